// Package runner turns a model into a text generator: it owns the KV memory,
// schedules requests into slots with continuous batching, samples, detokenises
// and applies stop rules. It is what runners.py's InferenceRunner meant to be
// (slots in one batch, each with its own step and sampling settings), fixed
// where runners.py is wrong: token lists are per slot, EOS and stop strings
// end a request, inactive slots cost nothing.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grok-go/grok/internal/sysmem"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/sampler"
	"github.com/grok-go/grok/tokenizer"
)

// Options configures an Engine.
type Options struct {
	// Slots is how many sequences decode together in one batch (default 1).
	Slots int
	// Context is the KV memory rows per slot: prompt plus generated tokens
	// (maximum: the model's sequence_len). The default is the model's
	// sequence_len, capped so that the KV memory takes at most half of
	// MemoryLimit: a file may declare a context far larger than the machine.
	Context int
	// MemoryLimit is the memory the KV memory may take, in bytes: New fails
	// with a *MemoryError if an explicit Context needs more. 0 means the
	// memory the system has available now (internal/sysmem), or no limit
	// where the system does not say.
	MemoryLimit int64
	// MaxQueue bounds the requests waiting for a slot (default 64); Submit
	// returns ErrQueueFull beyond it.
	MaxQueue int
	// PrefillChunk caps the prompt tokens one sequence feeds per step, so a
	// long prompt does not stall the others' decoding (default 256).
	PrefillChunk int

	// BeforeStep, when set, runs in the engine's loop before every forward
	// pass (never while the engine is idle). It is for tests, which use it
	// to pause the loop at a known point or to pace it so that a request
	// lasts long enough to be cancelled whatever the kernels' speed. It must
	// not call the engine.
	BeforeStep func()
}

// MemoryError reports a KV memory larger than the memory there is.
type MemoryError struct {
	Slots, Context int
	Need           float64 // bytes
	Available      float64 // bytes: Options.MemoryLimit or what the system had (half, for a default context)
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("runner: a KV memory of %d slot(s) × %d tokens needs %.3g GB, but only %.3g GB of memory is available",
		e.Slots, e.Context, e.Need/1e9, e.Available/1e9)
}

// ErrQueueFull is returned by Submit when every slot is busy and the queue is full.
var ErrQueueFull = errors.New("runner: too many requests waiting")

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("runner: engine is closed")

// Request is one generation job.
type Request struct {
	Prompt    []int          // token ids, no BOS added (runners.py encodes without one)
	MaxTokens int            // new tokens at most; 0 = until the context is full
	Sampling  sampler.Params // temperature 0 = greedy
	Stop      []string       // stop strings: output ends before the first match
	IgnoreEOS bool           // keep generating through EOS, as runners.py does
	// TruncatePrompt keeps the last tokens of a prompt that does not fit
	// (runners.py's pad_to_size left truncation) instead of failing.
	TruncatePrompt bool
	// Logprobs makes TokenInfo report the model's own distribution: the
	// log-softmax of the raw logits, before penalties, temperature and
	// filters, with the TopLogprobs (at most sampler.MaxTopLogprobs) most
	// likely tokens. This is what API clients expect (and vLLM's default):
	// the sampler's distribution is a point mass under greedy decoding,
	// which says nothing. Without it TokenInfo carries the sampler's figures.
	Logprobs    bool
	TopLogprobs int
}

// Finish reasons, in OpenAI's vocabulary where it has one.
const (
	FinishStop      = "stop"      // EOS or a stop string
	FinishLength    = "length"    // max tokens or the context is full
	FinishCancelled = "cancelled" // the client went away or Cancel was called
	FinishError     = "error"
)

// TokenInfo describes one sampled token.
type TokenInfo struct {
	ID int
	// Text is what the token added to the decoded output (empty without a
	// tokenizer). Concatenated over a request's tokens it is the whole
	// generated text before stop strings cut it: a byte-fallback token
	// that leaves a character incomplete has empty Text, and the token that
	// completes the character carries all of it.
	Text    string
	Logprob float32
	// Top is copied; at most Request.TopLogprobs entries with
	// Request.Logprobs, else at most Sampling.TopLogprobs.
	Top []sampler.TokenProb
}

// Usage counts a request's tokens and times its phases.
type Usage struct {
	PromptTokens, CompletionTokens int
	Truncated                      int           // prompt tokens dropped by TruncatePrompt
	Queued, Prefill, Decode        time.Duration // waiting, prompt until first token, after it
}

// Event is what a Stream delivers: newly released text and the tokens of one
// step, or the end of the request.
type Event struct {
	Text   string
	Tokens []TokenInfo
	Done   bool
	Finish string // set when Done
	Err    error  // set when Finish is FinishError
	Usage  Usage  // complete when Done
}

// Stream is a submitted request. Recv returns its events in order.
type Stream struct {
	req    Request
	ctx    context.Context
	cancel atomic.Bool

	mu     sync.Mutex
	events []Event
	notify chan struct{}
	ended  bool // the final event has been queued

	// Owned by the engine loop.
	slot      int
	fed       int // prompt tokens written to memory
	last      int // the token to feed next (after prefill)
	generated []int
	history   []int
	smp       *sampler.Sampler
	dec       *tokenizer.StreamDecoder
	stop      stopMatcher
	usage     Usage
	submitted time.Time
	started   time.Time
	firstTok  time.Time
}

// Recv waits for the next event. After the Done event it returns io.EOF.
func (s *Stream) Recv(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.events) > 0 {
			ev := s.events[0]
			s.events[0] = Event{}
			s.events = s.events[1:]
			s.mu.Unlock()
			return ev, nil
		}
		ended := s.ended
		s.mu.Unlock()
		if ended {
			return Event{}, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Cancel asks the engine to stop the request; its slot is freed at the next step.
func (s *Stream) Cancel() { s.cancel.Store(true) }

func (s *Stream) push(ev Event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	if ev.Done {
		s.ended = true
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Stats are the engine's counters, for metrics.
type Stats struct {
	Requests, Finished, Cancelled, Rejected int64
	PromptTokens, GeneratedTokens           int64
	// Steps counts batched forward calls; BatchRows sums the sequences in
	// each, so BatchRows/Steps is the mean batch occupancy.
	Steps, BatchRows int64
	// ForwardTime is the time spent in the model's Forward.
	ForwardTime           time.Duration
	Queued, Active, Slots int
}

// Engine runs requests on one model. Its loop goroutine is the only caller
// of the model's Forward.
type Engine struct {
	lm   *model.LanguageModel
	tok  *tokenizer.Tokenizer
	mem  *model.KVMemory
	opts Options
	eos  int

	mu      sync.Mutex
	waiting []*Stream
	closed  bool
	wake    chan struct{}
	done    chan struct{}

	slots  []*Stream // loop-owned; nil = free
	inputs []model.Input
	rows   []*Stream
	draws  []draw

	requests, finished, cancelled, rejected atomic.Int64
	promptTok, genTok, steps, batchRows     atomic.Int64
	forwardNs                               atomic.Int64
	active                                  atomic.Int64
}

// New starts an engine for lm. tok may be nil, in which case events carry
// tokens but no text, and stop strings are not supported.
func New(lm *model.LanguageModel, tok *tokenizer.Tokenizer, opts Options) (*Engine, error) {
	c := &lm.Config
	if opts.Slots <= 0 {
		opts.Slots = 1
	}
	if opts.Context > c.SequenceLen {
		return nil, fmt.Errorf("runner: context %d exceeds the model's sequence_len %d", opts.Context, c.SequenceLen)
	}
	limit, known := float64(opts.MemoryLimit), opts.MemoryLimit > 0
	if !known {
		var avail int64
		avail, known = sysmem.Available()
		limit = float64(avail)
	}
	if opts.Context <= 0 {
		opts.Context = c.SequenceLen
		if known {
			// Half: the mapped weights and the workspace need the rest.
			opts.Context = min(opts.Context, model.MaxKVContext(c, opts.Slots, limit/2))
		}
		if opts.Context < 1 {
			return nil, &MemoryError{Slots: opts.Slots, Context: 1, Need: model.KVMemoryBytes(c, opts.Slots, 1), Available: limit / 2}
		}
	} else if need := model.KVMemoryBytes(c, opts.Slots, opts.Context); known && need > limit {
		return nil, &MemoryError{Slots: opts.Slots, Context: opts.Context, Need: need, Available: limit}
	}
	if opts.MaxQueue <= 0 {
		opts.MaxQueue = 64
	}
	if opts.PrefillChunk <= 0 {
		opts.PrefillChunk = 256
	}
	mem, err := model.NewKVMemory(c, opts.Slots, opts.Context)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		lm: lm, tok: tok, mem: mem, opts: opts, eos: c.EOSToken,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		slots: make([]*Stream, opts.Slots),
	}
	if tok != nil && tok.EOS() >= 0 {
		e.eos = tok.EOS()
	}
	go e.loop()
	return e, nil
}

// Context returns the rows per slot: the most prompt + generated tokens a request can have.
func (e *Engine) Context() int { return e.opts.Context }

// Model returns the engine's model.
func (e *Engine) Model() *model.LanguageModel { return e.lm }

// Tokenizer returns the engine's tokenizer (may be nil).
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// EOS returns the end-of-sequence token id that ends requests.
func (e *Engine) EOS() int { return e.eos }

// Slots returns how many sequences decode together.
func (e *Engine) Slots() int { return e.opts.Slots }

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	q := len(e.waiting)
	e.mu.Unlock()
	return Stats{
		Requests: e.requests.Load(), Finished: e.finished.Load(), Cancelled: e.cancelled.Load(),
		Rejected: e.rejected.Load(), PromptTokens: e.promptTok.Load(), GeneratedTokens: e.genTok.Load(),
		Steps: e.steps.Load(), BatchRows: e.batchRows.Load(), ForwardTime: time.Duration(e.forwardNs.Load()),
		Queued: q, Active: int(e.active.Load()), Slots: e.opts.Slots,
	}
}

// Submit validates req and queues it. ctx cancels the request: when it is
// done, the request's slot is freed at the next step.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
	V := e.lm.Config.VocabSize
	if len(req.Prompt) == 0 {
		return nil, errors.New("runner: the prompt is empty")
	}
	for _, t := range req.Prompt {
		if t < 0 || t >= V {
			return nil, fmt.Errorf("runner: prompt token %d is outside the vocabulary [0, %d)", t, V)
		}
	}
	if req.MaxTokens < 0 {
		return nil, fmt.Errorf("runner: max tokens %d is negative", req.MaxTokens)
	}
	// An empty stop string would match at once and end every request
	// before its first token; it means nothing, so it is dropped.
	if slices.Contains(req.Stop, "") {
		req.Stop = slices.DeleteFunc(slices.Clone(req.Stop), func(s string) bool { return s == "" })
	}
	if len(req.Stop) > 0 && e.tok == nil {
		return nil, errors.New("runner: stop strings need a tokenizer")
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > sampler.MaxTopLogprobs {
		return nil, fmt.Errorf("runner: top logprobs %d must lie in [0, %d]", req.TopLogprobs, sampler.MaxTopLogprobs)
	}
	ctxLen := e.opts.Context
	var truncated int
	if len(req.Prompt) >= ctxLen {
		if !req.TruncatePrompt {
			return nil, fmt.Errorf("runner: the prompt has %d tokens; the context holds %d (prompt and generated tokens together)", len(req.Prompt), ctxLen)
		}
		keep := ctxLen - max(1, min(req.MaxTokens, ctxLen/2))
		truncated = len(req.Prompt) - keep
		req.Prompt = req.Prompt[truncated:]
	}
	smp, err := sampler.New(V, req.Sampling)
	if err != nil {
		return nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	s := &Stream{req: req, ctx: ctx, notify: make(chan struct{}, 1), smp: smp, submitted: time.Now()}
	s.usage.Truncated = truncated
	s.usage.PromptTokens = len(req.Prompt)
	s.stop.stops = req.Stop
	if e.tok != nil {
		// Prime the decoder with the prompt so that the continuation's text
		// is exactly Decode(prompt+generated) minus Decode(prompt): the
		// leading-space rule applies to the prompt's first piece, not ours.
		s.dec = e.tok.NewDecoder()
		for _, id := range req.Prompt {
			if _, err := s.dec.Add(id); err != nil {
				return nil, err
			}
		}
	}
	s.history = append(make([]int, 0, len(req.Prompt)+64), req.Prompt...)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if len(e.waiting) >= e.opts.MaxQueue {
		// Requests whose clients gave up still hold places until the loop
		// next runs; they must not make a live request fail.
		e.pruneWaiting()
	}
	if len(e.waiting) >= e.opts.MaxQueue {
		e.rejected.Add(1)
		return nil, ErrQueueFull
	}
	e.waiting = append(e.waiting, s)
	e.requests.Add(1)
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return s, nil
}

// Close stops the engine: waiting and running requests end as cancelled.
// It returns when the loop has exited.
func (e *Engine) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	e.mu.Unlock()
	<-e.done
}

func (e *Engine) loop() {
	defer close(e.done)
	for {
		// Cancelled requests leave their slots before admission, so that a
		// slot a client gave up is taken by a waiting request in this very
		// step instead of idling through it.
		for _, s := range e.slots {
			if s != nil && s.cancelled() {
				e.finish(s, FinishCancelled, nil)
			}
		}
		e.mu.Lock()
		closed := e.closed
		e.pruneWaiting()
		var admit []*Stream
		for i := range e.slots {
			if e.slots[i] == nil && len(e.waiting) > 0 && !closed {
				s := e.waiting[0]
				e.waiting[0] = nil
				e.waiting = e.waiting[1:]
				s.slot = i
				e.slots[i] = s
				admit = append(admit, s)
			}
		}
		if closed {
			for _, s := range e.waiting {
				e.end(s, FinishCancelled, ErrClosed)
			}
			e.waiting = nil
		}
		e.mu.Unlock()
		now := time.Now()
		for _, s := range admit {
			e.mem.Reset(s.slot)
			s.started = now
			s.usage.Queued = now.Sub(s.submitted)
			e.active.Add(1)
		}
		if closed {
			for _, s := range e.slots {
				if s != nil {
					e.finish(s, FinishCancelled, ErrClosed)
				}
			}
			return
		}
		// With no active slot the loop sleeps until Submit or Close wakes
		// it: an idle engine costs nothing.
		if !e.step() {
			<-e.wake
		}
	}
}

// pruneWaiting ends the waiting requests whose clients gave up. e.mu is held.
func (e *Engine) pruneWaiting() {
	k := 0
	for _, s := range e.waiting {
		if s.cancelled() {
			s.usage.Queued = time.Since(s.submitted)
			e.end(s, FinishCancelled, nil)
			continue
		}
		e.waiting[k] = s
		k++
	}
	clear(e.waiting[k:])
	e.waiting = e.waiting[:k]
}

func (s *Stream) cancelled() bool { return s.cancel.Load() || s.ctx.Err() != nil }

// step runs one batched forward over every active slot; it reports false
// when there was nothing to do.
func (e *Engine) step() bool {
	e.inputs, e.rows = e.inputs[:0], e.rows[:0]
	for _, s := range e.slots {
		if s == nil {
			continue
		}
		if s.cancelled() {
			e.finish(s, FinishCancelled, nil)
			continue
		}
		if s.fed < len(s.req.Prompt) {
			n := min(len(s.req.Prompt)-s.fed, e.opts.PrefillChunk)
			e.inputs = append(e.inputs, model.Input{Slot: s.slot, Tokens: s.req.Prompt[s.fed : s.fed+n]})
			s.fed += n
		} else {
			e.inputs = append(e.inputs, model.Input{Slot: s.slot, Tokens: []int{s.last}})
		}
		e.rows = append(e.rows, s)
	}
	if len(e.inputs) == 0 {
		return false
	}
	if e.opts.BeforeStep != nil {
		e.opts.BeforeStep()
	}
	e.steps.Add(1)
	e.batchRows.Add(int64(len(e.rows)))
	t0 := time.Now()
	logits, err := e.lm.Forward(e.mem, e.inputs)
	e.forwardNs.Add(int64(time.Since(t0)))
	if err != nil {
		for _, s := range e.rows {
			e.finish(s, FinishError, err)
		}
		return true
	}
	V := e.lm.Config.VocabSize
	n := len(e.rows)
	e.draws = slices.Grow(e.draws[:0], n)[:n]
	e.forRows(n, func(i int) {
		s := e.rows[i]
		if s.fed < len(s.req.Prompt) {
			return // mid-prompt: nothing to sample yet
		}
		row, d := logits[i*V:(i+1)*V], &e.draws[i]
		d.r, d.err = s.smp.Sample(row, s.history)
		if d.err == nil && s.req.Logprobs {
			d.logprob, d.top = rawLogprobs(row, d.r.Token, s.req.TopLogprobs)
		}
	})
	for i, s := range e.rows {
		if s.fed < len(s.req.Prompt) {
			continue
		}
		e.sampleNext(s, &e.draws[i])
	}
	return true
}

// draw is one row's sampling result, computed in parallel with the other
// rows' and then applied in order by sampleNext.
type draw struct {
	r       sampler.Result
	err     error
	logprob float32             // with Request.Logprobs
	top     []sampler.TokenProb // with Request.Logprobs
}

// forRows runs f(0..n-1), split over the available cores when there is
// more than one row. Sampling (a softmax over the vocabulary for each row)
// runs between forward passes, when nothing else does, so spreading it
// shortens every step; each row touches only its own stream's sampler.
func (e *Engine) forRows(n int, f func(int)) {
	g := min(n, runtime.GOMAXPROCS(0))
	if g <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	for k := 1; k < g; k++ {
		wg.Go(func() {
			for i := k; i < n; i += g {
				f(i)
			}
		})
	}
	for i := 0; i < n; i += g {
		f(i)
	}
	wg.Wait()
}

// sampleNext applies a row's draw to its stream: it records the token,
// decodes it, applies the stop rules and pushes the event.
func (e *Engine) sampleNext(s *Stream, d *draw) {
	if s.firstTok.IsZero() {
		s.firstTok = time.Now()
		s.usage.Prefill = s.firstTok.Sub(s.started)
		e.promptTok.Add(int64(len(s.req.Prompt)))
	}
	r, err := d.r, d.err
	if err != nil {
		e.finish(s, FinishError, err)
		return
	}
	s.generated = append(s.generated, r.Token)
	s.history = append(s.history, r.Token)
	s.usage.CompletionTokens++
	e.genTok.Add(1)
	info := TokenInfo{ID: r.Token, Logprob: r.Logprob}
	if s.req.Logprobs {
		info.Logprob, info.Top = d.logprob, d.top
	} else if len(r.Top) > 0 {
		// r.Top is the sampler's storage, overwritten by its next draw.
		info.Top = append([]sampler.TokenProb(nil), r.Top...)
	}
	if r.Token == e.eos && !s.req.IgnoreEOS {
		s.push(Event{Tokens: []TokenInfo{info}})
		e.flush(s)
		e.finish(s, FinishStop, nil)
		return
	}
	var text string
	stopped := false
	if s.dec != nil {
		piece, err := s.dec.Add(r.Token)
		if err != nil {
			e.finish(s, FinishError, err)
			return
		}
		info.Text = piece
		text, stopped = s.stop.push(piece)
	}
	s.push(Event{Text: text, Tokens: []TokenInfo{info}})
	switch {
	case stopped:
		e.finish(s, FinishStop, nil)
	case s.req.MaxTokens > 0 && len(s.generated) >= s.req.MaxTokens,
		e.mem.Step(s.slot) >= e.opts.Context:
		e.flush(s)
		e.finish(s, FinishLength, nil)
	default:
		s.last = r.Token
	}
}

// flush releases text held back by the stop matcher and any incomplete UTF-8
// the decoder kept, when a request ends other than by a stop string.
func (e *Engine) flush(s *Stream) {
	if s.dec == nil {
		return
	}
	if tail := s.stop.flush() + s.dec.Flush(); tail != "" {
		s.push(Event{Text: tail})
	}
}

// finish ends an admitted request and frees its slot.
func (e *Engine) finish(s *Stream, reason string, err error) {
	e.slots[s.slot] = nil
	e.active.Add(-1)
	if !s.firstTok.IsZero() {
		s.usage.Decode = time.Since(s.firstTok)
	}
	e.end(s, reason, err)
}

func (e *Engine) end(s *Stream, reason string, err error) {
	if reason == FinishCancelled {
		e.cancelled.Add(1)
	} else {
		e.finished.Add(1)
	}
	s.push(Event{Done: true, Finish: reason, Err: err, Usage: s.usage})
}

// rawLogprobs returns the log-probability of token under softmax(row) and
// the k most likely tokens (higher logit first, lower id on ties), computed
// in float64 so that the normaliser neither overflows nor loses the tail.
func rawLogprobs(row []float32, token, k int) (float32, []sampler.TokenProb) {
	m := math.Inf(-1)
	for _, v := range row {
		m = max(m, float64(v))
	}
	var z float64
	for _, v := range row {
		z += math.Exp(float64(v) - m)
	}
	logZ := m + math.Log(z)
	lp := func(id int) float32 { return float32(float64(row[id]) - logZ) }
	if k == 0 {
		return lp(token), nil
	}
	top := make([]int, 0, k)
	for id, v := range row {
		if len(top) == k && v <= row[top[k-1]] {
			continue // ties keep the lower id already listed
		}
		if len(top) < k {
			top = append(top, id)
		} else {
			top[k-1] = id
		}
		for j := len(top) - 1; j > 0 && row[top[j]] > row[top[j-1]]; j-- {
			top[j], top[j-1] = top[j-1], top[j]
		}
	}
	out := make([]sampler.TokenProb, len(top))
	for i, id := range top {
		l := lp(id)
		out[i] = sampler.TokenProb{Token: id, Logprob: l, Prob: float32(math.Exp(float64(l)))}
	}
	return lp(token), out
}

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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grok-go/grok/internal/sysmem"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/sampler"
)

// Stats are the engine's counters, for metrics.
type Stats struct {
	Requests, Finished, Cancelled, Rejected int64
	PromptTokens, GeneratedTokens           int64
	// CachedTokens counts prompt tokens taken from a slot's KV memory
	// instead of prefilled (Options.NoPromptCache).
	CachedTokens int64
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
	tok  Tokenizer
	mem  *model.KVMemory
	opts Options
	eos  int

	mu      sync.Mutex
	waiting []*Stream
	closed  bool
	wake    chan struct{}
	done    chan struct{}

	slots []*Stream // loop-owned; nil = free
	// held[i] is the tokens whose keys and values slot i's memory holds
	// from its last request, in order (loop-owned).
	held   [][]int
	inputs []model.Input
	rows   []*Stream
	draws  []draw

	sampleJob sampleTask

	requests, finished, cancelled, rejected atomic.Int64
	promptTok, genTok, steps, batchRows     atomic.Int64
	cachedTok                               atomic.Int64
	forwardNs                               atomic.Int64
	active                                  atomic.Int64
}

// FitContext returns the rows per slot New gives slots slots of c when asked
// for context (0: the default, see Options.Context) under memoryLimit (0:
// the memory the system has available), or the error New fails with.
func FitContext(c *model.Config, slots, context int, memoryLimit int64) (int, error) {
	if context > c.SequenceLen {
		return 0, fmt.Errorf("runner: context %d exceeds the model's sequence_len %d", context, c.SequenceLen)
	}
	limit, known := float64(memoryLimit), memoryLimit > 0
	if !known {
		var avail int64
		avail, known = sysmem.Available()
		limit = float64(avail)
	}
	if context > 0 {
		if need := model.KVMemoryBytes(c, slots, context); known && need > limit {
			return 0, &MemoryError{Slots: slots, Context: context, Need: need, Available: limit}
		}
		return context, nil
	}
	context = c.SequenceLen
	if known {
		// Half: the mapped weights and the workspace need the rest.
		context = min(context, model.MaxKVContext(c, slots, limit/2))
	}
	if context < 1 {
		return 0, &MemoryError{Slots: slots, Context: 1, Need: model.KVMemoryBytes(c, slots, 1), Available: limit / 2}
	}
	return context, nil
}

// New starts an engine for lm. tok may be nil, in which case events carry
// tokens but no text, and stop strings are not supported.
func New(lm *model.LanguageModel, tok Tokenizer, opts Options) (*Engine, error) {
	c := &lm.Config
	if opts.Slots <= 0 {
		opts.Slots = 1
	}
	var err error
	if opts.Context, err = FitContext(c, opts.Slots, opts.Context, opts.MemoryLimit); err != nil {
		return nil, err
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
		slots: make([]*Stream, opts.Slots), held: make([][]int, opts.Slots),
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
func (e *Engine) Tokenizer() Tokenizer { return e.tok }

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
		CachedTokens: e.cachedTok.Load(),
		Steps:        e.steps.Load(), BatchRows: e.batchRows.Load(), ForwardTime: time.Duration(e.forwardNs.Load()),
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
		s.dec = e.tok.NewTextDecoder()
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
		for len(e.waiting) > 0 && !closed {
			s := e.waiting[0]
			i := e.pickSlot(s.req.Prompt)
			if i < 0 {
				break
			}
			e.waiting[0] = nil
			e.waiting = e.waiting[1:]
			s.slot = i
			e.slots[i] = s
			admit = append(admit, s)
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
			e.reuse(s)
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
	e.sampleJob = sampleTask{e: e, logits: logits, V: V}
	e.pool().Run(n, 1, &e.sampleJob)
	e.sampleJob = sampleTask{}
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

// sampleTask samples the rows of one step on the worker pool. Sampling (a
// softmax over the vocabulary for each row) runs between forward passes,
// when the pool is idle, so spreading it shortens every step; each row
// touches only its own stream's sampler and draw.
type sampleTask struct {
	e      *Engine
	logits []float32
	V      int
}

func (t *sampleTask) Run(_, lo, hi int) {
	for i := lo; i < hi; i++ {
		s := t.e.rows[i]
		if s.fed < len(s.req.Prompt) {
			continue // mid-prompt: nothing to sample yet
		}
		row, d := t.logits[i*t.V:(i+1)*t.V], &t.e.draws[i]
		d.r, d.err = s.smp.Sample(row, s.history)
		if d.err == nil && s.req.Logprobs {
			d.logprob, d.top = sampler.Logprobs(row, d.r.Token, s.req.TopLogprobs)
		}
	}
}

// pool is the worker pool the model runs on, which sampling shares.
func (e *Engine) pool() *parallel.Pool {
	if e.lm.Pool != nil {
		return e.lm.Pool
	}
	return parallel.Default()
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

// pickSlot returns the free slot for a prompt: the one whose held tokens
// share the longest prefix with it (the first free one without the cache),
// or -1 if none is free.
func (e *Engine) pickSlot(prompt []int) int {
	best, bestLen := -1, -1
	for i, s := range e.slots {
		if s != nil {
			continue
		}
		n := 0
		if !e.opts.NoPromptCache {
			n = commonPrefix(e.held[i], prompt)
		}
		if n > bestLen {
			best, bestLen = i, n
		}
	}
	return best
}

// reuse prepares an admitted request's slot: its memory keeps the longest
// prefix of the prompt it already holds, less one token, since the last
// prompt token must be fed to get the logits of the first new one.
func (e *Engine) reuse(s *Stream) {
	n := 0
	if !e.opts.NoPromptCache {
		n = min(commonPrefix(e.held[s.slot], s.req.Prompt), len(s.req.Prompt)-1)
	}
	e.held[s.slot] = e.held[s.slot][:0]
	if n <= 0 {
		e.mem.Reset(s.slot)
		return
	}
	if err := e.mem.Truncate(s.slot, n); err != nil {
		e.mem.Reset(s.slot) // unreachable: n ≤ the rows held
		return
	}
	s.fed = n
	s.usage.CachedTokens = n
	e.cachedTok.Add(int64(n))
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// finish ends an admitted request and frees its slot, remembering the
// tokens its memory holds: the prompt, then each generated token that was
// fed back (all but the last).
func (e *Engine) finish(s *Stream, reason string, err error) {
	if rows := e.mem.Step(s.slot); !e.opts.NoPromptCache && rows > 0 {
		h := append(e.held[s.slot][:0], s.req.Prompt[:min(rows, len(s.req.Prompt))]...)
		if rows > len(s.req.Prompt) {
			h = append(h, s.generated[:rows-len(s.req.Prompt)]...)
		}
		e.held[s.slot] = h
	}
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

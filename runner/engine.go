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
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grok-go/grok/internal/sysmem"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/sampler"
	"github.com/grok-go/grok/tensor"
)

// Stats are the engine's counters, for metrics.
type Stats struct {
	Requests, Finished, Cancelled, Rejected int64
	PromptTokens, GeneratedTokens           int64
	// CachedTokens counts prompt tokens taken from the prefix cache
	// instead of prefilled (Options.NoPromptCache); PrefillTokens counts
	// the tokens that were prefilled, a preempted request's again.
	CachedTokens, PrefillTokens int64
	// Preempted counts requests that gave their KV pages back to let
	// older ones grow, to be resumed (recomputed) when pages are free.
	Preempted int64
	// Steps counts batched forward calls; BatchRows sums the sequences in
	// each, so BatchRows/Steps is the mean batch occupancy.
	Steps, BatchRows int64
	// ForwardTime is the time spent in the model's Forward.
	ForwardTime           time.Duration
	Queued, Active, Slots int
	// KVPages is the pool's pages of model.PageRows tokens; KVPagesFree
	// those no one holds, KVPagesCached those the prefix cache holds
	// (some may be in use by running requests too).
	KVPages, KVPagesFree, KVPagesCached int
}

// Engine runs requests on one model. Its loop goroutine is the only caller
// of the model's Forward.
type Engine struct {
	lm   *model.LanguageModel
	tok  Tokenizer
	mem  *model.KVMemory
	plan KVPlan
	opts Options
	eos  int

	mu      sync.Mutex
	waiting []*Stream
	closed  bool
	wake    chan struct{}
	done    chan struct{}

	slots    []*Stream    // loop-owned; nil = free
	cache    *prefixCache // loop-owned; nil with Options.NoPromptCache
	admitted int64        // admissions so far, to order the active requests (loop-owned)
	inputs   []model.Input
	rows     []*Stream
	draws    []draw

	sampleJob sampleTask

	requests, finished, cancelled, rejected atomic.Int64
	promptTok, genTok, steps, batchRows     atomic.Int64
	cachedTok, prefillTok, preempted        atomic.Int64
	forwardNs                               atomic.Int64
	active                                  atomic.Int64
	pagesFree, pagesCached                  atomic.Int64

	group []*Engine // NewGroup's replicas; the fields above then are the front's
}

// KVPlan is the KV memory New allocates: the context per slot (the most
// tokens a request can have) and the pool's pages of model.PageRows rows.
type KVPlan struct {
	Context, Pages int
	KType, VType   tensor.DType
	Bytes          float64 // what the pool takes, pad flags included
}

// PageTokens is the tokens of one page of KV memory (model.PageRows).
const PageTokens = model.PageRows

// Tokens returns the tokens the pool holds.
func (p KVPlan) Tokens() int { return p.Pages * model.PageRows }

// PlanKV returns the KV memory New gives lm's config c for opts (see
// Options.Context, Options.KVMemory and Options.KVTokens), or the error New
// fails with: a *MemoryError when it does not fit the memory there is.
func PlanKV(c *model.Config, opts Options) (KVPlan, error) {
	p := KVPlan{KType: opts.KType, VType: opts.VType}
	for _, t := range []tensor.DType{p.KType, p.VType} {
		if err := model.CheckKVType(t, c.KeySize); err != nil {
			return p, err
		}
	}
	slots, context := max(opts.Slots, 1), opts.Context
	if context > c.SequenceLen {
		return p, fmt.Errorf("runner: context %d exceeds the model's sequence_len %d", context, c.SequenceLen)
	}
	if opts.KVMemory < 0 || opts.KVTokens < 0 {
		return p, fmt.Errorf("runner: a KV memory of %d bytes or %d tokens is negative", opts.KVMemory, opts.KVTokens)
	}
	page := model.KVPageBytes(c, p.KType, p.VType)
	limit, known := float64(opts.MemoryLimit), opts.MemoryLimit > 0
	if !known {
		var avail int64
		avail, known = sysmem.Available()
		limit = float64(avail)
	}
	if opts.KVTokens > 0 || opts.KVMemory > 0 {
		if opts.KVTokens > 0 {
			p.Pages = int(min((int64(opts.KVTokens)+model.PageRows-1)/model.PageRows, math.MaxInt32/model.PageRows))
		} else {
			p.Pages = int(min(float64(opts.KVMemory)/page, math.MaxInt32/model.PageRows))
		}
		tokens := p.Pages * model.PageRows
		p.Bytes = float64(p.Pages) * page
		if p.Pages == 0 {
			return p, fmt.Errorf("runner: a KV memory of %d bytes holds not one page of %d tokens (%.0f bytes)", opts.KVMemory, model.PageRows, page)
		}
		if known && p.Bytes > limit {
			return p, &MemoryError{Tokens: tokens, Need: p.Bytes, Available: limit}
		}
		if context == 0 {
			context = min(c.SequenceLen, tokens)
		} else if context > tokens {
			return p, fmt.Errorf("runner: a context of %d tokens does not fit in a KV memory of %d tokens", context, tokens)
		}
		p.Context = context
		return p, nil
	}
	if context > 0 {
		p.Context, p.Pages = context, model.KVPages(slots, context)
		p.Bytes = float64(p.Pages) * page
		if known && p.Bytes > limit {
			return p, &MemoryError{Slots: slots, Context: context, Need: p.Bytes, Available: limit}
		}
		return p, nil
	}
	context = c.SequenceLen
	if known {
		// Half: the mapped weights and the workspace need the rest.
		context = min(context, model.MaxKVContextTypes(c, slots, limit/2, p.KType, p.VType))
	}
	if context < 1 {
		return p, &MemoryError{Slots: slots, Context: 1, Need: float64(slots) * page, Available: limit / 2}
	}
	p.Context, p.Pages = context, model.KVPages(slots, context)
	p.Bytes = float64(p.Pages) * page
	return p, nil
}

// New starts an engine for lm. tok may be nil, in which case events carry
// tokens but no text, and stop strings are not supported.
func New(lm *model.LanguageModel, tok Tokenizer, opts Options) (*Engine, error) {
	c := &lm.Config
	if opts.Slots <= 0 {
		opts.Slots = 1
	}
	plan, err := PlanKV(c, opts)
	if err != nil {
		return nil, err
	}
	opts.Context = plan.Context
	if opts.MaxQueue <= 0 {
		opts.MaxQueue = 64
	}
	if opts.PrefillChunk <= 0 {
		opts.PrefillChunk = 256
	}
	mem, err := lm.NewPagedKVMemory(model.KVOptions{
		Slots: opts.Slots, SeqLen: opts.Context, Pages: plan.Pages, KType: plan.KType, VType: plan.VType})
	if err != nil {
		return nil, err
	}
	lm.Precision = opts.Precision
	e := &Engine{
		lm: lm, tok: tok, mem: mem, opts: opts, eos: c.EOSToken, plan: plan,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		slots: make([]*Stream, opts.Slots),
	}
	if !opts.NoPromptCache {
		e.cache = newPrefixCache(mem)
	}
	e.pageStats()
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

// KV returns the engine's KV memory plan: context, pages, types, bytes.
func (e *Engine) KV() KVPlan { return e.plan }

// Slots returns how many sequences decode together.
func (e *Engine) Slots() int { return e.opts.Slots }

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	if e.group != nil {
		return e.statsGroup()
	}
	e.mu.Lock()
	q := len(e.waiting)
	e.mu.Unlock()
	return Stats{
		Requests: e.requests.Load(), Finished: e.finished.Load(), Cancelled: e.cancelled.Load(),
		Rejected: e.rejected.Load(), PromptTokens: e.promptTok.Load(), GeneratedTokens: e.genTok.Load(),
		CachedTokens: e.cachedTok.Load(), PrefillTokens: e.prefillTok.Load(), Preempted: e.preempted.Load(),
		Steps: e.steps.Load(), BatchRows: e.batchRows.Load(), ForwardTime: time.Duration(e.forwardNs.Load()),
		Queued: q, Active: int(e.active.Load()), Slots: e.opts.Slots,
		KVPages: e.plan.Pages, KVPagesFree: int(e.pagesFree.Load()), KVPagesCached: int(e.pagesCached.Load()),
	}
}

// Submit validates req and queues it. ctx cancels the request: when it is
// done, the request's slot is freed at the next step.
func (e *Engine) Submit(ctx context.Context, req Request) (*Stream, error) {
	if e.group != nil {
		return e.submitGroup(ctx, req)
	}
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
	s.feed = req.Prompt
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
	if e.group != nil {
		e.closeGroup()
		return
	}
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
		reserved := e.reserved()
		for len(e.waiting) > 0 && !closed {
			s := e.waiting[0]
			i := e.freeSlot()
			if i < 0 {
				break
			}
			// A request waits (first come, first served) until the pool
			// can hold its prompt beside what the running ones still
			// prefill: it never fails for pages, since the context fits
			// the pool (PlanKV) and older requests finish.
			need := e.admitPages(s)
			if need > 0 && need+reserved > e.mem.FreePages()+e.evictable() {
				break
			}
			reserved += need
			e.waiting[0] = nil
			e.waiting = e.waiting[1:]
			s.slot = i
			e.slots[i] = s
			// Attached now, so that the next admission's count of
			// evictable pages leaves these out.
			e.reuse(s)
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
			e.admitted++
			s.order = e.admitted
			if !s.resumed {
				s.started = now
				s.usage.Queued = now.Sub(s.submitted)
			}
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
	for _, s := range e.slots {
		if s != nil && s.cancelled() {
			e.finish(s, FinishCancelled, nil)
		}
	}
	e.makeRoom()
	e.inputs, e.rows = e.inputs[:0], e.rows[:0]
	prefilled := 0
	for _, s := range e.slots {
		if s == nil {
			continue
		}
		s.fedAll = false
		if n := s.nextInput(e.opts.PrefillChunk); n > 0 {
			e.inputs = append(e.inputs, model.Input{Slot: s.slot, Tokens: s.feed[s.fed : s.fed+n]})
			s.fed += n
			s.fedAll = s.fed == len(s.feed)
			prefilled += n
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
	e.prefillTok.Add(int64(prefilled))
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
		if s.fed < len(s.feed) {
			continue
		}
		if s.fedAll && e.cache != nil {
			// The prompt is in: its full pages serve requests that
			// arrive while this one runs.
			e.cache.insert(s.history[:e.mem.Step(s.slot)], s.slot, false)
		}
		e.sampleNext(s, &e.draws[i])
	}
	e.pageStats()
	return true
}

// nextInput returns how many tokens of its feed s puts in this step (0: it
// decodes its last token).
func (s *Stream) nextInput(chunk int) int {
	return min(len(s.feed)-s.fed, chunk)
}

// makeRoom gets the free pages this step's inputs need: it evicts cached
// pages, least recently used first; then the cache gives up the pages
// requests are about to write into (which they would otherwise copy);
// and if that is not enough it preempts the most recently admitted
// requests, which give their pages to the cache and wait at the head of
// the queue to be recomputed. The oldest request always fits (its context
// fits the pool, and it needs no copy), so every request progresses.
func (e *Engine) makeRoom() {
	for {
		need := e.pagesNeeded()
		if need <= e.mem.FreePages() || e.cache != nil && e.cache.evict(need) {
			return
		}
		if e.cache != nil {
			gave := false
			for _, s := range e.slots {
				if s != nil {
					if p := e.mem.WritePage(s.slot); p >= 0 && e.cache.giveUp(p) {
						gave = true
					}
				}
			}
			if gave {
				continue
			}
		}
		var newest *Stream
		for _, s := range e.slots {
			if s != nil && (newest == nil || s.order > newest.order) {
				newest = s
			}
		}
		if newest == nil {
			return
		}
		e.preempt(newest)
	}
}

// pagesNeeded returns the free pages this step's inputs take.
func (e *Engine) pagesNeeded() int {
	need := 0
	for _, s := range e.slots {
		if s != nil {
			need += e.mem.PagesNeeded(s.slot, max(s.nextInput(e.opts.PrefillChunk), 1))
		}
	}
	return need
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
		if s.fed < len(s.feed) {
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

// freeSlot returns a free slot, or -1 if none is free. Slots hold no
// memory of their own between requests: the prefix cache's pages serve
// every slot alike.
func (e *Engine) freeSlot() int {
	for i, s := range e.slots {
		if s == nil {
			return i
		}
	}
	return -1
}

// cacheLimit is the most of s's feed the cache may supply: all but the
// last token, which must be fed to get the logits of the next one.
func (s *Stream) cacheLimit() int { return len(s.feed) - 1 }

// admitPages returns the pages s's feed takes beyond the full pages the
// prefix cache already holds for it (an upper bound: its first step's
// copy of a partial page included).
func (e *Engine) admitPages(s *Stream) int {
	shared := 0
	if e.cache != nil && !s.req.NoPromptCache {
		_, n := e.cache.match(s.feed, s.cacheLimit())
		shared = n / model.PageRows
	}
	return (len(s.feed)+model.PageRows-1)/model.PageRows - shared
}

// reserved returns the pages the running requests' unfed prompts will take.
func (e *Engine) reserved() int {
	r := 0
	for _, s := range e.slots {
		if s != nil {
			r += max(0, (len(s.feed)+model.PageRows-1)/model.PageRows-len(e.mem.PageTable(s.slot)))
		}
	}
	return r
}

// evictable returns the cached pages no request holds.
func (e *Engine) evictable() int {
	if e.cache == nil {
		return 0
	}
	return e.cache.evictable()
}

// reuse starts an admitted request's slot on the longest prefix of its
// feed the prefix cache holds (less its last token), which it then does
// not prefill.
func (e *Engine) reuse(s *Stream) {
	s.fed = 0
	if e.cache == nil || s.req.NoPromptCache {
		return
	}
	pages, n := e.cache.match(s.feed, s.cacheLimit())
	if n <= 0 {
		return
	}
	if err := e.mem.Attach(s.slot, pages, n); err != nil {
		return // unreachable: the pages are the tree's, the slot is empty
	}
	s.fed = n
	if !s.resumed {
		s.usage.CachedTokens = n
		e.cachedTok.Add(int64(n))
	}
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// release gives a slot's pages back: to the prefix cache, which keeps the
// tokens they hold (history[:rows]: the prompt, then each generated token
// that was fed back), or to the pool without it.
func (e *Engine) release(s *Stream) {
	if rows := e.mem.Step(s.slot); e.cache != nil && rows > 0 {
		e.cache.insert(s.history[:rows], s.slot, true)
	}
	e.mem.Reset(s.slot)
	e.slots[s.slot] = nil
	e.active.Add(-1)
	e.pageStats()
}

// pageStats publishes the pool's counts for Stats (read by other goroutines).
func (e *Engine) pageStats() {
	e.pagesFree.Store(int64(e.mem.FreePages()))
	if e.cache != nil {
		e.pagesCached.Store(int64(e.cache.size()))
	}
}

// finish ends an admitted request and frees its slot.
func (e *Engine) finish(s *Stream, reason string, err error) {
	e.release(s)
	if !s.firstTok.IsZero() {
		s.usage.Decode = time.Since(s.firstTok)
	}
	e.end(s, reason, err)
}

// preempt takes a running request's pages back for older requests: they go
// to the prefix cache (evictable), and the request waits at the head of
// the queue. When admitted again it recomputes what the cache lost, all
// it had fed and its last sampled token, and goes on sampling: the same
// bits as without the pause, since incremental decoding equals one full
// pass.
func (e *Engine) preempt(s *Stream) {
	e.release(s)
	if s.fed >= len(s.feed) {
		// Decoding: the memory held all of history but its last token.
		s.feed = slices.Clone(s.history)
	}
	s.fed = 0
	s.resumed = true
	e.preempted.Add(1)
	e.mu.Lock()
	e.waiting = slices.Insert(e.waiting, 0, s)
	e.mu.Unlock()
}

func (e *Engine) end(s *Stream, reason string, err error) {
	if reason == FinishCancelled {
		e.cancelled.Add(1)
	} else {
		e.finished.Add(1)
	}
	s.push(Event{Done: true, Finish: reason, Err: err, Usage: s.usage})
}

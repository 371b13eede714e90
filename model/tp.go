package model

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/internal/numa"
	"github.com/grok-go/grok/internal/park"
	"github.com/grok-go/grok/parallel"
)

// tpGroup is NewTP's model: n shards in one process, each on a pool of
// its own, joined by an in-process comm group. Shards 1..n-1 each run on a
// goroutine of their own that waits for calls, so that a forward call
// starts no goroutine and allocates nothing. A call is handed out by
// advancing gen and collected by counting pending down; the goroutines
// (and the caller) wait on park.Waiters, whose sleeps allocate nothing,
// where a channel's took a runtime sudog that GCs make the runtime
// allocate anew. They sleep at once (no spin): between calls a waiting
// goroutine would only take a core from one still computing.
type tpGroup struct {
	shards []*LanguageModel
	pools  []*parallel.Pool
	errs   []error
	calls  []tpCall      // shard r's part of the current call
	gen    atomic.Uint64 // calls handed out (and one more at close)
	// pending counts the shards' goroutines yet to finish the current call.
	pending atomic.Int64
	quit    atomic.Bool
	park    []*park.Waiter // shard r's goroutine's (nil for one the caller runs)
	caller  *park.Waiter
	// first is the first shard with a goroutine of its own: 1, shard 0
	// running on the caller's, or 0 for a placed group (TPOptions.Place),
	// whose every shard runs on threads of its own.
	first  int
	place  func(shard int)
	logits []float32 // shard 0's, of the current forward call
	closed bool
}

// tpCall is one call handed to a shard's goroutine: a forward call, or
// fn (set-up work on the shard's thread); neither: nothing for this shard.
type tpCall struct {
	mem    *KVMemory
	inputs []Input
	fn     func(shard int)
}

// serve runs shard r's calls until the group closes. A placed shard's
// goroutine keeps its OS thread, which ends with it.
func (g *tpGroup) serve(r int) {
	if g.place != nil {
		runtime.LockOSThread()
		g.place(r)
	}
	var seen uint64
	for {
		g.park[r].WaitSpin(func() bool { return g.gen.Load() != seen }, 0)
		seen = g.gen.Load()
		if g.quit.Load() {
			return
		}
		switch c := g.calls[r]; {
		case c.fn != nil:
			c.fn(r)
		case c.inputs != nil:
			out, err := g.shards[r].Forward(c.mem, c.inputs)
			g.errs[r] = err
			if r == 0 {
				g.logits = out
			}
		}
		if g.pending.Add(-1) == 0 {
			g.caller.Wake()
		}
	}
}

// start hands out the calls set in g.calls to the shards' goroutines.
func (g *tpGroup) start() {
	g.pending.Store(int64(len(g.park) - g.first))
	g.gen.Add(1) // publishes the calls
	for _, w := range g.park[g.first:] {
		w.Wake()
	}
}

// wait returns when the goroutines have finished their calls.
func (g *tpGroup) wait() {
	g.caller.WaitSpin(func() bool { return g.pending.Load() == 0 }, 0)
	clear(g.calls) // do not keep the caller's data alive
}

// each runs fn(r) for every shard r on the shard's thread (shard 0 on the
// caller's, unless placed) and returns when all are done; with only ≥ 0,
// for that shard alone.
func (g *tpGroup) each(fn func(shard int), only int) {
	for r := g.first; r < len(g.park); r++ {
		if only < 0 || only == r {
			g.calls[r] = tpCall{fn: fn}
		}
	}
	g.start()
	if g.first == 1 && (only < 0 || only == 0) {
		fn(0)
	}
	g.wait()
}

// TPOptions tune NewTPWith.
type TPOptions struct {
	// Place, if set, places the shards, e.g. on NUMA nodes: it runs first
	// on each of shard r's threads, each locked to its OS thread (the
	// shard's own goroutine and its pool's workers), to pin the thread
	// and set its memory policy (numa.Setup). Every shard, shard 0 too,
	// then runs on threads of its own, and is built there, so that the
	// pages of its weights are first read (faulted into the page cache) by
	// its own threads: the load's checks read some, and every page of its
	// matrices is touched after. Its strided weight slices (row-parallel
	// matrices whose rows are cut) are copied into memory its thread
	// allocates, since their pages are shared with the other shards' in
	// the file; NewKVMemory allocates and touches each shard's keys and
	// values on its thread; its scratch is allocated by its threads as it
	// runs. Pages already in the page cache stay where they are.
	Place func(shard int)
}

// NewTP builds the model of cfg over src split into n shards on the model
// axis (see shard.go), all in this process: each shard runs on a pool of
// its own with pool's threads divided among them (at least one each), and
// the shards meet through comm.NewLocal, each endpoint counted
// (comm.Counting; see Collectives). The result is one LanguageModel
// whose Config is the whole model's; Forward runs the shards concurrently
// and returns the full logits, equal to the unsharded model's to rounding
// (the row-parallel products sum in another order). Close releases the
// shards' threads. n = 1 is a plain shard of one.
func NewTP(cfg Config, src TensorSource, n int, pool *parallel.Pool) (*LanguageModel, error) {
	return NewTPWith(cfg, src, n, pool, TPOptions{})
}

// NewTPWith is NewTP placed as o says.
func NewTPWith(cfg Config, src TensorSource, n int, pool *parallel.Pool, o TPOptions) (*LanguageModel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckShards(&cfg, n); err != nil {
		return nil, err
	}
	cs, err := comm.NewLocal(n)
	if err != nil {
		return nil, err
	}
	for r := range cs {
		cs[r] = comm.NewCounting(cs[r])
	}
	return newTP(cfg, src, cs, pool, o)
}

// NewTPComms is NewTP over the given endpoints of one group (rank r's
// shard uses cs[r]), e.g. wrapped to count their traffic (comm.Counting).
func NewTPComms(cfg Config, src TensorSource, cs []comm.Comm, pool *parallel.Pool) (*LanguageModel, error) {
	return newTP(cfg, src, cs, pool, TPOptions{})
}

func newTP(cfg Config, src TensorSource, cs []comm.Comm, pool *parallel.Pool, o TPOptions) (*LanguageModel, error) {
	n := len(cs)
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckShards(&cfg, n); err != nil {
		return nil, err
	}
	if err := CheckShardTensors(&cfg, src, n); err != nil {
		return nil, err
	}
	if pool == nil {
		pool = parallel.Default()
	}
	for r, c := range cs {
		if c.Rank() != r || c.Size() != n {
			return nil, fmt.Errorf("model: endpoint %d is rank %d of %d", r, c.Rank(), c.Size())
		}
	}
	g := &tpGroup{errs: make([]error, n), calls: make([]tpCall, n), park: make([]*park.Waiter, n),
		caller: park.NewWaiter(), first: 1, place: o.Place,
		shards: make([]*LanguageModel, n), pools: make([]*parallel.Pool, n)}
	if o.Place != nil {
		g.first = 0
	}
	for r := g.first; r < n; r++ {
		g.park[r] = park.NewWaiter()
		go g.serve(r)
	}
	threads := max(1, pool.Threads()/n)
	build := func(r int) {
		s, err := newShard(cfg, src, cs[r], false, o.Place != nil)
		if err != nil {
			g.errs[r] = err
			return
		}
		if o.Place != nil {
			s.Pool = parallel.NewLocked(threads, func(int) { o.Place(r) })
			for _, m := range s.Mats() {
				numa.Touch(m.Data)
			}
			numa.Touch(s.Embed.W.Data)
		} else {
			s.Pool = parallel.New(threads)
		}
		g.shards[r], g.pools[r] = s, s.Pool
	}
	// One shard at a time (a source need not be safe for concurrent
	// use), each on its own thread.
	for r := 0; r < n; r++ {
		g.each(build, r)
		if err := g.errs[r]; err != nil {
			clear(g.errs)
			g.close()
			return nil, err
		}
	}
	return &LanguageModel{Config: cfg, Pool: pool, tp: g}, nil
}

// Close stops the goroutines and worker threads of NewTP's shards; it
// does nothing for other models. The model must not be used after.
func (lm *LanguageModel) Close() {
	if lm.tp != nil {
		lm.tp.close()
	}
}

func (g *tpGroup) close() {
	if g.closed {
		return
	}
	g.closed = true
	g.quit.Store(true)
	g.gen.Add(1)
	for _, w := range g.park[g.first:] {
		w.Wake()
	}
	for _, p := range g.pools {
		if p != nil {
			p.Close()
		}
	}
}

// Collectives returns the counter of the model's collectives: rank 0's
// endpoint of NewTP's group, or a shard's own endpoint if NewShard was
// given a *comm.Counting; nil otherwise (an unsharded model has none).
// Every rank makes the same calls, so rank 0's counts are each rank's.
func (lm *LanguageModel) Collectives() *comm.Counting {
	s := lm
	if lm.tp != nil {
		s = lm.tp.shards[0]
	}
	if s.shard == nil {
		return nil
	}
	c, _ := s.shard.comm.(*comm.Counting)
	return c
}

// Shards returns NewTP's shards (nil for other models), e.g. to read their
// step bytes.
func (lm *LanguageModel) Shards() []*LanguageModel {
	if lm.tp == nil {
		return nil
	}
	return lm.tp.shards
}

// NewKVMemory allocates the model's KV memory (see the package function).
// For NewTP's model it allocates each shard's kv heads and returns shard
// 0's memory, which keeps the others.
func (lm *LanguageModel) NewKVMemory(slots, seqLen int) (*KVMemory, error) {
	return lm.NewPagedKVMemory(KVOptions{Slots: slots, SeqLen: seqLen})
}

// NewPagedKVMemory allocates the model's KV memory as o says (see the
// package function). For NewTP's model it allocates each shard's kv heads
// over one shared book of pages and returns shard 0's memory, which keeps
// the others: Attach, Reset, Truncate and Step act on every shard at once.
func (lm *LanguageModel) NewPagedKVMemory(o KVOptions) (*KVMemory, error) {
	if lm.tp == nil {
		return NewPagedKVMemory(&lm.Config, o)
	}
	if o.SeqLen <= 0 {
		o.SeqLen = lm.Config.SequenceLen
	}
	g := lm.tp
	if g.first == 1 {
		m, err := NewPagedKVMemory(&g.shards[0].Config, o)
		if err != nil {
			return nil, err
		}
		parts := []*KVMemory{m}
		for _, s := range g.shards[1:] {
			parts = append(parts, newKVShard(&s.Config, m))
		}
		m.shards = parts
		return m, nil
	}
	// Placed: each shard's keys and values are allocated and first
	// touched on its own thread, the book (and shard 0's) first.
	parts := make([]*KVMemory, len(g.shards))
	var err error
	g.each(func(int) {
		if parts[0], err = NewPagedKVMemory(&g.shards[0].Config, o); err == nil {
			parts[0].touch()
		}
	}, 0)
	if err != nil {
		return nil, err
	}
	m := parts[0]
	g.each(func(r int) {
		if r > 0 {
			p := &KVMemory{Slots: m.Slots, SeqLen: m.SeqLen, KType: m.KType, VType: m.VType, kvBook: m.kvBook}
			p.allocRows(&g.shards[r].Config, m.Pages())
			p.touch()
			parts[r] = p
		}
	}, -1)
	m.mems = append(m.mems, parts[1:]...) // as newKVShard does
	m.shards = parts
	return m, nil
}

// touch writes every page of m's keys and values from this thread, so
// that pages the allocator left untouched are placed by its policy.
func (m *KVMemory) touch() {
	for l := range m.k {
		numa.TouchWrite(m.k[l])
		numa.TouchWrite(m.v[l])
	}
}

// shardMemories returns the shards' memories for mem: its own if
// lm.NewKVMemory made it, or, for a memory of the whole model's shape
// (NewKVMemory(&lm.Config, …)), memories of the shards' shape made on
// first use over mem's book of pages (mem's own rows then stay unused).
func (g *tpGroup) shardMemories(lm *LanguageModel, mem *KVMemory) ([]*KVMemory, error) {
	c := &lm.Config
	if mem.shards != nil {
		if len(mem.shards) != len(g.shards) || mem.shards[0].KVHeads != g.shards[0].Config.NumKVHeads {
			return nil, fmt.Errorf("model: KV memory was made for another model")
		}
		return mem.shards, nil
	}
	if mem.KVHeads != c.NumKVHeads || mem.KeySize != c.KeySize || mem.layers != c.NumLayers {
		return nil, fmt.Errorf("model: KV memory was made for another model")
	}
	parts := make([]*KVMemory, len(g.shards))
	for r, s := range g.shards {
		parts[r] = newKVShard(&s.Config, mem)
	}
	mem.shards = parts
	return parts, nil
}

// forward is Forward for NewTP's model: every shard's Forward at once,
// shard 0 on the caller's goroutine.
func (g *tpGroup) forward(lm *LanguageModel, mem *KVMemory, inputs []Input) ([]float32, error) {
	parts, err := g.shardMemories(lm, mem)
	if err != nil {
		return nil, err
	}
	if g.closed {
		return nil, fmt.Errorf("model: Forward on a closed model")
	}
	if N, _, err := checkInputs(&lm.Config, mem, inputs); err != nil || N == 0 {
		return nil, err
	}
	// The shards share mem's book of pages: the group takes the call's
	// pages and writes the pad flags once, and the shards only their rows.
	if err := mem.preparePages(inputs); err != nil {
		return nil, err
	}
	for _, in := range inputs {
		for t, tok := range in.Tokens {
			mem.setKeyOK(in.Slot, mem.step[in.Slot]+t, tok > lm.Config.PadToken)
		}
	}
	mem.grouped = true
	defer func() { mem.grouped = false }()
	for _, s := range g.shards {
		s.Precision = lm.Precision // each rank's prefill in the group's precision
	}
	for r := g.first; r < len(g.shards); r++ {
		g.calls[r] = tpCall{mem: parts[r], inputs: inputs}
	}
	g.start()
	if g.first == 1 {
		g.logits, g.errs[0] = g.shards[0].Forward(parts[0], inputs)
	}
	g.wait()
	logits := g.logits
	g.logits = nil
	err = nil
	for _, e := range g.errs {
		// One rank's failure aborts the group: report the cause, not
		// the other ranks' ErrAborted.
		if e != nil && (err == nil || errors.Is(err, comm.ErrAborted) && !errors.Is(e, comm.ErrAborted)) {
			err = e
		}
	}
	clear(g.errs)
	if err != nil {
		return nil, err
	}
	for _, in := range inputs {
		mem.step[in.Slot] += len(in.Tokens)
	}
	return logits, nil
}

package comm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// NewLocal returns the n endpoints of an in-process group: shards that run
// on goroutines of one process and exchange data through shared memory.
// Endpoint r must be used by one goroutine at a time.
func NewLocal(n int) ([]Comm, error) {
	if n <= 0 {
		return nil, fmt.Errorf("comm: a group needs at least one rank, got %d", n)
	}
	g := &localGroup{n: n, f32: make([][]float32, n), bytes: make([][]byte, n)}
	g.cond = sync.NewCond(&g.mu)
	cs := make([]Comm, n)
	for r := range cs {
		cs[r] = &local{g: g, rank: r}
	}
	return cs, nil
}

type localGroup struct {
	n       int
	mu      sync.Mutex
	cond    *sync.Cond
	waiting atomic.Int64  // ranks in the current barrier
	gen     atomic.Uint64 // completed barriers
	aborted atomic.Bool

	f32   [][]float32 // each rank's posted buffer
	bytes [][]byte
	sum   []float32 // AllReduceSum's result, shared
}

type local struct {
	g    *localGroup
	rank int
}

func (c *local) Rank() int { return c.rank }
func (c *local) Size() int { return c.g.n }

// barrierSpins is how many times a rank waiting in a barrier yields its
// thread (runtime.Gosched) before it sleeps: a sharded decode step's
// collectives come microseconds apart, and waking a sleeping goroutine
// costs more than that.
const barrierSpins = 100

// barrier blocks until all n ranks have entered it. The last rank to
// arrive completes it (gen+1) and wakes the sleepers under mu, which a
// sleeper holds while it checks gen, so no wake-up is lost.
func (g *localGroup) barrier() error {
	if g.aborted.Load() {
		return ErrAborted
	}
	gen := g.gen.Load()
	if g.waiting.Add(1) == int64(g.n) {
		g.waiting.Store(0)
		g.gen.Add(1)
		g.mu.Lock()
		g.cond.Broadcast()
		g.mu.Unlock()
		return nil
	}
	for i := 0; i < barrierSpins && g.gen.Load() == gen && !g.aborted.Load(); i++ {
		runtime.Gosched()
	}
	if g.gen.Load() == gen {
		g.mu.Lock()
		for g.gen.Load() == gen && !g.aborted.Load() {
			g.cond.Wait()
		}
		g.mu.Unlock()
	}
	if g.aborted.Load() {
		return ErrAborted
	}
	return nil
}

func (c *local) Barrier() error { return c.g.barrier() }

func (c *local) Abort(int) {
	g := c.g
	g.mu.Lock()
	g.aborted.Store(true)
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (c *local) AllReduceSum(buf []float32) error {
	g := c.g
	if g.n == 1 {
		return nil
	}
	g.f32[c.rank] = buf
	if c.rank == 0 {
		if cap(g.sum) < len(buf) {
			g.sum = make([]float32, len(buf))
		}
		g.sum = g.sum[:len(buf)]
	}
	if err := g.barrier(); err != nil {
		return err
	}
	// Rank r sums its share of the elements over the ranks in rank order.
	n := len(g.sum)
	if len(buf) != n {
		c.Abort(1)
		return fmt.Errorf("comm: AllReduceSum of %d elements on rank %d, %d on rank 0", len(buf), c.rank, n)
	}
	lo, hi := c.rank*n/g.n, (c.rank+1)*n/g.n
	// Rank by rank over the share (the same additions, in the same order,
	// as element by element), in loops the compiler keeps tight.
	sum := g.sum[lo:hi]
	copy(sum, g.f32[0][lo:hi])
	for q := 1; q < g.n; q++ {
		add := g.f32[q][lo:hi]
		add = add[:len(sum)]
		for i := range sum {
			sum[i] += add[i]
		}
	}
	if err := g.barrier(); err != nil {
		return err
	}
	copy(buf, g.sum)
	return g.barrier()
}

func (c *local) AllGather(dst, src []float32) error {
	g := c.g
	if len(dst) != g.n*len(src) {
		return fmt.Errorf("comm: AllGather of %d elements into %d on %d ranks", len(src), len(dst), g.n)
	}
	g.f32[c.rank] = src
	if err := g.barrier(); err != nil {
		return err
	}
	for q := 0; q < g.n; q++ {
		if len(g.f32[q]) != len(src) {
			c.Abort(1)
			return fmt.Errorf("comm: AllGather of %d elements on rank %d, %d on rank %d", len(src), c.rank, len(g.f32[q]), q)
		}
		copy(dst[q*len(src):], g.f32[q])
	}
	return g.barrier()
}

func (c *local) Bcast(buf []byte, root int) error {
	g := c.g
	if root < 0 || root >= g.n {
		return fmt.Errorf("comm: Bcast from rank %d of %d", root, g.n)
	}
	g.bytes[c.rank] = buf
	if err := g.barrier(); err != nil {
		return err
	}
	if c.rank != root {
		if len(g.bytes[root]) != len(buf) {
			c.Abort(1)
			return fmt.Errorf("comm: Bcast of %d bytes on rank %d, %d on the root", len(buf), c.rank, len(g.bytes[root]))
		}
		copy(buf, g.bytes[root])
	}
	return g.barrier()
}

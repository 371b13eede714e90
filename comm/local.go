package comm

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/grok-go/grok/internal/park"
)

// NewLocal returns the n endpoints of an in-process group: shards that run
// on goroutines of one process and exchange data through shared memory.
// Endpoint r must be used by one goroutine at a time.
func NewLocal(n int) ([]Comm, error) {
	if n <= 0 {
		return nil, fmt.Errorf("comm: a group needs at least one rank, got %d", n)
	}
	g := &localGroup{n: n, f32: make([][]float32, n), bytes: make([][]byte, n), park: make([]*park.Waiter, n)}
	for r := range g.park {
		g.park[r] = park.NewWaiter()
	}
	cs := make([]Comm, n)
	for r := range cs {
		cs[r] = &local{g: g, rank: r}
	}
	return cs, nil
}

type localGroup struct {
	n       int
	waiting atomic.Int64  // ranks in the current barrier
	gen     atomic.Uint64 // completed barriers
	aborted atomic.Bool
	park    []*park.Waiter // where each rank waits in a barrier

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

// barrierSpin is how long a rank polls a barrier before it sleeps: long
// enough for the usual skew between the shards of a decode step (a sleep
// and a wake-up through the poller cost tens of microseconds), short
// because a rank that polls takes the core from a shard still computing
// when the shards have more threads than free cores (on a loaded 2-core
// machine decode was slower with park.SpinFor than with this).
const barrierSpin = 50 * time.Microsecond

// barrier blocks until all n ranks have entered it: a generation counter
// the last rank to arrive advances. The others poll it, then sleep on a
// park.Waiter (see internal/park: the collectives of a sharded decode step
// come microseconds apart, so they rarely sleep, and a sleep allocates
// nothing, where a sync.Cond's took a runtime sudog that GCs make the
// runtime allocate anew).
func (g *localGroup) barrier(rank int) error {
	if g.aborted.Load() {
		return ErrAborted
	}
	gen := g.gen.Load() // it cannot advance before this rank arrives
	if g.waiting.Add(1) == int64(g.n) {
		g.waiting.Store(0) // before gen: no rank leaves, so none re-enters, until then
		g.gen.Add(1)
		for q, w := range g.park {
			if q != rank {
				w.Wake()
			}
		}
		return nil
	}
	g.park[rank].WaitSpin(func() bool { return g.gen.Load() != gen || g.aborted.Load() }, barrierSpin)
	if g.aborted.Load() {
		return ErrAborted
	}
	return nil
}

func (c *local) Barrier() error { return c.g.barrier(c.rank) }

func (c *local) Abort(int) {
	g := c.g
	g.aborted.Store(true)
	for _, w := range g.park {
		w.Wake()
	}
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
	if err := g.barrier(c.rank); err != nil {
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
	if err := g.barrier(c.rank); err != nil {
		return err
	}
	copy(buf, g.sum)
	return g.barrier(c.rank)
}

func (c *local) AllGather(dst, src []float32) error {
	g := c.g
	if len(dst) != g.n*len(src) {
		return fmt.Errorf("comm: AllGather of %d elements into %d on %d ranks", len(src), len(dst), g.n)
	}
	g.f32[c.rank] = src
	if err := g.barrier(c.rank); err != nil {
		return err
	}
	for q := 0; q < g.n; q++ {
		if len(g.f32[q]) != len(src) {
			c.Abort(1)
			return fmt.Errorf("comm: AllGather of %d elements on rank %d, %d on rank %d", len(src), c.rank, len(g.f32[q]), q)
		}
		copy(dst[q*len(src):], g.f32[q])
	}
	return g.barrier(c.rank)
}

func (c *local) Bcast(buf []byte, root int) error {
	g := c.g
	if root < 0 || root >= g.n {
		return fmt.Errorf("comm: Bcast from rank %d of %d", root, g.n)
	}
	g.bytes[c.rank] = buf
	if err := g.barrier(c.rank); err != nil {
		return err
	}
	if c.rank != root {
		if len(g.bytes[root]) != len(buf) {
			c.Abort(1)
			return fmt.Errorf("comm: Bcast of %d bytes on rank %d, %d on the root", len(buf), c.rank, len(g.bytes[root]))
		}
		copy(buf, g.bytes[root])
	}
	return g.barrier(c.rank)
}

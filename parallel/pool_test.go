package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/allocs"
	"github.com/grok-go/grok/internal/park"
)

// countTask records how often each index was visited and checks each range.
type countTask struct {
	t       *testing.T
	align   int
	threads int
	n       int
	hits    []atomic.Int32
	workers []atomic.Int32
}

func (c *countTask) Run(worker, lo, hi int) {
	if worker < 0 || worker >= c.threads {
		c.t.Errorf("worker %d outside [0, %d)", worker, c.threads)
		return
	}
	if c.workers[worker].Add(1) != 1 {
		c.t.Errorf("worker %d runs two ranges at once", worker)
	}
	defer c.workers[worker].Add(-1)
	if lo%c.align != 0 || lo >= hi || hi > c.n || (hi%c.align != 0 && hi != c.n) {
		c.t.Errorf("range [%d, %d) of n=%d is not aligned to %d", lo, hi, c.n, c.align)
	}
	for i := lo; i < hi; i++ {
		c.hits[i].Add(1)
	}
}

// Every index is visited exactly once, in aligned ranges, by valid workers,
// for any pool size — also more threads than cores.
func TestRunCoversEachIndexOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		p := New(threads)
		for _, align := range []int{1, 16, 64} {
			for _, n := range []int{0, 1, 15, 16, 17, 100, 1000, 4096, 5000} {
				c := &countTask{t: t, align: align, threads: threads, n: n,
					hits: make([]atomic.Int32, n), workers: make([]atomic.Int32, threads)}
				for rep := 0; rep < 3; rep++ {
					p.Run(n, align, c)
				}
				for i := range c.hits {
					if h := c.hits[i].Load(); h != 3 {
						t.Fatalf("threads %d align %d n %d: index %d visited %d times in 3 loops", threads, align, n, i, h)
					}
				}
			}
		}
		p.Close()
	}
}

// The ranges are cut guided: they tile [0, n) in order, never shrink below
// the least size except for the last, get no longer from one to the next,
// and there are few of them (the bounds slice never overflows into the
// catch-all last range) for any pool size and loop length.
func TestCutIsGuided(t *testing.T) {
	for _, threads := range []int{2, 3, 5, 16, 64} {
		p := New(threads)
		for _, units := range []int{2, 3, 7, 16, 100, 512, 1000, 4097, 1 << 20} {
			const align = 16
			n := units*align - 3 // a ragged last unit
			k := p.cut(units, align, n)
			if k >= len(p.bounds)-1 {
				t.Fatalf("threads %d units %d: %d ranges fill the %d bounds", threads, units, k, len(p.bounds))
			}
			if k > threads*guidedTail+5*threads+2 {
				t.Errorf("threads %d units %d: %d ranges", threads, units, k)
			}
			least := max(1, (units+guidedTail*threads-1)/(guidedTail*threads))
			if p.bounds[0] != 0 || p.bounds[k] != n {
				t.Fatalf("threads %d units %d: ranges span [%d, %d), want [0, %d)", threads, units, p.bounds[0], p.bounds[k], n)
			}
			prev := units + 1
			for i := 0; i < k; i++ {
				lo, hi := p.bounds[i], p.bounds[i+1]
				size := (min(hi, units*align) - lo + align - 1) / align
				if lo%align != 0 || hi <= lo {
					t.Fatalf("threads %d units %d: range %d is [%d, %d)", threads, units, i, lo, hi)
				}
				if size > prev || (size < least && i != k-1) {
					t.Fatalf("threads %d units %d: range %d has %d units after %d (least %d)", threads, units, i, size, prev, least)
				}
				prev = size
			}
			if first := p.bounds[1] / align; first < units/(2*threads) {
				t.Errorf("threads %d units %d: first range %d units, want ≥ %d", threads, units, first, units/(2*threads))
			}
		}
		p.Close()
	}
}

// The ranges are actually shared: with two threads and a slow body both
// threads take part.
func TestRunUsesWorkers(t *testing.T) {
	p := New(2)
	defer p.Close()
	var used [2]atomic.Bool
	p.ForAligned(8, 1, func(w, lo, hi int) {
		used[w].Store(true)
		time.Sleep(2 * time.Millisecond)
	})
	if !used[0].Load() || !used[1].Load() {
		t.Errorf("workers used: %v %v, want both", used[0].Load(), used[1].Load())
	}
}

// Loops keep working after the workers went to sleep (idle longer than
// park.SpinFor), and plain writes of the ranges are visible after For returns.
func TestSleepAndWake(t *testing.T) {
	p := New(3)
	defer p.Close()
	out := make([]int, 300)
	for rep := 0; rep < 5; rep++ {
		time.Sleep(2 * park.SpinFor)
		p.ForAligned(len(out), 1, func(_, lo, hi int) {
			for i := lo; i < hi; i++ {
				out[i] = rep*1000 + i
			}
		})
		for i, v := range out {
			if v != rep*1000+i {
				t.Fatalf("rep %d: out[%d] = %d", rep, i, v)
			}
		}
	}
}

// Loops from several goroutines run one after another and each is complete.
func TestConcurrentCallers(t *testing.T) {
	p := New(2)
	defer p.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]int, 257)
			for rep := 0; rep < 50; rep++ {
				p.ForAligned(len(buf), 1, func(_, lo, hi int) {
					for i := lo; i < hi; i++ {
						buf[i]++
					}
				})
			}
			for i, v := range buf {
				if v != 50 {
					t.Errorf("goroutine %d: buf[%d] = %d, want 50", g, i, v)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestSetThreadsAndClose(t *testing.T) {
	p := New(1)
	if p.Threads() != 1 {
		t.Fatalf("Threads = %d", p.Threads())
	}
	for _, n := range []int{3, 2, 4} {
		p.SetThreads(n)
		if p.Threads() != n {
			t.Fatalf("Threads = %d, want %d", p.Threads(), n)
		}
		c := &countTask{t: t, align: 1, threads: n, n: 100, hits: make([]atomic.Int32, 100), workers: make([]atomic.Int32, n)}
		p.Run(100, 1, c)
		for i := range c.hits {
			if c.hits[i].Load() != 1 {
				t.Fatalf("after SetThreads(%d): index %d visited %d times", n, i, c.hits[i].Load())
			}
		}
	}
	p.SetThreads(0)
	if p.Threads() != DefaultThreads() {
		t.Errorf("SetThreads(0) gave %d threads, want %d", p.Threads(), DefaultThreads())
	}
	p.Close()
	sum := 0
	p.ForAligned(10, 1, func(w, lo, hi int) { sum += hi - lo })
	if sum != 10 {
		t.Errorf("closed pool covered %d of 10", sum)
	}
}

// sumTask is a Task kept between calls, as the model keeps its tasks in its
// workspace.
type sumTask struct {
	in  []float32
	out []float32
}

func (s *sumTask) Run(_, lo, hi int) {
	for i := lo; i < hi; i++ {
		s.out[i] = s.in[i] * 2
	}
}

func double(_, _, _ int) {}

// A loop allocates nothing: neither with a Task pointer nor with a func that
// captures nothing.
func TestRunDoesNotAllocate(t *testing.T) {
	p := New(3)
	defer p.Close()
	s := &sumTask{in: make([]float32, 4096), out: make([]float32, 4096)}
	if a := testing.AllocsPerRun(200, func() { p.Run(len(s.in), 16, s) }); a != 0 {
		t.Errorf("Run: %v allocations per loop", a)
	}
	if a := testing.AllocsPerRun(200, func() { p.For(4096, double) }); a != 0 {
		t.Errorf("For with a static func: %v allocations per loop", a)
	}
}

// Loops that find their workers asleep allocate nothing either, counted
// over the whole run with GCs in it (a worker that slept on a channel took
// a runtime sudog, which the runtime allocates anew after a GC empties its
// central cache).
func TestSleepingLoopsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	p := New(3)
	defer p.Close()
	s := &sumTask{in: make([]float32, 4096), out: make([]float32, 4096)}
	asleep := func() {
		for _, w := range p.workers {
			for !w.park.Sleeping() {
				time.Sleep(park.SpinFor / 4)
			}
		}
	}
	asleep()
	p.Run(len(s.in), 16, s) // first sleeps make the poller's state
	sites := allocs.Count(func() {
		for i := 0; i < 60; i++ {
			if i%20 == 10 {
				runtime.GC()
			}
			asleep()
			p.Run(len(s.in), 16, s)
		}
	})
	if n := sites.Total(); n != 0 {
		t.Errorf("60 loops that woke their workers allocated %d objects:\n%s", n, sites)
	}
}

// NewLocked's workers run setup once each, before their first loop, and
// again when SetThreads starts new ones; the caller is not one of them.
func TestNewLockedRunsSetup(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	p := NewLocked(3, func(w int) {
		mu.Lock()
		seen[w]++
		mu.Unlock()
	})
	defer p.Close()
	p.For(4096, double)
	p.SetThreads(2)
	p.For(4096, double)
	p.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[1] != 2 || seen[2] != 1 {
		t.Errorf("setup ran for workers %v, want map[1:2 2:1]", seen)
	}

	// SetWorkerSetup gives a running pool's workers a setup.
	clear(seen)
	q := New(3)
	defer q.Close()
	q.SetWorkerSetup(func(w int) {
		mu.Lock()
		seen[w]++
		mu.Unlock()
	})
	mu.Unlock()
	q.For(4096, double)
	q.Close()
	mu.Lock()
	if len(seen) != 2 || seen[1] != 1 || seen[2] != 1 {
		t.Errorf("after SetWorkerSetup, setup ran for workers %v, want map[1:1 2:1]", seen)
	}
}

// BenchmarkLoopOverhead is the cost of one near-empty loop on the default
// pool: the price of one parallel region of a forward call.
func BenchmarkLoopOverhead(b *testing.B) {
	p := New(0)
	defer p.Close()
	s := &sumTask{in: make([]float32, 64), out: make([]float32, 64)}
	b.ReportAllocs()
	for b.Loop() {
		p.Run(len(s.in), 16, s)
	}
}

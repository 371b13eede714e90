// Package parallel runs loops over index ranges on a fixed set of worker
// goroutines: the engine's thread pool. It is the CPU form of the seed's
// "model" mesh axis (semantics §2): a layer's outputs are split into
// contiguous ranges and each range is computed by one thread, which reads
// only its own slice of the weights.
//
// A Pool is created once and reused for every loop of every token; a loop
// costs no goroutine, no channel send when the workers are awake, and no heap
// allocation. The goroutine that calls For is itself worker 0 and takes a
// share of the work, so a pool of n threads starts n-1 goroutines.
package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grok-go/grok/internal/park"
)

// Task is a loop body: Run computes the indices [lo, hi) and may use worker
// (0 ≤ worker < Threads) to pick per-thread scratch, since one worker runs
// one range at a time. A pointer to a struct kept between calls makes a Task
// that costs no allocation to pass.
type Task interface {
	Run(worker, lo, hi int)
}

// Func adapts a function to Task. A func value is one pointer wide, so the
// conversion itself never allocates; a closure that captures variables does
// (once, where it is created), because the pool hands it to other goroutines.
type Func func(worker, lo, hi int)

// Run calls f.
func (f Func) Run(worker, lo, hi int) { f(worker, lo, hi) }

// DefaultAlign is the range granularity of For: 16 float32 outputs fill one
// 64-byte cache line, so two workers never write the same line of an output
// row, and 16 is a whole number of AVX-512 vectors, so a SIMD kernel's tiles
// stay whole.
const DefaultAlign = 16

// A loop's ranges are cut the way OpenMP's schedule(guided) cuts them: each
// range takes 1/(2·threads) of the indices not yet handed out, but never less
// than 1/(guidedTail·threads) of the loop. The first ranges are long, so each
// thread streams long runs of weights; the last are short, so a thread that
// finishes early (or one whose core another process took for a while) leaves
// little work for the loop to wait for. With 2 threads a loop of 512 units
// is cut into 12 ranges, the last whole ones 1/32 of it, where equal
// quarters per thread would leave the slower thread a last range of 1/8
// (figures: bench/README.md).
const guidedTail = 16

// Waiting threads (idle workers, and the caller waiting for a loop's last
// ranges) poll for park.SpinFor before they sleep: between the loops of
// one forward call the gaps are microseconds (a norm, the router), far
// shorter than waking a sleeping goroutine, which costs several
// microseconds and an OS thread switch. They sleep on a park.Waiter, whose
// sleep costs no allocation, where a channel's would take a runtime sudog
// the GC's emptying of the central cache makes the runtime allocate anew.

// Pool is a set of worker threads that run For loops. Its methods are safe
// for concurrent use; loops from several goroutines run one after another.
// A loop body must not call For on the same pool.
type Pool struct {
	mu      sync.Mutex   // held by Run and SetThreads: one loop at a time
	threads int          // including the caller; written with mu held
	size    atomic.Int32 // threads, readable without mu (from a loop body)
	workers []*worker
	wg      sync.WaitGroup // running worker goroutines
	closed  bool

	// The current loop. The plain fields are written by For before it
	// publishes the loop by storing left, and read by a worker only after it
	// claimed a range from left, so the atomic orders them.
	task   Task
	n      int
	bounds []int        // range i is [bounds[i], bounds[i+1])
	left   atomic.Int64 // ranges not yet claimed, counted down: range total-left is next
	done   atomic.Int64 // ranges finished
	total  int64        // ranges in the loop
	gen    atomic.Uint64
	quit   atomic.Bool
	caller *park.Waiter // where the caller sleeps waiting for done

	// locked: each worker goroutine locks its thread and runs setup, if
	// set, first (NewLocked).
	locked bool
	setup  func(worker int)
}

// worker is one goroutine's place to sleep.
type worker struct {
	park *park.Waiter
}

// New returns a pool of threads threads in all (the caller counted);
// threads ≤ 0 means DefaultThreads(). Close it when done: its workers
// otherwise live as long as the process.
func New(threads int) *Pool {
	p := &Pool{caller: park.NewWaiter()}
	p.start(threads)
	return p
}

// NewLocked is New with worker goroutines that each lock their OS thread
// (runtime.LockOSThread) and call setup(worker) before their first loop,
// e.g. to pin the thread to some CPUs; setup nil only locks. A locked
// worker's thread ends with it (Close, SetThreads), so whatever setup did
// to the thread never reaches other goroutines. The caller, worker 0,
// is not touched: it sets up its own thread if it needs to.
func NewLocked(threads int, setup func(worker int)) *Pool {
	p := &Pool{caller: park.NewWaiter(), locked: true, setup: setup}
	p.start(threads)
	return p
}

// DefaultThreads is the number of threads a pool gets when none is asked
// for: runtime.GOMAXPROCS(0), which is the number of CPUs unless a CPU quota
// or GOMAXPROCS lowers it — more threads than that would only take turns.
func DefaultThreads() int { return runtime.GOMAXPROCS(0) }

var (
	defaultOnce sync.Once
	defaultPool *Pool
)

// Default returns the process-wide pool, created on first use with
// DefaultThreads() threads.
func Default() *Pool {
	defaultOnce.Do(func() { defaultPool = New(0) })
	return defaultPool
}

// SetThreads resizes the default pool (threads ≤ 0: DefaultThreads()).
func SetThreads(threads int) { Default().SetThreads(threads) }

// Threads returns the pool's size, the caller included.
func (p *Pool) Threads() int { return int(p.size.Load()) }

// SetThreads stops the pool's workers and starts threads-1 new ones
// (threads ≤ 0: DefaultThreads()). Per-thread scratch that users of the pool
// sized by Threads must be resized with it, so call it only while nothing
// is running on the pool (e.g. at start-up).
func (p *Pool) SetThreads(threads int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if threads <= 0 {
		threads = DefaultThreads()
	}
	if threads == p.threads && !p.closed {
		return
	}
	p.stop()
	p.closed = false
	p.start(threads)
}

// SetWorkerSetup restarts the pool's workers as NewLocked's, each locked
// to its OS thread and calling setup(worker) first (nil: only locked).
// Call it only while nothing runs on the pool, as SetThreads.
func (p *Pool) SetWorkerSetup(setup func(worker int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	threads := p.threads
	p.stop()
	p.closed = false
	p.locked, p.setup = true, setup
	p.start(threads)
}

// Close stops the workers. Later loops run on the caller alone.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stop()
	p.closed = true
	p.threads = 1
	p.size.Store(1)
}

func (p *Pool) start(threads int) {
	if threads <= 0 {
		threads = DefaultThreads()
	}
	p.threads = threads
	p.size.Store(int32(threads))
	// cut makes at most about 6.2·threads+2 ranges (see cut).
	p.bounds = make([]int, 8*threads+8)
	p.quit.Store(false)
	p.workers = make([]*worker, threads-1)
	for i := range p.workers {
		w := &worker{park: park.NewWaiter()}
		p.workers[i] = w
		p.wg.Add(1)
		go p.work(w, i+1, p.gen.Load())
	}
}

// stop ends every worker goroutine and waits for them. p.mu is held.
func (p *Pool) stop() {
	p.quit.Store(true)
	p.gen.Add(1)
	for _, w := range p.workers {
		w.park.Wake()
	}
	p.wg.Wait()
	for _, w := range p.workers {
		w.park.Close()
	}
	p.workers = nil
}

// For runs fn over [0, n) in contiguous ranges aligned to DefaultAlign
// indices and returns when all are done. See Run.
func (p *Pool) For(n int, fn func(worker, lo, hi int)) {
	p.Run(n, DefaultAlign, Func(fn))
}

// ForAligned is For with ranges that start at multiples of align.
func (p *Pool) ForAligned(n, align int, fn func(worker, lo, hi int)) {
	p.Run(n, align, Func(fn))
}

// Run calls t.Run on ranges that cover [0, n) exactly once, each starting at
// a multiple of align (the last one ends at n), on the pool's threads and the
// caller, and returns when every range is done. Writes made by the ranges
// are visible to the caller when Run returns.
//
// Which thread runs which range, and where the ranges are cut, depend on the
// pool's size and on timing. A Task whose result for each index does not
// depend on the range it came in (as computing each output of a matrix
// product separately does not) therefore gives the same bits for any number
// of threads.
func (p *Pool) Run(n, align int, t Task) {
	if n <= 0 {
		return
	}
	align = max(align, 1)
	units := (n + align - 1) / align
	p.mu.Lock()
	defer p.mu.Unlock()
	if units <= 1 || p.threads == 1 {
		// Too little to share: waking a worker would cost more than it saves.
		t.Run(0, 0, n)
		return
	}
	p.task, p.n = t, n
	p.total = int64(p.cut(units, align, n))
	p.done.Store(0)
	p.left.Store(p.total) // publishes the loop to workers still spinning
	p.gen.Add(1)          // and this tells the sleeping ones to look
	for _, w := range p.workers {
		w.park.Wake()
	}
	p.runRanges(0)
	p.waitDone()
	p.task = nil // do not keep the caller's data alive
}

// cut fills p.bounds with the guided ranges of a loop of n indices in units
// of align (units ≥ 2) and returns how many there are. Ranges of the
// geometric part shrink by 1 - 1/(2T) until they reach the least size, at
// the latest when less than 1/8 of the loop is left: about 2T·ln 8 ≈ 4.2T
// ranges; the rest is at most 2T ranges of the least size, plus one.
func (p *Pool) cut(units, align, n int) int {
	T := p.threads
	least := max(1, (units+guidedTail*T-1)/(guidedTail*T))
	k, at := 0, 0
	for at < units {
		size := max(least, (units-at)/(2*T))
		if k == len(p.bounds)-2 {
			size = units - at // unreachable by the count above; kept safe
		}
		p.bounds[k] = at * align
		at += min(size, units-at)
		k++
	}
	p.bounds[k] = n
	return k
}

// runRanges claims and runs ranges of the current loop until none is left.
func (p *Pool) runRanges(worker int) {
	for {
		c := p.left.Add(-1)
		if c < 0 {
			return
		}
		// Read the loop before counting the range done: once the count is
		// complete, For may return and start the next loop.
		total := p.total
		k := int(total - 1 - c) // ranges are claimed first to last
		lo, hi := p.bounds[k], p.bounds[k+1]
		p.task.Run(worker, lo, hi)
		if p.done.Add(1) == total {
			p.caller.Wake()
		}
	}
}

// pollsPerCheck is how many polls of a spin pass between looks at the
// clock and yields (a power of two).
const pollsPerCheck = 1024

// waitDone returns when every range of the current loop has finished.
// The spin is inline, not park.Waiter.Wait's: a poll through a function
// value is slower, so fewer waits reach a yield, and other goroutines of
// the caller's P (a chat's Ctrl-C watcher) wait longer for one.
func (p *Pool) waitDone() {
	start := time.Now()
	for i := 0; p.done.Load() != p.total; i++ {
		if i&(pollsPerCheck-1) != pollsPerCheck-1 {
			continue
		}
		if time.Since(start) < park.SpinFor {
			// Yield now and then, not on every poll: a yield costs about
			// a microsecond, but without any a pool with more threads than
			// cores would keep runnable goroutines waiting for the spin.
			runtime.Gosched()
			continue
		}
		p.caller.Sleep(func() bool { return p.done.Load() == p.total })
		start, i = time.Now(), 0
	}
}

// work is a worker goroutine: wait for a new loop, run ranges of it, repeat.
func (p *Pool) work(w *worker, id int, seen uint64) {
	defer p.wg.Done()
	if p.locked {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if p.setup != nil {
			p.setup(id)
		}
	}
	for {
		seen = p.await(w, seen)
		if p.quit.Load() {
			return
		}
		p.runRanges(id)
	}
}

// await returns the loop generation once it differs from seen, spinning
// for a while (inline, as waitDone) and then sleeping.
func (p *Pool) await(w *worker, seen uint64) uint64 {
	start := time.Now()
	for i := 0; ; i++ {
		if g := p.gen.Load(); g != seen {
			return g
		}
		if i&(pollsPerCheck-1) != pollsPerCheck-1 {
			continue
		}
		if time.Since(start) < park.SpinFor {
			runtime.Gosched()
			continue
		}
		w.park.Sleep(func() bool { return p.gen.Load() != seen })
		start, i = time.Now(), 0
	}
}

// Package park lets a goroutine wait for a condition another goroutine
// makes true: it polls for a short while, then sleeps until woken. The
// sleep costs no heap allocation. A goroutine that blocks on a channel,
// a sync.Cond or a mutex takes a runtime sudog, and the runtime refills
// its per-P caches of those from a central list that every GC empties, so
// a loop whose goroutines park keeps allocating after each GC. Here the
// sleeper blocks reading a file descriptor of the runtime's network
// poller (an eventfd on Linux, a pipe on other Unix systems), which parks
// the goroutine without a sudog and frees its thread and P.
package park

import (
	"runtime"
	"sync/atomic"
	"time"
)

// SpinFor is how long Wait polls before it sleeps. The waits of a decode
// step (the pool's loops, the shards' collectives) are microseconds apart,
// far shorter than a sleep and a wake-up cost.
const SpinFor = 200 * time.Microsecond

// pollsPerCheck is how many polls pass between looks at the clock and
// yields (a power of two).
const pollsPerCheck = 1024

// Waiter is one goroutine's place to sleep in Wait; Wake wakes it. One
// goroutine at a time may Wait on a Waiter; any goroutine may Wake it.
type Waiter struct {
	sleeping atomic.Bool
	sem      sem
}

// NewWaiter returns a Waiter. Close it when done with it to release its
// file descriptors at once (the GC would, later). If the system refuses a
// descriptor, the Waiter sleeps on a channel instead, which works alike
// but may allocate.
func NewWaiter() *Waiter {
	w := &Waiter{}
	w.sem.init()
	return w
}

// Wait returns once ready() reports true. It polls ready, yielding the
// thread now and then, for up to SpinFor, then sleeps until Wake (and
// polls again, should it have been woken for another reason). Whoever
// makes ready true must call Wake after.
func (w *Waiter) Wait(ready func() bool) { w.WaitSpin(ready, SpinFor) }

// WaitSpin is Wait polling for spin instead of SpinFor (0: a thousand
// polls or so, then sleep).
func (w *Waiter) WaitSpin(ready func() bool, spin time.Duration) {
	start := time.Now()
	for i := 0; ; i++ {
		if ready() {
			return
		}
		if i&(pollsPerCheck-1) != pollsPerCheck-1 {
			continue
		}
		if time.Since(start) < spin {
			// Yield now and then, not on every poll: a yield costs about
			// a microsecond, but without any, more waiters than cores
			// would keep runnable goroutines waiting for the spin.
			runtime.Gosched()
			continue
		}
		w.Sleep(ready)
		start, i = time.Now(), 0
	}
}

// Sleep sleeps until Wake, unless ready() reports true: it announces the
// sleep, then looks once more, since a Wake that came before the
// announcement did not see it. Callers that poll themselves call it when
// they are done polling, and look at their condition again after.
func (w *Waiter) Sleep(ready func() bool) {
	w.sleeping.Store(true)
	if ready() {
		if !w.sleeping.CompareAndSwap(true, false) {
			w.sem.wait() // a Wake saw the flag and posted: take its token
		}
		return
	}
	w.sem.wait()
}

// Wake wakes w if it sleeps in Wait. The flag decides who posts, so that
// exactly one wake-up is posted per sleep.
func (w *Waiter) Wake() {
	// The load first: most Wakes find a spinner, and a failed CAS would
	// still take the cache line for writing.
	if w.sleeping.Load() && w.sleeping.CompareAndSwap(true, false) {
		w.sem.post()
	}
}

// Sleeping reports whether a goroutine sleeps in w's Wait, e.g. for a
// test that must wake a sleeper, not a spinner.
func (w *Waiter) Sleeping() bool { return w.sleeping.Load() }

// Close releases w's descriptors. w must not be in Wait, nor be woken
// after.
func (w *Waiter) Close() { w.sem.close() }

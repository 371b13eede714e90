package park

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/allocs"
)

// pair is two goroutines that take turns: in each round, the answering
// goroutine sleeps in b.Wait until the test's goroutine wakes it, and
// that one sleeps in a.Wait until woken back. Each side waits until the
// other is asleep before it wakes it, so every round goes through the
// sleep, not the spin.
type pair struct {
	a, b *Waiter
	turn atomic.Int64 // odd: b's side to move, even: a's
	next int64
	done chan struct{}
}

func newPair(rounds int) *pair {
	p := &pair{a: NewWaiter(), b: NewWaiter(), done: make(chan struct{})}
	go p.answer(rounds)
	return p
}

func (p *pair) answer(rounds int) {
	defer close(p.done)
	for r := int64(1); r < 2*int64(rounds); r += 2 {
		p.b.Wait(func() bool { return p.turn.Load() >= r })
		for !p.a.sleeping.Load() {
			runtime.Gosched()
		}
		p.turn.Store(r + 1)
		p.a.Wake()
	}
}

// rounds runs k rounds, calling each(i) before the i-th.
func (p *pair) rounds(k int, each func(i int)) {
	for i := 0; i < k; i++ {
		each(i)
		r := p.next
		for !p.b.sleeping.Load() {
			runtime.Gosched()
		}
		p.turn.Store(r + 1)
		p.b.Wake()
		p.a.Wait(func() bool { return p.turn.Load() >= r+2 })
		p.next += 2
	}
}

func (p *pair) finish(t *testing.T) {
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the pair hung")
	}
	p.a.Close()
	p.b.Close()
}

func TestWaitWake(t *testing.T) {
	for _, rounds := range []int{1, 2, 10} {
		p := newPair(rounds)
		n := 0
		p.rounds(rounds, func(int) { n++ })
		p.finish(t)
		if n != rounds || p.turn.Load() != 2*int64(rounds) {
			t.Errorf("%d rounds ran to turn %d, want %d", n, p.turn.Load(), 2*rounds)
		}
	}
}

// A sleep and a wake-up allocate nothing, across GCs too (which empty the
// runtime's central cache of sudogs): counted over the whole loop, not
// averaged per round.
func TestSleepDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	const warm, rounds = 10, 300
	p := newPair(warm + rounds)
	p.rounds(warm, func(int) {}) // the poller's state is made on first use
	sites := allocs.Count(func() {
		p.rounds(rounds, func(i int) {
			if i%100 == 50 {
				runtime.GC()
			}
		})
	})
	p.finish(t)
	if n := sites.Total(); n != 0 {
		t.Errorf("%d sleeps and wake-ups on each side allocated %d objects:\n%s", rounds, n, sites)
	}
}

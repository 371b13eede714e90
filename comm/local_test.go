package comm

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/allocs"
)

// run calls f on every endpoint of a new n-rank group concurrently.
func run(t *testing.T, n int, f func(c Comm) error) []error {
	t.Helper()
	cs, err := NewLocal(n)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(c) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the group hung")
	}
	return errs
}

func TestLocalCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 8} {
		res := make([][]float32, n)
		gath := make([][]float32, n)
		bc := make([][]byte, n)
		errs := run(t, n, func(c Comm) error {
			r := c.Rank()
			buf := make([]float32, 7)
			for i := range buf {
				buf[i] = float32(r*10 + i)
			}
			for k := 0; k < 3; k++ { // reuse across calls
				if err := c.AllReduceSum(buf); err != nil {
					return err
				}
			}
			res[r] = buf
			dst := make([]float32, 2*n)
			if err := c.AllGather(dst, []float32{float32(r), float32(-r)}); err != nil {
				return err
			}
			gath[r] = dst
			b := []byte{byte(r), byte(r)}
			if err := c.Bcast(b, n-1); err != nil {
				return err
			}
			bc[r] = b
			return c.Barrier()
		})
		for r := 0; r < n; r++ {
			if errs[r] != nil {
				t.Fatalf("n=%d rank %d: %v", n, r, errs[r])
			}
			for i, v := range res[r] {
				// After three reductions: n² · (column sum of the first).
				var want float32
				for q := 0; q < n; q++ {
					want += float32(q*10 + i)
				}
				for k := 1; k < 3; k++ {
					want *= float32(n)
				}
				if v != want {
					t.Fatalf("n=%d rank %d AllReduceSum[%d] = %v, want %v", n, r, i, v, want)
				}
			}
			for q := 0; q < n; q++ {
				if gath[r][2*q] != float32(q) || gath[r][2*q+1] != float32(-q) {
					t.Fatalf("n=%d rank %d AllGather = %v", n, r, gath[r])
				}
			}
			if bc[r][0] != byte(n-1) || bc[r][1] != byte(n-1) {
				t.Fatalf("n=%d rank %d Bcast = %v", n, r, bc[r])
			}
		}
	}
}

func TestLocalAbortUnblocks(t *testing.T) {
	errs := run(t, 3, func(c Comm) error {
		if c.Rank() == 2 {
			c.Abort(1) // rank 2 gives up instead of reducing
			return nil
		}
		return c.AllReduceSum(make([]float32, 4))
	})
	for r := 0; r < 2; r++ {
		if !errors.Is(errs[r], ErrAborted) {
			t.Errorf("rank %d: %v, want ErrAborted", r, errs[r])
		}
	}
}

func TestLocalMismatchedLengths(t *testing.T) {
	errs := run(t, 2, func(c Comm) error {
		return c.AllReduceSum(make([]float32, 3+c.Rank()))
	})
	if errs[0] == nil && errs[1] == nil {
		t.Fatal("mismatched AllReduceSum lengths were accepted")
	}
}

// asleep waits until rank r of the group of c sleeps in a barrier.
func asleep(c Comm, r int) {
	for !c.(*local).g.park[r].Sleeping() {
		time.Sleep(100 * time.Microsecond)
	}
}

// Abort wakes ranks that sleep in a barrier, not only those that poll.
func TestLocalAbortWakesSleepers(t *testing.T) {
	cs, err := NewLocal(3)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for r := 0; r < 2; r++ {
		go func() { errs <- cs[r].AllReduceSum(make([]float32, 4)) }()
	}
	asleep(cs[0], 0)
	asleep(cs[0], 1)
	cs[2].Abort(1)
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrAborted) {
				t.Errorf("a sleeping rank got %v, want ErrAborted", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Abort left a sleeping rank asleep")
		}
	}
}

// Collectives allocate nothing, also when ranks sleep in their barriers
// and GCs run between them (a rank that slept on a sync.Cond took a
// runtime sudog, which the runtime allocates anew after a GC empties its
// central cache): counted exactly over the whole loop.
func TestLocalCollectivesDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	const n, warm, steps = 3, 5, 60
	cs, err := NewLocal(n)
	if err != nil {
		t.Fatal(err)
	}
	step := func(c Comm, buf, all []float32) {
		if err := c.AllReduceSum(buf); err != nil {
			t.Error(err)
		}
		if err := c.AllGather(all, buf[:2]); err != nil {
			t.Error(err)
		}
	}
	done := make(chan struct{}, n) // buffered: a send never parks (which allocates)
	for r := 1; r < n; r++ {
		go func() {
			defer func() { done <- struct{}{} }()
			buf, all := make([]float32, 64), make([]float32, 2*n)
			for range warm + steps {
				step(cs[r], buf, all)
			}
		}()
	}
	buf, all := make([]float32, 64), make([]float32, 2*n)
	// Rank 0 comes last to every step, once the others sleep.
	loop := func(k int) {
		for i := 0; i < k; i++ {
			if i%20 == 10 {
				runtime.GC()
			}
			for r := 1; r < n; r++ {
				asleep(cs[0], r)
			}
			step(cs[0], buf, all)
		}
	}
	loop(warm)
	sites := allocs.Count(func() { loop(steps) })
	for r := 1; r < n; r++ {
		<-done
	}
	if n := sites.Total(); n != 0 {
		t.Errorf("%d steps of collectives with sleeping ranks allocated %d objects:\n%s", steps, n, sites)
	}
}

package kernels

import (
	"runtime"
	"sync"
	"testing"
)

// The products' scratch buffers survive garbage collections: a sync.Pool
// would drop them (after two), and the next product would allocate again.
// The buffer itself is compared, not the process's malloc count, which
// other goroutines (the runtime's, the test framework's) can move.
func TestScratchSurvivesGC(t *testing.T) {
	p := getScratch(4096)
	want := &(*p)[0]
	scratchPool.Put(p)
	for range 3 {
		runtime.GC()
		runtime.GC()
		p := getScratch(4096)
		got := &(*p)[0]
		scratchPool.Put(p)
		if got != want {
			t.Fatalf("after two GCs the scratch buffer is a new one")
		}
	}
}

// A large request takes a free buffer large enough when there is one, not
// the first free one (which would then grow): buffers of many sizes share
// the list, and which product put which back depends on the threads.
func TestScratchFitsBySize(t *testing.T) {
	var l freeList[[]float32]
	l.sizeOf = func(p *[]float32) int { return cap(*p) }
	small, large := make([]float32, 16), make([]float32, 4096)
	l.Put(&small)
	l.Put(&large)
	if p := l.Fit(4000); p != &large {
		t.Errorf("Fit(4000) took a buffer of %d", cap(*p))
	}
	if p := l.Fit(4000); p != &small {
		t.Errorf("with no large buffer left, Fit(4000) did not take the small one")
	}
}

// The other scratch lists survive garbage collections too.
func TestFreeListsSurviveGC(t *testing.T) {
	b, f, q := bytePool.Get(), fastPool.Get(), qbufPool.Get()
	bytePool.Put(b)
	fastPool.Put(f)
	qbufPool.Put(q)
	runtime.GC()
	runtime.GC()
	if bytePool.Get() != b || fastPool.Get() != f || qbufPool.Get() != q {
		t.Error("a scratch object was dropped by two GCs")
	}
}

// Threads that take, grow and return buffers at once each get a buffer of
// their own (run with -race: a size noted after a buffer was back in the
// list raced with the thread that took it next).
func TestFreeListConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				p := getScratch(16 + (g*7+i)%64)
				for j := range *p {
					(*p)[j] = float32(g)
				}
				for j := range *p {
					if (*p)[j] != float32(g) {
						t.Errorf("goroutine %d: its buffer was written by another", g)
						return
					}
				}
				scratchPool.Put(p)
			}
		}()
	}
	wg.Wait()
}

package kernels

import (
	"runtime"
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

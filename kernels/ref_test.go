package kernels

import (
	"runtime"
	"testing"
)

// The products' scratch buffers survive garbage collections: a sync.Pool
// would drop them (after two), and the next product would allocate again.
func TestScratchSurvivesGC(t *testing.T) {
	scratchPool.Put(getScratch(4096))
	var a, b runtime.MemStats
	for range 3 {
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&a)
		p := getScratch(4096)
		scratchPool.Put(p)
		runtime.ReadMemStats(&b)
		if n := b.Mallocs - a.Mallocs; n != 0 {
			t.Fatalf("a scratch buffer after two GCs cost %d allocations", n)
		}
	}
}

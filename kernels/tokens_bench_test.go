package kernels

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/grok-go/grok/tensor"
)

func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGEMMTokens times one thread's prefill product of a Grok-1-wide
// matrix (6144 inputs) for growing numbers of tokens: past the L2 budget's
// tokens the activations of a chunk no longer stay in L2.
func BenchmarkGEMMTokens(b *testing.B) {
	const out, in = 2048, 6144
	for _, c := range []benchCase{{name: "Q8_0", dt: tensor.Q8_0}, {name: "F16", dt: tensor.F16}, {name: "F32", dt: tensor.F32}, {name: "Q4_K", dt: tensor.Q4_K}} {
		mats := benchMats(c, out, in, 0)
		for _, n := range []int{32, 48, 96, 256, 1024} {
			// Rows 64-byte aligned, as the model's buffers are (randInputs
			// misaligns them by 4 bytes, which costs the F32 kernels 20 %).
			x := randInputs(rand.New(rand.NewPCG(2, 2)), n+1, in)[in-1:][:n*in]
			dst := make([]float32, n*out)
			b.Run(c.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				runtimeLockOSThread()
				defer runtimeUnlockOSThread()
				c0 := threadCPU()
				for b.Loop() {
					MatMulRows(dst, x, n, &mats[0], 0, out)
				}
				b.ReportMetric(2*float64(n*out*in)*float64(b.N)/(threadCPU()-c0).Seconds()/1e9, "GFLOP/s-cpu")
			})
		}
	}
}

var runtimeLockOSThread, runtimeUnlockOSThread = runtime.LockOSThread, runtime.UnlockOSThread

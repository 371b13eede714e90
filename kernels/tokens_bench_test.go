package kernels

import (
	"fmt"
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
		// Q8_0 both ways past q8TwoPassTokens: in registers and through
		// float32 tiles (q8TwoPass, chosen per CPU vendor).
		routes := []bool{q8TwoPass}
		if c.dt == tensor.Q8_0 {
			routes = []bool{false, true}
		}
		for _, n := range []int{32, 48, 96, 256, 1024} {
			// Rows 64-byte aligned, as the model's buffers are (randInputs
			// misaligns them by 4 bytes, which costs the F32 kernels 20 %).
			x := randInputs(rand.New(rand.NewPCG(2, 2)), n+1, in)[in-1:][:n*in]
			dst := make([]float32, n*out)
			for _, two := range routes {
				name := c.name + "/" + strconv.Itoa(n)
				if len(routes) > 1 {
					name = c.name + "/twopass=" + strconv.FormatBool(two) + "/" + strconv.Itoa(n)
				}
				b.Run(name, func(b *testing.B) {
					defer func(v bool) { q8TwoPass = v }(q8TwoPass)
					q8TwoPass = two
					gemmCPU(b, n, out, in, func() { MatMulRows(dst, x, n, &mats[0], 0, out) })
				})
			}
		}
	}
}

var runtimeLockOSThread, runtimeUnlockOSThread = runtime.LockOSThread, runtime.UnlockOSThread

// gemmCPU runs product, one of n tokens by an out×in matrix, on a locked
// thread and reports its GFLOP/s by the thread's CPU time (a shared
// machine's wall time says little about one thread's loop).
func gemmCPU(b *testing.B, n, out, in int, product func()) {
	runtimeLockOSThread()
	defer runtimeUnlockOSThread()
	c0 := threadCPU()
	for b.Loop() {
		product()
	}
	b.ReportMetric(2*float64(n*out*in)*float64(b.N)/(threadCPU()-c0).Seconds()/1e9, "GFLOP/s-cpu")
}

// BenchmarkFusedPastN times one thread's prefill product of each type with
// fused kernels past their N tokens both ways, the fused kernels
// (fusedMatMul; dequantMatMul takes them where fusedPastN says, for
// fusesPastN's types and those with table kernels, which also run without
// their tables) and the two-pass path, on an expert's real-shape gate
// (2048×6144 of its 32768 rows) and down (1024×32768) matrices, active
// kernels.
func BenchmarkFusedPastN(b *testing.B) {
	ks := active
	types := []tensor.DType{tensor.Q4_0, tensor.Q4_K, tensor.Q6_K, tensor.Q2_K, tensor.Q3_K, tensor.Q5_K,
		tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.IQ4_NL, tensor.IQ4_XS}
	for _, sh := range []struct{ out, in int }{{2048, 6144}, {1024, 32768}} {
		for _, dt := range types {
			ff := ks.fusedFamily(dt)
			if ff == nil {
				continue
			}
			mats := benchMats(benchCase{dt: dt}, sh.out, sh.in, 0)
			m := &mats[0]
			for _, n := range []int{64, 256} {
				x := randInputs(rand.New(rand.NewPCG(2, 2)), n+1, sh.in)[sh.in-1:][:n*sh.in]
				dst := make([]float32, n*sh.out)
				paths := []string{"fused", "two-pass"}
				if ff.tab != nil {
					paths = append(paths, "fused-no-tables")
				}
				for _, path := range paths {
					b.Run(fmt.Sprintf("%dx%d/%v/%d/%s", sh.out, sh.in, dt, n, path), func(b *testing.B) {
						defer func(v bool) { noTables = v }(noTables)
						noTables = path == "fused-no-tables"
						gemmCPU(b, n, sh.out, sh.in, func() {
							clear(dst) // both paths add to it
							if path == "two-pass" {
								ks.dequantTwoPass(dst, x, n, m, 0, sh.out)
							} else {
								fusedMatMul(dst, x, n, m, 0, sh.out, ff, m.stride())
							}
						})
					})
				}
			}
		}
	}
}

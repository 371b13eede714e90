package kernels

import (
	"math"
	"sync/atomic"
)

// peakChains is the number of independent FMA chains of the peak loop (the
// generator's constant of the same name).
const peakChains = 12

// FMAPeak runs iters iterations of a register-only loop of independent
// float32 fused multiply-adds on the calling goroutine, at the widest
// vector width of the active kernels, and returns the floating-point
// operations it performed (2 per lane per FMA). Timed on every thread at
// once, it is the float32 peak that an exact-precision prefill is judged
// against: no memory access, no dependency chain longer than the FMA's
// latency. Under the pure-Go kernels it runs a scalar loop of the same
// shape, which measures Go's scalar code, not the machine.
func FMAPeak(iters int) (flops float64) {
	if iters <= 0 {
		return 0
	}
	if s := active; s != nil && s.fmaPeak != nil {
		s.fmaPeak(iters)
		return float64(iters) * peakChains * float64(s.lanes) * 2
	}
	var a [peakChains]float32
	x, y := float32(1e-3), float32(0.5)
	for range iters {
		for j := range a {
			a[j] = a[j]*y + x
		}
	}
	peakSink.Store(math.Float32bits(a[0]))
	return float64(iters) * peakChains * 2
}

// IntPeak runs iters iterations of a register-only loop of independent
// 512-bit VPDPWSSDs on the calling goroutine and returns the operations it
// performed, 2 per int16 product (a multiply and an add, as FLOPs count a
// fused multiply-add), so that it compares with a prefill's FLOPs: the
// peak of the fast precision's integer products. 0 on a machine without
// AVX-512 VNNI (where Fast runs no integer products).
func IntPeak(iters int) (ops float64) {
	if s := active; iters > 0 && s != nil && s.intPeak != nil {
		s.intPeak(iters)
		return float64(iters) * peakChains * 32 * 2
	}
	return 0
}

// peakSink keeps the pure-Go loop's result alive (atomic: every thread of
// the probe writes it).
var peakSink atomic.Uint32

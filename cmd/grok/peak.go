package main

import (
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/parallel"
)

// A peak pass is peakUnits loop indices a thread, each peakIters
// iterations of the peak loop: many small indices let the pool's dynamic
// ranges keep every thread busy to the end of the pass.
const (
	peakIters = 1 << 19
	peakUnits = 16
)

// peakTask runs a peak loop (kernels.FMAPeak, kernels.IntPeak) once per
// index on its worker.
type peakTask struct {
	ops   []float64
	probe func(iters int) float64
}

func (t *peakTask) Run(worker, lo, hi int) {
	for range hi - lo {
		t.ops[worker*8] += t.probe(peakIters)
	}
}

// fmaPeakGFLOPs measures the float32 FMA peak of the pool's threads: every
// thread runs the register-only FMA loop at once, and the best of passes
// passes is returned in GFLOP/s. It is the ceiling of an
// exact-precision prefill (float32 products), measured in the same run as
// the prefill it is compared with.
func fmaPeakGFLOPs(pool *parallel.Pool, passes int) float64 {
	return peakGOPs(pool, passes, kernels.FMAPeak)
}

// intPeakGOPs is fmaPeakGFLOPs for the int16 products of the fast
// precision (kernels.IntPeak, 2 operations a product, GOP/s): 0 where
// there are none.
func intPeakGOPs(pool *parallel.Pool, passes int) float64 {
	if kernels.IntPeak(1) == 0 {
		return 0
	}
	return peakGOPs(pool, passes, kernels.IntPeak)
}

// peakGOPs times probe on every thread at once, best of passes passes.
func peakGOPs(pool *parallel.Pool, passes int, probe func(iters int) float64) float64 {
	n := pool.Threads()
	t := peakTask{ops: make([]float64, 8*n), probe: probe}
	d := timeBest(passes, func() { pool.Run(peakUnits*n, 1, &t) })
	var f float64 // every pass does the same work
	for w := 0; w < n; w++ {
		f += t.ops[w*8]
	}
	if d <= 0 {
		return 0
	}
	return f / float64(passes) / d.Seconds() / 1e9
}

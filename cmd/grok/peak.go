package main

import (
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/parallel"
)

// An FMA peak pass is peakUnits loop indices a thread, each peakIters
// iterations of the FMA loop: many small indices let the pool's dynamic
// ranges keep every thread busy to the end of the pass.
const (
	peakIters = 1 << 19
	peakUnits = 16
)

// peakTask runs kernels.FMAPeak once per index on its worker.
type peakTask struct{ flops []float64 }

func (t *peakTask) Run(worker, lo, hi int) {
	for range hi - lo {
		t.flops[worker*8] += kernels.FMAPeak(peakIters)
	}
}

// fmaPeakGFLOPs measures the float32 FMA peak of the pool's threads: every
// thread runs the register-only FMA loop at once, and the best of passes
// passes is returned in GFLOP/s. It is the ceiling of an
// exact-precision prefill (float32 products), measured in the same run as
// the prefill it is compared with.
func fmaPeakGFLOPs(pool *parallel.Pool, passes int) float64 {
	n := pool.Threads()
	t := peakTask{flops: make([]float64, 8*n)}
	d := timeBest(passes, func() { pool.Run(peakUnits*n, 1, &t) })
	var f float64 // every pass does the same work
	for w := 0; w < n; w++ {
		f += t.flops[w*8]
	}
	if d <= 0 {
		return 0
	}
	return f / float64(passes) / d.Seconds() / 1e9
}

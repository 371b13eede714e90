package main

import (
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// l2Bytes is the weight bytes of the rows a kernel-bound pass multiplies
// again and again: well inside the L2 of both CPU kinds here (1-2 MiB), so
// that the pass measures the kernels' arithmetic, not the memory.
const l2Bytes = 256 << 10

// l2ProductTask runs one-token products over the first rows of a matrix
// on every worker at once, reps products an index.
type l2ProductTask struct {
	m    *kernels.Mat
	rows int
	x    []float32
	dst  []float32 // a padded output vector a worker (MatMulRows wants all of Out)
	reps int
}

func (t *l2ProductTask) Run(worker, lo, hi int) {
	stride := t.m.Out + 16
	d := t.dst[worker*stride : worker*stride+t.m.Out]
	for range (hi - lo) * t.reps {
		kernels.MatMulRows(d, t.x, 1, t.m, 0, t.rows)
	}
}

// kernelRate measures, in GB/s of weights, the one-token products of m's
// first rows (about l2Bytes of them) on all of the pool's threads at once:
// the decode kernels' own bound for m's type, without memory stalls.
func kernelRate(pool *parallel.Pool, m *kernels.Mat) float64 {
	rb, err := m.Type.RowBytes(m.In)
	if err != nil || m.Transposed || rb == 0 {
		return 0
	}
	rows := min(m.Out, max(4, l2Bytes/rb))
	n := pool.Threads()
	t := &l2ProductTask{m: m, rows: rows, x: make([]float32, m.In), dst: make([]float32, n*(m.Out+16))}
	for i := range t.x {
		t.x[i] = float32(i%7)/8 - 0.375
	}
	// About 8 MiB of products an index: a pass of 8 indices a thread
	// takes milliseconds.
	t.reps = max(1, (8<<20)/(rows*rb))
	const units = 8
	pool.Run(n, 1, t) // warm-up: the rows into each core's L2
	d := timeBest(3, func() { pool.Run(units*n, 1, t) })
	if d <= 0 {
		return 0
	}
	return float64(units*n) * float64(t.reps) * float64(rows*rb) / d.Seconds() / 1e9
}

// kernelBound is the decode rate the exact kernels allow when no weight
// waits on memory: for each type of the products a decoded token reads,
// the rate of its largest matrix in L2 (kernelRate), and tok/s = 1 /
// Σ bytes_t / rate_t. It returns 0 when a type could not be timed.
func kernelBound(pool *parallel.Pool, products map[tensor.DType]model.Products) (float64, map[string]float64) {
	rates := map[string]float64{}
	var secs float64 // per token
	for t, p := range products {
		r := kernelRate(pool, p.Largest)
		if r <= 0 {
			return 0, nil
		}
		rates[t.String()] = r
		secs += float64(p.Bytes) / (r * 1e9)
	}
	if secs <= 0 {
		return 0, nil
	}
	return 1 / secs, rates
}

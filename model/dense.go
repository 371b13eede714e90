package model

import (
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/parallel"
)

// DenseBlock is model.py's DenseBlock (963-1007), used when num_experts ≤ 1:
// (gelu(x·W) ⊙ (x·V))·W1 without a router or gate.
type DenseBlock struct {
	Linear, LinearV, Linear1 Linear
}

// Forward writes the block's output for n rows of x into dst.
func (d *DenseBlock) Forward(dst, x []float32, n int, ws *workspace) {
	F := d.Linear.W.Out
	ws.ffn(dst, x, n, &d.Linear, &d.LinearV, &d.Linear1, ws.h1[:n*F], ws.h2[:n*F])
}

// ffnTask is the first half of an expert (or of the dense block) over a
// range of its F hidden units: h1 = gelu(x·Wᵀ) ⊙ (x·Vᵀ) for those units.
// The gelu product is elementwise, so it is done in the same range while
// the range's outputs are still in cache.
type ffnTask struct {
	gate, up *kernels.Mat
	x        []float32
	n        int
	fast     []bool // per row: fast precision (nil: all exact)
	q        *kernels.FastActs
	h1, h2   []float32 // n×F
}

func (t *ffnTask) Run(_, lo, hi int) {
	mulRows(t.h1, t.x, t.n, t.gate, lo, hi, t.fast, t.q)
	mulRows(t.h2, t.x, t.n, t.up, lo, hi, t.fast, t.q)
	F := t.gate.Out
	for i := 0; i < t.n; i++ {
		h := t.h1[i*F+lo : i*F+hi]
		kernels.GeluMul(h, h, t.h2[i*F+lo:i*F+hi])
	}
}

// ffn runs the gated feed-forward block (gelu(x·W) ⊙ (x·V))·W1 over n rows
// of x on the pool, leaving the result in y (n×D) and using h1, h2 (n×F).
func (ws *workspace) ffn(y, x []float32, n int, w, v, w1 *Linear, h1, h2 []float32) {
	t := &ws.ffnJob
	*t = ffnTask{gate: &w.W, up: &v.W, x: x, n: n, fast: ws.fast, h1: h1, h2: h2}
	t.q = ws.quantizeFast(&ws.qMat, x, n, w.W.In, ws.fast, &w.W, &v.W)
	ws.pool.Run(w.W.Out, parallel.DefaultAlign, t)
	*t = ffnTask{}
	ws.matmul(h1, n, 0, []*Linear{w1}, y)
}

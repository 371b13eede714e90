package model

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

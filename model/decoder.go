package model

import "github.com/grok-go/grok/kernels"

// DecoderLayer is model.py's DecoderLayer (1030-1102) with its four
// "sandwich" norms:
//
//	h += rms_norm_1(attn(rms_norm(h)))
//	h += rms_norm_3(moe(rms_norm_2(h)))
//
// In Grok-2 moe is (mlp + moe)/√2 with a dense MLP beside the experts
// (MoELayer.Residual).
type DecoderLayer struct {
	RMSNorm, RMSNorm1, RMSNorm2, RMSNorm3 RMSNorm
	Attention                             MultiHeadAttention
	MoE                                   *MoELayer   // num_experts > 1
	Dense                                 *DenseBlock // num_experts ≤ 1
}

// Forward updates the residual stream h (N×D) in place.
func (d *DecoderLayer) Forward(h []float32, N, l int, seqs []attnSeq, mem *KVMemory, ws *workspace) {
	d.attend(h, N, l, seqs, mem, ws)
	d.feedForward(h, N, ws)
}

// attend is the layer's first half: h += RMSNorm1(attention(RMSNorm(h))),
// which also writes the N rows' keys and values to mem.
func (d *DecoderLayer) attend(h []float32, N, l int, seqs []attnSeq, mem *KVMemory, ws *workspace) {
	D := len(d.RMSNorm.Scale)
	xn, a := ws.xn[:N*D], ws.a[:N*D]
	d.RMSNorm.Forward(xn, h, N)
	d.Attention.Forward(a, xn, N, l, seqs, mem, ws)
	ws.reduce(a[:N*D]) // a shard's partial output projection (shard.go)
	d.RMSNorm1.Forward(a, a, N)
	kernels.Axpy(h[:N*D], 1, a)
}

// feedForward is the second half: h += RMSNorm3(MoE or MLP(RMSNorm2(h)))
// for N rows, each on its own (ws.fast, if set, has a precision a row).
func (d *DecoderLayer) feedForward(h []float32, N int, ws *workspace) {
	D := len(d.RMSNorm.Scale)
	xn, a := ws.xn[:N*D], ws.a[:N*D]
	d.RMSNorm2.Forward(xn, h, N)
	if d.MoE != nil {
		d.MoE.Forward(a, xn, N, ws)
	} else {
		d.Dense.Forward(a, xn, N, ws)
	}
	ws.reduce(a[:N*D]) // a shard's partial linear_1 sums
	d.RMSNorm3.Forward(a, a, N)
	kernels.Axpy(h[:N*D], 1, a)
}

// Transformer is model.py's Transformer (1289-1398): the stack of decoder layers.
type Transformer struct {
	Layers []DecoderLayer
}

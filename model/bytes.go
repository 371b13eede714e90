package model

import (
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/tensor"
)

// StepBytes is the weight bytes one single-token decode step reads, by part.
// Decoding streams these bytes from memory once per token, so they bound
// its speed: tokens/s ≤ memory bandwidth / Total.
type StepBytes struct {
	Attention int64 // q, k, v and output projections of every layer
	Router    int64 // every layer's router
	Experts   int64 // the selected experts' three matrices (or the dense block)
	DenseMLP  int64 // Grok-2's dense MLP beside the experts
	Norms     int64 // four norms per layer and the final norm
	Embedding int64 // the one embedding row looked up
	Unembed   int64 // the whole unembedding matrix
	Total     int64

	// ExpertsPerLayer is how many experts of each layer a token runs:
	// exactly num_selected_experts, since top-k picks k distinct experts
	// (1 for a dense model).
	ExpertsPerLayer int
}

// DecodeStepBytes returns the weight bytes a one-token Forward reads. The
// experts are those a token actually runs — num_selected_experts per layer,
// each with its full three matrices — so the count is exact for one token,
// whichever experts the router picks (all experts of a layer have the same
// type and size). KV-memory reads are activations, not weights, and are not
// counted (2·layers·Hkv·K·4 bytes per token of context).
//
// For NewTP's model it is the sum over the shards (each reads its own
// slices; the replicated norms and router count once a shard); for a
// shard, its own slices.
func (lm *LanguageModel) DecodeStepBytes() StepBytes { return lm.stepBytes(nil) }

// Products is what a decode step multiplies of one weight type: the bytes
// of its matrices and the largest of them.
type Products struct {
	Bytes   int64
	Largest *kernels.Mat
}

// DecodeStepProducts returns DecodeStepBytes' matrices (every part but the
// norms and the embedding row: the products) by weight type.
func (lm *LanguageModel) DecodeStepProducts() map[tensor.DType]Products {
	p := map[tensor.DType]Products{}
	lm.stepBytes(p)
	return p
}

// stepBytes is DecodeStepBytes, adding each product to products by type
// when it is not nil.
func (lm *LanguageModel) stepBytes(products map[tensor.DType]Products) StepBytes {
	var b StepBytes
	if lm.tp != nil {
		for _, s := range lm.tp.shards {
			sb := s.stepBytes(products)
			b.Attention += sb.Attention
			b.Router += sb.Router
			b.Experts += sb.Experts
			b.DenseMLP += sb.DenseMLP
			b.Norms += sb.Norms
			b.Embedding = sb.Embedding // one shard owns the token's row
			b.Unembed += sb.Unembed
			b.ExpertsPerLayer = sb.ExpertsPerLayer
		}
		b.Total = b.Attention + b.Router + b.Experts + b.DenseMLP + b.Norms + b.Embedding + b.Unembed
		return b
	}
	c := &lm.Config
	// add counts the matrices ms into part and into products.
	add := func(part *int64, ms ...*kernels.Mat) {
		for _, m := range ms {
			n := matBytes(m)
			*part += n
			if products != nil {
				p := products[m.Type]
				p.Bytes += n
				if p.Largest == nil || n > matBytes(p.Largest) {
					p.Largest = m
				}
				products[m.Type] = p
			}
		}
	}
	for i := range lm.Transformer.Layers {
		d := &lm.Transformer.Layers[i]
		a := &d.Attention
		add(&b.Attention, &a.Query.W, &a.Key.W, &a.Value.W, &a.Linear.W)
		b.Norms += 4 * int64(c.EmbSize) * 4
		switch {
		case d.MoE != nil:
			add(&b.Router, &d.MoE.Router.W.W)
			k := d.MoE.Router.TopK
			b.ExpertsPerLayer = k
			for e := 0; e < k; e++ {
				add(&b.Experts, &d.MoE.Linear[e].W, &d.MoE.LinearV[e].W, &d.MoE.Linear1[e].W)
			}
			if r := d.MoE.Residual; r != nil {
				add(&b.DenseMLP, &r.Linear.W, &r.LinearV.W, &r.Linear1.W)
			}
		case d.Dense != nil:
			b.ExpertsPerLayer = 1
			add(&b.Experts, &d.Dense.Linear.W, &d.Dense.LinearV.W, &d.Dense.Linear1.W)
		}
	}
	b.Norms += int64(c.EmbSize) * 4
	b.Embedding = matBytes(&lm.Embed.W) / int64(lm.Embed.W.Out)
	add(&b.Unembed, &lm.Unembed.W)
	b.Total = b.Attention + b.Router + b.Experts + b.DenseMLP + b.Norms + b.Embedding + b.Unembed
	return b
}

// matBytes is a matrix's weight bytes, scales included (of a strided
// slice, its own bytes only).
func matBytes(m *kernels.Mat) int64 {
	rows, cols := int64(m.Out), m.In
	if m.Transposed {
		rows, cols = int64(m.In), m.Out
	}
	rb, _ := m.Type.RowBytes(cols)
	return rows*int64(rb) + 4*int64(len(m.Scales))
}

// PrefillFLOPs returns the floating-point operations (2 per multiply-add)
// of one prefill of p tokens into an empty sequence, per token: every
// weight matrix a token uses (attention, router, its num_selected_experts
// experts, a dense MLP), its attention over the positions before it
// (scores and weighted values: 4·H·K per position), and the last layer's
// feed-forward (router, experts, dense MLP) and the unembedding once, for
// the last token only (Forward computes no other logits, and so no other
// row of the last feed-forward).
// Element-wise work (norms, RoPE, softmax, gelu) is left out: it is a few
// FLOPs per activation, under 0.1 % of the products at Grok-1's shapes.
func (lm *LanguageModel) PrefillFLOPs(p int) float64 {
	if p <= 0 {
		return 0
	}
	// Position t attends to t+1 keys: the mean over 0..p-1 is (p+1)/2.
	return lm.tokenFLOPs(float64(p+1)/2, 1/float64(p))
}

// DecodeFLOPs returns the floating-point operations of decoding one token
// at position pos (after pos earlier ones), counted as PrefillFLOPs counts
// them: a decoded token runs every layer's feed-forward and the whole
// unembedding, and attends to pos+1 keys.
func (lm *LanguageModel) DecodeFLOPs(pos int) float64 {
	return lm.tokenFLOPs(float64(pos+1), 1)
}

// tokenFLOPs counts a token's FLOPs when it attends to keys positions in
// every layer and runs the last layer's feed-forward and the unembedding
// in the share last of the tokens.
func (lm *LanguageModel) tokenFLOPs(keys, last float64) float64 {
	if lm.tp != nil {
		// Each shard's share; the replicated router counts once a shard.
		var f float64
		for _, s := range lm.tp.shards {
			f += s.tokenFLOPs(keys, last)
		}
		return f
	}
	c := &lm.Config
	var mac float64 // multiply-adds per token
	for i := range lm.Transformer.Layers {
		d := &lm.Transformer.Layers[i]
		a := &d.Attention
		mac += matElems(&a.Query.W) + matElems(&a.Key.W) + matElems(&a.Value.W) + matElems(&a.Linear.W)
		mac += 2 * float64(c.NumQHeads*c.KeySize) * keys
		ffn := 0.0
		switch {
		case d.MoE != nil:
			ffn += matElems(&d.MoE.Router.W.W)
			for e := 0; e < d.MoE.Router.TopK; e++ {
				ffn += matElems(&d.MoE.Linear[e].W) + matElems(&d.MoE.LinearV[e].W) + matElems(&d.MoE.Linear1[e].W)
			}
			if r := d.MoE.Residual; r != nil {
				ffn += matElems(&r.Linear.W) + matElems(&r.LinearV.W) + matElems(&r.Linear1.W)
			}
		case d.Dense != nil:
			ffn += matElems(&d.Dense.Linear.W) + matElems(&d.Dense.LinearV.W) + matElems(&d.Dense.Linear1.W)
		}
		if i == len(lm.Transformer.Layers)-1 {
			ffn *= last
		}
		mac += ffn
	}
	mac += matElems(&lm.Unembed.W) * last
	return 2 * mac
}

func matElems(m *kernels.Mat) float64 { return float64(m.Out) * float64(m.In) }

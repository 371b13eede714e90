package model

import "github.com/grok-go/grok/kernels"

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
func (lm *LanguageModel) DecodeStepBytes() StepBytes {
	var b StepBytes
	c := &lm.Config
	for i := range lm.Transformer.Layers {
		d := &lm.Transformer.Layers[i]
		a := &d.Attention
		b.Attention += matBytes(&a.Query.W) + matBytes(&a.Key.W) + matBytes(&a.Value.W) + matBytes(&a.Linear.W)
		b.Norms += 4 * int64(c.EmbSize) * 4
		switch {
		case d.MoE != nil:
			b.Router += matBytes(&d.MoE.Router.W.W)
			k := d.MoE.Router.TopK
			b.ExpertsPerLayer = k
			for e := 0; e < k; e++ {
				b.Experts += matBytes(&d.MoE.Linear[e].W) + matBytes(&d.MoE.LinearV[e].W) + matBytes(&d.MoE.Linear1[e].W)
			}
			if r := d.MoE.Residual; r != nil {
				b.DenseMLP += matBytes(&r.Linear.W) + matBytes(&r.LinearV.W) + matBytes(&r.Linear1.W)
			}
		case d.Dense != nil:
			b.ExpertsPerLayer = 1
			b.Experts += matBytes(&d.Dense.Linear.W) + matBytes(&d.Dense.LinearV.W) + matBytes(&d.Dense.Linear1.W)
		}
	}
	b.Norms += int64(c.EmbSize) * 4
	b.Embedding = int64(len(lm.Embed.W.Data)) / int64(c.VocabSize)
	b.Unembed = matBytes(&lm.Unembed.W)
	b.Total = b.Attention + b.Router + b.Experts + b.DenseMLP + b.Norms + b.Embedding + b.Unembed
	return b
}

// matBytes is a matrix's weight bytes, scales included.
func matBytes(m *kernels.Mat) int64 {
	return int64(len(m.Data)) + 4*int64(len(m.Scales))
}

package xaickpt

import (
	"fmt"
	"sort"
)

// param is one leaf of the Haiku parameter tree: one checkpoint file.
type param struct {
	Path  string // Haiku module path, e.g. "transformer/decoder_layer_3/moe/linear"
	Canon string // canonical GGUF name, e.g. "blk.3.ffn_gate_exps.weight"
	// Quantized is true for the projection matrices, which xAI stores as
	// QuantizedWeight8bit (int8 weight + bf16 scales).
	Quantized bool
	// Shape is the array shape in the checkpoint (Haiku's [in, out] for
	// matrices, experts leading); ScaleShape the scales' [..., S, out].
	Shape, ScaleShape []int
	// Transposed is set for matrices: their last two axes are [in, out],
	// the transpose of the canonical [out, in].
	Transposed bool
}

// layerModule describes one module of a decoder layer.
type layerModule struct {
	suffix    string // path below transformer/decoder_layer_N/
	canon     string // GGUF name below blk.N.
	quantized bool
	shape     []int // in the checkpoint's layout
	// scaleRows is the number S of row blocks of a quantised module's
	// scales: 1 for column-parallel, model_shards for row-parallel ones.
	scaleRows int
}

// layerModules lists a decoder layer's parameters (semantics §2). The
// order here does not matter: the file order comes from sorting the paths.
func layerModules(c *Config) []layerModule {
	D, F, E, S := c.EmbSize, c.FFNSize, c.NumExperts, c.ModelShards
	HQ, HKV := c.NumQHeads*c.KeySize, c.NumKVHeads*c.KeySize
	mods := []layerModule{
		{"multi_head_attention/query", "attn_q.weight", true, []int{D, HQ}, 1},
		{"multi_head_attention/key", "attn_k.weight", true, []int{D, HKV}, 1},
		{"multi_head_attention/value", "attn_v.weight", true, []int{D, HKV}, 1},
		{"multi_head_attention/linear", "attn_output.weight", true, []int{HQ, D}, S},
		{"rms_norm", "attn_norm.weight", false, []int{D}, 0},
		{"rms_norm_1", "attn_output_norm.weight", false, []int{D}, 0},
		{"rms_norm_2", "ffn_norm.weight", false, []int{D}, 0},
		{"rms_norm_3", "layer_output_norm.weight", false, []int{D}, 0},
	}
	if E > 1 {
		mods = append(mods,
			layerModule{"moe/linear", "ffn_gate_exps.weight", true, []int{E, D, F}, 1},
			layerModule{"moe/linear_v", "ffn_up_exps.weight", true, []int{E, D, F}, 1},
			layerModule{"moe/linear_1", "ffn_down_exps.weight", true, []int{E, F, D}, S},
			layerModule{"router", "ffn_gate_inp.weight", false, []int{D, E}, 0},
		)
	} else {
		// DenseBlock: the same three matrices directly under the layer.
		mods = append(mods,
			layerModule{"linear", "ffn_gate.weight", true, []int{D, F}, 1},
			layerModule{"linear_v", "ffn_up.weight", true, []int{D, F}, 1},
			layerModule{"linear_1", "ffn_down.weight", true, []int{F, D}, S},
		)
	}
	return mods
}

// params returns the checkpoint's parameters in file order: the Haiku module
// paths sorted as strings, which is how JAX flattens the parameter dict
// (so layer 10 comes between 1 and 2). Nothing here assumes a layer count.
func params(c *Config) []param {
	ps := []param{
		{Path: "language_model/in_out_embed", Canon: "token_embd.weight", Shape: []int{c.VocabSize, c.EmbSize}},
		{Path: "language_model/rms_norm", Canon: "output_norm.weight", Shape: []int{c.EmbSize}},
	}
	for l := 0; l < c.NumLayers; l++ {
		for _, m := range layerModules(c) {
			shape, s := m.shape, m.scaleRows
			p := param{
				Path:      fmt.Sprintf("transformer/decoder_layer_%d/%s", l, m.suffix),
				Canon:     fmt.Sprintf("blk.%d.%s", l, m.canon),
				Quantized: m.quantized,
				Shape:     shape,
			}
			if len(shape) >= 2 {
				p.Transposed = true
			}
			if m.quantized {
				// Scales: the weight's shape with the row axis
				// replaced by S blocks.
				p.ScaleShape = append([]int(nil), shape...)
				p.ScaleShape[len(shape)-2] = s
			}
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Path < ps[j].Path })
	return ps
}

package loader

import (
	"strings"

	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// The grok GGUF layout that every writer of this repository follows
// (convert, the test fixtures, make-model): the metadata keys are
// GGUFMetadata's (semantics §9), the tensor names model.TensorSource's, and
// the rules below say which tensors keep F32 and what general.file_type a
// file declares.

// KeepsF32 reports whether a tensor stays F32 whatever type the file's
// matrices have: the norms and the router, which llama.cpp's converter and
// llama-quantize never quantise.
func KeepsF32(name string) bool {
	return strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, ".ffn_gate_inp.weight")
}

// FileType returns llama.cpp's general.file_type code (enum llama_ftype)
// for a file whose matrices are all of type dt: ALL_F32 0, MOSTLY_F16 1,
// MOSTLY_Q8_0 7, MOSTLY_BF16 32 (the mixtures of llama-quantize have codes
// of their own, convert.Ftype).
func FileType(dt tensor.DType) uint32 {
	switch dt {
	case tensor.F16:
		return 1
	case tensor.Q8_0:
		return 7
	case tensor.BF16:
		return 32
	}
	return 0
}

// MetaKV is one GGUF metadata pair to write.
type MetaKV struct {
	Key   string
	Value any
}

// GGUFMetadata is the inverse of ConfigFromGGUF: the general.* and grok.*
// keys of semantics §9 (and §G5 for Grok-2) for c, in the order llama.cpp's
// converter and our test-model generator write them. That a file is Grok-2
// is told by its dense MLP tensors, not by a key (see IsGrok2).
func GGUFMetadata(name string, c *model.Config) []MetaKV {
	u := func(v int) uint32 { return uint32(v) }
	ffn, routerCap := c.FFNSize, c.RouterLogitCap
	if c.DenseFFNSize > 0 {
		ffn = c.DenseFFNSize // llama.cpp's n_ff: the dense MLP
	}
	if routerCap == 0 {
		// Written as llama.cpp's converter writes it; neither model.py nor
		// llama.cpp applies it (semantics §7.4), and ConfigFromGGUF ignores
		// it in a Grok-1 file.
		routerCap = 30
	}
	kvs := []MetaKV{
		{"general.architecture", "grok"},
		{"general.name", name},
		{"grok.context_length", u(c.SequenceLen)},
		{"grok.embedding_length", u(c.EmbSize)},
		{"grok.block_count", u(c.NumLayers)},
		{"grok.feed_forward_length", u(ffn)},
		{"grok.expert_feed_forward_length", u(c.FFNSize)},
		{"grok.attention.head_count", u(c.NumQHeads)},
		{"grok.attention.head_count_kv", u(c.NumKVHeads)},
		{"grok.attention.key_length", u(c.KeySize)},
		{"grok.attention.value_length", u(c.KeySize)},
		{"grok.rope.dimension_count", u(c.KeySize)},
		{"grok.rope.freq_base", c.RopeBase},
		{"grok.attention.layer_norm_rms_epsilon", c.RMSEps},
		{"grok.expert_count", u(c.NumExperts)},
		{"grok.expert_used_count", u(c.NumSelectedExperts)},
		{"grok.embedding_scale", c.EmbeddingMultiplierScale},
		{"grok.logit_scale", c.OutputMultiplierScale},
		{"grok.attention.output_scale", c.AttnOutputMultiplier},
		{"grok.attn_logit_softcapping", c.AttnLogitCap},
		{"grok.router_logit_softcapping", routerCap},
	}
	if c.FinalLogitCap != 0 {
		kvs = append(kvs, MetaKV{"grok.final_logit_softcapping", c.FinalLogitCap})
	}
	if c.AttnTemperatureLen > 0 {
		kvs = append(kvs, MetaKV{"grok.attention.temperature_length", u(c.AttnTemperatureLen)})
	}
	return append(kvs, MetaKV{"grok.vocab_size", u(c.VocabSize)})
}

// LayerTensors lists a decoder layer's tensor names (blk.N.NAME.weight) in
// llama.cpp's file order: Grok-1's MoE layer, a dense layer, or Grok-2's.
func LayerTensors(c *model.Config) []string {
	if c.NumExperts > 1 && c.DenseFFNSize > 0 {
		// Grok-2 as llama.cpp's converter writes it: the dense MLP after
		// the experts, the post-FFN norm named post_ffw_norm.
		return []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm",
			"ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
			"ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm"}
	}
	if c.NumExperts > 1 {
		return []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm",
			"ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "layer_output_norm"}
	}
	return []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm",
		"ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "layer_output_norm"}
}

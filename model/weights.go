package model

import (
	"fmt"

	"github.com/grok-go/grok/tensor"
)

// TensorSource hands the model its parameters by name. Names are the GGUF
// names of llama.cpp's `grok` architecture (semantics §7); a format whose own
// names differ (xAI checkpoint, safetensors) translates to these:
//
//	token_embd.weight               [V, D]      language_model/in_out_embed (also the unembedding)
//	output_norm.weight              [D]         language_model/rms_norm
//	blk.N.attn_norm.weight          [D]         decoder_layer_N/rms_norm
//	blk.N.attn_q.weight             [Hq·K, D]   multi_head_attention/query
//	blk.N.attn_k.weight             [Hkv·K, D]  multi_head_attention/key
//	blk.N.attn_v.weight             [Hkv·K, D]  multi_head_attention/value
//	blk.N.attn_output.weight        [D, Hq·K]   multi_head_attention/linear
//	blk.N.attn_output_norm.weight   [D]         rms_norm_1
//	blk.N.ffn_norm.weight           [D]         rms_norm_2
//	blk.N.ffn_gate_inp.weight       [E, D]      router
//	blk.N.ffn_gate_exps.weight      [E, F, D]   moe/linear (the gelu branch)
//	blk.N.ffn_up_exps.weight        [E, F, D]   moe/linear_v
//	blk.N.ffn_down_exps.weight      [E, D, F]   moe/linear_1
//	blk.N.layer_output_norm.weight  [D]         rms_norm_3 (also accepted: post_ffw_norm)
//
// Grok-2 (semantics §G5) adds, beside the experts, its dense MLP
// blk.N.ffn_{gate,up,down}.weight ([Fd, D], [Fd, D], [D, Fd]; Fd =
// Config.DenseFFNSize) and an untied output.weight [V, D] (lm_head).
//
// Shapes are numpy order, [out, in] for matrices; a Tensor with Transposed
// set stores the last two axes as [in, out] (Haiku's layout). Experts may
// instead come one matrix each as blk.N.ffn_{gate,up,down}.E.weight, and a
// dense model (num_experts ≤ 1) names them blk.N.ffn_{gate,up,down}.weight.
type TensorSource interface {
	// Lookup returns the tensor with the given name, or false if absent.
	Lookup(name string) (*tensor.Tensor, bool)
}

func need(src TensorSource, name string) (*tensor.Tensor, error) {
	t, ok := src.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("model: missing tensor %q", name)
	}
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	return t, nil
}

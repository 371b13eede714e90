// Package model is the Grok-1 transformer of xai-org/grok-1 model.py, in Go:
// one file per model.py module (Linear, RMSNorm, RotaryEmbedding,
// MultiHeadAttention, KVMemory, Router, MoELayer, DenseBlock, DecoderLayer,
// Transformer, LanguageModel). It never reads files: a TensorSource hands it
// named tensors. The maths is specified in docs/semantics.md; comments cite
// its sections as "semantics §N".
package model

import (
	"errors"
	"fmt"
	"math"
)

// Config mirrors model.py's TransformerConfig and LanguageModelConfig with the
// fields that matter at inference (semantics §1). Field names follow model.py.
type Config struct {
	VocabSize  int // vocab_size
	EmbSize    int // emb_size (D)
	KeySize    int // key_size (K, head dim)
	NumQHeads  int // num_q_heads
	NumKVHeads int // num_kv_heads
	NumLayers  int // num_layers
	// FFNSize is the expert hidden size F; model.py derives it from
	// widening_factor with ffn_size() (see FFNSizeFromWidening).
	FFNSize            int
	NumExperts         int // num_experts (≤ 1: DenseBlock)
	NumSelectedExperts int // num_selected_experts (top-k)

	AttnOutputMultiplier     float32 // attn_output_multiplier (replaces 1/√K)
	EmbeddingMultiplierScale float32 // embedding_multiplier_scale
	OutputMultiplierScale    float32 // output_multiplier_scale
	AttnLogitCap             float32 // 30 in model.py: s = cap·tanh(s/cap); 0 disables

	PadToken    int // pad_token: keys with token id == pad are masked
	EOSToken    int // eos_token
	SequenceLen int // sequence_len: KV memory rows per sequence (the context)

	RopeBase float32 // 10000 (model.py 801)
	RMSEps   float32 // 1e-5 (model.py 592)

	// Grok-2 (semantics §G2): each field's zero value is Grok-1's.

	// DenseFFNSize is the width of the dense GELU MLP that runs beside
	// the experts on the same input (intermediate_size with residual_moe);
	// the layer's output is then (mlp + moe) / √2. 0: no dense MLP.
	DenseFFNSize int
	// RouterLogitCap soft-caps the router logits, r = cap·tanh(r/cap),
	// before the softmax; 0 disables (Grok-1's model.py has none).
	RouterLogitCap float32
	// FinalLogitCap soft-caps the logits after the output multiplier; 0
	// disables.
	FinalLogitCap float32
	// AttnTemperatureLen is attn_temperature_len L: a query at 0-based
	// position p > L multiplies its soft-capped scores by log2(p)/log2(L)
	// (semantics §G4). 0 disables.
	AttnTemperatureLen int
	// UntiedOutput requires output.weight (Grok-2's lm_head). Without it
	// the unembedding is output.weight if the weights have one, else the
	// embedding (Grok-1 ties them).
	UntiedOutput bool
	// Yarn replaces plain RoPE by YaRN as llama.cpp computes it for a GGUF
	// with rope.scaling.type yarn (semantics §G3). Its zero value, the
	// default, is plain RoPE: SGLang's reading of Grok-2's "original".
	Yarn YarnScaling
}

// YarnScaling holds YaRN's RoPE parameters as llama.cpp hands them to
// ggml_rope_ext (llama-context.cpp, from the GGUF keys the loader reads);
// Tables applies them as ggml's rope_yarn does. Factor 0 means none.
type YarnScaling struct {
	Factor      float32 // rope.scaling.factor s: frequencies interpolate to θ/s (freq_scale 1/s)
	OrigContext int     // n_ctx_orig: the training context the correction dims are measured in
	ExtFactor   float32 // ext_factor: weight of the extrapolation ramp (0: pure interpolation)
	AttnFactor  float32 // attn_factor: cos and sin are scaled by it, times 1 + 0.1·ln s when ExtFactor ≠ 0
	BetaFast    float32 // beta_fast: rotations at the low correction dim
	BetaSlow    float32 // beta_slow: rotations at the high correction dim
}

// On reports whether YaRN is in use.
func (y YarnScaling) On() bool { return y.Factor != 0 }

// FFNSizeFromWidening is model.py's ffn_size (85-89):
// int(widening_factor·emb_size)·2//3, rounded up to a multiple of 8.
func FFNSizeFromWidening(embSize int, wideningFactor float64) int {
	f := int(wideningFactor*float64(embSize)) * 2 / 3
	return f + (8-f%8)%8
}

// Grok1 returns the real Grok-1 configuration of run.py (semantics §1).
func Grok1() Config {
	return Config{
		VocabSize: 128 * 1024, EmbSize: 48 * 128, KeySize: 128,
		NumQHeads: 48, NumKVHeads: 8, NumLayers: 64,
		FFNSize:    FFNSizeFromWidening(6144, 8),
		NumExperts: 8, NumSelectedExperts: 2,
		AttnOutputMultiplier:     0.08838834764831845,
		EmbeddingMultiplierScale: 78.38367176906169,
		OutputMultiplierScale:    0.5773502691896257,
		AttnLogitCap:             30,
		PadToken:                 0, EOSToken: 2, SequenceLen: 8192,
		RopeBase: 10000, RMSEps: 1e-5,
	}
}

// Grok2 returns the configuration of xai-org/grok-2's config.json
// (semantics §G1).
func Grok2() Config {
	return Config{
		VocabSize: 128 * 1024, EmbSize: 8192, KeySize: 128,
		NumQHeads: 64, NumKVHeads: 8, NumLayers: 64,
		FFNSize:    16384,
		NumExperts: 8, NumSelectedExperts: 2,
		AttnOutputMultiplier:     0.08838834764831845,
		EmbeddingMultiplierScale: 90.50966799187809,
		OutputMultiplierScale:    0.5,
		AttnLogitCap:             30,
		PadToken:                 0, EOSToken: 2, SequenceLen: 131072,
		RopeBase: 208533496, RMSEps: 1e-5,
		DenseFFNSize: 32768, RouterLogitCap: 30, FinalLogitCap: 50,
		AttnTemperatureLen: 1024, UntiedOutput: true,
	}
}

// Presets are the named configurations a user can ask for by name.
var Presets = map[string]func() Config{"grok-1": Grok1}

// GroupSize is the number of query heads that share one kv head (G).
func (c *Config) GroupSize() int { return c.NumQHeads / c.NumKVHeads }

// Validate reports every inconsistency in c, joined into one error, each
// message naming its field.
func (c *Config) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	pos("vocab_size", c.VocabSize)
	pos("emb_size", c.EmbSize)
	pos("key_size", c.KeySize)
	pos("num_q_heads", c.NumQHeads)
	pos("num_kv_heads", c.NumKVHeads)
	pos("num_layers", c.NumLayers)
	pos("ffn_size", c.FFNSize)
	pos("sequence_len", c.SequenceLen)
	if c.NumExperts < 0 {
		errs = append(errs, fmt.Errorf("num_experts must not be negative, got %d", c.NumExperts))
	}
	if c.KeySize > 0 && c.KeySize%2 != 0 {
		errs = append(errs, fmt.Errorf("key_size must be even for rotary embeddings, got %d", c.KeySize))
	}
	if c.NumKVHeads > 0 && c.NumQHeads%c.NumKVHeads != 0 {
		errs = append(errs, fmt.Errorf("num_q_heads (%d) is not divisible by num_kv_heads (%d)", c.NumQHeads, c.NumKVHeads))
	}
	if c.NumExperts > 1 {
		if c.NumSelectedExperts <= 0 || c.NumSelectedExperts > c.NumExperts {
			errs = append(errs, fmt.Errorf("num_selected_experts must be in 1..num_experts (%d), got %d", c.NumExperts, c.NumSelectedExperts))
		}
	}
	if c.PadToken < 0 || c.PadToken >= max(c.VocabSize, 1) {
		errs = append(errs, fmt.Errorf("pad_token %d is outside the vocabulary", c.PadToken))
	}
	if c.EOSToken < 0 || c.EOSToken >= max(c.VocabSize, 1) {
		errs = append(errs, fmt.Errorf("eos_token %d is outside the vocabulary", c.EOSToken))
	}
	for _, f := range []struct {
		name string
		v    float32
	}{
		{"attn_output_multiplier", c.AttnOutputMultiplier},
		{"embedding_multiplier_scale", c.EmbeddingMultiplierScale},
		{"output_multiplier_scale", c.OutputMultiplierScale},
		{"rope_base", c.RopeBase},
		{"rms_eps", c.RMSEps},
	} {
		if !(f.v > 0) || math.IsInf(float64(f.v), 0) {
			errs = append(errs, fmt.Errorf("%s must be a positive finite number, got %v", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    float32
	}{
		{"attn logit cap", c.AttnLogitCap},
		{"router logit cap", c.RouterLogitCap},
		{"final logit cap", c.FinalLogitCap},
	} {
		if !(f.v >= 0) || math.IsInf(float64(f.v), 0) {
			errs = append(errs, fmt.Errorf("%s must be a finite number ≥ 0, got %v", f.name, f.v))
		}
	}
	if c.DenseFFNSize < 0 {
		errs = append(errs, fmt.Errorf("dense_ffn_size must not be negative, got %d", c.DenseFFNSize))
	}
	if c.DenseFFNSize > 0 && c.NumExperts <= 1 {
		errs = append(errs, fmt.Errorf("dense_ffn_size %d: a dense MLP beside the experts needs num_experts > 1, got %d", c.DenseFFNSize, c.NumExperts))
	}
	if c.RouterLogitCap > 0 && c.NumExperts <= 1 {
		errs = append(errs, fmt.Errorf("router logit cap %v without a router (num_experts %d)", c.RouterLogitCap, c.NumExperts))
	}
	if y := c.Yarn; y.On() {
		for _, f := range []struct {
			name string
			v    float32
		}{{"yarn factor", y.Factor}, {"yarn attn_factor", y.AttnFactor}, {"yarn beta_fast", y.BetaFast}, {"yarn beta_slow", y.BetaSlow}} {
			if !(f.v > 0) || math.IsInf(float64(f.v), 0) {
				errs = append(errs, fmt.Errorf("%s must be a positive finite number, got %v", f.name, f.v))
			}
		}
		if !(y.ExtFactor >= 0) || math.IsInf(float64(y.ExtFactor), 0) {
			errs = append(errs, fmt.Errorf("yarn ext_factor must be a finite number ≥ 0, got %v", y.ExtFactor))
		}
		if y.OrigContext <= 0 {
			errs = append(errs, fmt.Errorf("yarn original context length must be positive, got %d", y.OrigContext))
		}
	}
	// L = 1 would divide by log2(1) = 0.
	if c.AttnTemperatureLen < 0 || c.AttnTemperatureLen == 1 {
		errs = append(errs, fmt.Errorf("attn_temperature_len must be 0 (off) or at least 2, got %d", c.AttnTemperatureLen))
	}
	// Guard sizes that would overflow buffer arithmetic long before memory runs out.
	const limit = 1 << 40
	if c.VocabSize > 0 && c.EmbSize > 0 && c.VocabSize > limit/c.EmbSize {
		errs = append(errs, fmt.Errorf("vocab_size × emb_size is too large"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("model config: %w", err)
	}
	return nil
}

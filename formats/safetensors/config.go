package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/grok-go/grok/internal/safefile"
)

// maxConfigSize caps config.json and the shard index; real ones are a few
// kilobytes (an index of Grok-1 is about 200 kB).
const maxConfigSize = 64 << 20

// Config is the model configuration of a Hugging Face conversion of Grok-1,
// read from config.json. Field names follow xai-org/grok-1 model.py (as
// model.Config does), so the caller maps it field by field; each comment
// names the config.json key(s) it comes from. The three spellings in use are
// accepted: hpcai-tech's Grok1ModelForCausalLM ("grok-1"), keyfan's
// GrokForCausalLM ("grok") and the Mixtral-style keys of SGLang/Grok-2.
type Config struct {
	Architectures []string // architectures
	ModelType     string   // model_type

	VocabSize  int // vocab_size
	EmbSize    int // hidden_size (D)
	KeySize    int // head_dim, else hidden_size / num_attention_heads
	NumQHeads  int // num_attention_heads
	NumKVHeads int // num_key_value_heads (default num_attention_heads)
	NumLayers  int // num_hidden_layers
	FFNSize    int // moe_intermediate_size, else intermediate_size: the expert hidden size F

	NumExperts         int // num_experts (hpcai) or num_local_experts (keyfan, Mixtral)
	NumSelectedExperts int // num_experts_per_tok (default 2)

	AttnOutputMultiplier     float64 // attn_output_multiplier (default 1/√KeySize)
	EmbeddingMultiplierScale float64 // embedding_multiplier_scale (default 1)
	OutputMultiplierScale    float64 // output_multiplier_scale (default 1)
	MaxAttnValue             float64 // max_attn_value: the attention logit cap (default 30)

	SequenceLen int     // max_position_embeddings (default 8192)
	RopeBase    float64 // rope_theta (default 10000: hpcai hard-codes it)
	RMSEps      float64 // rms_norm_eps (default 1e-5)

	PadToken int // pad_token_id (default 0)
	BOSToken int // bos_token_id (default 1)
	EOSToken int // eos_token_id, the first one if a list (default 2)

	// TieWordEmbeddings is tie_word_embeddings (default true, as in
	// transformers): the unembedding is the embedding, and lm_head.weight
	// is not offered as output.weight.
	TieWordEmbeddings bool

	// Grok-2 (residual_moe: true; semantics §G1, SGLang's grok.py keys).
	ResidualMoE        bool    // residual_moe: a dense MLP beside the experts
	DenseFFNSize       int     // intermediate_size when residual_moe (0 otherwise)
	RouterLogitCap     float64 // router_logit_softcapping (default 30 with residual_moe, else 0)
	FinalLogitCap      float64 // final_logit_softcapping (default 0: none)
	AttnTemperatureLen int     // attn_temperature_len (default 0; -1, SGLang's "off", reads as 0)

	// RopeType is rope_type ("" if absent): "original" (Grok-2, plain RoPE
	// in SGLang) or "default". Yarn holds the YaRN keys beside it, which
	// only a caller applying YaRN uses (--rope-scaling yarn, as llama.cpp's
	// converter writes them into a GGUF).
	RopeType string
	Yarn     YarnConfig

	// Defaulted lists the config.json keys that were absent and got the
	// default noted above, so that a caller can warn: a Grok model without
	// its multipliers computes something else.
	Defaulted []string
}

// YarnConfig is xai-org/grok-2's YaRN keys, which llama.cpp's converter
// (conversion/grok.py) writes as GGUF rope.scaling.* keys for rope_type
// "original" or "yarn".
type YarnConfig struct {
	ScalingFactor        float64 // scaling_factor → rope.scaling.factor
	OriginalMaxPositions int     // original_max_position_embeddings → rope.scaling.original_context_length
	ExtrapolationFactor  float64 // extrapolation_factor → rope.scaling.yarn_ext_factor
	AttnFactor           float64 // attn_factor → rope.scaling.yarn_attn_factor
	BetaFast, BetaSlow   float64 // beta_fast, beta_slow → rope.scaling.yarn_beta_fast, _slow
	// Missing lists the keys above that config.json lacks (llama.cpp's
	// converter needs them all).
	Missing []string
}

// configJSON holds the raw keys; pointers tell absent from zero. Token ids
// are raw because transformers allows null and lists there.
type configJSON struct {
	Architectures            []string        `json:"architectures"`
	ModelType                string          `json:"model_type"`
	VocabSize                *int            `json:"vocab_size"`
	HiddenSize               *int            `json:"hidden_size"`
	IntermediateSize         *int            `json:"intermediate_size"`
	NumHiddenLayers          *int            `json:"num_hidden_layers"`
	NumAttentionHeads        *int            `json:"num_attention_heads"`
	NumKeyValueHeads         *int            `json:"num_key_value_heads"`
	HeadDim                  *int            `json:"head_dim"`
	NumExperts               *int            `json:"num_experts"`
	NumLocalExperts          *int            `json:"num_local_experts"`
	NumExpertsPerTok         *int            `json:"num_experts_per_tok"`
	MaxPositionEmbeddings    *int            `json:"max_position_embeddings"`
	RMSNormEps               *float64        `json:"rms_norm_eps"`
	RopeTheta                *float64        `json:"rope_theta"`
	AttnOutputMultiplier     *float64        `json:"attn_output_multiplier"`
	EmbeddingMultiplierScale *float64        `json:"embedding_multiplier_scale"`
	OutputMultiplierScale    *float64        `json:"output_multiplier_scale"`
	MaxAttnValue             *float64        `json:"max_attn_value"`
	AttnLogitSoftcapping     *float64        `json:"attn_logit_softcapping"`
	MoEIntermediateSize      *int            `json:"moe_intermediate_size"`
	RouterLogitSoftcapping   *float64        `json:"router_logit_softcapping"`
	FinalLogitSoftcapping    *float64        `json:"final_logit_softcapping"`
	AttnTemperatureLen       *int            `json:"attn_temperature_len"`
	RopeType                 *string         `json:"rope_type"`
	PadTokenID               json.RawMessage `json:"pad_token_id"`
	BOSTokenID               json.RawMessage `json:"bos_token_id"`
	EOSTokenID               json.RawMessage `json:"eos_token_id"`
	TieWordEmbeddings        *bool           `json:"tie_word_embeddings"`
	ResidualMoE              *bool           `json:"residual_moe"`
	ScalingFactor            *float64        `json:"scaling_factor"`
	OriginalMaxPositions     *int            `json:"original_max_position_embeddings"`
	ExtrapolationFactor      *float64        `json:"extrapolation_factor"`
	AttnFactor               *float64        `json:"attn_factor"`
	BetaFast                 *float64        `json:"beta_fast"`
	BetaSlow                 *float64        `json:"beta_slow"`
}

// readSmallFile reads a JSON side file, refusing absurd sizes before
// allocating for them.
func readSmallFile(path string) ([]byte, error) {
	return safefile.ReadFile(path, maxConfigSize)
}

// LoadConfig reads a Hugging Face config.json.
func LoadConfig(path string) (*Config, error) {
	data, err := readSmallFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses the contents of a Hugging Face config.json. Unknown keys
// are ignored; the shape keys (vocab_size, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads) are required.
func ParseConfig(data []byte) (*Config, error) {
	var j configJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := &Config{Architectures: j.Architectures, ModelType: j.ModelType}
	c.ResidualMoE = j.ResidualMoE != nil && *j.ResidualMoE
	var errs []error
	required := func(key string, p *int) int {
		if p == nil {
			errs = append(errs, fmt.Errorf("missing %s", key))
			return 0
		}
		return *p
	}
	c.VocabSize = required("vocab_size", j.VocabSize)
	c.EmbSize = required("hidden_size", j.HiddenSize)
	c.FFNSize = required("intermediate_size", j.IntermediateSize)
	switch {
	case c.ResidualMoE:
		// Grok-2: intermediate_size is the dense MLP, the experts'
		// width is moe_intermediate_size (SGLang's grok.py).
		c.DenseFFNSize = c.FFNSize
		c.FFNSize = required("moe_intermediate_size", j.MoEIntermediateSize)
	case j.MoEIntermediateSize != nil:
		c.FFNSize = *j.MoEIntermediateSize
	}
	c.NumLayers = required("num_hidden_layers", j.NumHiddenLayers)
	c.NumQHeads = required("num_attention_heads", j.NumAttentionHeads)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}

	intOr := func(key string, p *int, def int) int {
		if p == nil {
			c.Defaulted = append(c.Defaulted, key)
			return def
		}
		return *p
	}
	floatOr := func(key string, p *float64, def float64) float64 {
		if p == nil {
			c.Defaulted = append(c.Defaulted, key)
			return def
		}
		return *p
	}
	c.NumKVHeads = intOr("num_key_value_heads", j.NumKeyValueHeads, c.NumQHeads)
	switch {
	case j.HeadDim != nil:
		c.KeySize = *j.HeadDim
	case c.NumQHeads > 0 && c.EmbSize%c.NumQHeads == 0:
		c.KeySize = c.EmbSize / c.NumQHeads
	default:
		errs = append(errs, fmt.Errorf("hidden_size %d is not divisible by num_attention_heads %d and head_dim is absent", c.EmbSize, c.NumQHeads))
	}
	switch {
	case j.NumExperts != nil && j.NumLocalExperts != nil && *j.NumExperts != *j.NumLocalExperts:
		errs = append(errs, fmt.Errorf("num_experts %d and num_local_experts %d disagree", *j.NumExperts, *j.NumLocalExperts))
	case j.NumExperts != nil:
		c.NumExperts = *j.NumExperts
	case j.NumLocalExperts != nil:
		c.NumExperts = *j.NumLocalExperts
	default:
		errs = append(errs, errors.New("missing num_experts (or num_local_experts)"))
	}
	c.NumSelectedExperts = intOr("num_experts_per_tok", j.NumExpertsPerTok, 2)
	c.SequenceLen = intOr("max_position_embeddings", j.MaxPositionEmbeddings, 8192)
	c.RMSEps = floatOr("rms_norm_eps", j.RMSNormEps, 1e-5)
	c.RopeBase = floatOr("rope_theta", j.RopeTheta, 10000)
	defScale := 1.0
	if c.KeySize > 0 {
		defScale = 1 / math.Sqrt(float64(c.KeySize))
	}
	c.AttnOutputMultiplier = floatOr("attn_output_multiplier", j.AttnOutputMultiplier, defScale)
	c.EmbeddingMultiplierScale = floatOr("embedding_multiplier_scale", j.EmbeddingMultiplierScale, 1)
	c.OutputMultiplierScale = floatOr("output_multiplier_scale", j.OutputMultiplierScale, 1)
	if j.AttnLogitSoftcapping != nil {
		c.MaxAttnValue = *j.AttnLogitSoftcapping // Grok-2's spelling
	} else {
		c.MaxAttnValue = floatOr("max_attn_value", j.MaxAttnValue, 30)
	}
	if c.ResidualMoE {
		c.RouterLogitCap = floatOr("router_logit_softcapping", j.RouterLogitSoftcapping, 30)
	}
	if j.FinalLogitSoftcapping != nil {
		c.FinalLogitCap = *j.FinalLogitSoftcapping
	}
	if j.AttnTemperatureLen != nil && *j.AttnTemperatureLen > 0 {
		c.AttnTemperatureLen = *j.AttnTemperatureLen
	}
	if j.RopeType != nil {
		c.RopeType = *j.RopeType
	}
	y := &c.Yarn
	for _, k := range []struct {
		key string
		src *float64
		dst *float64
	}{
		{"scaling_factor", j.ScalingFactor, &y.ScalingFactor}, {"extrapolation_factor", j.ExtrapolationFactor, &y.ExtrapolationFactor},
		{"attn_factor", j.AttnFactor, &y.AttnFactor}, {"beta_fast", j.BetaFast, &y.BetaFast}, {"beta_slow", j.BetaSlow, &y.BetaSlow},
	} {
		if k.src == nil {
			y.Missing = append(y.Missing, k.key)
			continue
		}
		*k.dst = *k.src
	}
	if j.OriginalMaxPositions != nil {
		y.OriginalMaxPositions = *j.OriginalMaxPositions
	} else {
		y.Missing = append(y.Missing, "original_max_position_embeddings")
	}
	if j.RopeType != nil && *j.RopeType != "original" && *j.RopeType != "default" {
		// "original" is plain RoPE (semantics §G3): SGLang's other methods
		// rescale the frequencies, which the engine does not.
		errs = append(errs, fmt.Errorf("rope_type %q is not supported (only \"original\", plain RoPE)", *j.RopeType))
	}
	// Grok-2's lm_head is its own tensor; its config has no
	// tie_word_embeddings key.
	c.TieWordEmbeddings = !c.ResidualMoE
	if j.TieWordEmbeddings != nil {
		c.TieWordEmbeddings = *j.TieWordEmbeddings
	} else if !c.ResidualMoE {
		c.Defaulted = append(c.Defaulted, "tie_word_embeddings")
	}
	for _, t := range []struct {
		key string
		raw json.RawMessage
		def int
		dst *int
	}{
		{"pad_token_id", j.PadTokenID, 0, &c.PadToken},
		{"bos_token_id", j.BOSTokenID, 1, &c.BOSToken},
		{"eos_token_id", j.EOSTokenID, 2, &c.EOSToken},
	} {
		v, present, err := tokenID(t.raw)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", t.key, err))
		case !present:
			*t.dst = t.def
			c.Defaulted = append(c.Defaulted, t.key)
		default:
			*t.dst = v
		}
	}
	if err := errors.Join(append(errs, c.validate())...); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// tokenID reads a token id that transformers may write as an int, null or a
// list of ints (several EOS ids); a list yields its first element.
func tokenID(raw json.RawMessage) (v int, present bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	if err := json.Unmarshal(raw, &v); err == nil {
		return v, true, nil
	}
	var list []int
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, false, fmt.Errorf("not an integer or a list of integers: %s", raw)
	}
	if len(list) == 0 {
		return 0, false, nil
	}
	return list[0], true, nil
}

// validate checks what this package relies on to compute tensor shapes;
// the model validates the rest.
func (c *Config) validate() error {
	var errs []error
	for _, f := range []struct {
		key string
		v   int
	}{
		{"vocab_size", c.VocabSize}, {"hidden_size", c.EmbSize}, {"head_dim", c.KeySize},
		{"num_attention_heads", c.NumQHeads}, {"num_key_value_heads", c.NumKVHeads},
		{"num_hidden_layers", c.NumLayers}, {"intermediate_size (the experts')", c.FFNSize},
	} {
		// 1<<24 bounds every dimension far above Grok-1's and keeps the
		// products in shape checks from overflowing.
		if f.v <= 0 || f.v > 1<<24 {
			errs = append(errs, fmt.Errorf("%s must be in 1..%d, got %d", f.key, 1<<24, f.v))
		}
	}
	if c.ResidualMoE && (c.DenseFFNSize <= 0 || c.DenseFFNSize > 1<<24) {
		errs = append(errs, fmt.Errorf("intermediate_size (the dense MLP's) must be in 1..%d, got %d", 1<<24, c.DenseFFNSize))
	}
	if c.RouterLogitCap < 0 || c.FinalLogitCap < 0 || math.IsNaN(c.RouterLogitCap) || math.IsNaN(c.FinalLogitCap) {
		errs = append(errs, fmt.Errorf("router_logit_softcapping %g and final_logit_softcapping %g must not be negative", c.RouterLogitCap, c.FinalLogitCap))
	}
	if c.NumExperts < 0 || c.NumExperts > 1<<16 {
		errs = append(errs, fmt.Errorf("num_experts must be in 0..%d, got %d", 1<<16, c.NumExperts))
	}
	if c.NumKVHeads > 0 && c.NumQHeads%c.NumKVHeads != 0 {
		errs = append(errs, fmt.Errorf("num_attention_heads %d is not divisible by num_key_value_heads %d", c.NumQHeads, c.NumKVHeads))
	}
	return errors.Join(errs...)
}

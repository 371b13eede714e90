package xaickpt

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/grok-go/grok/internal/safefile"
)

// Config is the model configuration of an xAI checkpoint, with the field
// names of xai-org/grok-1 model.py (TransformerConfig and
// LanguageModelConfig, as run.py sets them) plus the keys the design note
// adds. Each comment names its config.json key.
type Config struct {
	VocabSize          int // vocab_size (V)
	EmbSize            int // emb_size (D)
	KeySize            int // key_size (K, head size)
	NumQHeads          int // num_q_heads
	NumKVHeads         int // num_kv_heads
	NumLayers          int // num_layers
	NumExperts         int // num_experts (≤ 1: a dense feed-forward block)
	NumSelectedExperts int // num_selected_experts (top-k)
	FFNSize            int // ffn_size (F): authoritative; from widening_factor if absent
	// WideningFactor is widening_factor, 0 if absent. When present it must
	// give FFNSize through model.py's ffn_size().
	WideningFactor float64

	AttnOutputMultiplier     float64 // attn_output_multiplier
	EmbeddingMultiplierScale float64 // embedding_multiplier_scale
	OutputMultiplierScale    float64 // output_multiplier_scale

	PadToken    int     // pad_token (default 0)
	EOSToken    int     // eos_token (default 2)
	SequenceLen int     // sequence_len (default 8192)
	RopeBase    float64 // rope_base (default 10000, hard-coded in model.py)
	RMSEps      float64 // rms_eps (default 1e-5, model.py's RMSNorm default)
	// ModelShards is model_shards (S, default 8): the row blocks of the
	// per-shard scales of the row-parallel layers.
	ModelShards int

	// Defaulted lists the optional keys that were absent and got their
	// default, so that a caller can say so.
	Defaulted []string
}

// Grok1Config returns Grok-1's configuration as run.py sets it (the values
// of the design note), used when a checkpoint has no config.json.
func Grok1Config() Config {
	return Config{
		VocabSize: 131072, EmbSize: 6144, KeySize: 128,
		NumQHeads: 48, NumKVHeads: 8, NumLayers: 64,
		NumExperts: 8, NumSelectedExperts: 2,
		FFNSize: 32768, WideningFactor: 8,
		AttnOutputMultiplier:     0.08838834764831845,
		EmbeddingMultiplierScale: 78.38367176906169,
		OutputMultiplierScale:    0.5773502691896257,
		PadToken:                 0, EOSToken: 2, SequenceLen: 8192,
		RopeBase: 10000, RMSEps: 1e-5, ModelShards: 8,
	}
}

// ffnSize is model.py's ffn_size(emb_size, widening_factor):
// int(widening_factor·emb_size)·2//3 rounded up to a multiple of 8.
func ffnSize(embSize int, wideningFactor float64) int {
	f := int(wideningFactor*float64(embSize)) * 2 / 3
	return f + (8-f%8)%8
}

// configJSON holds the raw keys; pointers tell absent from zero.
type configJSON struct {
	VocabSize                *int     `json:"vocab_size"`
	EmbSize                  *int     `json:"emb_size"`
	KeySize                  *int     `json:"key_size"`
	NumQHeads                *int     `json:"num_q_heads"`
	NumKVHeads               *int     `json:"num_kv_heads"`
	NumLayers                *int     `json:"num_layers"`
	NumExperts               *int     `json:"num_experts"`
	NumSelectedExperts       *int     `json:"num_selected_experts"`
	FFNSize                  *int     `json:"ffn_size"`
	WideningFactor           *float64 `json:"widening_factor"`
	AttnOutputMultiplier     *float64 `json:"attn_output_multiplier"`
	EmbeddingMultiplierScale *float64 `json:"embedding_multiplier_scale"`
	OutputMultiplierScale    *float64 `json:"output_multiplier_scale"`
	PadToken                 *int     `json:"pad_token"`
	EOSToken                 *int     `json:"eos_token"`
	SequenceLen              *int     `json:"sequence_len"`
	RopeBase                 *float64 `json:"rope_base"`
	RMSEps                   *float64 `json:"rms_eps"`
	ModelShards              *int     `json:"model_shards"`
}

// maxConfigSize caps config.json; the real one is half a kilobyte.
const maxConfigSize = 1 << 20

// LoadConfig reads a checkpoint's config.json.
func LoadConfig(path string) (*Config, error) {
	data, err := safefile.ReadFile(path, maxConfigSize)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses config.json (the keys of the design note's "config.json
// next to a checkpoint"). Unknown keys are ignored. The shape keys and the
// three multipliers are required; pad_token, eos_token, sequence_len,
// rope_base, rms_eps and model_shards default to Grok-1's values.
func ParseConfig(data []byte) (*Config, error) {
	var j configJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := &Config{}
	var errs []error
	reqInt := func(key string, p *int) int {
		if p == nil {
			errs = append(errs, fmt.Errorf("missing %s", key))
			return 0
		}
		return *p
	}
	reqFloat := func(key string, p *float64) float64 {
		if p == nil {
			errs = append(errs, fmt.Errorf("missing %s", key))
			return 0
		}
		return *p
	}
	c.VocabSize = reqInt("vocab_size", j.VocabSize)
	c.EmbSize = reqInt("emb_size", j.EmbSize)
	c.KeySize = reqInt("key_size", j.KeySize)
	c.NumQHeads = reqInt("num_q_heads", j.NumQHeads)
	c.NumKVHeads = reqInt("num_kv_heads", j.NumKVHeads)
	c.NumLayers = reqInt("num_layers", j.NumLayers)
	c.NumExperts = reqInt("num_experts", j.NumExperts)
	c.NumSelectedExperts = reqInt("num_selected_experts", j.NumSelectedExperts)
	c.AttnOutputMultiplier = reqFloat("attn_output_multiplier", j.AttnOutputMultiplier)
	c.EmbeddingMultiplierScale = reqFloat("embedding_multiplier_scale", j.EmbeddingMultiplierScale)
	c.OutputMultiplierScale = reqFloat("output_multiplier_scale", j.OutputMultiplierScale)
	if j.WideningFactor != nil {
		c.WideningFactor = *j.WideningFactor
	}
	switch {
	case j.FFNSize != nil:
		c.FFNSize = *j.FFNSize
	case j.WideningFactor != nil && j.EmbSize != nil:
		c.FFNSize = ffnSize(c.EmbSize, c.WideningFactor)
	default:
		errs = append(errs, errors.New("missing ffn_size (and widening_factor)"))
	}
	defInt := func(key string, p *int, def int) int {
		if p == nil {
			c.Defaulted = append(c.Defaulted, key)
			return def
		}
		return *p
	}
	defFloat := func(key string, p *float64, def float64) float64 {
		if p == nil {
			c.Defaulted = append(c.Defaulted, key)
			return def
		}
		return *p
	}
	g := Grok1Config()
	c.PadToken = defInt("pad_token", j.PadToken, g.PadToken)
	c.EOSToken = defInt("eos_token", j.EOSToken, g.EOSToken)
	c.SequenceLen = defInt("sequence_len", j.SequenceLen, g.SequenceLen)
	c.RopeBase = defFloat("rope_base", j.RopeBase, g.RopeBase)
	c.RMSEps = defFloat("rms_eps", j.RMSEps, g.RMSEps)
	c.ModelShards = defInt("model_shards", j.ModelShards, g.ModelShards)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// maxDim bounds every dimension: far above Grok-1's, low enough that the
// products of tensor shapes cannot overflow an int64.
const maxDim = 1 << 24

// maxLayers bounds num_layers (Grok-1 has 64).
const maxLayers = 4096

// Validate reports every inconsistency that would make the checkpoint's
// shapes ill-defined, naming the config.json keys. The model checks the
// rest of its semantics.
func (c *Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		key string
		v   int
	}{
		{"vocab_size", c.VocabSize}, {"emb_size", c.EmbSize}, {"key_size", c.KeySize},
		{"num_q_heads", c.NumQHeads}, {"num_kv_heads", c.NumKVHeads},
		{"num_layers", c.NumLayers}, {"ffn_size", c.FFNSize}, {"model_shards", c.ModelShards},
	} {
		if f.v <= 0 || f.v > maxDim {
			errs = append(errs, fmt.Errorf("%s must be in 1..%d, got %d", f.key, maxDim, f.v))
		}
	}
	if c.NumLayers > maxLayers {
		// Each layer is a dozen files; a hostile count must not make
		// Open build millions of entries before finding files missing.
		errs = append(errs, fmt.Errorf("num_layers must be at most %d, got %d", maxLayers, c.NumLayers))
	}
	if c.NumExperts < 0 || c.NumExperts > 1<<16 {
		errs = append(errs, fmt.Errorf("num_experts must be in 0..%d, got %d", 1<<16, c.NumExperts))
	}
	if c.NumExperts > 1 && (c.NumSelectedExperts < 1 || c.NumSelectedExperts > c.NumExperts) {
		errs = append(errs, fmt.Errorf("num_selected_experts must be in 1..num_experts (%d), got %d", c.NumExperts, c.NumSelectedExperts))
	}
	if c.NumKVHeads > 0 && c.NumQHeads%c.NumKVHeads != 0 {
		errs = append(errs, fmt.Errorf("num_q_heads %d is not divisible by num_kv_heads %d", c.NumQHeads, c.NumKVHeads))
	}
	if c.WideningFactor != 0 && c.EmbSize > 0 {
		if math.IsNaN(c.WideningFactor) || math.IsInf(c.WideningFactor, 0) || c.WideningFactor < 0 || c.WideningFactor > maxDim {
			errs = append(errs, fmt.Errorf("widening_factor %v is not a usable number", c.WideningFactor))
		} else if f := ffnSize(c.EmbSize, c.WideningFactor); f != c.FFNSize {
			errs = append(errs, fmt.Errorf("widening_factor %v gives ffn_size %d, but ffn_size is %d", c.WideningFactor, f, c.FFNSize))
		}
	}
	// The row-parallel weights (attention output, expert output) split
	// their input rows into model_shards blocks, each with its own scales.
	if s := c.ModelShards; s > 0 {
		if r := c.NumQHeads * c.KeySize; r > 0 && r%s != 0 {
			errs = append(errs, fmt.Errorf("the %d rows of multi_head_attention/linear (num_q_heads·key_size) do not split into model_shards = %d blocks", r, s))
		}
		if c.FFNSize > 0 && c.FFNSize%s != 0 {
			errs = append(errs, fmt.Errorf("the %d rows of moe/linear_1 (ffn_size) do not split into model_shards = %d blocks", c.FFNSize, s))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

package xaickpt

import (
	"slices"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	const base = `"vocab_size": 512, "emb_size": 128, "key_size": 16, "num_q_heads": 8, "num_kv_heads": 2,
		"num_layers": 2, "num_experts": 4, "num_selected_experts": 2, "attn_output_multiplier": 0.2,
		"embedding_multiplier_scale": 8.0, "output_multiplier_scale": 0.5`
	tests := []struct {
		name      string
		json      string
		ffn       int
		defaulted []string
		err       []string
	}{
		{name: "ffn_size and widening_factor", json: `{` + base + `, "ffn_size": 256, "widening_factor": 3, "pad_token": 0, "eos_token": 2, "sequence_len": 256, "rope_base": 10000, "rms_eps": 1e-5, "model_shards": 8}`, ffn: 256},
		{name: "ffn from widening_factor", json: `{` + base + `, "widening_factor": 3}`, ffn: 256,
			defaulted: []string{"pad_token", "eos_token", "sequence_len", "rope_base", "rms_eps", "model_shards"}},
		{name: "Grok-1 widening", json: `{` + strings.Replace(base, `"emb_size": 128`, `"emb_size": 6144`, 1) + `, "widening_factor": 8}`, ffn: 32768,
			defaulted: []string{"pad_token", "eos_token", "sequence_len", "rope_base", "rms_eps", "model_shards"}},
		{name: "unknown keys ignored", json: `{` + base + `, "ffn_size": 256, "model_shards": 8, "fprop_dtype": "bf16", "nested": {"a": [1]}}`, ffn: 256,
			defaulted: []string{"pad_token", "eos_token", "sequence_len", "rope_base", "rms_eps"}},
		{name: "widening disagrees", json: `{` + base + `, "ffn_size": 256, "widening_factor": 4}`, err: []string{"widening_factor 4 gives ffn_size 344"}},
		{name: "missing keys", json: `{"vocab_size": 512}`, err: []string{"missing emb_size", "missing key_size", "missing num_experts", "missing attn_output_multiplier", "missing ffn_size"}},
		{name: "shards do not divide", json: `{` + base + `, "ffn_size": 252, "model_shards": 8}`, err: []string{"rows of moe/linear_1 (ffn_size) do not split into model_shards = 8"}},
		{name: "attention rows do not divide", json: `{` + base + `, "ffn_size": 256, "model_shards": 3}`, err: []string{"multi_head_attention/linear", "model_shards = 3"}},
		{name: "heads do not divide", json: `{` + strings.Replace(base, `"num_kv_heads": 2`, `"num_kv_heads": 3`, 1) + `, "ffn_size": 256}`, err: []string{"not divisible by num_kv_heads 3"}},
		{name: "negative size", json: `{` + strings.Replace(base, `"emb_size": 128`, `"emb_size": -1`, 1) + `, "ffn_size": 256}`, err: []string{"emb_size must be in"}},
		{name: "huge layer count", json: `{` + strings.Replace(base, `"num_layers": 2`, `"num_layers": 100000000`, 1) + `, "ffn_size": 256}`, err: []string{"num_layers must be at most"}},
		{name: "top-k above experts", json: `{` + strings.Replace(base, `"num_selected_experts": 2`, `"num_selected_experts": 5`, 1) + `, "ffn_size": 256}`, err: []string{"num_selected_experts"}},
		{name: "not an int", json: `{` + base + `, "ffn_size": 256.5}`, err: []string{"ffn_size"}},
		{name: "not JSON", json: `{`, err: []string{"config"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatal("no error")
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.FFNSize != tc.ffn || !slices.Equal(c.Defaulted, tc.defaulted) {
				t.Errorf("ffn %d defaulted %v, want %d %v", c.FFNSize, c.Defaulted, tc.ffn, tc.defaulted)
			}
		})
	}
	if err := func() error { g := Grok1Config(); return g.Validate() }(); err != nil {
		t.Errorf("Grok-1 preset: %v", err)
	}
	if g := Grok1Config(); ffnSize(g.EmbSize, g.WideningFactor) != g.FFNSize {
		t.Error("Grok-1 preset ffn_size disagrees with widening_factor")
	}
}

package model_test

import (
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"math"
	"strings"
	"testing"
)

func TestGrok1Preset(t *testing.T) {
	c := model.Grok1()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// semantics §1: ffn_size(6144, 8) = 32768, G = 6.
	if c.FFNSize != 32768 || c.GroupSize() != 6 || c.VocabSize != 131072 || c.NumLayers != 64 {
		t.Errorf("Grok-1 preset: %+v", c)
	}
}

// semantics §G1: Grok-2's hyper-parameters.
func TestGrok2Preset(t *testing.T) {
	c := model.Grok2()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.EmbSize != 8192 || c.GroupSize() != 8 || c.FFNSize != 16384 || c.DenseFFNSize != 32768 ||
		c.RouterLogitCap != 30 || c.FinalLogitCap != 50 || c.AttnTemperatureLen != 1024 || !c.UntiedOutput ||
		math.Abs(float64(c.EmbeddingMultiplierScale)-math.Sqrt(8192)) > 1e-5 || c.OutputMultiplierScale != 0.5 {
		t.Errorf("Grok-2 preset: %+v", c)
	}
}

func TestFFNSizeFromWidening(t *testing.T) {
	for _, tc := range []struct {
		d    int
		w    float64
		want int
	}{{6144, 8, 32768}, {128, 3, 256}, {256, 1.125, 192}, {100, 1, 72}} {
		if got := model.FFNSizeFromWidening(tc.d, tc.w); got != tc.want {
			t.Errorf("ffn_size(%d, %g) = %d, want %d", tc.d, tc.w, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*model.Config)
		want   string
	}{
		{"heads not divisible", func(c *model.Config) { c.NumKVHeads = 3 }, "not divisible"},
		{"odd key size", func(c *model.Config) { c.KeySize = 7 }, "key_size must be even"},
		{"top-k > experts", func(c *model.Config) { c.NumSelectedExperts = 5 }, "num_selected_experts"},
		{"zero layers", func(c *model.Config) { c.NumLayers = 0 }, "num_layers must be positive"},
		{"yarn without a context", func(c *model.Config) {
			c.Yarn = model.YarnScaling{Factor: 16, ExtFactor: 1, AttnFactor: 1, BetaFast: 8, BetaSlow: 1}
		}, "yarn original context length"},
		{"yarn beta 0", func(c *model.Config) {
			c.Yarn = model.YarnScaling{Factor: 16, OrigContext: 8192, ExtFactor: 1, AttnFactor: 1, BetaFast: 8}
		}, "yarn beta_slow"},
		{"yarn negative factor", func(c *model.Config) {
			c.Yarn = model.YarnScaling{Factor: -2, OrigContext: 8192, AttnFactor: 1, BetaFast: 8, BetaSlow: 1}
		}, "yarn factor"},
		{"pad outside vocab", func(c *model.Config) { c.PadToken = 64 }, "pad_token"},
		{"zero eps", func(c *model.Config) { c.RMSEps = 0 }, "rms_eps"},
		{"negative cap", func(c *model.Config) { c.AttnLogitCap = -1 }, "cap"},
		{"huge vocab", func(c *model.Config) { c.VocabSize = 1 << 40 }, "too large"},
		{"negative router cap", func(c *model.Config) { c.RouterLogitCap = -30 }, "router logit cap"},
		{"infinite final cap", func(c *model.Config) { c.FinalLogitCap = float32(math.Inf(1)) }, "final logit cap"},
		{"temperature length 1", func(c *model.Config) { c.AttnTemperatureLen = 1 }, "attn_temperature_len"},
		{"negative dense width", func(c *model.Config) { c.DenseFFNSize = -1 }, "dense_ffn_size"},
		{"dense MLP without experts", func(c *model.Config) { c.NumExperts, c.NumSelectedExperts, c.DenseFFNSize = 1, 1, 64 }, "needs num_experts > 1"},
		{"router cap without a router", func(c *model.Config) { c.NumExperts, c.NumSelectedExperts, c.RouterLogitCap = 1, 1, 30 }, "without a router"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testmodel.SmallConfig()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	for _, c := range []model.Config{testmodel.SmallConfig(), testmodel.SmallGrok2Config()} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
}

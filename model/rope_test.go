package model_test

import (
	"math"
	"testing"

	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/model"
)

// yarnRef64 is YaRN as its authors wrote it (jquesnelle/yarn,
// LlamaYaRNScaledRotaryEmbedding.py, which ggml's rope_yarn cites), in
// float64 and independent of model/rope.go's structure: the inverse
// frequencies are blended (not the angles), with the linear ramp mask
// over K/2 pairs and mscale = (0.1·ln s + 1)·attn_factor.
func yarnRef64(K, pos int, base float64, y model.YarnScaling) (cos, sin []float64) {
	s := float64(y.Factor)
	corr := func(rot float64) float64 {
		return float64(K) * math.Log(float64(y.OrigContext)/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	low := math.Max(math.Floor(corr(float64(y.BetaFast))), 0)
	high := math.Min(math.Ceil(corr(float64(y.BetaSlow))), float64(K-1))
	if low == high {
		high += 0.001
	}
	mscale := float64(y.AttnFactor)
	if y.ExtFactor != 0 {
		mscale *= 0.1*math.Log(s) + 1
	}
	for i := 0; i < K/2; i++ {
		posFreq := math.Pow(base, float64(2*i)/float64(K))
		extrap, interp := 1/posFreq, 1/(s*posFreq)
		linear := math.Min(math.Max((float64(i)-low)/(high-low), 0), 1)
		mask := (1 - linear) * float64(y.ExtFactor)
		inv := interp*(1-mask) + extrap*mask
		cos = append(cos, math.Cos(float64(pos)*inv)*mscale)
		sin = append(sin, math.Sin(float64(pos)*inv)*mscale)
	}
	return cos, sin
}

// grok2Yarn is what llama.cpp's converter writes for Grok-2's "original"
// RoPE (scaling_factor 16, original_max_position_embeddings 8192, beta 8
// and 1, extrapolation 1), with the attn_factor llama.cpp derives.
var grok2Yarn = model.YarnScaling{Factor: 16, OrigContext: 8192, ExtFactor: 1, AttnFactor: 1, BetaFast: 8, BetaSlow: 1}

// YaRN's tables equal an independent float64 computation of its
// frequencies and magnitude, at Grok-2's base and at small sizes, with and
// without the extrapolation ramp.
func TestYarnTables(t *testing.T) {
	pureInterp := grok2Yarn
	pureInterp.ExtFactor = 0
	half := grok2Yarn
	half.ExtFactor, half.AttnFactor, half.Factor = 0.5, 0.9, 4
	for _, tc := range []struct {
		name string
		K    int
		base float32
		y    model.YarnScaling
	}{
		{"grok-2", 128, 208533496, grok2Yarn},
		{"grok-2 ext 0", 128, 208533496, pureInterp},
		{"small", 16, 10000, half},
		{"short context", 16, 10000, model.YarnScaling{Factor: 8, OrigContext: 64, ExtFactor: 1, AttnFactor: 1, BetaFast: 4, BetaSlow: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := model.RotaryEmbedding{KeySize: tc.K, Base: tc.base, Yarn: tc.y}
			cos, sin := make([]float32, tc.K/2), make([]float32, tc.K/2)
			for _, pos := range []int{0, 1, 7, 1000, 8191, 8192, 100000, 131071} {
				r.Tables(cos, sin, pos)
				wc, ws := yarnRef64(tc.K, pos, float64(tc.base), tc.y)
				for j := range cos {
					if d := math.Max(math.Abs(float64(cos[j])-wc[j]), math.Abs(float64(sin[j])-ws[j])); d > 3e-7 { // float32 rounding of values up to 1.28
						t.Fatalf("pos %d pair %d: cos, sin = %v, %v; float64 YaRN %v, %v", pos, j, cos[j], sin[j], wc[j], ws[j])
					}
				}
			}
		})
	}
	// The magnitude ggml gives Grok-2's files: 1 + 0.1·ln 16.
	r := model.RotaryEmbedding{KeySize: 128, Base: 208533496, Yarn: grok2Yarn}
	cos, sin := make([]float32, 64), make([]float32, 64)
	r.Tables(cos, sin, 0)
	if want := float32(1 + 0.1*math.Log(16)); cos[0] != want || sin[0] != 0 {
		t.Errorf("position 0: cos %v sin %v, want %v and 0", cos[0], sin[0], want)
	}
}

// Without YaRN the tables are plain RoPE's, bit for bit.
func TestRopeDefaultUnchanged(t *testing.T) {
	for _, base := range []float32{10000, 208533496} {
		r := model.RotaryEmbedding{KeySize: 128, Base: base}
		got, gs := make([]float32, 64), make([]float32, 64)
		want, ws := make([]float32, 64), make([]float32, 64)
		for _, pos := range []int{0, 3, 1025, 131071} {
			r.Tables(got, gs, pos)
			kernels.RopeTables(want, ws, pos, base, 128)
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) || math.Float32bits(gs[j]) != math.Float32bits(ws[j]) {
					t.Fatalf("base %v pos %d pair %d: %v %v, plain RoPE %v %v", base, pos, j, got[j], gs[j], want[j], ws[j])
				}
			}
		}
	}
}

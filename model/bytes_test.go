package model_test

import (
	"math"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/tensor"
)

// DecodeStepBytes counts k of E experts per layer and every other weight once.
func TestDecodeStepBytes(t *testing.T) {
	c := testmodel.SmallConfig()
	b := mustModel(t, c, testmodel.Random(c, 1)).DecodeStepBytes()
	L, D, V, F := int64(c.NumLayers), int64(c.EmbSize), int64(c.VocabSize), int64(c.FFNSize)
	qd, kd := int64(c.NumQHeads*c.KeySize), int64(c.NumKVHeads*c.KeySize)
	k, E := int64(c.NumSelectedExperts), int64(c.NumExperts)
	want := []struct {
		name      string
		got, want int64
	}{
		{"attention", b.Attention, L * D * (2*qd + 2*kd) * 4},
		{"router", b.Router, L * E * D * 4},
		{"experts", b.Experts, L * k * 3 * D * F * 4},
		{"norms", b.Norms, (4*L + 1) * D * 4},
		{"embedding row", b.Embedding, D * 4},
		{"unembedding", b.Unembed, V * D * 4},
		{"total", b.Total, L*D*(2*qd+2*kd)*4 + L*E*D*4 + L*k*3*D*F*4 + (4*L+1)*D*4 + D*4 + V*D*4},
	}
	for _, w := range want {
		if w.got != w.want {
			t.Errorf("%s: %d bytes, want %d", w.name, w.got, w.want)
		}
	}
	if b.ExpertsPerLayer != c.NumSelectedExperts {
		t.Errorf("ExpertsPerLayer = %d", b.ExpertsPerLayer)
	}
	// The products are every matrix but the norms and the embedding row;
	// the random model is F32 throughout.
	if p := mustModel(t, c, testmodel.Random(c, 1)).DecodeStepProducts(); len(p) != 1 || p[tensor.F32].Bytes != b.Total-b.Norms-b.Embedding {
		t.Errorf("products by type %v, want F32 %d", p, b.Total-b.Norms-b.Embedding)
	}
}

// A Grok-2 step also reads every layer's dense MLP and the untied output.
func TestDecodeStepBytesGrok2(t *testing.T) {
	c := testmodel.SmallGrok2Config()
	b := mustModel(t, c, testmodel.Random(c, 1)).DecodeStepBytes()
	g1 := testmodel.SmallConfig()
	b1 := mustModel(t, g1, testmodel.Random(g1, 1)).DecodeStepBytes()
	L, D, Fd := int64(c.NumLayers), int64(c.EmbSize), int64(c.DenseFFNSize)
	if want := L * 3 * D * Fd * 4; b.DenseMLP != want || b.Total != b1.Total+want {
		t.Errorf("dense MLP %d bytes (want %d), total %d (want %d)", b.DenseMLP, want, b.Total, b1.Total+want)
	}
}

// PrefillFLOPs and DecodeFLOPs, from the config alone: 2 per multiply-add
// of every product a token runs and its attention, over (p+1)/2 positions
// on average in a prefill, with the last layer's feed-forward and the
// unembedding once per prefill; over pos+1 positions when decoding, with
// every layer's feed-forward and the whole unembedding.
func TestPrefillFLOPs(t *testing.T) {
	for _, g2 := range []bool{false, true} {
		c := testmodel.SmallConfig()
		if g2 {
			c = testmodel.SmallGrok2Config()
		}
		lm := mustModel(t, c, testmodel.Random(c, 1))
		L, D, V, F := float64(c.NumLayers), float64(c.EmbSize), float64(c.VocabSize), float64(c.FFNSize)
		qd, kd := float64(c.NumQHeads*c.KeySize), float64(c.NumKVHeads*c.KeySize)
		k, E, Fd := float64(c.NumSelectedExperts), float64(c.NumExperts), float64(c.DenseFFNSize)
		for _, p := range []int{1, 7, 128} {
			attn := 2 * qd * float64(p+1) / 2
			ffn := E*D + k*3*D*F + 3*D*Fd
			want := 2 * (L*(D*(2*qd+2*kd)+attn) + (L-1+1/float64(p))*ffn + V*D/float64(p))
			if got := lm.PrefillFLOPs(p); math.Abs(got-want) > 1e-9*want {
				t.Errorf("grok2=%v p=%d: %v FLOP/token, want %v", g2, p, got, want)
			}
		}
		if got := lm.PrefillFLOPs(0); got != 0 {
			t.Errorf("PrefillFLOPs(0) = %v", got)
		}
		for _, pos := range []int{0, 9, 300} {
			attn := 2 * qd * float64(pos+1)
			ffn := E*D + k*3*D*F + 3*D*Fd
			want := 2 * (L*(D*(2*qd+2*kd)+attn+ffn) + V*D)
			if got := lm.DecodeFLOPs(pos); math.Abs(got-want) > 1e-9*want {
				t.Errorf("grok2=%v pos=%d: %v FLOP a decoded token, want %v", g2, pos, got, want)
			}
		}
	}
}

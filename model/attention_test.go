package model_test

import (
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/kernels"
)

// RoPE makes q·k depend only on the distance between the positions.
func TestRopeRelativePosition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const K = 16
	r := model.RotaryEmbedding{KeySize: K, Base: 10000}
	q0, k0 := make([]float32, K), make([]float32, K)
	for i := range q0 {
		q0[i], k0[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	cos, sin := make([]float32, K/2), make([]float32, K/2)
	score := func(m, n int) float64 {
		q, k := append([]float32(nil), q0...), append([]float32(nil), k0...)
		r.Apply(q, 1, m, cos, sin)
		r.Apply(k, 1, n, cos, sin)
		return float64(kernels.Dot(q, k))
	}
	for _, tc := range []struct{ m, n, shift int }{{5, 2, 10}, {0, 0, 100}, {30, 7, 3}, {3, 9, 50}} {
		a, b := score(tc.m, tc.n), score(tc.m+tc.shift, tc.n+tc.shift)
		if math.Abs(a-b) > 1e-4*max(1, math.Abs(a)) {
			t.Errorf("score(%d,%d)=%g but shifted by %d: %g", tc.m, tc.n, a, tc.shift, b)
		}
	}
	// And the rotation pairs feature i with i+K/2 (NeoX), not neighbours.
	x := make([]float32, K)
	x[0] = 1
	r.Apply(x, 1, 1, cos, sin)
	if x[K/2] == 0 || x[1] != 0 {
		t.Errorf("rotating e0 moved weight to %v, want only features 0 and %d", x, K/2)
	}
}

// A pad token at position 0 sees only itself, a masked key: the documented
// choice is a zero attention output (model.py would average all memory
// slots, a value that depends on the memory size). The logits then must not
// depend on the memory size, and must be finite.
func TestAllMaskedQueryIsZeroAttention(t *testing.T) {
	c := testmodel.SmallConfig()
	lm := mustModel(t, c, testmodel.Random(c, 13))
	toks := []int{0, 0, 7, 9}
	var outs [][]float32
	for _, seq := range []int{8, 64} {
		mem, _ := model.NewKVMemory(&c, 1, seq)
		o, err := lm.Forward(mem, []model.Input{{Tokens: toks, AllLogits: true}})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range o {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatal("non-finite logits")
			}
		}
		outs = append(outs, append([]float32(nil), o...))
	}
	if d := testmodel.MaxAbsDiff(outs[0], outs[1]); d != 0 {
		t.Errorf("logits depend on memory size: %g", d)
	}
	// With zero attention the first position's logits equal those of a model
	// whose attention output projection is zero.
	src := testmodel.Random(c, 13)
	for l := 0; l < c.NumLayers; l++ {
		n := "blk." + string(rune('0'+l)) + ".attn_output.weight"
		src[n] = testmodel.F32(n, src[n].Shape, make([]float32, len(src[n].Data)/4))
	}
	zero, _ := testmodel.FullLogits(mustModel(t, c, src), []int{0})
	if d := testmodel.MaxAbsDiff(outs[0][:c.VocabSize], zero); d > 1e-6 {
		t.Errorf("pad at position 0: max |Δ| vs zero attention = %g", d)
	}
}

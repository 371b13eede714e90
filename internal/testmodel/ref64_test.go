package testmodel_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
)

const goldenDir = "../../testdata/grok-tiny"

// Ref64 reproduces the golden logits of grok-tiny, which an independent
// numpy float64 implementation computed and stored as float32: the only
// difference left is that rounding (≤ ½ ulp of |logit| ≤ ~30, about 1e-6).
func TestRef64MatchesGolden(t *testing.T) {
	m, err := loader.Open(filepath.Join(goldenDir, "grok-tiny.gguf"), loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks := testmodel.ReadTokens(t, goldenDir)
	for _, name := range []string{"len7", "len64"} {
		want := testmodel.ReadLogits(t, filepath.Join(goldenDir, "logits_"+name+".f32"))
		ref, err := testmodel.Ref64(m.Config, m.Source, toks[name])
		if err != nil {
			t.Fatal(err)
		}
		d, agree := testmodel.Compare64(want, ref, m.Config.VocabSize)
		// Allow twice the float32 rounding of the largest logit.
		var big float64
		for _, v := range ref {
			big = max(big, math.Abs(v))
		}
		tol := 2 * big * 0x1p-24
		if d > tol || agree != 1 {
			t.Errorf("%s: ref64 vs golden max |Δ| = %.3g (want ≤ %.3g), argmax agreement %.3f", name, d, tol, agree)
		}
		t.Logf("%s: ref64 vs golden max |Δ| = %.3g (tolerance %.3g)", name, d, tol)

		got, err := testmodel.FullLogits(m.LanguageModel, toks[name])
		if err != nil {
			t.Fatal(err)
		}
		d, agree = testmodel.Compare64(got, ref, m.Config.VocabSize)
		if d > 1e-4 || agree != 1 {
			t.Errorf("%s: engine F32 vs ref64 max |Δ| = %.3g (want ≤ 1e-4), argmax agreement %.3f", name, d, agree)
		}
		t.Logf("%s: engine F32 vs ref64 max |Δ| = %.3g", name, d)
	}
}

// Ref64 follows the engine where model.py is silent: pad keys masked,
// a query seeing only pads gets zero attention output. A random model with
// pads at the start, inside and at the end agrees with the engine.
func TestRef64PadsAndLayouts(t *testing.T) {
	c := testmodel.SmallConfig()
	src := testmodel.Random(c, 7)
	seq := []int{0, 0, 5, 9, 0, 17, 33, 0, 12, 40, 0, 0}
	lm, err := model.New(c, src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := testmodel.FullLogits(lm, seq)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := testmodel.Ref64(c, src, seq)
	if err != nil {
		t.Fatal(err)
	}
	if d, agree := testmodel.Compare64(got, ref, c.VocabSize); d > 1e-4 || agree != 1 {
		t.Errorf("pads: engine vs ref64 max |Δ| = %.3g, argmax agreement %.3f", d, agree)
	}

	// The same weights with experts one per tensor, and transposed
	// ([in, out], Haiku's layout) matrices, give the same reference.
	alt := testmodel.Source{}
	for name, tn := range src {
		alt[name] = tn
	}
	for l := 0; l < c.NumLayers; l++ {
		for _, kind := range []string{"gate", "up", "down"} {
			merged := blk(l, "ffn_"+kind+"_exps")
			tn := alt[merged]
			delete(alt, merged)
			v, _ := tn.Float32s()
			per := len(v) / c.NumExperts
			for e := 0; e < c.NumExperts; e++ {
				name := blk(l, "ffn_"+kind+"."+itoa(e))
				alt[name] = testmodel.F32(name, tn.Shape[1:], v[e*per:(e+1)*per])
			}
		}
		q := blk(l, "attn_q")
		v, _ := alt[q].Float32s()
		R, C := alt[q].Shape[0], alt[q].Shape[1]
		tv := make([]float32, len(v))
		for r := 0; r < R; r++ {
			for col := 0; col < C; col++ {
				tv[col*R+r] = v[r*C+col]
			}
		}
		alt[q] = testmodel.F32(q, []int{C, R}, tv)
		alt[q].Transposed = true
	}
	ref2, err := testmodel.Ref64(c, alt, seq)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ref {
		if ref[i] != ref2[i] {
			t.Fatalf("per-expert/transposed layout changes ref64 logit %d: %v vs %v", i, ref2[i], ref[i])
		}
	}
}

func blk(l int, s string) string { return "blk." + itoa(l) + "." + s + ".weight" }

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

const grok2Dir = "../../testdata/grok2-tiny"

// Ref64 with the Grok-2 features reproduces grok2-tiny's golden logits (an
// independent float64 implementation of SGLang's Grok-2, stored as
// float32) to their rounding, and the engine agrees with it.
func TestRef64MatchesGrok2Golden(t *testing.T) {
	m, err := loader.Open(filepath.Join(grok2Dir, "grok2-tiny.gguf"), loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks := testmodel.ReadTokens(t, grok2Dir)
	for _, name := range []string{"len7", "len64", "len100"} {
		want := testmodel.ReadLogits(t, filepath.Join(grok2Dir, "xai", "logits_"+name+".f32"))
		ref, err := testmodel.Ref64(m.Config, m.Source, toks[name])
		if err != nil {
			t.Fatal(err)
		}
		d, agree := testmodel.Compare64(want, ref, m.Config.VocabSize)
		var big float64
		for _, v := range ref {
			big = max(big, math.Abs(v))
		}
		tol := 2 * big * 0x1p-24
		if d > tol || agree != 1 {
			t.Errorf("%s: ref64 vs golden max |Δ| = %.3g (want ≤ %.3g), argmax agreement %.3f", name, d, tol, agree)
		}
		t.Logf("%s: ref64 vs golden max |Δ| = %.3g (tolerance %.3g)", name, d, tol)

		got, err := testmodel.FullLogits(m.LanguageModel, toks[name])
		if err != nil {
			t.Fatal(err)
		}
		d, agree = testmodel.Compare64(got, ref, m.Config.VocabSize)
		if d > 1e-3 || agree != 1 {
			t.Errorf("%s: engine F32 vs ref64 max |Δ| = %.3g (want ≤ 1e-3), argmax agreement %.3f", name, d, agree)
		}
		t.Logf("%s: engine F32 vs ref64 max |Δ| = %.3g", name, d)
	}
}

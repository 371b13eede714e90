package model_test

import (
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
)

// The engine agrees with testmodel.Ref64, the independent float64 forward
// pass, on configurations the golden files do not cover: dense FFN, every
// GQA grouping, all experts selected, no attention cap, an untied
// output.weight, xAI's transposed int8 weights, and pads — both in one call
// and fed one token at a time through the KV memory.
func TestEngineMatchesRef64(t *testing.T) {
	base := testmodel.SmallConfig()
	with := func(f func(c *model.Config)) model.Config {
		c := base
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name   string
		c      model.Config
		untied bool
		int8   bool
		pads   bool
	}{
		{name: "moe", c: base},
		{name: "dense", c: with(func(c *model.Config) { c.NumExperts, c.NumSelectedExperts = 1, 1 })},
		{name: "mha G=1", c: with(func(c *model.Config) { c.NumKVHeads = 4 })},
		{name: "mqa G=4", c: with(func(c *model.Config) { c.NumKVHeads = 1 })},
		{name: "all experts", c: with(func(c *model.Config) { c.NumSelectedExperts = 4 })},
		{name: "top-1", c: with(func(c *model.Config) { c.NumSelectedExperts = 1 })},
		{name: "no cap", c: with(func(c *model.Config) { c.AttnLogitCap = 0 })},
		{name: "untied output", c: base, untied: true},
		{name: "xai int8", c: base, int8: true},
		{name: "pads", c: base, pads: true},
		{name: "grok-2", c: testmodel.SmallGrok2Config()},
		{name: "grok-2 xai int8", c: testmodel.SmallGrok2Config(), int8: true},
		{name: "grok-2 pads", c: testmodel.SmallGrok2Config(), pads: true},
		{name: "grok-2 dense MLP only", c: with(func(c *model.Config) { c.DenseFFNSize = 96 })},
		{name: "grok-2 temperature only", c: with(func(c *model.Config) { c.AttnTemperatureLen = 2 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := testmodel.Random(tc.c, 31)
			if tc.untied {
				rng := rand.New(rand.NewPCG(5, 5))
				v := make([]float32, tc.c.VocabSize*tc.c.EmbSize)
				for i := range v {
					v[i] = float32(rng.NormFloat64() * 0.1)
				}
				src["output.weight"] = testmodel.F32("output.weight", []int{tc.c.VocabSize, tc.c.EmbSize}, v)
			}
			if tc.int8 {
				src = xaiInt8(src)
			}
			rng := rand.New(rand.NewPCG(9, 9))
			toks := randTokens(rng, 24, tc.c.VocabSize, tc.pads)
			ref, err := testmodel.Ref64(tc.c, src, toks)
			if err != nil {
				t.Fatal(err)
			}
			lm := mustModel(t, tc.c, src)
			full, err := testmodel.FullLogits(lm, toks)
			if err != nil {
				t.Fatal(err)
			}
			mem, _ := model.NewKVMemory(&tc.c, 1, 0)
			var inc []float32
			for _, tok := range toks {
				out, err := lm.Forward(mem, []model.Input{{Tokens: []int{tok}}})
				if err != nil {
					t.Fatal(err)
				}
				inc = append(inc, out...)
			}
			for _, run := range []struct {
				name string
				got  []float32
			}{{"full", full}, {"incremental", inc}} {
				d, agree := testmodel.Compare64(run.got, ref, tc.c.VocabSize)
				if d > 1e-4 || agree != 1 {
					t.Errorf("%s: engine vs ref64 max |Δ| = %.3g (want ≤ 1e-4), argmax agreement %.3f", run.name, d, agree)
				}
			}
		})
	}
}

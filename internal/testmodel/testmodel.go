// Package testmodel builds small random models of the Grok-1 architecture in
// memory, for tests across the engine (model, runner, server).
package testmodel

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// Source is a model.TensorSource over tensors built in memory.
type Source map[string]*tensor.Tensor

// Lookup implements model.TensorSource.
func (m Source) Lookup(name string) (*tensor.Tensor, bool) {
	t, ok := m[name]
	return t, ok
}

// SmallConfig is a T1-like configuration (semantics §8) small enough for
// property tests.
func SmallConfig() model.Config {
	return model.Config{
		VocabSize: 64, EmbSize: 32, KeySize: 8, NumQHeads: 4, NumKVHeads: 2, NumLayers: 2,
		FFNSize: 64, NumExperts: 4, NumSelectedExperts: 2,
		AttnOutputMultiplier: 0.2, EmbeddingMultiplierScale: 8, OutputMultiplierScale: 0.5773502691896257,
		AttnLogitCap: 30, PadToken: 0, EOSToken: 2, SequenceLen: 64, RopeBase: 10000, RMSEps: 1e-5,
	}
}

// SmallGrok2Config is SmallConfig with every Grok-2 feature (semantics §G2),
// each sized to act on these small random weights: a dense MLP beside the
// experts, router and final soft-caps at about the logits' size, the
// attention temperature from position 5 and an untied output.weight.
func SmallGrok2Config() model.Config {
	c := SmallConfig()
	c.DenseFFNSize = 96
	c.RouterLogitCap, c.FinalLogitCap = 2, 4
	c.AttnTemperatureLen = 4
	c.UntiedOutput = true
	c.RopeBase = 208533496
	return c
}

// F32 makes an F32 tensor from values.
func F32(name string, shape []int, vals []float32) *tensor.Tensor {
	data, _ := tensor.EncodeRow(nil, tensor.F32, vals)
	return &tensor.Tensor{Name: name, Type: tensor.F32, Shape: shape, Data: data}
}

// Random makes random float32 weights for c in GGUF naming, scaled as
// the golden model's generator does (semantics README of grok-tiny).
func Random(c model.Config, seed uint64) Source {
	rng := rand.New(rand.NewPCG(seed, 0))
	src := Source{}
	mat := func(name string, gain float64, shape ...int) {
		n, _ := tensor.Elements(shape)
		fanIn := shape[len(shape)-1]
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * gain / math.Sqrt(float64(fanIn)))
		}
		src[name] = F32(name, shape, v)
	}
	norm := func(name string, lo, hi float64) {
		v := make([]float32, c.EmbSize)
		for i := range v {
			v[i] = float32(lo + (hi-lo)*rng.Float64())
		}
		src[name] = F32(name, []int{c.EmbSize}, v)
	}
	D, K, F, E := c.EmbSize, c.KeySize, c.FFNSize, c.NumExperts
	emb := make([]float32, c.VocabSize*D)
	for i := range emb {
		emb[i] = float32(rng.NormFloat64() * 0.04)
	}
	src["token_embd.weight"] = F32("token_embd.weight", []int{c.VocabSize, D}, emb)
	norm("output_norm.weight", 10, 14)
	for l := 0; l < c.NumLayers; l++ {
		p := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", l, s) }
		norm(p("attn_norm"), 0.8, 1.2)
		norm(p("attn_output_norm"), 1.5, 2.5)
		norm(p("ffn_norm"), 0.8, 1.2)
		norm(p("layer_output_norm"), 1.5, 2.5)
		mat(p("attn_q"), 2, c.NumQHeads*K, D)
		mat(p("attn_k"), 2, c.NumKVHeads*K, D)
		mat(p("attn_v"), 1, c.NumKVHeads*K, D)
		mat(p("attn_output"), 0.05, D, c.NumQHeads*K)
		if E > 1 {
			mat(p("ffn_gate_inp"), 2, E, D)
			mat(p("ffn_gate_exps"), 1, E, F, D)
			mat(p("ffn_up_exps"), 1, E, F, D)
			mat(p("ffn_down_exps"), 0.01, E, D, F)
		} else {
			mat(p("ffn_gate"), 1, F, D)
			mat(p("ffn_up"), 1, F, D)
			mat(p("ffn_down"), 0.01, D, F)
		}
		if Fd := c.DenseFFNSize; Fd > 0 && E > 1 {
			mat(p("ffn_gate"), 1, Fd, D)
			mat(p("ffn_up"), 1, Fd, D)
			mat(p("ffn_down"), 0.01, D, Fd)
		}
	}
	if c.UntiedOutput {
		mat("output.weight", 0.5, c.VocabSize, D)
	}
	return src
}

// FullLogits runs each sequence alone in one call and returns all-position logits.
func FullLogits(lm *model.LanguageModel, tokens []int) ([]float32, error) {
	mem, err := model.NewKVMemory(&lm.Config, 1, 0)
	if err != nil {
		return nil, err
	}
	out, err := lm.Forward(mem, []model.Input{{Slot: 0, Tokens: tokens, AllLogits: true}})
	return append([]float32(nil), out...), err
}

// RankLogits is FullLogits of every rank's shard at once, each on its own
// goroutine, as the ranks of a group must run their collectives together.
func RankLogits(ranks []*model.LanguageModel, tokens []int) ([][]float32, error) {
	got := make([][]float32, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for r, lm := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[r], errs[r] = FullLogits(lm, tokens)
		}()
	}
	wg.Wait()
	return got, errors.Join(errs...)
}

// MaxAbsDiff is max |a[i] - b[i]|, +Inf on length mismatch or NaN.
func MaxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = max(m, d)
	}
	return m
}

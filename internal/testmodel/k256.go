package testmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// K256Config is the configuration of testdata/grok-k256: the smallest
// Grok-1-shaped model whose every matrix row (D, F and Hq·K) is a whole
// 256-element super-block, so that llama.cpp's K-quants and 256-block
// i-quants apply to every projection. One layer and two experts (top 1)
// keep each quantised file near 300 KB; the vocabulary is grok-tiny's.
func K256Config() model.Config {
	return model.Config{
		VocabSize: 512, EmbSize: 256, KeySize: 32, NumQHeads: 8, NumKVHeads: 2, NumLayers: 1,
		FFNSize: 256, NumExperts: 2, NumSelectedExperts: 1,
		AttnOutputMultiplier: 0.2, EmbeddingMultiplierScale: 8, OutputMultiplierScale: float32(1 / math.Sqrt(3)),
		AttnLogitCap: 30, PadToken: 0, EOSToken: 2, SequenceLen: 256, RopeBase: 10000, RMSEps: 1e-5,
	}
}

// K256Weights returns grok-k256's float32 weights, deterministic: matrices
// N(0, 1/fan_in) (attention output and ffn_down ×0.5), embeddings
// N(0, 1/8²) so that the scaled embedding has unit variance, norm scales
// uniform in [0.8, 1.2]. Every activation is of order one, so quantisation
// error shows in the logits in proportion to its size.
func K256Weights() Source {
	c := K256Config()
	rng := rand.New(rand.NewPCG(256, 0x6b323536))
	src := Source{}
	fill := func(name string, shape []int, f func() float64) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(f())
		}
		src[name] = F32(name, shape, v)
	}
	mat := func(name string, gain float64, shape ...int) {
		sd := gain / math.Sqrt(float64(shape[len(shape)-1]))
		fill(name, shape, func() float64 { return rng.NormFloat64() * sd })
	}
	norm := func(name string) {
		fill(name, []int{c.EmbSize}, func() float64 { return 0.8 + 0.4*rng.Float64() })
	}
	D, K, F, E := c.EmbSize, c.KeySize, c.FFNSize, c.NumExperts
	fill("token_embd.weight", []int{c.VocabSize, D}, func() float64 { return rng.NormFloat64() / 8 })
	for l := 0; l < c.NumLayers; l++ {
		p := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", l, s) }
		norm(p("attn_norm"))
		mat(p("attn_q"), 1, c.NumQHeads*K, D)
		mat(p("attn_k"), 1, c.NumKVHeads*K, D)
		mat(p("attn_v"), 1, c.NumKVHeads*K, D)
		mat(p("attn_output"), 0.5, D, c.NumQHeads*K)
		norm(p("attn_output_norm"))
		norm(p("ffn_norm"))
		mat(p("ffn_gate_inp"), 1, E, D)
		mat(p("ffn_gate_exps"), 1, E, F, D)
		mat(p("ffn_up_exps"), 1, E, F, D)
		mat(p("ffn_down_exps"), 0.5, E, D, F)
		norm(p("layer_output_norm"))
	}
	norm("output_norm.weight")
	return src
}

// K256Names lists grok-k256's tensors in llama.cpp's file order.
func K256Names() []string {
	c := K256Config()
	names := []string{"token_embd.weight"}
	for l := 0; l < c.NumLayers; l++ {
		for _, s := range []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm",
			"ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "layer_output_norm"} {
			names = append(names, fmt.Sprintf("blk.%d.%s.weight", l, s))
		}
	}
	return append(names, "output_norm.weight")
}

// WriteK256 writes grok-k256 as an F32 GGUF to path: grok-tiny's metadata
// (read from the GGUF at tinyPath; its tokenizer included) with the
// dimensions of K256Config, and K256Weights.
func WriteK256(path, tinyPath string) error {
	tiny, err := gguf.Open(tinyPath)
	if err != nil {
		return err
	}
	defer tiny.Close()
	c := K256Config()
	u := func(v int) uint32 { return uint32(v) }
	override := map[string]any{
		"general.name":                    "grok-k256",
		"grok.context_length":             u(c.SequenceLen),
		"grok.embedding_length":           u(c.EmbSize),
		"grok.block_count":                u(c.NumLayers),
		"grok.feed_forward_length":        u(c.FFNSize),
		"grok.expert_feed_forward_length": u(c.FFNSize),
		"grok.attention.head_count":       u(c.NumQHeads),
		"grok.attention.head_count_kv":    u(c.NumKVHeads),
		"grok.attention.key_length":       u(c.KeySize),
		"grok.attention.value_length":     u(c.KeySize),
		"grok.rope.dimension_count":       u(c.KeySize),
		"grok.expert_count":               u(c.NumExperts),
		"grok.expert_used_count":          u(c.NumSelectedExperts),
		"grok.embedding_scale":            c.EmbeddingMultiplierScale,
		"grok.logit_scale":                c.OutputMultiplierScale,
		"grok.attention.output_scale":     c.AttnOutputMultiplier,
		"grok.vocab_size":                 u(c.VocabSize),
	}
	w := gguf.NewWriter()
	for _, kv := range tiny.Metadata {
		var v any = kv.Value
		if o, ok := override[kv.Key]; ok {
			v = o
		}
		if err := w.AddKV(kv.Key, v); err != nil {
			return err
		}
	}
	if n := len(tiny.Metadata); n == 0 {
		return fmt.Errorf("testmodel: %s has no metadata", tinyPath)
	}
	if toks, _ := tiny.Strings("tokenizer.ggml.tokens"); len(toks) != c.VocabSize {
		return fmt.Errorf("testmodel: %s has %d tokens, want %d", tinyPath, len(toks), c.VocabSize)
	}
	src := K256Weights()
	for _, name := range K256Names() {
		t := src[name]
		if err := w.AddTensor(name, t.Type, t.Shape, t.Data); err != nil {
			return err
		}
	}
	return w.WriteFile(path)
}

// K256Recipe is one vendored quantisation of grok-k256: the file and the
// llama-quantize arguments (after the input and output paths) that made it.
type K256Recipe struct {
	File string
	Args []string
	// Imatrix says the run needs an importance matrix (--imatrix is added):
	// llama-quantize refuses IQ1_*, IQ2_* and IQ3_XXS without one.
	Imatrix bool
}

// K256Recipes are the files of testdata/grok-k256: four of llama.cpp's
// standard mixes, and two mixes chosen tensor by tensor so that every
// block type the engine decodes appears at least once in few bytes.
var K256Recipes = []K256Recipe{
	{File: "grok-k256-Q2_K.gguf", Args: []string{"Q2_K"}},
	{File: "grok-k256-Q3_K_M.gguf", Args: []string{"Q3_K_M"}},
	{File: "grok-k256-Q4_K_M.gguf", Args: []string{"Q4_K_M"}},
	{File: "grok-k256-Q4_0.gguf", Args: []string{"Q4_0"}},
	{File: "grok-k256-iq-mix.gguf", Imatrix: true, Args: []string{
		"--token-embedding-type", "iq4_nl",
		"--tensor-type", "attn_q=iq4_xs", "--tensor-type", "attn_k=iq3_s", "--tensor-type", "attn_v=iq3_xxs",
		"--tensor-type", "attn_output=iq2_s", "--tensor-type", "ffn_gate_exps=iq2_xs",
		"--tensor-type", "ffn_up_exps=iq2_xxs", "--tensor-type", "ffn_down_exps=iq1_m", "IQ2_XXS"}},
	{File: "grok-k256-legacy-mix.gguf", Imatrix: true, Args: []string{
		"--token-embedding-type", "q4_1",
		"--tensor-type", "attn_q=q5_0", "--tensor-type", "attn_k=q5_1", "--tensor-type", "attn_v=q8_0",
		"--tensor-type", "attn_output=q5_1", "--tensor-type", "ffn_gate_exps=iq1_s",
		"--tensor-type", "ffn_up_exps=q4_1", "--tensor-type", "ffn_down_exps=q5_0", "Q4_1"}},
}

// WriteK256Imatrix writes a uniform importance matrix (every column weight
// 1) for grok-k256's projections in llama-imatrix's GGUF layout:
// NAME.in_sum2 (input columns × experts) and NAME.counts (one per expert).
// It only makes llama-quantize accept the very-low-bit types; with random
// weights no column is more important than another anyway.
func WriteK256Imatrix(path string) error {
	w := gguf.NewWriter()
	for _, kv := range []struct {
		k string
		v any
	}{
		{"general.type", "imatrix"},
		{"imatrix.datasets", []string{"uniform"}},
		{"imatrix.chunk_count", uint32(1)},
		{"imatrix.chunk_size", uint32(1)},
	} {
		if err := w.AddKV(kv.k, kv.v); err != nil {
			return err
		}
	}
	src := K256Weights()
	for _, name := range K256Names() {
		t := src[name]
		if len(t.Shape) < 2 || name == "token_embd.weight" || strings.HasSuffix(name, "ffn_gate_inp.weight") {
			continue
		}
		in, experts := t.Shape[len(t.Shape)-1], 1
		if len(t.Shape) == 3 {
			experts = t.Shape[0]
		}
		sums := make([]float32, in*experts)
		counts := make([]float32, experts)
		for i := range sums {
			sums[i] = 1
		}
		for i := range counts {
			counts[i] = 1
		}
		s, c := F32(name+".in_sum2", []int{experts, in}, sums), F32(name+".counts", []int{experts, 1}, counts)
		for _, x := range []*tensor.Tensor{s, c} {
			if err := w.AddTensor(x.Name, x.Type, x.Shape, x.Data); err != nil {
				return err
			}
		}
	}
	return w.WriteFile(path)
}

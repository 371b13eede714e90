package model_test

import (
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/model"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func mustModel(t *testing.T, c model.Config, src model.TensorSource) *model.LanguageModel {
	t.Helper()
	lm, err := model.New(c, src)
	if err != nil {
		t.Fatal(err)
	}
	return lm
}

func randTokens(rng *rand.Rand, n, vocab int, pads bool) []int {
	ts := make([]int, n)
	for i := range ts {
		ts[i] = 1 + rng.IntN(vocab-1)
		if pads && i > 0 && rng.IntN(5) == 0 {
			ts[i] = 0
		}
	}
	return ts
}

// Incremental decoding through the KV memory must reproduce one full pass
// (semantics §4), pads included, for several prefill/chunk splits: bit for
// bit, since every sum runs on the fixed grid whatever the call's size.
func TestIncrementalEqualsFullPass(t *testing.T) {
	for _, cfg := range []struct {
		name string
		c    model.Config
	}{{"grok-1", testmodel.SmallConfig()}, {"grok-2", testmodel.SmallGrok2Config()}} {
		t.Run(cfg.name, func(t *testing.T) { testIncrementalEqualsFullPass(t, cfg.c) })
	}
}

func testIncrementalEqualsFullPass(t *testing.T, c model.Config) {
	lm := mustModel(t, c, testmodel.Random(c, 1))
	rng := rand.New(rand.NewPCG(2, 2))
	for _, tc := range []struct {
		name   string
		pads   bool
		chunks []int
	}{
		{"one-at-a-time", false, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"prefill-then-steps", false, []int{7, 1, 1, 1, 1, 1}},
		{"chunks", false, []int{3, 4, 2, 3}},
		{"pads-one-at-a-time", true, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"pads-chunks", true, []int{5, 2, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			total := 0
			for _, n := range tc.chunks {
				total += n
			}
			toks := randTokens(rng, total, c.VocabSize, tc.pads)
			want, err := testmodel.FullLogits(lm, toks)
			if err != nil {
				t.Fatal(err)
			}
			mem, _ := model.NewKVMemory(&c, 1, 0)
			var got []float32
			pos := 0
			for _, n := range tc.chunks {
				out, err := lm.Forward(mem, []model.Input{{Tokens: toks[pos : pos+n], AllLogits: true}})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, out...)
				pos += n
			}
			if d := testmodel.MaxAbsDiff(got, want); d != 0 {
				t.Errorf("incremental vs full: max |Δ| = %g, want 0", d)
			}
		})
	}
}

// A ragged batch (different lengths and different memory steps) gives each
// sequence exactly the logits it gets alone.
func TestRaggedBatchEqualsAlone(t *testing.T) {
	// long: experts' linear_1 rows span several of the kernels' sum spans
	// (kernels.dotSpan) and the batch routes enough tokens to one expert
	// that the prefill kernels cut the input axis into chunks, which the
	// tokens of one sequence alone do not.
	long := testmodel.SmallConfig()
	long.NumLayers, long.FFNSize, long.SequenceLen = 1, 2600, 128
	long2 := long
	long2.DenseFFNSize, long2.RouterLogitCap, long2.FinalLogitCap, long2.AttnTemperatureLen, long2.UntiedOutput = 2700, 2, 4, 4, true
	for _, tc := range []struct {
		name         string
		c            model.Config
		prefix, next []int // tokens per sequence; prefix 0: none
	}{
		{"small", testmodel.SmallConfig(), []int{5, 0, 2}, []int{3, 9, 1}},
		{"long", long, []int{20, 0, 7}, []int{40, 50, 1}},
		{"grok-2", testmodel.SmallGrok2Config(), []int{5, 0, 2}, []int{3, 9, 1}},
		{"grok-2-long", long2, []int{20, 0, 7}, []int{40, 50, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			lm := mustModel(t, c, testmodel.Random(c, 3))
			rng := rand.New(rand.NewPCG(4, 4))
			var prefix, next [][]int
			for i := range tc.prefix {
				var p []int
				if tc.prefix[i] > 0 {
					p = randTokens(rng, tc.prefix[i], c.VocabSize, i == 2)
				}
				prefix = append(prefix, p)
				next = append(next, randTokens(rng, tc.next[i], c.VocabSize, i == 1))
			}

			mem, _ := model.NewKVMemory(&c, 4, 0)
			var pre []model.Input
			for i, p := range prefix {
				if p != nil {
					pre = append(pre, model.Input{Slot: i + 1, Tokens: p})
				}
			}
			if _, err := lm.Forward(mem, pre); err != nil {
				t.Fatal(err)
			}
			var in []model.Input
			for i, n := range next {
				in = append(in, model.Input{Slot: i + 1, Tokens: n, AllLogits: true})
			}
			batch, err := lm.Forward(mem, in)
			if err != nil {
				t.Fatal(err)
			}
			batch = slices.Clone(batch)
			off := 0
			for i := range next {
				want, err := testmodel.FullLogits(lm, append(slices.Clone(prefix[i]), next[i]...))
				if err != nil {
					t.Fatal(err)
				}
				want = want[len(prefix[i])*c.VocabSize:]
				got := batch[off : off+len(want)]
				off += len(want)
				if d := testmodel.MaxAbsDiff(got, want); d != 0 {
					t.Errorf("sequence %d: batch vs alone max |Δ| = %g, want bit-identical", i, d)
				}
			}
		})
	}
}

// Only the last row is returned unless AllLogits is set.
func TestLastLogitsOnly(t *testing.T) {
	c := testmodel.SmallConfig()
	lm := mustModel(t, c, testmodel.Random(c, 5))
	toks := []int{5, 6, 7, 8}
	all, _ := testmodel.FullLogits(lm, toks)
	mem, _ := model.NewKVMemory(&c, 1, 0)
	last, err := lm.Forward(mem, []model.Input{{Tokens: toks}})
	if err != nil {
		t.Fatal(err)
	}
	if d := testmodel.MaxAbsDiff(last, all[3*c.VocabSize:]); d != 0 {
		t.Errorf("last row differs by %g", d)
	}
}

// GQA without repetition equals plain multi-head attention whose K/V
// projections repeat each kv head for its G query heads.
func TestGQAEqualsRepeatedMHA(t *testing.T) {
	c := testmodel.SmallConfig()
	src := testmodel.Random(c, 7)
	mha := c
	mha.NumKVHeads = c.NumQHeads
	G, K, D := c.GroupSize(), c.KeySize, c.EmbSize
	src2 := testmodel.Source{}
	for k, v := range src {
		src2[k] = v
	}
	for l := 0; l < c.NumLayers; l++ {
		for _, nm := range []string{"attn_k", "attn_v"} {
			name := "blk." + string(rune('0'+l)) + "." + nm + ".weight"
			w, _ := src[name].Float32s()
			rep := make([]float32, 0, c.NumQHeads*K*D)
			for h := 0; h < c.NumQHeads; h++ {
				kv := h / G
				rep = append(rep, w[kv*K*D:(kv+1)*K*D]...)
			}
			src2[name] = testmodel.F32(name, []int{c.NumQHeads * K, D}, rep)
		}
	}
	a := mustModel(t, c, src)
	b := mustModel(t, mha, src2)
	toks := []int{3, 9, 27, 14, 0, 5, 61}
	la, _ := testmodel.FullLogits(a, toks)
	lb, _ := testmodel.FullLogits(b, toks)
	if d := testmodel.MaxAbsDiff(la, lb); d > 1e-5 {
		t.Errorf("GQA vs repeated MHA: max |Δ| = %g", d)
	}
}

// A dense model (num_experts ≤ 1) equals a one-expert MoE whose gate is 1.
func TestDenseBlockEqualsSingleExpert(t *testing.T) {
	c := testmodel.SmallConfig()
	c.NumExperts, c.NumSelectedExperts = 1, 1
	src := testmodel.Random(c, 9)
	lm := mustModel(t, c, src)
	if lm.Transformer.Layers[0].Dense == nil {
		t.Fatal("num_experts = 1 did not build a DenseBlock")
	}
	got, err := testmodel.FullLogits(lm, []int{4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	// Reference: hand-run the dense FFN as an MoE of 2 identical experts,
	// both selected, router all zero (gates 0.5 + 0.5 = 1).
	c2 := c
	c2.NumExperts, c2.NumSelectedExperts = 2, 2
	src2 := testmodel.Source{}
	for k, v := range src {
		src2[k] = v
	}
	for l := 0; l < c.NumLayers; l++ {
		pre := "blk." + string(rune('0'+l)) + "."
		for _, kind := range []string{"gate", "up", "down"} {
			w := src[pre+"ffn_"+kind+".weight"]
			f, _ := w.Float32s()
			shape := append([]int{2}, w.Shape...)
			src2[pre+"ffn_"+kind+"_exps.weight"] = testmodel.F32("x", shape, append(slices.Clone(f), f...))
			delete(src2, pre+"ffn_"+kind+".weight")
		}
		src2[pre+"ffn_gate_inp.weight"] = testmodel.F32("r", []int{2, c.EmbSize}, make([]float32, 2*c.EmbSize))
	}
	want, err := testmodel.FullLogits(mustModel(t, c2, src2), []int{4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	if d := testmodel.MaxAbsDiff(got, want); d > 1e-5 {
		t.Errorf("dense vs 2-expert MoE: max |Δ| = %g", d)
	}
}

func TestForwardErrors(t *testing.T) {
	c := testmodel.SmallConfig()
	lm := mustModel(t, c, testmodel.Random(c, 11))
	for _, tc := range []struct {
		name   string
		inputs []model.Input
		want   string
	}{
		{"token too large", []model.Input{{Tokens: []int{1, c.VocabSize}}}, "outside the vocabulary"},
		{"negative token", []model.Input{{Tokens: []int{-1}}}, "outside the vocabulary"},
		{"too long", []model.Input{{Tokens: make([]int, c.SequenceLen+1)}}, "exceed the context"},
		{"bad slot", []model.Input{{Slot: 3, Tokens: []int{1}}}, "slot 3 out of range"},
		{"same slot twice", []model.Input{{Tokens: []int{1}}, {Tokens: []int{2}}}, "both use slot"},
		{"empty", []model.Input{{Tokens: nil}}, "no tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, _ := model.NewKVMemory(&c, 2, 0)
			_, err := lm.Forward(mem, tc.inputs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if mem.Step(0) != 0 || mem.Step(1) != 0 {
				t.Errorf("a failed call advanced the memory")
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	c := testmodel.SmallConfig()
	for _, tc := range []struct {
		name   string
		mutate func(testmodel.Source)
		want   string
	}{
		{"missing", func(s testmodel.Source) { delete(s, "blk.1.attn_q.weight") }, `missing tensor "blk.1.attn_q.weight"`},
		{"wrong shape", func(s testmodel.Source) {
			s["blk.0.attn_k.weight"].Shape = []int{8, 64}
			s["blk.0.attn_k.weight"].Data = make([]byte, 8*64*4)
		}, "has shape"},
		{"short data", func(s testmodel.Source) { s["output_norm.weight"].Data = s["output_norm.weight"].Data[:8] }, "needs"},
		{"missing experts", func(s testmodel.Source) { delete(s, "blk.0.ffn_up_exps.weight") }, "ffn_up"},
		{"dense MLP beside the experts (Grok-2)", func(s testmodel.Source) {
			s["blk.1.ffn_up.weight"] = testmodel.F32("blk.1.ffn_up.weight", []int{c.FFNSize, c.EmbSize}, make([]float32, c.FFNSize*c.EmbSize))
		}, "residual MoE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := testmodel.Random(c, 1)
			tc.mutate(src)
			_, err := model.New(c, src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// A Grok-2 config needs its dense MLP, of its width, and its own output.
func TestNewErrorsGrok2(t *testing.T) {
	c := testmodel.SmallGrok2Config()
	for _, tc := range []struct {
		name   string
		mutate func(testmodel.Source)
		want   string
	}{
		{"no output.weight", func(s testmodel.Source) { delete(s, "output.weight") }, `missing tensor "output.weight"`},
		{"no dense MLP", func(s testmodel.Source) { delete(s, "blk.1.ffn_down.weight") }, `missing tensor "blk.1.ffn_down.weight"`},
		{"dense MLP of the experts' width", func(s testmodel.Source) {
			s["blk.0.ffn_gate.weight"] = testmodel.F32("blk.0.ffn_gate.weight", []int{c.FFNSize, c.EmbSize}, make([]float32, c.FFNSize*c.EmbSize))
		}, "has shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := testmodel.Random(c, 1)
			tc.mutate(src)
			_, err := model.New(c, src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// Forward runs the last layer's feed-forward only for the rows whose
// logits are wanted; their logits keep the bits of the pass that computes
// every row, in a ragged batch of prompts, decode steps and a sequence
// that wants all its logits, in both precisions.
func TestLastLayerOnlyWantedRows(t *testing.T) {
	for _, cfg := range []struct {
		name string
		c    model.Config
	}{{"grok-1", testmodel.SmallConfig()}, {"grok-2", testmodel.SmallGrok2Config()}} {
		lm := mustModel(t, cfg.c, testmodel.Random(cfg.c, 3))
		rng := rand.New(rand.NewPCG(5, 6))
		seqs := [][]int{randTokens(rng, 9, cfg.c.VocabSize, false), randTokens(rng, 1, cfg.c.VocabSize, false),
			randTokens(rng, 6, cfg.c.VocabSize, false), randTokens(rng, 4, cfg.c.VocabSize, false)}
		for _, p := range []kernels.Precision{kernels.Exact, kernels.Fast} {
			t.Run(cfg.name+"/"+p.String(), func(t *testing.T) {
				lm.Precision = p
				defer func() { lm.Precision = kernels.Exact }()
				run := func(all func(i int) bool) [][]float32 {
					mem, err := model.NewKVMemory(&cfg.c, len(seqs), 0)
					if err != nil {
						t.Fatal(err)
					}
					var in []model.Input
					for i, s := range seqs {
						in = append(in, model.Input{Slot: i, Tokens: s, AllLogits: all(i)})
					}
					out, err := lm.Forward(mem, in)
					if err != nil {
						t.Fatal(err)
					}
					V, off := cfg.c.VocabSize, 0
					var rows [][]float32
					for i, s := range seqs {
						n := 1
						if all(i) {
							n = len(s)
						}
						// The sequence's last row, copied: the next call reuses out.
						rows = append(rows, append([]float32(nil), out[(off+n-1)*V:(off+n)*V]...))
						off += n
					}
					return rows
				}
				full := run(func(int) bool { return true })
				for name, all := range map[string]func(int) bool{
					"last rows only":     func(int) bool { return false },
					"one sequence's all": func(i int) bool { return i == 2 },
				} {
					got := run(all)
					for i := range seqs {
						if d := testmodel.MaxAbsDiff(got[i], full[i]); d != 0 {
							t.Errorf("%s: sequence %d's last logits differ from the full pass's by %g", name, i, d)
						}
					}
				}
			})
		}
	}
}

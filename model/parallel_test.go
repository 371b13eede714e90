package model_test

import (
	"fmt"
	"github.com/grok-go/grok/internal/allocs"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// midConfig is larger than SmallConfig in every axis the threads split:
// several aligned ranges per matrix, more than one attention token block.
func midConfig() model.Config {
	c := testmodel.SmallConfig()
	c.VocabSize, c.EmbSize, c.KeySize, c.NumQHeads, c.NumKVHeads = 200, 64, 16, 4, 2
	c.FFNSize, c.NumExperts, c.NumSelectedExperts = 96, 4, 2
	return c
}

// withGrok2 adds SmallGrok2Config's Grok-2 features to c, with a dense MLP
// of width dense.
func withGrok2(c model.Config, dense int) model.Config {
	g := testmodel.SmallGrok2Config()
	c.DenseFFNSize, c.RouterLogitCap, c.FinalLogitCap = dense, g.RouterLogitCap, g.FinalLogitCap
	c.AttnTemperatureLen, c.UntiedOutput, c.RopeBase = g.AttnTemperatureLen, true, g.RopeBase
	return c
}

// wideConfig has int8 [in, out] matrices of several row blocks
// (kernels.BlockRows): q, k, v, linear and linear_v of 544 rows (blocks of
// 256, 256, 32), linear_1 of 4 shards of 300 rows (two blocks each).
func wideConfig() model.Config {
	c := midConfig()
	c.EmbSize, c.FFNSize = 544, 1200
	return c
}

// script runs a fixed mix of calls — a ragged prefill with pads, then
// batched single-token steps, then a chunk — and returns every logit.
func script(t *testing.T, lm *model.LanguageModel, seed uint64) []float32 {
	t.Helper()
	c := lm.Config
	rng := rand.New(rand.NewPCG(seed, seed))
	mem, err := model.NewKVMemory(&c, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	var all []float32
	run := func(in []model.Input) {
		out, err := lm.Forward(mem, in)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, out...)
	}
	run([]model.Input{
		{Slot: 0, Tokens: randTokens(rng, 37, c.VocabSize, true), AllLogits: true},
		{Slot: 2, Tokens: randTokens(rng, 5, c.VocabSize, false), AllLogits: true},
	})
	for step := 0; step < 4; step++ {
		run([]model.Input{
			{Slot: 0, Tokens: randTokens(rng, 1, c.VocabSize, false)},
			{Slot: 1, Tokens: randTokens(rng, 1, c.VocabSize, false)},
			{Slot: 2, Tokens: randTokens(rng, 1, c.VocabSize, false)},
		})
	}
	run([]model.Input{{Slot: 1, Tokens: randTokens(rng, 18, c.VocabSize, true), AllLogits: true}})
	return all
}

// The logits are the same bits whatever the number of threads: each output
// is computed by one thread, in the same order, however the work is cut.
func TestLogitsIndependentOfThreads(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    model.Config
		dt   tensor.DType
	}{
		{"small-f32", testmodel.SmallConfig(), tensor.F32},
		{"mid-f32", midConfig(), tensor.F32},
		{"mid-q8_0", midConfig(), tensor.Q8_0},
		{"mid-f16", midConfig(), tensor.F16},
		// xAI int8 in Haiku's [in, out] layout: one and five threads compute
		// its row-parallel layers (4 shards, a block each) by output ranges,
		// two and three by block.
		{"mid-xai-int8", midConfig(), tensor.I8},
		// Several blocks a matrix: two and three threads decode every
		// matrix by blocks, five only linear_1 (8 blocks).
		{"wide-xai-int8", wideConfig(), tensor.I8},
		// Grok-2: the dense MLP runs as one more part of the experts' loops.
		{"mid-grok2-f32", withGrok2(midConfig(), 160), tensor.F32},
		{"mid-grok2-q8_0", withGrok2(midConfig(), 160), tensor.Q8_0},
		{"wide-grok2-xai-int8", withGrok2(wideConfig(), 1500), tensor.I8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := testmodel.Random(tc.c, 31)
			switch tc.dt {
			case tensor.F32:
			case tensor.I8:
				src = xaiInt8(src)
			default:
				src = convert(t, src, reencode(tc.dt))
			}
			lm := mustModel(t, tc.c, src)
			var want []float32
			for _, threads := range []int{1, 2, 3, 5} { // 5: more threads than int8 shards
				p := parallel.New(threads)
				lm.Pool = p
				for rep := 0; rep < 2; rep++ {
					got := script(t, lm, 5)
					if want == nil {
						want = slices.Clone(got)
						continue
					}
					if len(got) != len(want) {
						t.Fatalf("%d threads: %d logits, want %d", threads, len(got), len(want))
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%d threads, rep %d: logit %d = %v, with 1 thread %v", threads, rep, i, got[i], want[i])
						}
					}
				}
				p.Close()
			}
		})
	}
}

// decodeSetup prefills a prompt and returns a function that runs one
// single-token decode step, rewinding the memory when it is full.
func decodeSetup(tb testing.TB, lm *model.LanguageModel, prompt, ctx int) func() {
	c := lm.Config
	mem, err := model.NewKVMemory(&c, 1, ctx)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	if _, err := lm.Forward(mem, []model.Input{{Tokens: randTokens(rng, prompt, c.VocabSize, false)}}); err != nil {
		tb.Fatal(err)
	}
	in := []model.Input{{Tokens: []int{1}}}
	return func() {
		if mem.Step(0) == ctx {
			mem.Truncate(0, prompt)
		}
		in[0].Tokens[0] = 1 + mem.Step(0)%(c.VocabSize-1)
		if _, err := lm.Forward(mem, in); err != nil {
			tb.Fatal(err)
		}
	}
}

// batchSetup prefills B slots with prompts of different lengths and
// returns a function that runs one continuous-batching step: every slot
// decodes a token, except that every fifth step one slot (in turn) takes
// a chunk of 8 prompt tokens, as the runner's chunked prefill does; a slot
// that reaches ctx is rewound to its prompt.
func batchSetup(tb testing.TB, lm *model.LanguageModel, B, ctx int) func() {
	c := lm.Config
	mem, err := model.NewKVMemory(&c, B, ctx)
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([]model.Input, B)
	prompt := make([]int, B)
	for b := range in {
		prompt[b] = 4 + 3*b
		in[b] = model.Input{Slot: b, Tokens: randTokens(rng, prompt[b], c.VocabSize, false)}
	}
	if _, err := lm.Forward(mem, in); err != nil {
		tb.Fatal(err)
	}
	one := make([][]int, B)
	for b := range one {
		one[b] = []int{1}
	}
	chunk := randTokens(rng, 8, c.VocabSize, false)
	step := 0
	return func() {
		for b := range in {
			in[b].Tokens = one[b]
			if step%5 == 0 && b == step/5%B {
				in[b].Tokens = chunk
			}
			if mem.Step(b)+len(in[b].Tokens) > ctx {
				mem.Truncate(b, prompt[b])
			}
			one[b][0] = 1 + (mem.Step(b)*7+b)%(c.VocabSize-1)
		}
		step++
		if _, err := lm.Forward(mem, in); err != nil {
			tb.Fatal(err)
		}
	}
}

// A decode step allocates nothing once the workspace has grown, nor does
// a continuous-batching step of several slots (batchSetup): not the model,
// not the kernels, not the thread pool, not NewTP's shards, their
// collectives or the shared page book. The allocations are counted over
// whole loops of steps, exactly (testing.AllocsPerRun's average rounds a
// few per loop down to 0), with a GC in the middle: a goroutine that parks
// on a channel, mutex or sync.Cond takes a runtime sudog, which the
// runtime allocates anew once a GC has emptied its central cache, and a
// sync.Pool loses its objects at GCs.
//
// The one allocation a loop may make is the kernels' scratch free list
// growing by a buffer: it holds as many as products have ever run at once,
// and when two threads first happen to run theirs together depends on
// timing. That ends once the list holds one per product the threads can
// run at once, so a later loop must then count 0.
func TestDecodeStepDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	const steps, loops = 280, 8
	// No warm-up: a context that grows must not allocate either, so the
	// first loop grows it from 9 keys to 290 (past the kernels' 256-row
	// pieces); later loops rewind it to the prompt.
	check := func(name string, step func()) {
		t.Helper()
		step() // the first step after the prompt sizes nothing new
		for l := 0; l < loops; l++ {
			sites := allocs.Count(func() {
				for i := 0; i < steps; i++ {
					if i == steps/2 {
						runtime.GC()
					}
					step()
				}
			})
			if sites.Total() == 0 {
				return
			}
			for _, s := range sites {
				if !s.Has("kernels.getScratch") && !s.Has("kernels.getBytes") {
					t.Errorf("%s: %d allocations in loop %d of %d decode steps:\n%s", name, sites.Total(), l, steps, sites)
					return
				}
			}
			t.Logf("%s: loop %d grew the kernels' scratch list (%d allocations)", name, l, sites.Total())
		}
		t.Errorf("%s: the kernels' scratch list was still growing after %d loops of %d decode steps", name, loops, steps)
	}
	f32 := testmodel.Random(midConfig(), 3)
	for _, src := range []struct {
		name string
		c    model.Config
		src  testmodel.Source
	}{
		{"f32", midConfig(), f32},
		{"xai-int8", midConfig(), xaiInt8(f32)},
		{"xai-int8-wide", wideConfig(), xaiInt8(testmodel.Random(wideConfig(), 3))},
		{"grok2", withGrok2(midConfig(), 160), testmodel.Random(withGrok2(midConfig(), 160), 3)},
		{"grok2-xai-int8-wide", withGrok2(wideConfig(), 1500), xaiInt8(testmodel.Random(withGrok2(wideConfig(), 1500), 3))},
	} {
		for _, threads := range []int{1, 2, 3} {
			lm := mustModel(t, src.c, src.src)
			p := parallel.New(threads)
			lm.Pool = p
			check(fmt.Sprintf("%s, %d threads", src.name, threads), decodeSetup(t, lm, 8, 300))
			check(fmt.Sprintf("%s, %d threads, 6 slots batched", src.name, threads), batchSetup(t, lm, 6, 300))
			p.Close()
		}
	}
	// Split in two in process.
	for _, src := range []struct {
		name string
		c    model.Config
		src  testmodel.Source
	}{
		{"tp2-f32", midConfig(), f32},
		{"tp2-grok2", withGrok2(midConfig(), 160), testmodel.Random(withGrok2(midConfig(), 160), 3)},
	} {
		for _, threads := range []int{2, 4} {
			for _, placed := range []bool{false, true} {
				p := parallel.New(threads)
				var o model.TPOptions
				if placed { // as --numa places them, less the pinning
					o.Place = func(int) {}
				}
				lm, err := model.NewTPWith(src.c, src.src, 2, p, o)
				if err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("%s, %d threads, placed %v", src.name, threads, placed), decodeSetup(t, lm, 8, 300))
				check(fmt.Sprintf("%s, %d threads, placed %v, 6 slots batched", src.name, threads, placed), batchSetup(t, lm, 6, 300))
				lm.Close()
				p.Close()
			}
		}
	}
}

// benchConfig is a scaled-down "medium" model of reference-figures.md
// (same shape ratios, an eighth of its weights: 85 MB of F32).
func benchConfig() model.Config {
	c := testmodel.SmallConfig()
	c.VocabSize, c.EmbSize, c.KeySize, c.NumQHeads, c.NumKVHeads, c.NumLayers = 8192, 768, 64, 12, 2, 2
	c.FFNSize, c.NumExperts, c.NumSelectedExperts = 2048, 8, 2
	c.SequenceLen = 512
	return c
}

// benchModel builds benchConfig's model on a pool of GOMAXPROCS threads
// (so that -cpu 1,2 compares thread counts).
func benchModel(b *testing.B) *model.LanguageModel {
	c := benchConfig()
	lm, err := model.New(c, testmodel.Random(c, 1))
	if err != nil {
		b.Fatal(err)
	}
	p := parallel.New(runtime.GOMAXPROCS(0))
	b.Cleanup(p.Close)
	lm.Pool = p
	return lm
}

// BenchmarkDecodeStep times one single-token Forward after a 64-token
// prompt; run it with -benchmem to see 0 allocs/op.
func BenchmarkDecodeStep(b *testing.B) {
	lm := benchModel(b)
	step := decodeSetup(b, lm, 64, 256)
	step()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		step()
	}
}

// BenchmarkPrefill times one Forward over a 64-token prompt.
func BenchmarkPrefill(b *testing.B) {
	lm := benchModel(b)
	c := lm.Config
	mem, err := model.NewKVMemory(&c, 1, 64)
	if err != nil {
		b.Fatal(err)
	}
	in := []model.Input{{Tokens: randTokens(rand.New(rand.NewPCG(1, 1)), 64, c.VocabSize, false)}}
	if _, err := lm.Forward(mem, in); err != nil { // sizes the workspace
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		mem.Reset(0)
		if _, err := lm.Forward(mem, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "tok/s")
}

// The experts of a call run in groups when their rows exceed the
// workspace's budget (long prompts). Grouping changes only which loop an
// expert runs in, never the order in which a token's expert terms are
// added, so the logits are the same bits for any budget.
func TestExpertGroupsSameBits(t *testing.T) {
	// Grok-2's dense MLP joins the last group, or runs in one of its own.
	for _, c := range []model.Config{midConfig(), withGrok2(midConfig(), 160)} {
		src := testmodel.Random(c, 7)
		var want []float32
		for _, budget := range []int{512, 40, 9, 1} {
			restore := model.SetMaxExpertRows(budget)
			lm := mustModel(t, c, src)
			got := script(t, lm, 9)
			restore()
			if want == nil {
				want = got
				continue
			}
			if d := testmodel.MaxAbsDiff(got, want); d != 0 {
				t.Errorf("dense %d, expert row budget %d: max |Δ| = %g against 512, want bit-identical", c.DenseFFNSize, budget, d)
			}
		}
	}
}

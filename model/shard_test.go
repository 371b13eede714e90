package model_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// tpTol is how far a sharded model's logits may be from the unsharded
// model's: the row-parallel products sum their inputs in another order
// (partial sums per shard, then the reduce), which moves these random
// models' logits (of size 5 to 10) by up to 2.5e-5; a lost head, expert
// share or vocabulary block moves them by 1e-2 or more.
const tpTol = 1e-4

// eightKV has 8 kv heads, so that it splits 2, 4 and 8 ways, with every
// row-parallel width (Hq·K = 256, F = 256, the dense MLP's 512) a whole
// number of Q8_0 blocks and of 8 int8 scale shards at 8 shards.
func eightKV() model.Config {
	c := testmodel.SmallConfig()
	c.VocabSize, c.EmbSize, c.KeySize, c.NumQHeads, c.NumKVHeads = 203, 64, 16, 16, 8
	c.FFNSize, c.NumExperts, c.NumSelectedExperts = 256, 4, 2
	return c
}

// kquantConfig has every matrix's input axis a whole number of 256-element
// K-quant super-blocks, also after a split in two (Hq·K = F = 512).
func kquantConfig() model.Config {
	c := testmodel.SmallConfig()
	c.VocabSize, c.EmbSize, c.KeySize, c.NumQHeads, c.NumKVHeads = 100, 256, 64, 8, 2
	c.FFNSize, c.NumLayers = 512, 1
	return c
}

func quantizeTo(dt tensor.DType) func(string, *tensor.Tensor) *tensor.Tensor {
	return func(name string, w *tensor.Tensor) *tensor.Tensor {
		f, _ := w.Float32s()
		rb, err := dt.RowBytes(len(f))
		if err != nil {
			panic(err)
		}
		data := make([]byte, rb)
		if err := tensor.QuantizeRow(dt, f, data); err != nil {
			panic(err)
		}
		return &tensor.Tensor{Name: name, Type: dt, Shape: w.Shape, Data: data}
	}
}

// int8Source converts every matrix but the embedding and router into
// xAI's int8 [in, out] layout with shards scale shards.
func int8Source(t *testing.T, src testmodel.Source, shards int) testmodel.Source {
	rng := rand.New(rand.NewPCG(8, 8))
	return convert(t, src, func(name string, w *tensor.Tensor) *tensor.Tensor {
		if name == "token_embd.weight" || name == "output.weight" {
			return w
		}
		q, _ := quantize8bit(rng, name, w, shards)
		return q
	})
}

// greedy prefills prompt into a fresh memory of lm and decodes n tokens
// greedily, one step at a time.
func greedy(t *testing.T, lm *model.LanguageModel, prompt []int, n int) []int {
	t.Helper()
	mem, err := lm.NewKVMemory(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	in := prompt
	V := lm.Config.VocabSize
	for len(out) < n {
		l, err := lm.Forward(mem, []model.Input{{Slot: 0, Tokens: in}})
		if err != nil {
			t.Fatal(err)
		}
		best := 0
		for j, v := range l[:V] {
			if v > l[best] {
				best = j
			}
		}
		out = append(out, best)
		in = []int{best}
	}
	return out
}

// Logits of a model split 2, 4 and 8 ways on the model axis, in process,
// equal the unsharded model's within tpTol, for every weight type and
// layout (F32, Q8_0 with a Q8_0 embedding, a K-quant, xAI's int8 [in, out]
// with per-shard scales), Grok-2's dense MLP beside the experts and a
// dense model: over a ragged prefill with pads, batched decode steps and
// a chunk (script), and greedy continuations are the same tokens.
func TestTPEqualsUnsharded(t *testing.T) {
	grok2 := withGrok2(eightKV(), 512)
	dense := eightKV()
	dense.NumExperts, dense.NumSelectedExperts = 1, 1
	for _, tc := range []struct {
		name string
		c    model.Config
		src  func(t *testing.T, src testmodel.Source) testmodel.Source
		tps  []int
	}{
		{"f32", eightKV(), nil, []int{1, 2, 4, 8}},
		{"q8_0", eightKV(), func(t *testing.T, s testmodel.Source) testmodel.Source {
			return convert(t, s, reencode(tensor.Q8_0))
		}, []int{2, 4, 8}},
		{"q4_k", kquantConfig(), func(t *testing.T, s testmodel.Source) testmodel.Source {
			return convert(t, s, func(name string, w *tensor.Tensor) *tensor.Tensor {
				if name == "token_embd.weight" {
					return w
				}
				return quantizeTo(tensor.Q4_K)(name, w)
			})
		}, []int{2}},
		{"xai-int8", eightKV(), func(t *testing.T, s testmodel.Source) testmodel.Source { return int8Source(t, s, 8) }, []int{2, 4, 8}},
		{"grok-2", grok2, nil, []int{2, 4, 8}},
		{"grok-2-int8", grok2, func(t *testing.T, s testmodel.Source) testmodel.Source { return int8Source(t, s, 8) }, []int{2, 8}},
		{"dense", dense, nil, []int{2, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := testmodel.Random(tc.c, 31)
			if tc.src != nil {
				src = tc.src(t, src)
			}
			lm := mustModel(t, tc.c, src)
			want := script(t, lm, 9)
			prompt := randTokens(rand.New(rand.NewPCG(1, 2)), 9, tc.c.VocabSize, false)
			wantTokens := greedy(t, lm, prompt, 12)
			for _, n := range tc.tps {
				tp, err := model.NewTP(tc.c, src, n, parallel.New(2))
				if err != nil {
					t.Fatalf("tp %d: %v", n, err)
				}
				got := script(t, tp, 9)
				if d := testmodel.MaxAbsDiff(got, want); d > tpTol {
					t.Errorf("tp %d: max |Δ| = %g from the unsharded logits, want ≤ %g", n, d, tpTol)
				}
				if toks := greedy(t, tp, prompt, 12); !slices.Equal(toks, wantTokens) {
					t.Errorf("tp %d: greedy %v, unsharded %v", n, toks, wantTokens)
				}
				tp.Close()
			}
		})
	}
}

// A ragged batch through a sharded model gives each sequence what it gets
// alone through the same sharded model, bit for bit (each shard keeps the
// unsharded model's batch independence).
func TestTPRaggedBatchEqualsAlone(t *testing.T) {
	c := eightKV()
	tp, err := model.NewTP(c, testmodel.Random(c, 5), 4, parallel.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	rng := rand.New(rand.NewPCG(6, 6))
	seqs := [][]int{randTokens(rng, 13, c.VocabSize, true), randTokens(rng, 1, c.VocabSize, false), randTokens(rng, 6, c.VocabSize, true)}
	mem, err := tp.NewKVMemory(len(seqs), 0)
	if err != nil {
		t.Fatal(err)
	}
	var in []model.Input
	for i, s := range seqs {
		in = append(in, model.Input{Slot: i, Tokens: s, AllLogits: true})
	}
	batch, err := tp.Forward(mem, in)
	if err != nil {
		t.Fatal(err)
	}
	batch = slices.Clone(batch)
	off := 0
	for i, s := range seqs {
		alone, err := testmodel.FullLogits(tp, s)
		if err != nil {
			t.Fatal(err)
		}
		if d := testmodel.MaxAbsDiff(batch[off:off+len(alone)], alone); d != 0 {
			t.Errorf("sequence %d: batch vs alone max |Δ| = %g, want bit-identical", i, d)
		}
		off += len(alone)
	}
}

// The runner's memory operations on the model's memory (Reset, Truncate)
// reach every shard: a truncated slot decodes as if the rows after the
// cut had never been written.
func TestTPTruncateReachesShards(t *testing.T) {
	c := eightKV()
	src := testmodel.Random(c, 7)
	tp, err := model.NewTP(c, src, 2, parallel.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	rng := rand.New(rand.NewPCG(3, 3))
	a, b := randTokens(rng, 10, c.VocabSize, false), randTokens(rng, 4, c.VocabSize, false)
	for _, viaModel := range []bool{true, false} {
		var mem *model.KVMemory
		if viaModel {
			mem, err = tp.NewKVMemory(1, 0)
		} else {
			mem, err = model.NewKVMemory(&tp.Config, 1, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tp.Forward(mem, []model.Input{{Slot: 0, Tokens: a}}); err != nil {
			t.Fatal(err)
		}
		if err := mem.Truncate(0, 6); err != nil {
			t.Fatal(err)
		}
		got, err := tp.Forward(mem, []model.Input{{Slot: 0, Tokens: b, AllLogits: true}})
		if err != nil {
			t.Fatal(err)
		}
		got = slices.Clone(got)
		want, _ := testmodel.FullLogits(tp, append(slices.Clone(a[:6]), b...))
		if d := testmodel.MaxAbsDiff(got, want[6*c.VocabSize:]); d != 0 {
			t.Errorf("memory from the model %v: after Truncate max |Δ| = %g", viaModel, d)
		}
		mem.Reset(0)
		got, err = tp.Forward(mem, []model.Input{{Slot: 0, Tokens: b, AllLogits: true}})
		if err != nil {
			t.Fatal(err)
		}
		got = slices.Clone(got)
		want, _ = testmodel.FullLogits(tp, b)
		if d := testmodel.MaxAbsDiff(got, want); d != 0 {
			t.Errorf("memory from the model %v: after Reset max |Δ| = %g", viaModel, d)
		}
	}
}

// A shard's KV memory holds only its kv heads.
func TestShardMemoryIsItsShare(t *testing.T) {
	c := eightKV()
	cs, _ := comm.NewLocal(4)
	s, err := model.NewShard(c, testmodel.Random(c, 1), cs[1])
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.NumKVHeads != 2 || s.Config.NumQHeads != 4 || s.Config.FFNSize != 64 || s.Config.VocabSize != c.VocabSize {
		t.Errorf("shard config %+v", s.Config)
	}
	if sh := s.Sharding(); sh.Rank != 1 || sh.Size != 4 || sh.Full != c {
		t.Errorf("Sharding() = %+v", sh)
	}
	mem, _ := s.NewKVMemory(1, 8)
	full, _ := model.NewKVMemory(&c, 1, 8)
	// Keys and values are a quarter; each rank keeps its own pad flags
	// (a byte a row of its pages).
	flags := int64(model.KVPages(1, 8) * model.PageRows)
	if 4*(mem.Bytes()-flags) != full.Bytes()-flags {
		t.Errorf("shard memory %d bytes, whole model's %d", mem.Bytes(), full.Bytes())
	}
}

// Shard counts and splits that cannot work are refused, each with a
// message naming what is wrong, before any weight is read.
func TestShardRefusals(t *testing.T) {
	q8 := eightKV()
	q8.KeySize = 2 // Hq·K = 32: one Q8_0 block, so 2 shards would split it
	kq := kquantConfig()
	kq.KeySize = 32 // Hq·K = 256: one super-block
	for _, tc := range []struct {
		name string
		c    model.Config
		src  func(t *testing.T, src testmodel.Source) testmodel.Source
		n    int
		want []string // what the message must say
	}{
		{"zero", eightKV(), nil, 0, []string{"at least 1 shard", "got 0"}},
		{"negative", eightKV(), nil, -2, []string{"at least 1 shard"}},
		{"not dividing", eightKV(), nil, 3, []string{"3 shards do not divide", "8 kv heads"}},
		{"more than heads", eightKV(), nil, 16, []string{"16 shards are more than", "8 kv heads"}},
		{"ffn", func() model.Config { c := eightKV(); c.FFNSize = 100; return c }(), nil, 8, []string{"ffn_size 100"}},
		{"q8_0 block", q8, func(t *testing.T, s testmodel.Source) testmodel.Source {
			return convert(t, s, reencode(tensor.Q8_0))
		}, 2, []string{`"blk.0.attn_output.weight"`, "2 shards", "Q8_0 blocks of 32"}},
		{"k-quant block", kq, func(t *testing.T, s testmodel.Source) testmodel.Source {
			return convert(t, s, quantizeTo(tensor.Q4_K))
		}, 2, []string{`"blk.0.attn_output.weight"`, "2 shards", "Q4_K blocks of 256"}},
		{"int8 scale shard", eightKV(), func(t *testing.T, s testmodel.Source) testmodel.Source { return int8Source(t, s, 2) }, 4,
			[]string{`"blk.0.attn_output.weight"`, "4 shards", "int8 scale shards (2 of them)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var src model.TensorSource = testmodel.Random(tc.c, 2)
			looked := 0
			if tc.src != nil {
				src = tc.src(t, src.(testmodel.Source))
			} else {
				// A refusal by the config reads no tensor at all.
				src = countingSource{src, &looked}
			}
			_, err := model.NewTP(tc.c, src, tc.n, parallel.New(1))
			if err == nil {
				t.Fatalf("%d shards accepted", tc.n)
			}
			if looked > 0 {
				t.Errorf("%d tensors looked up before the refusal", looked)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// countingSource counts the tensors looked up.
type countingSource struct {
	model.TensorSource
	n *int
}

func (s countingSource) Lookup(name string) (*tensor.Tensor, bool) {
	*s.n++
	return s.TensorSource.Lookup(name)
}

// cloneSource copies every tensor's bytes (and scales).
func cloneSource(src testmodel.Source) testmodel.Source {
	out := testmodel.Source{}
	for k, v := range src {
		cp := *v
		cp.Data = slices.Clone(v.Data)
		if v.Scales != nil {
			sc := *v.Scales
			sc.Data = slices.Clone(v.Scales.Data)
			cp.Scales = &sc
		}
		out[k] = &cp
	}
	return out
}

// poisonOutside overwrites with NaN every element of an F32 [.., rows,
// cols] tensor outside rows [lo, hi) (byRows) or columns [lo, hi).
func poisonOutside(t *tensor.Tensor, byRows bool, lo, hi int) {
	sh := t.Shape
	rows, cols := sh[len(sh)-2], sh[len(sh)-1]
	nan := []byte{0, 0, 0xc0, 0x7f}
	for i := 0; i < len(t.Data)/4; i++ {
		r, c := i/cols%rows, i%cols
		k := c
		if byRows {
			k = r
		}
		if k < lo || k >= hi {
			copy(t.Data[4*i:], nan)
		}
	}
}

// Each shard reads only its own slices of the weights: with every element
// outside them NaN in the copy of the weights a shard is built from, the
// group's logits are still the unsharded model's.
func TestShardReadsOnlyItsSlices(t *testing.T) {
	c := withGrok2(eightKV(), 512)
	const n = 4
	base := testmodel.Random(c, 11)
	want := script(t, mustModel(t, c, base), 4)
	cs, _ := comm.NewLocal(n)
	shards := make([]*model.LanguageModel, n)
	for r := range shards {
		src := cloneSource(base)
		s, err := model.NewShard(c, src, cs[r])
		if err != nil {
			t.Fatal(err)
		}
		s.Pool = parallel.New(1)
		shards[r] = s
		part := func(total int) (int, int) { return r * total / n, (r + 1) * total / n }
		V := c.VocabSize
		per := (V + n - 1) / n
		for k, v := range src {
			var lo, hi int
			byRows := true
			switch {
			case k == "token_embd.weight" || k == "output.weight":
				lo, hi = r*per, min(V, (r+1)*per)
			case strings.Contains(k, "attn_q"):
				lo, hi = part(c.NumQHeads * c.KeySize)
			case strings.Contains(k, "attn_k") || strings.Contains(k, "attn_v"):
				lo, hi = part(c.NumKVHeads * c.KeySize)
			case strings.Contains(k, "attn_output."):
				lo, hi = part(c.NumQHeads * c.KeySize)
				byRows = false
			case strings.Contains(k, "gate_exps") || strings.Contains(k, "up_exps"):
				lo, hi = part(c.FFNSize)
			case strings.Contains(k, "down_exps"):
				lo, hi = part(c.FFNSize)
				byRows = false
			case strings.HasSuffix(k, "ffn_gate.weight") || strings.HasSuffix(k, "ffn_up.weight"):
				lo, hi = part(c.DenseFFNSize)
			case strings.HasSuffix(k, "ffn_down.weight"):
				lo, hi = part(c.DenseFFNSize)
				byRows = false
			default:
				continue // replicated: norms, router
			}
			poisonOutside(v, byRows, lo, hi)
		}
	}
	got := scriptGroup(t, shards, 4)
	if d := testmodel.MaxAbsDiff(got, want); d > tpTol {
		t.Errorf("max |Δ| = %g from the unsharded logits (NaN: a shard read another's weights)", d)
	}
}

// scriptGroup is script for a group of shards run by hand, each Forward
// on a goroutine of its own, as MPI ranks would run them.
func scriptGroup(t *testing.T, shards []*model.LanguageModel, seed uint64) []float32 {
	t.Helper()
	c := shards[0].Sharding().Full
	mems := make([]*model.KVMemory, len(shards))
	for r, s := range shards {
		mems[r], _ = s.NewKVMemory(3, 0)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	var all []float32
	run := func(in []model.Input) {
		outs := make([][]float32, len(shards))
		errs := make([]error, len(shards))
		var wg sync.WaitGroup
		for r := range shards {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[r], errs[r] = shards[r].Forward(mems[r], in)
			}()
		}
		wg.Wait()
		for r := range shards {
			if errs[r] != nil {
				t.Fatal(errs[r])
			}
			if d := testmodel.MaxAbsDiff(outs[r], outs[0]); d != 0 {
				t.Fatalf("rank %d's logits differ from rank 0's by %g", r, d)
			}
		}
		all = append(all, outs[0]...)
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

// A decode step of a sharded model makes two collectives a layer (after
// attention, after the feed-forward block) plus the embedding's reduce
// and the logits' gather, and NewTP's model counts them.
func TestTPCollectivesPerStep(t *testing.T) {
	c := eightKV()
	const n = 4
	tp, err := model.NewTP(c, testmodel.Random(c, 1), n, parallel.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if lm := mustModel(t, c, testmodel.Random(c, 1)); lm.Collectives() != nil {
		t.Error("an unsharded model has collectives")
	}
	mem, _ := tp.NewKVMemory(2, 0)
	if _, err := tp.Forward(mem, []model.Input{{Slot: 0, Tokens: []int{5, 6, 7}}, {Slot: 1, Tokens: []int{8}}}); err != nil {
		t.Fatal(err)
	}
	cc := tp.Collectives()
	cc.Reset()
	if _, err := tp.Forward(mem, []model.Input{{Slot: 0, Tokens: []int{9}}, {Slot: 1, Tokens: []int{10}}}); err != nil {
		t.Fatal(err)
	}
	s := cc.Stats()
	per := (c.VocabSize + n - 1) / n
	wantBytes := int64(4 * (2*c.EmbSize*(1+2*c.NumLayers) + n*2*per))
	if s.Calls != int64(2+2*c.NumLayers) || s.Bytes != wantBytes {
		t.Errorf("one step of 2 rows: %d collectives of %d bytes, want %d of %d", s.Calls, s.Bytes, 2+2*c.NumLayers, wantBytes)
	}
}

// The byte and FLOP counts of a sharded model add up its shards' slices:
// the same matrices as the unsharded model's, the replicated router and
// norms once a shard.
func TestTPCounts(t *testing.T) {
	c := withGrok2(eightKV(), 512)
	src := testmodel.Random(c, 1)
	lm := mustModel(t, c, src)
	tp, err := model.NewTP(c, src, 4, parallel.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	a, b := lm.DecodeStepBytes(), tp.DecodeStepBytes()
	if a.Attention != b.Attention || a.Experts != b.Experts || a.DenseMLP != b.DenseMLP || a.Unembed != b.Unembed ||
		4*a.Router != b.Router || 4*a.Norms != b.Norms || a.Embedding != b.Embedding {
		t.Errorf("step bytes: unsharded %+v, 4 shards %+v", a, b)
	}
	if want, p := b.Total-b.Norms-b.Embedding, tp.DecodeStepProducts(); len(p) != 1 || p[tensor.F32].Bytes != want {
		t.Errorf("4 shards' products by type %v, want F32 %d", p, want)
	}
	fa, fb := lm.PrefillFLOPs(16), tp.PrefillFLOPs(16)
	// The last layer's router runs for the last token only.
	router := 2 * float64(c.NumExperts*c.EmbSize) * (float64(c.NumLayers-1) + 1.0/16)
	if d := fb - fa - 3*router; d < -1 || d > 1 {
		t.Errorf("prefill FLOPs: unsharded %g, 4 shards %g (want the router 3 times more)", fa, fb)
	}
}

// releasingSource is a PageReleaser over heap tensors: every tensor counts
// as mapped, and a released range is overwritten with NaN, so that a shard
// still reading it would show in its logits.
type releasingSource struct {
	testmodel.Source
	released *int
}

func (releasingSource) Mapped([]byte) bool { return true }

func (s releasingSource) ReleasePages(b []byte) {
	*s.released += len(b)
	for i := 0; i+4 <= len(b); i += 4 {
		copy(b[i:], []byte{0, 0, 0xc0, 0x7f})
	}
}

// Over a PageReleaser, NewShard copies its strided slices (here the
// row-parallel ones of ggml's [out, in] layout, and the column-parallel
// ones of xAI's [in, out]) and releases the matrices they came from: the
// group's logits are the bits of the in-process model's, whose shards keep
// views, and nothing released is read again.
func TestShardPacksStridedSlices(t *testing.T) {
	c := withGrok2(eightKV(), 512)
	for _, tc := range []struct {
		name string
		src  func() testmodel.Source
	}{
		{"ggml", func() testmodel.Source { return testmodel.Random(c, 11) }},
		{"xai-int8", func() testmodel.Source { return int8Source(t, testmodel.Random(c, 11), 8) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2
			base := tc.src()
			tp, err := model.NewTP(c, base, n, parallel.New(1))
			if err != nil {
				t.Fatal(err)
			}
			defer tp.Close()
			want := script(t, tp, 4)
			cs, _ := comm.NewLocal(n)
			shards := make([]*model.LanguageModel, n)
			for r := range shards {
				released := 0
				s, err := model.NewShard(c, releasingSource{cloneSource(base), &released}, cs[r])
				if err != nil {
					t.Fatal(err)
				}
				if released == 0 {
					t.Fatalf("rank %d released nothing", r)
				}
				s.Pool = parallel.New(1)
				shards[r] = s
			}
			if d := testmodel.MaxAbsDiff(scriptGroup(t, shards, 4), want); d != 0 {
				t.Errorf("packed shards: max |Δ| = %g from the in-process model's views, want the same bits", d)
			}
		})
	}
}

// A bad input is refused by every shard alike and the group carries on; a
// failure of one rank alone (here a memory of another shape) ends the
// group, so that the others return instead of waiting in a collective.
func TestShardErrors(t *testing.T) {
	c := eightKV()
	tp, err := model.NewTP(c, testmodel.Random(c, 1), 2, parallel.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	mem, _ := tp.NewKVMemory(1, 0)
	if _, err := tp.Forward(mem, []model.Input{{Tokens: []int{c.VocabSize}}}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Errorf("bad token: %v", err)
	}
	if _, err := tp.Forward(mem, []model.Input{{Tokens: []int{5}}}); err != nil {
		t.Errorf("after a refused input: %v", err)
	}

	cs, _ := comm.NewLocal(2)
	shards := make([]*model.LanguageModel, 2)
	for r := range shards {
		if shards[r], err = model.NewShard(c, testmodel.Random(c, 1), cs[r]); err != nil {
			t.Fatal(err)
		}
		shards[r].Pool = parallel.New(1)
	}
	good, _ := shards[0].NewKVMemory(1, 0)
	wrong, _ := model.NewKVMemory(&c, 1, 0) // the whole model's heads
	done := make(chan error, 2)
	go func() { _, err := shards[0].Forward(good, []model.Input{{Tokens: []int{5}}}); done <- err }()
	go func() { _, err := shards[1].Forward(wrong, []model.Input{{Tokens: []int{5}}}); done <- err }()
	for range shards {
		select {
		case err := <-done:
			if err == nil {
				t.Error("a rank succeeded")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a rank hung after the other failed")
		}
	}
}

// A placed NewTP (TPOptions.Place, as --numa sets it) runs Place once on
// each of every shard's threads (its goroutine and its pool's workers) and
// gives the unplaced model's logits bit for bit, over the memory of the
// whole model's shape (script) and over its own (NewKVMemory, whose rows
// the shards allocate on their threads). Its strided slices are copied
// (xai-int8's row-parallel [in, out] matrices are strided).
func TestTPPlacedEqualsUnplaced(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    model.Config
		src  func(t *testing.T) testmodel.Source
	}{
		{"f32", eightKV(), func(t *testing.T) testmodel.Source { return testmodel.Random(eightKV(), 31) }},
		{"xai-int8", eightKV(), func(t *testing.T) testmodel.Source { return int8Source(t, testmodel.Random(eightKV(), 31), 8) }},
	} {
		src := tc.src(t)
		for _, n := range []int{2, 4} {
			plain, err := model.NewTP(tc.c, src, n, parallel.New(4))
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			calls := make([]int, n)
			placed, err := model.NewTPWith(tc.c, src, n, parallel.New(4), model.TPOptions{Place: func(r int) {
				mu.Lock()
				calls[r]++
				mu.Unlock()
			}})
			if err != nil {
				t.Fatal(err)
			}
			want, got := script(t, plain, 5), script(t, placed, 5)
			if d := testmodel.MaxAbsDiff(got, want); d != 0 {
				t.Errorf("%s tp %d: placed logits differ from unplaced by up to %g", tc.name, n, d)
			}
			prompt := randTokens(rand.New(rand.NewPCG(3, 3)), 7, tc.c.VocabSize, false)
			a, b := ownMemoryLogits(t, plain, prompt), ownMemoryLogits(t, placed, prompt)
			if d := testmodel.MaxAbsDiff(b, a); d != 0 {
				t.Errorf("%s tp %d: over NewKVMemory, placed logits differ by up to %g", tc.name, n, d)
			}
			mu.Lock()
			for r, k := range calls {
				if want := max(1, 4/n); k != want { // the goroutine and its pool's other workers
					t.Errorf("%s tp %d: Place ran %d times for shard %d, want %d", tc.name, n, k, r, want)
				}
			}
			mu.Unlock()
			plain.Close()
			placed.Close()
		}
	}
}

// ownMemoryLogits runs prompt and two decode steps through lm over its
// own NewKVMemory and returns the logits.
func ownMemoryLogits(t *testing.T, lm *model.LanguageModel, prompt []int) []float32 {
	t.Helper()
	mem, err := lm.NewKVMemory(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	var all []float32
	for _, toks := range [][]int{prompt, {3}, {5}} {
		out, err := lm.Forward(mem, []model.Input{{Tokens: toks}})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, out...)
	}
	return all
}

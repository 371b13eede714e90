package loader

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
)

// tpGoldenTol bounds how far the in-process sharded model's logits may be
// from the unsharded model's on the golden models. The row-parallel
// products add per-shard partial sums, a different float32 order than one
// dot product over the whole row; on these models that moves the logits
// by up to 4.2e-5 (grok2-tiny), less than the unsharded float32 model's own
// distance from the float64 reference (3.8e-5 on grok-tiny's len64). A
// mistake in the sharding (a head, an expert's share or a vocabulary
// block lost) moves them by 1e-2 or more.
const tpGoldenTol = 1e-4

// tpRun returns the logits of one ragged batch (every sequence, every
// position), then of 8 batched decode steps feeding back each sequence's
// argmax, and the tokens those steps picked.
func tpRun(t *testing.T, lm *model.LanguageModel, seqs [][]int) (logits []float32, picked [][]int) {
	t.Helper()
	mem, err := lm.NewKVMemory(len(seqs), 0)
	if err != nil {
		t.Fatal(err)
	}
	V := lm.Config.VocabSize
	var in []model.Input
	for i, s := range seqs {
		in = append(in, model.Input{Slot: i, Tokens: s, AllLogits: true})
	}
	out, err := lm.Forward(mem, in)
	if err != nil {
		t.Fatal(err)
	}
	logits = slices.Clone(out)
	picked = make([][]int, len(seqs))
	next := make([]int, len(seqs))
	row := 0
	for i, s := range seqs {
		row += len(s)
		next[i] = argmax(out[(row-1)*V : row*V])
	}
	for step := 0; step < 8; step++ {
		in = in[:0]
		for i := range seqs {
			picked[i] = append(picked[i], next[i])
			in = append(in, model.Input{Slot: i, Tokens: []int{next[i]}})
		}
		out, err := lm.Forward(mem, in)
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, out...)
		for i := range seqs {
			next[i] = argmax(out[i*V : (i+1)*V])
		}
	}
	return logits, picked
}

// The golden models (GGUF F32 and Q8_0, xAI int8 with per-shard scales,
// bf16 safetensors, Grok-2, llama.cpp's quantisations of grok-k256) split
// two ways in process give the unsharded logits within tpGoldenTol over a
// ragged batch and batched greedy steps, and the same greedy tokens. A
// file whose quantisation blocks a split would cut is refused, naming the
// tensor and the block; every one of these models has 2 kv heads, so 4
// shards are refused (8-kv-head models are split 4 and 8 ways in
// model/shard_test.go).
func TestTPGoldenModels(t *testing.T) {
	type golden struct{ path, tokens, ref string } // ref: the float64 reference's logits of len64
	models := []golden{
		{"../testdata/grok-tiny/grok-tiny.gguf", "../testdata/grok-tiny", "../testdata/grok-tiny/logits_len64.f32"},
		{"../testdata/grok-tiny/grok-tiny-q8_0.gguf", "../testdata/grok-tiny", ""},
		{"../testdata/xai-ckpt-tiny", "../testdata/xai-ckpt-tiny", "../testdata/xai-ckpt-tiny/logits_len64.f32"},
		{"../testdata/hf-safetensors-tiny", "../testdata/hf-safetensors-tiny", "../testdata/hf-safetensors-tiny/logits_len64.f32"},
		{"../testdata/grok2-tiny/grok2-tiny.gguf", "../testdata/grok2-tiny", "../testdata/grok2-tiny/xai/logits_len64.f32"},
	}
	k256, _ := filepath.Glob("../testdata/grok-k256/*.gguf")
	for _, p := range k256 {
		models = append(models, golden{p, "../testdata/grok-tiny", ""})
	}
	for _, g := range models {
		t.Run(filepath.Base(g.path), func(t *testing.T) {
			m, err := Open(g.path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			toks := testmodel.ReadTokens(t, g.tokens)
			seqs := [][]int{toks["len64"], toks["len7"]}
			for _, s := range seqs {
				for _, tok := range s {
					if tok >= m.Config.VocabSize {
						t.Skipf("token %d outside the vocabulary", tok)
					}
				}
			}
			want, wantPicked := tpRun(t, m.LanguageModel, seqs)

			tp, err := Open(g.path, Options{TP: 2})
			if err != nil {
				if strings.Contains(err.Error(), "blocks of 256") && strings.Contains(err.Error(), "2 shards") {
					t.Logf("refused as expected: %v", err)
					return
				}
				t.Fatal(err)
			}
			defer tp.Close()
			got, gotPicked := tpRun(t, tp.LanguageModel, seqs)
			d := testmodel.MaxAbsDiff(got, want)
			if d > tpGoldenTol {
				t.Errorf("tp 2: max |Δ| = %g from the unsharded logits, want ≤ %g", d, tpGoldenTol)
			}
			t.Logf("tp 2: max |Δ| = %.3g", d)
			if g.ref != "" {
				// The sharded model is as close to the float64 reference
				// as the unsharded one must be.
				V := m.Config.VocabSize
				compareLogits(t, got[:64*V], testmodel.ReadLogits(t, g.ref), V, goldenMaxAbs)
			}
			if !slices.EqualFunc(gotPicked, wantPicked, slices.Equal) {
				t.Errorf("tp 2: greedy %v, unsharded %v", gotPicked, wantPicked)
			}

			if _, err := Open(g.path, Options{TP: 4}); err == nil || !strings.Contains(err.Error(), "4 shards are more than the model's 2 kv heads") {
				t.Errorf("tp 4: %v, want a refusal naming the kv heads", err)
			}
		})
	}
	if _, err := os.Stat("../testdata/grok-k256"); err != nil || len(k256) == 0 {
		t.Errorf("no K-quant files in testdata/grok-k256")
	}
}

// Options.Comm builds one rank's shard, as an MPI rank does: two ranks
// opened separately over a mapped file (their strided slices copied and
// the pages released) give the bits of the in-process split.
func TestTPRanksOverMappedFile(t *testing.T) {
	for _, path := range []string{"../testdata/grok-tiny/grok-tiny-q8_0.gguf", "../testdata/xai-ckpt-tiny"} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			tp, err := Open(path, Options{TP: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer tp.Close()
			toks := []int{5, 17, 42, 9, 100, 3}
			want, err := testmodel.FullLogits(tp.LanguageModel, toks)
			if err != nil {
				t.Fatal(err)
			}
			cs, _ := comm.NewLocal(2)
			ranks := make([]*Model, 2)
			for r := range ranks {
				if ranks[r], err = Open(path, Options{Comm: cs[r]}); err != nil {
					t.Fatal(err)
				}
				defer ranks[r].Close()
				ranks[r].LanguageModel.Pool = parallel.New(1)
				if sh := ranks[r].Sharding(); sh.Rank != r || sh.Size != 2 {
					t.Fatalf("rank %d: Sharding %+v", r, sh)
				}
			}
			lms := make([]*model.LanguageModel, len(ranks))
			for r := range ranks {
				lms[r] = ranks[r].LanguageModel
			}
			got, err := testmodel.RankLogits(lms, toks)
			if err != nil {
				t.Fatal(err)
			}
			for r := range ranks {
				if d := testmodel.MaxAbsDiff(got[r], want); d != 0 {
					t.Errorf("rank %d: max |Δ| = %g from the in-process split, want the same bits", r, d)
				}
			}
		})
	}
}

package loader_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/formats/safetensors"
	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
)

// Two ranks (Options.Comm) over xai-org/grok-2's layout, experts split
// over 2 TP shards on the summation grid, each multiply their own files'
// slices where they are mapped: nothing is joined, and the logits are the
// in-process split's bits.
func TestTPRanksOverRelease(t *testing.T) {
	c := fixtures.Grok2SmallConfig()
	c.FFNSize = 4096
	dir := filepath.Join(t.TempDir(), "hf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fixtures.WriteGrok2Safetensors(dir, fixtures.Random(c, 3, fixtures.ModerateGains), fixtures.Grok2Options{TP: 2}); err != nil {
		t.Fatal(err)
	}
	tp, err := loader.Open(dir, loader.Options{TP: 2})
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
	ranks := make([]*loader.Model, 2)
	for r := range ranks {
		if ranks[r], err = loader.Open(dir, loader.Options{Comm: cs[r]}); err != nil {
			t.Fatal(err)
		}
		defer ranks[r].Close()
		ranks[r].LanguageModel.Pool = parallel.New(1)
		if n := ranks[r].Source.(*safetensors.Model).AssembledBytes(); n != 0 {
			t.Errorf("rank %d: %d bytes joined", r, n)
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
}

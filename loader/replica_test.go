package loader

import (
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/parallel"
)

// A replica over a model's mapped tensors (serve --dp) computes the bits
// of the model it replicates, whole or split like Open's Options.TP, on
// its own pool; closing the model closes it.
func TestReplicaEqualsModel(t *testing.T) {
	const path = "../testdata/grok-tiny/grok-tiny.gguf"
	seqs := [][]int{testmodel.ReadTokens(t, "../testdata/grok-tiny")["len7"]}
	for _, tp := range []int{1, 2} {
		m, err := Open(path, Options{TP: tp})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := tpRun(t, m.LanguageModel, seqs)
		pool := parallel.New(2)
		r, err := m.Replica(tp, pool)
		if err != nil {
			t.Fatal(err)
		}
		if r == m.LanguageModel {
			t.Fatal("the replica is the model itself")
		}
		got, _ := tpRun(t, r, seqs)
		if d := testmodel.MaxAbsDiff(got, want); d != 0 {
			t.Errorf("tp %d: replica's logits differ by %g from the model's", tp, d)
		}
		m.Close()
		pool.Close()
	}
}

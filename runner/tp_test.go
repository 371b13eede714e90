package runner

import (
	"slices"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
)

// An engine over a model split on its model axis (model.NewTP) decodes
// the unsharded model's greedy tokens, batched, through its prompt cache
// (which truncates the shards' memories) and after slots are reused.
func TestShardedEngineEqualsUnsharded(t *testing.T) {
	c := testmodel.SmallConfig()
	c.SequenceLen = 48
	src := testmodel.Random(c, 42)
	lm, err := model.New(c, src)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := model.NewTP(c, src, 2, parallel.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tp.Close)
	plain := newEngine(t, lm, Options{Slots: 2, NoPromptCache: true})
	sharded := newEngine(t, tp, Options{Slots: 2})
	greedy := func(p []int) Request { return Request{Prompt: p, MaxTokens: 6, IgnoreEOS: true} }
	prompt := []int{5, 9, 13, 4, 22, 31, 7, 8, 40, 41, 3, 17}
	first, _, _ := runOne(t, sharded, greedy(prompt))
	for _, p := range [][]int{
		prompt,
		append(append(slices.Clone(prompt), first...), 11, 12), // the second turn: cached prefix
		prompt[:5],       // a shorter prefix: the slot is truncated
		{6, 9, 13, 2, 1}, // a different start
	} {
		got, _, _ := runOne(t, sharded, greedy(p))
		want, _, _ := runOne(t, plain, greedy(p))
		if !slices.Equal(got, want) {
			t.Errorf("prompt %v: sharded %v, unsharded %v", p, got, want)
		}
	}
	if st := sharded.Stats(); st.CachedTokens == 0 {
		t.Error("the prompt cache was not used: the shards' truncation went untested")
	}
}

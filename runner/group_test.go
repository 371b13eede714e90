package runner

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
)

// replicas builds n networks over one set of weights, each on a pool of
// its own.
func replicas(t *testing.T, n int) []*model.LanguageModel {
	t.Helper()
	c := testmodel.SmallConfig()
	c.SequenceLen = 48
	src := testmodel.Random(c, 42)
	var lms []*model.LanguageModel
	for range n {
		lm, err := model.New(c, src)
		if err != nil {
			t.Fatal(err)
		}
		p := parallel.New(1)
		t.Cleanup(p.Close)
		lm.Pool = p
		lms = append(lms, lm)
	}
	return lms
}

// A group of replicas answers every request with the tokens and logprobs
// of one engine alone, spreads concurrent requests over its replicas
// (slots one each: two requests run at once only on two replicas), and
// adds its replicas' figures up.
func TestGroupEqualsOneEngineAndSpreads(t *testing.T) {
	one := newEngine(t, testModel(t), Options{Slots: 1, NoPromptCache: true})
	// The replicas run no step until the first three requests are placed:
	// else one could finish before the next is submitted (a loaded machine
	// can pause the test that long) and rightly take it too.
	gate := make(chan struct{})
	g, err := NewGroup(replicas(t, 3), nil, Options{Slots: 3, NoPromptCache: true, BeforeStep: func() { <-gate }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	open := true
	release := func() {
		if open {
			open = false
			close(gate)
		}
	}
	t.Cleanup(release) // before g.Close (cleanups run last first), if a check stops the test early
	if g.Replicas() != 3 || g.Slots() != 3 || g.Context() != one.Context() {
		t.Fatalf("group: %d replicas, %d slots, context %d; want 3, 3, %d", g.Replicas(), g.Slots(), g.Context(), one.Context())
	}
	if want := 3 * one.KV().Pages; g.KV().Pages != want {
		t.Errorf("group KV pages %d, want %d", g.KV().Pages, want)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var reqs []Request
	for i := range 6 {
		p := make([]int, 3+i)
		for j := range p {
			p[j] = 1 + rng.IntN(60)
		}
		reqs = append(reqs, Request{Prompt: p, MaxTokens: 12, IgnoreEOS: true, Logprobs: true})
	}
	// Three long requests at once: each on a replica of its own.
	var streams []*Stream
	for _, r := range reqs[:3] {
		s, err := g.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	for i, e := range g.group {
		if n := e.Stats().Requests; n != 1 {
			t.Errorf("three requests at once on three one-slot replicas: replica %d got %d", i, n)
		}
	}
	release()
	for i, s := range streams {
		var lps []float32
		got, _ := collectWith(t, s, func(ti TokenInfo) { lps = append(lps, ti.Logprob) })
		want, wlp, _ := runOne(t, one, reqs[i])
		sameBits(t, "group", got, want, lps, wlp)
	}
	for _, r := range reqs[3:] {
		got, lps, _ := runOne(t, g, r)
		want, wlp, _ := runOne(t, one, r)
		sameBits(t, "group", got, want, lps, wlp)
	}
	st := g.Stats()
	if st.Requests != 6 || st.Finished != 6 || st.GeneratedTokens != 6*12 {
		t.Errorf("group stats: %d requests, %d finished, %d tokens; want 6, 6, 72", st.Requests, st.Finished, st.GeneratedTokens)
	}
}

// The group shares out the slots and memory it is given.
func TestGroupSharesOptions(t *testing.T) {
	g, err := NewGroup(replicas(t, 2), nil, Options{Slots: 3, KVTokens: 2 * 64})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Slots() != 4 { // two slots a replica: at least the three asked for
		t.Errorf("3 slots over 2 replicas: %d", g.Slots())
	}
	for i, e := range g.group {
		if e.KV().Pages != 64/16 {
			t.Errorf("replica %d: %d pages, want %d (half of 128 tokens)", i, e.KV().Pages, 64/16)
		}
	}
	if g.Replicas() != 2 {
		t.Errorf("%d replicas, want 2", g.Replicas())
	}
	if _, err := NewGroup(nil, nil, Options{}); err == nil {
		t.Error("a group of no models: no error")
	}
}

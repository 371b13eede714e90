package runner

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"
)

// run submits one request and returns its tokens, their logprobs and its
// usage.
func runOne(t *testing.T, e *Engine, req Request) ([]int, []float32, Usage) {
	t.Helper()
	s, err := e.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var lps []float32
	toks, ev := collectWith(t, s, func(ti TokenInfo) { lps = append(lps, ti.Logprob) })
	return toks, lps, ev.Usage
}

// collectWith is collect, calling f on every token.
func collectWith(t *testing.T, s *Stream, f func(TokenInfo)) ([]int, Event) {
	t.Helper()
	var toks []int
	// A deadline only to turn a hang into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		ev, err := s.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range ev.Tokens {
			toks = append(toks, ti.ID)
			f(ti)
		}
		if ev.Done {
			return toks, ev
		}
	}
}

// A request whose prompt begins with what a free slot's memory holds from
// an earlier request prefills only the rest (the second turn of a chat, a
// repeated prompt), and its tokens and logprobs are the same bits as with
// the cache off.
func TestPromptCache(t *testing.T) {
	lm := testModel(t)
	cached := newEngine(t, lm, Options{Slots: 2})
	plain := newEngine(t, lm, Options{Slots: 2, NoPromptCache: true})
	greedy := func(p []int, n int) Request {
		return Request{Prompt: p, MaxTokens: n, IgnoreEOS: true, Logprobs: true}
	}
	prompt := []int{5, 9, 13, 4, 22, 31, 7, 8, 40, 41, 3, 17}

	first, _, u := runOne(t, cached, greedy(prompt, 6))
	if u.CachedTokens != 0 {
		t.Errorf("first request: %d cached tokens", u.CachedTokens)
	}
	// The second turn: the first exchange, then new tokens. The slot holds
	// the prompt and the 5 generated tokens fed back.
	turn := append(append(slices.Clone(prompt), first...), 11, 12)
	for _, tc := range []struct {
		name   string
		prompt []int
		cached int
	}{
		{"second turn", turn, len(prompt) + 5},
		{"same prompt again", turn, len(turn) - 1},
		{"shorter prefix", prompt[:8], 7},
		{"different start", []int{6, 9, 13}, 0},
	} {
		got, glp, u := runOne(t, cached, greedy(tc.prompt, 4))
		want, wlp, _ := runOne(t, plain, greedy(tc.prompt, 4))
		if u.CachedTokens != tc.cached {
			t.Errorf("%s: %d cached tokens, want %d", tc.name, u.CachedTokens, tc.cached)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: tokens %v with the cache, %v without", tc.name, got, want)
		}
		for i := range wlp {
			if math.Float32bits(glp[i]) != math.Float32bits(wlp[i]) {
				t.Errorf("%s: logprob %d is %g with the cache, %g without", tc.name, i, glp[i], wlp[i])
			}
		}
	}
	if st := plain.Stats(); st.CachedTokens != 0 {
		t.Errorf("NoPromptCache engine reused %d tokens", st.CachedTokens)
	}
	if st := cached.Stats(); st.CachedTokens == 0 {
		t.Error("Stats.CachedTokens is 0")
	}
}

// With several free slots a request goes to the one holding the longest
// prefix of its prompt.
func TestPromptCacheChoosesSlot(t *testing.T) {
	e := newEngine(t, testModel(t), Options{Slots: 3})
	a := []int{5, 6, 7, 8, 9, 10}
	b := []int{20, 21, 22, 23, 24, 25}
	// Run a and b at once so that they take two slots.
	sa, _ := e.Submit(context.Background(), Request{Prompt: a, MaxTokens: 1, IgnoreEOS: true})
	sb, _ := e.Submit(context.Background(), Request{Prompt: b, MaxTokens: 1, IgnoreEOS: true})
	collect(t, sa)
	collect(t, sb)
	_, _, u := runOne(t, e, Request{Prompt: append(slices.Clone(b), 30), MaxTokens: 1, IgnoreEOS: true})
	if u.CachedTokens != len(b) {
		t.Errorf("%d cached tokens, want %d (b's slot)", u.CachedTokens, len(b))
	}
}

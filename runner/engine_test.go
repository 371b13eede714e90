package runner

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/sampler"
)

func testModel(t testing.TB) *model.LanguageModel {
	t.Helper()
	c := testmodel.SmallConfig()
	c.SequenceLen = 48
	lm, err := model.New(c, testmodel.Random(c, 42))
	if err != nil {
		t.Fatal(err)
	}
	return lm
}

func newEngine(t testing.TB, lm *model.LanguageModel, o Options) *Engine {
	t.Helper()
	e, err := New(lm, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// collect drains a stream and returns its tokens and final event.
func collect(t testing.TB, s *Stream) ([]int, Event) {
	t.Helper()
	var toks []int
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		ev, err := s.Recv(ctx)
		if err == io.EOF {
			t.Fatal("stream ended without a Done event")
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range ev.Tokens {
			toks = append(toks, ti.ID)
		}
		if ev.Done {
			if _, err := s.Recv(ctx); err != io.EOF {
				t.Fatalf("Recv after Done: %v, want io.EOF", err)
			}
			return toks, ev
		}
	}
}

// greedyRef is the plain greedy loop over the model, one sequence alone.
func greedyRef(t testing.TB, lm *model.LanguageModel, prompt []int, n, eos int) []int {
	mem, _ := model.NewKVMemory(&lm.Config, 1, 0)
	logits, err := lm.Forward(mem, []model.Input{{Tokens: prompt}})
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for len(out) < n {
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		out = append(out, best)
		if best == eos {
			break
		}
		if logits, err = lm.Forward(mem, []model.Input{{Tokens: []int{best}}}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Greedy output of a request is the same whether it runs alone or among
// 15 others, with fewer slots than requests so that some wait and are
// prefilled while others decode.
func TestBatchedGreedyEqualsAlone(t *testing.T) {
	lm := testModel(t)
	rng := rand.New(rand.NewPCG(1, 1))
	const nreq = 16
	prompts := make([][]int, nreq)
	for i := range prompts {
		prompts[i] = make([]int, 1+rng.IntN(12))
		for j := range prompts[i] {
			prompts[i][j] = 3 + rng.IntN(lm.Config.VocabSize-3)
		}
	}
	want := make([][]int, nreq)
	for i, p := range prompts {
		want[i] = greedyRef(t, lm, p, 10, lm.Config.EOSToken)
	}
	for _, slots := range []int{16, 5} {
		e := newEngine(t, lm, Options{Slots: slots, PrefillChunk: 4})
		streams := make([]*Stream, nreq)
		for i, p := range prompts {
			var err error
			if streams[i], err = e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 10}); err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range streams {
			got, ev := collect(t, s)
			if !slices.Equal(got, want[i]) {
				t.Errorf("slots=%d request %d: got %v, want %v", slots, i, got, want[i])
			}
			wantFinish := FinishLength
			if len(want[i]) < 10 {
				wantFinish = FinishStop
			}
			if ev.Finish != wantFinish || ev.Usage.CompletionTokens != len(want[i]) || ev.Usage.PromptTokens != len(prompts[i]) {
				t.Errorf("request %d: finish %q usage %+v", i, ev.Finish, ev.Usage)
			}
		}
		if st := e.Stats(); st.Active != 0 || st.Queued != 0 || st.Finished != nreq {
			t.Errorf("stats after all done: %+v", st)
		}
	}
}

func TestSubmitErrors(t *testing.T) {
	lm := testModel(t)
	e := newEngine(t, lm, Options{Slots: 1})
	long := make([]int, 48)
	for i := range long {
		long[i] = 5
	}
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"empty prompt", Request{}, "empty"},
		{"token out of range", Request{Prompt: []int{1, 64}}, "outside the vocabulary"},
		{"prompt fills context", Request{Prompt: long}, "context holds 48"},
		{"bad sampling", Request{Prompt: []int{1}, Sampling: sampler.Params{Temperature: -1}}, "temperature"},
		{"stop without tokenizer", Request{Prompt: []int{1}, Stop: []string{"x"}}, "tokenizer"},
		{"negative max tokens", Request{Prompt: []int{1}, MaxTokens: -1}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.Submit(context.Background(), tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	// Truncation keeps the end of the prompt and leaves room to generate.
	s, err := e.Submit(context.Background(), Request{Prompt: long, MaxTokens: 4, TruncatePrompt: true, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	toks, ev := collect(t, s)
	if len(toks) != 4 || ev.Usage.Truncated != 4 || ev.Usage.PromptTokens != 44 {
		t.Errorf("truncated request: %d tokens, usage %+v", len(toks), ev.Usage)
	}
}

// A request without max tokens stops when the context is full.
func TestContextFullEndsWithLength(t *testing.T) {
	lm := testModel(t)
	e := newEngine(t, lm, Options{Context: 12})
	s, err := e.Submit(context.Background(), Request{Prompt: []int{5, 6, 7}, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	toks, ev := collect(t, s)
	// 12 rows: 3 prompt + 9 fed generated tokens, and the 10th is sampled
	// from the last row without being fed.
	if ev.Finish != FinishLength || len(toks) != 10 {
		t.Errorf("finish %q after %d tokens", ev.Finish, len(toks))
	}
}

// Cancelling (via the context or Cancel) frees the slot for the next request.
func TestCancelFreesSlot(t *testing.T) {
	lm := testModel(t)
	e := newEngine(t, lm, Options{Slots: 1, Context: 48})
	ctx, cancel := context.WithCancel(context.Background())
	s1, err := e.Submit(ctx, Request{Prompt: []int{5}, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := e.Submit(context.Background(), Request{Prompt: []int{6}, MaxTokens: 3, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Recv(context.Background()); err != nil { // wait until it runs
		t.Fatal(err)
	}
	cancel()
	_, ev := collect(t, s1)
	if ev.Finish != FinishCancelled {
		t.Errorf("cancelled request finished with %q", ev.Finish)
	}
	toks, ev := collect(t, s2)
	if len(toks) != 3 || ev.Finish != FinishLength {
		t.Errorf("second request: %d tokens, %q", len(toks), ev.Finish)
	}
	s3, _ := e.Submit(context.Background(), Request{Prompt: []int{7}, IgnoreEOS: true})
	s3.Cancel()
	if _, ev := collect(t, s3); ev.Finish != FinishCancelled {
		t.Errorf("Cancel: finish %q", ev.Finish)
	}
}

func TestQueueFullAndClose(t *testing.T) {
	lm := testModel(t)
	e, err := New(lm, nil, Options{Slots: 1, MaxQueue: 2})
	if err != nil {
		t.Fatal(err)
	}
	var streams []*Stream
	var full bool
	for i := 0; i < 10; i++ {
		s, err := e.Submit(context.Background(), Request{Prompt: []int{5}, IgnoreEOS: true})
		if errors.Is(err, ErrQueueFull) {
			full = true
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if !full {
		t.Fatal("the queue never filled")
	}
	e.Close()
	for _, s := range streams {
		if _, ev := collect(t, s); ev.Finish != FinishCancelled {
			t.Errorf("after Close: finish %q", ev.Finish)
		}
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: []int{5}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}

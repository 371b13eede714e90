package runner

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/loader"
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
// The test drives the loop one step at a time until the cancel, since the
// small model would otherwise fill the context before the test could act.
func TestCancelFreesSlot(t *testing.T) {
	lm := testModel(t)
	step, free := make(chan struct{}), make(chan struct{})
	e := newEngine(t, lm, Options{Slots: 1, Context: 48, BeforeStep: func() {
		select {
		case <-step:
		case <-free:
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	s1, err := e.Submit(ctx, Request{Prompt: []int{5}, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := e.Submit(context.Background(), Request{Prompt: []int{6}, MaxTokens: 3, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	step <- struct{}{} // the prefill step, which samples s1's first token
	if _, err := s1.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	close(free)
	// The loop may already hold the next step's inputs, s1 among them: the
	// slot is freed at the step after that one at the latest.
	toks, ev := collect(t, s1)
	if ev.Finish != FinishCancelled || len(toks) > 1 {
		t.Errorf("cancelled request finished with %q after %d more tokens", ev.Finish, len(toks))
	}
	toks, ev = collect(t, s2)
	if len(toks) != 3 || ev.Finish != FinishLength {
		t.Errorf("second request: %d tokens, %q", len(toks), ev.Finish)
	}
	s3, _ := e.Submit(context.Background(), Request{Prompt: []int{7}, IgnoreEOS: true})
	s3.Cancel()
	if _, ev := collect(t, s3); ev.Finish != FinishCancelled {
		t.Errorf("Cancel: finish %q", ev.Finish)
	}
	if st := e.Stats(); st.Active != 0 || st.Cancelled != 2 {
		t.Errorf("stats: %+v", st)
	}
}

// A request whose client gives up while it waits for a slot leaves the
// queue without running, and does not count against the queue bound.
func TestCancelWhileQueued(t *testing.T) {
	lm := testModel(t)
	step, free := make(chan struct{}), make(chan struct{})
	e := newEngine(t, lm, Options{Slots: 1, MaxQueue: 1, BeforeStep: func() {
		select {
		case <-step:
		case <-free:
		}
	}})
	s1, err := e.Submit(context.Background(), Request{Prompt: []int{5}, MaxTokens: 4, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	step <- struct{}{} // s1 is admitted and runs its first step
	if _, err := s1.Recv(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s2, err := e.Submit(ctx, Request{Prompt: []int{6}, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	// The queue is full of a cancelled request: Submit must make room.
	s3, err := e.Submit(context.Background(), Request{Prompt: []int{7}, MaxTokens: 2, IgnoreEOS: true})
	if err != nil {
		t.Fatalf("Submit with only a cancelled request queued: %v", err)
	}
	close(free)
	if toks, ev := collect(t, s2); ev.Finish != FinishCancelled || len(toks) != 0 || ev.Usage.CompletionTokens != 0 {
		t.Errorf("queued request cancelled: %d tokens, finish %q", len(toks), ev.Finish)
	}
	if toks, ev := collect(t, s3); len(toks) != 2 || ev.Finish != FinishLength {
		t.Errorf("s3: %d tokens, finish %q", len(toks), ev.Finish)
	}
	collect(t, s1)
}

// An idle engine runs no steps: the loop sleeps until work arrives.
func TestIdleDoesNotSpin(t *testing.T) {
	lm := testModel(t)
	e := newEngine(t, lm, Options{Slots: 2})
	s, err := e.Submit(context.Background(), Request{Prompt: []int{5}, MaxTokens: 3, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	before := e.Stats()
	time.Sleep(50 * time.Millisecond)
	after := e.Stats()
	if after.Steps != before.Steps || after.Steps != 3 || after.BatchRows != 3 {
		t.Errorf("steps %d then %d (batch rows %d), want 3 and no more while idle", before.Steps, after.Steps, after.BatchRows)
	}
}

// Raw logprobs are the log-softmax of the logits whatever the sampling
// settings; the top list is sorted and contains the greedy token.
func TestRawLogprobs(t *testing.T) {
	lm := testModel(t)
	e := newEngine(t, lm, Options{Slots: 1})
	prompt := []int{5, 9, 11}
	want := greedyRef(t, lm, prompt, 1, -1)[0]
	s, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 1, Logprobs: true, TopLogprobs: 5})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.Recv(context.Background())
	if err != nil || len(ev.Tokens) != 1 {
		t.Fatalf("first event %+v, %v", ev, err)
	}
	ti := ev.Tokens[0]
	if ti.ID != want || len(ti.Top) != 5 || ti.Top[0].Token != want || ti.Top[0].Logprob != ti.Logprob {
		t.Fatalf("token %+v, want greedy %d at the top", ti, want)
	}
	if ti.Logprob >= 0 || ti.Logprob < -10 {
		t.Errorf("logprob %v of the greedy token is not a real log-probability", ti.Logprob)
	}
	var sum float64
	for i, tp := range ti.Top {
		sum += float64(tp.Prob)
		if i > 0 && tp.Logprob > ti.Top[i-1].Logprob {
			t.Errorf("top list not sorted: %+v", ti.Top)
		}
	}
	if sum > 1.0001 {
		t.Errorf("top probabilities sum to %v", sum)
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: prompt, TopLogprobs: 9}); err == nil {
		t.Error("TopLogprobs 9 accepted")
	}
}

// With the demo model's tokenizer, each token's Text concatenates to the
// event texts (no stop strings), and an empty stop string is ignored.
func TestTokenText(t *testing.T) {
	m, err := loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(m.LanguageModel, m.Tokenizer, Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	prompt := m.Tokenizer.Encode("In the beginning God")
	s, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 12, Stop: []string{""}})
	if err != nil {
		t.Fatal(err)
	}
	var text, toks strings.Builder
	var ids []int
	ctx := context.Background()
	for {
		ev, err := s.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		text.WriteString(ev.Text)
		for _, ti := range ev.Tokens {
			toks.WriteString(ti.Text)
			ids = append(ids, ti.ID)
		}
		if ev.Done {
			if ev.Usage.CompletionTokens != 12 {
				t.Errorf("finish %q after %d tokens", ev.Finish, ev.Usage.CompletionTokens)
			}
			break
		}
	}
	full, _ := m.Tokenizer.Decode(append(slices.Clone(prompt), ids...))
	head, _ := m.Tokenizer.Decode(prompt)
	if text.String() != toks.String() || head+text.String() != full || text.Len() == 0 {
		t.Errorf("event text %q, token text %q, decoded %q", text.String(), toks.String(), full)
	}
}

func TestQueueFullAndClose(t *testing.T) {
	lm := testModel(t)
	// The loop is held before its first step until the engine is closed,
	// so that no request can run to its end first, however fast decoding is.
	free := make(chan struct{})
	e, err := New(lm, nil, Options{Slots: 1, MaxQueue: 2, BeforeStep: func() { <-free }})
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
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	// Submit says ErrClosed once Close has marked the engine closed. Until
	// then the queue may take one more request (the loop admitted the first
	// into the slot): it must end cancelled too.
	for {
		s, err := e.Submit(context.Background(), Request{Prompt: []int{5}, IgnoreEOS: true})
		if errors.Is(err, ErrClosed) {
			break
		}
		if err == nil {
			streams = append(streams, s)
		} else if !errors.Is(err, ErrQueueFull) {
			t.Fatalf("Submit while closing: %v", err)
		}
		runtime.Gosched()
	}
	close(free)
	<-closed
	for _, s := range streams {
		if _, ev := collect(t, s); ev.Finish != FinishCancelled {
			t.Errorf("after Close: finish %q", ev.Finish)
		}
	}
	if _, err := e.Submit(context.Background(), Request{Prompt: []int{5}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit after Close: %v", err)
	}
}

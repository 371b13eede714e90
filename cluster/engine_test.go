package cluster

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/runner"
)

// shardConfig is SmallConfig with kv heads enough for 4 shards.
func shardConfig() model.Config {
	c := testmodel.SmallConfig()
	c.NumQHeads, c.NumKVHeads = 8, 4
	return c
}

// shardCluster is the in-process image of `mpirun -np n`: rank r holds
// shard r of the model (model.NewShard over comm.Local), rank 0's with a
// Leader as its Hook, the others following it. stop shuts the followers
// down and fails the test if one of them failed.
func shardCluster(t *testing.T, n int, c model.Config, src model.TensorSource) (lead *model.LanguageModel, fols []*Follower, stop func()) {
	t.Helper()
	cs, err := comm.NewLocal(n)
	if err != nil {
		t.Fatal(err)
	}
	lms := make([]*model.LanguageModel, n)
	for r := range n {
		if lms[r], err = model.NewShard(c, src, cs[r]); err != nil {
			t.Fatal(err)
		}
		lms[r].Pool = parallel.New(1)
		t.Cleanup(lms[r].Pool.Close)
	}
	fols = make([]*Follower, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		fols[r] = NewFollower(cs[r], lms[r], lms[r].NewPagedKVMemory)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, errs[r] = fols[r].Run(); errs[r] != nil {
				cs[r].Abort(1)
			}
		}()
	}
	l := NewLeader(cs[0], time.Hour)
	lms[0].Hook = l
	stop = func() {
		t.Helper()
		if err := l.Close(0); err != nil {
			t.Errorf("closing the leader: %v", err)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute): // a hang, not a measurement
			t.Fatal("the followers did not stop")
		}
		for r, err := range errs {
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}
	}
	return lms[0], fols, stop
}

func newEngine(t *testing.T, lm *model.LanguageModel, o runner.Options) *runner.Engine {
	t.Helper()
	e, err := runner.New(lm, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// reply is a request's outcome.
type reply struct {
	toks []int
	lps  []float32
	u    runner.Usage
	err  error
}

func collect(t *testing.T, s *runner.Stream) reply {
	t.Helper()
	r, err := receive(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// receive drains s.
func receive(s *runner.Stream) (reply, error) {
	var r reply
	// A deadline only to turn a hang into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		ev, err := s.Recv(ctx)
		if err != nil {
			return r, err
		}
		for _, ti := range ev.Tokens {
			r.toks = append(r.toks, ti.ID)
			r.lps = append(r.lps, ti.Logprob)
		}
		if ev.Done {
			r.u, r.err = ev.Usage, ev.Err
			return r, nil
		}
	}
}

func submit(t *testing.T, e *runner.Engine, req runner.Request) *runner.Stream {
	t.Helper()
	s, err := e.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sameReply fails unless got has want's tokens and logprobs, bit for bit.
func sameReply(t *testing.T, what string, got, want reply) {
	t.Helper()
	if got.err != nil || want.err != nil {
		t.Fatalf("%s: %v; the reference: %v", what, got.err, want.err)
	}
	if !slices.Equal(got.toks, want.toks) || len(got.lps) != len(want.lps) {
		t.Fatalf("%s: tokens %v, want %v", what, got.toks, want.toks)
	}
	for i := range want.lps {
		if math.Float32bits(got.lps[i]) != math.Float32bits(want.lps[i]) {
			t.Fatalf("%s: logprob %d is %g, want %g", what, i, got.lps[i], want.lps[i])
		}
	}
}

func randTokens(rng *rand.Rand, n, vocab int) []int {
	ts := make([]int, n)
	for i := range ts {
		ts[i] = 3 + rng.IntN(vocab-3)
	}
	return ts
}

// TestEngineOverClusterUsesPrefixCache: a runner.Engine on rank 0 of a
// cluster of 2 and 4 shards, its prefix cache on, answers a multi-turn
// chat with the tokens and logprobs (bit for bit) of the same split in
// one process (model.NewTP) with the cache on and off, taking the earlier
// turns from the cache: each turn's match ends mid-page, so its first
// write copies the cached page. Then in a pool too small for its requests
// (evictions, preemptions, cached pages taken back) every request's bits
// are those of a single slot without the cache.
func TestEngineOverClusterUsesPrefixCache(t *testing.T) {
	c := shardConfig()
	src := testmodel.Random(c, 51)
	for _, n := range []int{2, 4} {
		lead, fols, stop := shardCluster(t, n, c, src)
		tp, err := model.NewTP(c, src, n, parallel.New(1))
		if err != nil {
			t.Fatal(err)
		}
		opts := runner.Options{Slots: 2}
		cl := newEngine(t, lead, opts)
		on := newEngine(t, tp, opts)
		opts.NoPromptCache = true
		off := newEngine(t, tp, opts)

		rng := rand.New(rand.NewPCG(uint64(n), 9))
		req := func(p []int) runner.Request {
			return runner.Request{Prompt: p, MaxTokens: 5, IgnoreEOS: true, Logprobs: true}
		}
		// Two chats, turn by turn: each turn starts in the slot the
		// other chat's last turn left, on its own chat's cached pages.
		chats := make([][]int, 2)
		cached := 0
		for turn := range 8 {
			chat := &chats[turn%2]
			// The slot held the chat so far but the last answer's last
			// token: all of that is cached.
			want := max(len(*chat)-1, 0)
			*chat = append(*chat, randTokens(rng, 3+rng.IntN(5), c.VocabSize)...)
			got := collect(t, submit(t, cl, req(*chat)))
			wantOn := collect(t, submit(t, on, req(*chat)))
			wantOff := collect(t, submit(t, off, req(*chat)))
			sameReply(t, "cache on in process", got, wantOn)
			sameReply(t, "cache off in process", got, wantOff)
			if got.u.CachedTokens != want || wantOn.u.CachedTokens != want {
				t.Fatalf("n=%d turn %d: %d cached tokens, %d in process, want %d", n, turn, got.u.CachedTokens, wantOn.u.CachedTokens, want)
			}
			if want%model.PageRows == 0 && want > 0 {
				t.Errorf("n=%d turn %d: the match of %d tokens ends at a page boundary: no copy", n, turn, want)
			}
			cached += got.u.CachedTokens
			*chat = append(*chat, got.toks...)
		}
		if st := cl.Stats(); st.CachedTokens != int64(cached) || cached < 3*16 {
			t.Errorf("n=%d: %d cached tokens in the stats, %d in the turns", n, st.CachedTokens, cached)
		}
		cl.Close()
		on.Close()
		off.Close()

		// A pool of one context for three slots: requests wait, are
		// preempted and take cached pages back.
		small := newEngine(t, lead, runner.Options{Slots: 3, KVTokens: 4 * model.PageRows})
		one := newEngine(t, tp, runner.Options{Slots: 1, NoPromptCache: true})
		var prompts [][]int
		for range 6 {
			prompts = append(prompts, randTokens(rng, 10+rng.IntN(15), c.VocabSize))
		}
		prompts = append(prompts, prompts[0], prompts[1])
		long := func(p []int) runner.Request {
			return runner.Request{Prompt: p, MaxTokens: 56 - len(p), IgnoreEOS: true, Logprobs: true}
		}
		var streams []*runner.Stream
		for _, p := range prompts {
			streams = append(streams, submit(t, small, long(p)))
		}
		got := make([]reply, len(streams))
		errs := make([]error, len(streams))
		var wg sync.WaitGroup
		for i, s := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = receive(s)
			}()
		}
		wg.Wait()
		for i, p := range prompts {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			sameReply(t, "a request in a small pool", got[i], collect(t, submit(t, one, long(p))))
		}
		if st := small.Stats(); st.Preempted == 0 {
			t.Errorf("n=%d: no request was preempted: the small pool went untested", n)
		}
		// A prompt, another in its slot, then the first again: its
		// cached pages come back to the slot the other used.
		p, q := randTokens(rng, 20, c.VocabSize), randTokens(rng, 10, c.VocabSize)
		for i, x := range [][]int{p, q, p} {
			r := collect(t, submit(t, small, req(x)))
			sameReply(t, "a prompt in a small pool", r, collect(t, submit(t, one, req(x))))
			if want := i / 2 * (len(p) - 1); r.u.CachedTokens != want {
				t.Errorf("n=%d: %d cached tokens of a prompt of %d, want %d", n, r.u.CachedTokens, len(x), want)
			}
		}
		small.Close()
		one.Close()
		tp.Close()
		stop()
		if fols[1].Calls == 0 {
			t.Errorf("n=%d: the followers ran no call", n)
		}
	}
}

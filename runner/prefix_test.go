package runner

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// sameBits reports the first difference of two runs' tokens and logprobs.
func sameBits(t *testing.T, what string, got, want []int, glp, wlp []float32) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: tokens %v, want %v", what, got, want)
		return
	}
	for i := range wlp {
		if math.Float32bits(glp[i]) != math.Float32bits(wlp[i]) {
			t.Errorf("%s: logprob %d is %g, want %g", what, i, glp[i], wlp[i])
			return
		}
	}
}

// The case: the second turn of a 560-token chat on the demo model
// prefills only its new tokens (≥ 5× fewer than the first turn), with the
// same tokens and logprobs as without the cache, in the serving default
// f16 cache.
func TestPrefixCacheChatTurn(t *testing.T) {
	m, err := loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
	if err != nil {
		t.Fatal(err)
	}
	lm := *m.LanguageModel
	lm.Config.SequenceLen = 1024 // the demo's 256 does not hold the chat; RoPE goes on
	opts := Options{Slots: 2, KType: tensor.F16, VType: tensor.F16}
	cached := newEngine(t, &lm, opts)
	opts.NoPromptCache = true
	plain := newEngine(t, &lm, opts)

	text := strings.Repeat("And God said, Let there be light: and there was light. And God saw the light, that it was good. ", 30)
	ids := m.Tokenizer.Encode(text)
	if len(ids) < 560 {
		t.Fatalf("only %d tokens", len(ids))
	}
	turn1 := ids[:540]
	req := func(p []int) Request { return Request{Prompt: p, MaxTokens: 20, IgnoreEOS: true, Logprobs: true} }
	before := cached.Stats().PrefillTokens
	answer, _, u1 := runOne(t, cached, req(turn1))
	first := cached.Stats().PrefillTokens - before
	turn2 := append(append(slices.Clone(turn1), answer...), m.Tokenizer.Encode(" And the evening and the morning were the first day.")...)
	if len(turn1)+len(answer) != 560 {
		t.Fatalf("the first turn is %d tokens", len(turn1)+len(answer))
	}
	before = cached.Stats().PrefillTokens
	got, glp, u2 := runOne(t, cached, req(turn2))
	second := cached.Stats().PrefillTokens - before
	want, wlp, _ := runOne(t, plain, req(turn2))
	sameBits(t, "second turn", got, want, glp, wlp)
	if u1.CachedTokens != 0 || u2.CachedTokens != len(turn1)+len(answer)-1 {
		t.Errorf("cached tokens %d then %d, want 0 then %d", u1.CachedTokens, u2.CachedTokens, len(turn1)+len(answer)-1)
	}
	if int(second) != len(turn2)-u2.CachedTokens || first < 5*second {
		t.Errorf("prefilled %d tokens in the first turn, %d in the second (of %d): want ≥ 5× fewer", first, second, len(turn2))
	}
}

// Two requests in two slots share a system prompt: the second, admitted
// while the first still decodes, attaches the first's prompt pages (the
// page the prompts part in copied) and prefills only its own question,
// with the same bits as without the cache.
func TestPrefixCacheSharedSystemPrompt(t *testing.T) {
	c := testmodel.SmallConfig()
	c.SequenceLen = 128
	lm, err := model.New(c, testmodel.Random(c, 43))
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{}, 8)
	var once sync.Once
	e := newEngine(t, lm, Options{Slots: 2, BeforeStep: func() { <-gate }})
	t.Cleanup(func() { once.Do(func() { close(gate) }) })
	plain := newEngine(t, lm, Options{Slots: 1, NoPromptCache: true})

	rng := rand.New(rand.NewPCG(1, 2))
	sys := randTokens(rng, 40, c.VocabSize)
	qa := append(slices.Clone(sys), randTokens(rng, 30, c.VocabSize)...)
	qb := append(slices.Clone(sys), randTokens(rng, 30, c.VocabSize)...)
	qb[40] = (qa[40] + 1) % c.VocabSize // the questions differ from their first token
	req := func(p []int) Request { return Request{Prompt: p, MaxTokens: 6, IgnoreEOS: true, Logprobs: true} }

	sa, err := e.Submit(context.Background(), req(qa))
	if err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{} // step 1: a's prompt
	ev, err := sa.Recv(context.Background())
	if err != nil || len(ev.Tokens) != 1 {
		t.Fatalf("a's first event %+v, %v", ev, err)
	}
	sb, err := e.Submit(context.Background(), req(qb))
	if err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{}              // step 2: a decodes, then b is admitted
	once.Do(func() { close(gate) }) // and the rest runs freely
	var alp []float32
	atoks, _ := collectWith(t, sa, func(ti TokenInfo) { alp = append(alp, ti.Logprob) })
	atoks = append([]int{ev.Tokens[0].ID}, atoks...)
	alp = append([]float32{ev.Tokens[0].Logprob}, alp...)
	var blp []float32
	btoks, bev := collectWith(t, sb, func(ti TokenInfo) { blp = append(blp, ti.Logprob) })
	if sb.slot == sa.slot {
		t.Errorf("both requests ran in slot %d", sa.slot)
	}
	if bev.Usage.CachedTokens != len(sys) {
		t.Errorf("b reused %d tokens, want the %d of the system prompt", bev.Usage.CachedTokens, len(sys))
	}
	for _, r := range []struct {
		name string
		p    []int
		toks []int
		lp   []float32
	}{{"a", qa, atoks, alp}, {"b", qb, btoks, blp}} {
		want, wlp, _ := runOne(t, plain, req(r.p))
		sameBits(t, r.name, r.toks, want, r.lp, wlp)
	}
}

func randTokens(rng *rand.Rand, n, vocab int) []int {
	ts := make([]int, n)
	for i := range ts {
		ts[i] = 3 + rng.IntN(vocab-3)
	}
	return ts
}

// A pool smaller than the slots' contexts: requests wait for pages, the
// newest running one is preempted when the others outgrow the pool and
// recomputed later, cached pages are evicted, and every request gets the
// same bits as with room for all.
func TestSmallPoolWaitsAndPreempts(t *testing.T) {
	lm := testModel(t) // context 48: 3 pages
	for _, cache := range []bool{true, false} {
		small := newEngine(t, lm, Options{Slots: 3, KVTokens: 4 * model.PageRows, NoPromptCache: !cache})
		big := newEngine(t, lm, Options{Slots: 1, NoPromptCache: true})
		rng := rand.New(rand.NewPCG(3, uint64(len(t.Name()))))
		var prompts [][]int
		for i := 0; i < 6; i++ {
			prompts = append(prompts, randTokens(rng, 10+rng.IntN(15), lm.Config.VocabSize))
		}
		prompts = append(prompts, prompts[0], prompts[1]) // repeats, perhaps cached
		req := func(p []int) Request {
			return Request{Prompt: p, MaxTokens: 40 - len(p), IgnoreEOS: true, Logprobs: true}
		}
		var streams []*Stream
		for _, p := range prompts {
			s, err := small.Submit(context.Background(), req(p))
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
		var got [][]int
		var lps [][]float32
		for i, s := range streams {
			var lp []float32
			toks, ev := collectWith(t, s, func(ti TokenInfo) { lp = append(lp, ti.Logprob) })
			if ev.Finish != FinishLength {
				t.Errorf("request %d: finish %q (%v)", i, ev.Finish, ev.Err)
			}
			got, lps = append(got, toks), append(lps, lp)
		}
		// The engines share the model, whose Forward runs one at a time:
		// the reference runs after the small engine is done.
		for i, p := range prompts {
			want, wlp, _ := runOne(t, big, req(p))
			sameBits(t, "request", got[i], want, lps[i], wlp)
		}
		st := small.Stats()
		if st.Preempted == 0 {
			t.Errorf("cache %v: no request was preempted", cache)
		}
		if st.KVPagesFree+st.KVPagesCached != st.KVPages && cache || !cache && st.KVPagesFree != st.KVPages {
			t.Errorf("cache %v: after the requests %d pages free, %d cached of %d", cache, st.KVPagesFree, st.KVPagesCached, st.KVPages)
		}
	}
}

// Eviction takes the least recently used unreferenced pages, leaves first,
// and never a page a slot holds.
func TestPrefixCacheEvictsLRU(t *testing.T) {
	lm := testModel(t)
	c := lm.Config
	mem, err := model.NewPagedKVMemory(&c, model.KVOptions{Slots: 2, Pages: 8})
	if err != nil {
		t.Fatal(err)
	}
	pc := newPrefixCache(mem)
	rng := rand.New(rand.NewPCG(4, 4))
	a, b := randTokens(rng, 40, c.VocabSize), randTokens(rng, 40, c.VocabSize)
	for _, toks := range [][]int{a, b} {
		if _, err := lm.Forward(mem, []model.Input{{Slot: 0, Tokens: toks}}); err != nil {
			t.Fatal(err)
		}
		pc.insert(toks, 0, true)
		mem.Reset(0)
	}
	if pc.size() != 6 || mem.FreePages() != 2 || pc.evictable() != 6 {
		t.Fatalf("%d pages cached, %d free, %d evictable; want 6, 2, 6", pc.size(), mem.FreePages(), pc.evictable())
	}
	if _, n := pc.match(a, 100); n != 40 { // a is now the more recent
		t.Fatalf("a matches %d tokens", n)
	}
	if !pc.evict(4) || mem.FreePages() != 4 {
		t.Fatalf("evict(4): %d free", mem.FreePages())
	}
	if _, n := pc.match(b, 100); n != 16 {
		t.Errorf("after evicting 2 pages b matches %d tokens, want 16 (its last two pages, older than a's, went)", n)
	}
	if _, n := pc.match(a, 100); n != 40 {
		t.Errorf("a, used more recently, matches %d tokens, want 40", n)
	}
	// A slot holding a's pages keeps them from eviction.
	pages, n := pc.match(a, 39)
	if err := mem.Attach(1, pages, n); err != nil {
		t.Fatal(err)
	}
	if pc.evict(8) {
		t.Error("evict(8) succeeded with a's pages held by a slot")
	}
	if _, n := pc.match(a, 100); n != 40 || mem.FreePages() != 5 || pc.evictable() != 0 {
		t.Errorf("a matches %d tokens, %d pages free, %d evictable; want 40, 5, 0", n, mem.FreePages(), pc.evictable())
	}
	mem.Reset(1)
	if !pc.evict(8) || pc.size() != 0 {
		t.Errorf("with no slot holding pages evict(8) left %d cached", pc.size())
	}
}

// The prefix cache on a model split in two shards (model.NewTP), whose
// memories share one book of pages: a repeated prefix is reused and the
// bits are those without the cache.
func TestPrefixCacheTP(t *testing.T) {
	c := testmodel.SmallConfig()
	c.SequenceLen = 64
	tp, err := model.NewTP(c, testmodel.Random(c, 44), 2, parallel.New(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tp.Close)
	cached := newEngine(t, tp, Options{Slots: 2, KType: tensor.BF16, VType: tensor.BF16})
	plain := newEngine(t, tp, Options{Slots: 2, KType: tensor.BF16, VType: tensor.BF16, NoPromptCache: true})
	rng := rand.New(rand.NewPCG(5, 6))
	p := randTokens(rng, 30, c.VocabSize)
	req := func(p []int) Request { return Request{Prompt: p, MaxTokens: 5, IgnoreEOS: true, Logprobs: true} }
	first, _, _ := runOne(t, cached, req(p))
	turn := append(append(slices.Clone(p), first...), randTokens(rng, 7, c.VocabSize)...)
	got, glp, u := runOne(t, cached, req(turn))
	want, wlp, _ := runOne(t, plain, req(turn))
	sameBits(t, "TP second turn", got, want, glp, wlp)
	if u.CachedTokens != len(p)+len(first)-1 {
		t.Errorf("%d cached tokens, want %d", u.CachedTokens, len(p)+len(first)-1)
	}
	// The shards' memories are the plan's bytes, not a whole model's more.
	if b := cached.mem.Bytes(); float64(b) != cached.KV().Bytes {
		t.Errorf("the TP model's KV memory takes %d bytes, planned %g", b, cached.KV().Bytes)
	}
}

// A chat turn in a pool that holds just one context: the next turn's
// prompt attaches the previous turn's pages, the last one partial, and
// writes on into it. The pool has no page for a copy; the cache gives the
// page up to the request instead (it would otherwise be preempted and
// readmitted forever).
func TestPrefixCacheFullPoolContinues(t *testing.T) {
	lm := testModel(t) // context 48: 3 pages
	e := newEngine(t, lm, Options{Slots: 1, KVTokens: 48})
	plain := newEngine(t, lm, Options{Slots: 1, NoPromptCache: true})
	rng := rand.New(rand.NewPCG(7, 8))
	p := randTokens(rng, 20, lm.Config.VocabSize)
	req := func(p []int, n int) Request { return Request{Prompt: p, MaxTokens: n, IgnoreEOS: true, Logprobs: true} }
	first, _, _ := runOne(t, e, req(p, 21)) // 40 rows held: 2 pages and 8 rows
	turn := append(append(slices.Clone(p), first...), 9, 10)
	got, glp, u := runOne(t, e, req(turn, 3))
	want, wlp, _ := runOne(t, plain, req(turn, 3))
	sameBits(t, "second turn", got, want, glp, wlp)
	if u.CachedTokens != 40 {
		t.Errorf("%d cached tokens, want 40", u.CachedTokens)
	}
	if st := e.Stats(); st.Preempted != 0 {
		t.Errorf("%d preemptions", st.Preempted)
	}
}

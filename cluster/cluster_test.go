package cluster

import (
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// recorder is a follower's model that keeps each call's logits.
type recorder struct {
	lm     *model.LanguageModel
	logits [][]float32
}

func (r *recorder) Forward(mem *model.KVMemory, in []model.Input) ([]float32, error) {
	out, err := r.lm.Forward(mem, in)
	r.logits = append(r.logits, slices.Clone(out))
	return out, err
}

func newModel(t *testing.T, c model.Config) *model.LanguageModel {
	t.Helper()
	lm, err := model.New(c, testmodel.Random(c, 7))
	if err != nil {
		t.Fatal(err)
	}
	lm.Pool = parallel.New(1) // the ranks' Forward calls run at once
	t.Cleanup(lm.Pool.Close)
	return lm
}

// group starts n-1 followers of unsharded copies of the model on an
// in-process group and returns rank 0's endpoint and a wait for the
// followers' results.
func group(t *testing.T, n int, c model.Config, every time.Duration) (comm.Comm, []*recorder, []*Follower, func() ([]int, []error)) {
	cs, err := comm.NewLocal(n)
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]*recorder, n)
	fols := make([]*Follower, n)
	codes := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		recs[r] = &recorder{lm: newModel(t, c)}
		fols[r] = NewFollower(cs[r], recs[r], recs[r].lm.NewPagedKVMemory)
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[r], errs[r] = fols[r].Run()
			if errs[r] != nil {
				cs[r].Abort(1)
			}
		}()
	}
	wait := func() ([]int, []error) {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute): // a hang, not a measurement
			t.Fatal("the followers did not stop")
		}
		return codes, errs
	}
	return cs[0], recs, fols, wait
}

// TestFollowersMirrorTheLeader runs a runner-like script of batched calls,
// resets and rewinds on rank 0 and checks that every follower computed the
// same logits on a memory at the same steps.
func TestFollowersMirrorTheLeader(t *testing.T) {
	c := testmodel.SmallConfig()
	for _, n := range []int{2, 4} {
		c0, recs, fols, wait := group(t, n, c, time.Hour)
		lm := newModel(t, c)
		lead := NewLeader(c0, time.Hour)
		lm.Hook = lead
		mem, err := model.NewKVMemory(&c, 3, 32)
		if err != nil {
			t.Fatal(err)
		}
		var want [][]float32
		steps := [][]int{}
		call := func(in ...model.Input) {
			out, err := lm.Forward(mem, in)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, slices.Clone(out))
			steps = append(steps, []int{mem.Step(0), mem.Step(1), mem.Step(2)})
		}
		call(model.Input{Slot: 0, Tokens: []int{1, 2, 3, 4}, AllLogits: true}, model.Input{Slot: 2, Tokens: []int{5, 0, 7}})
		call(model.Input{Slot: 0, Tokens: []int{8}}, model.Input{Slot: 2, Tokens: []int{9}}, model.Input{Slot: 1, Tokens: []int{10, 11}})
		mem.Reset(2)                               // a new request in slot 2
		if err := mem.Truncate(0, 2); err != nil { // a cached prefix of 2 tokens in slot 0
			t.Fatal(err)
		}
		call(model.Input{Slot: 2, Tokens: []int{12, 13}}, model.Input{Slot: 0, Tokens: []int{14}})
		call(model.Input{Slot: 1, Tokens: []int{15}})
		if _, err := lm.Forward(mem, []model.Input{{Slot: 1, Tokens: []int{c.VocabSize}}}); err == nil {
			t.Fatal("a bad token was accepted")
		} // refused on rank 0 before anything is sent
		// A second memory (bench makes one per shape) has its own copy, of
		// the same page count and element types.
		mem2, err := model.NewPagedKVMemory(&c, model.KVOptions{Slots: 1, SeqLen: 8, Pages: 3, KType: tensor.F16, VType: tensor.BF16})
		if err != nil {
			t.Fatal(err)
		}
		out, err := lm.Forward(mem2, []model.Input{{Slot: 0, Tokens: []int{3}}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, slices.Clone(out))
		if err := lead.Close(5); err != nil {
			t.Fatal(err)
		}
		codes, errs := wait()
		for r := 1; r < n; r++ {
			if errs[r] != nil || codes[r] != 5 {
				t.Fatalf("n=%d rank %d: code %d, %v; want 5", n, r, codes[r], errs[r])
			}
			if len(recs[r].logits) != len(want) {
				t.Fatalf("n=%d rank %d ran %d calls, want %d", n, r, len(recs[r].logits), len(want))
			}
			for i := range want {
				if d := testmodel.MaxAbsDiff(recs[r].logits[i], want[i]); d != 0 || len(recs[r].logits[i]) != len(want[i]) {
					t.Fatalf("n=%d rank %d call %d: logits differ by %g", n, r, i, d)
				}
			}
			m := fols[r].Memory(1)
			if got := []int{m.Step(0), m.Step(1), m.Step(2)}; !slices.Equal(got, steps[len(steps)-1]) {
				t.Fatalf("n=%d rank %d: steps %v, want %v", n, r, got, steps[len(steps)-1])
			}
			if m2 := fols[r].Memory(2); m2 == nil || m2.SeqLen != 8 || m2.Pages() != 3 || m2.KType != tensor.F16 || m2.VType != tensor.BF16 {
				t.Fatalf("n=%d rank %d: no copy of the second memory's shape: %+v", n, r, m2)
			}
		}
		if _, err := lm.Forward(mem, []model.Input{{Slot: 1, Tokens: []int{1}}}); err == nil {
			t.Fatal("Forward after Close was accepted")
		}
	}
}

func TestHeartbeatWhileIdle(t *testing.T) {
	c := testmodel.SmallConfig()
	c0, _, fols, wait := group(t, 3, c, time.Millisecond)
	lead := NewLeader(c0, time.Millisecond)
	deadline := time.Now().Add(time.Minute) // a hang guard, not a measurement
	for lead.Heartbeats() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeats")
		}
		time.Sleep(time.Millisecond)
	}
	if err := lead.Close(0); err != nil {
		t.Fatal(err)
	}
	_, errs := wait()
	for r := 1; r < 3; r++ {
		if errs[r] != nil || fols[r].Heartbeats != lead.Heartbeats() {
			t.Fatalf("rank %d: %d heartbeats of %d, %v", r, fols[r].Heartbeats, lead.Heartbeats(), errs[r])
		}
	}
}

// TestLeaderFailsWhenAFollowerQuits: a follower that cannot go on aborts
// the group, and rank 0's next Forward fails instead of hanging.
func TestLeaderFailsWhenAFollowerQuits(t *testing.T) {
	c := testmodel.SmallConfig()
	c0, _, _, wait := group(t, 2, c, time.Hour)
	lm := newModel(t, c)
	lm.Hook = NewLeader(c0, time.Hour)
	big, err := model.NewKVMemory(&c, 1, 8)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1 makes its memory with a different shape than rank 0 says:
	// simulate with a slot the follower's memory lacks.
	raw := rawCommand(kindForward, 1, 1, 1, 8, forwardPayload(nil, nil, []int{0}, [][]int{{0}}, [][4]int{{3, 0, 0, 1}}, [][]int{{1}}))
	// Rank 1 may abort before rank 0 leaves the second broadcast.
	if c0.Bcast(raw[0], 0) == nil {
		c0.Bcast(raw[1], 0)
	}
	_, errs := wait()
	if errs[1] == nil {
		t.Fatal("rank 1 followed a call to slot 3 of 1")
	}
	if _, err := lm.Forward(big, []model.Input{{Slot: 0, Tokens: []int{1}}}); !errors.Is(err, comm.ErrAborted) {
		t.Fatalf("rank 0's Forward after rank 1 quit: %v, want ErrAborted", err)
	}
}

func rawCommand(kind, seq, mem, slots, seqLen uint32, payload []byte) [2][]byte {
	h := header{kind: kind, seq: seq, mem: mem, slots: slots, seqLen: seqLen, payload: uint32(len(payload)),
		pages: uint32(model.KVPages(int(slots), int(seqLen)))}
	b := make([]byte, headerBytes)
	h.encode(b)
	return [2][]byte{b, payload}
}

// forwardPayload encodes a forward call (see Leader.BeginForward): a nil
// table is one the follower holds.
func forwardPayload(drop []uint32, copies [][2]int, steps []int, tables [][]int, ins [][4]int, toks [][]int) []byte {
	var p []byte
	p = binary.LittleEndian.AppendUint32(p, uint32(len(drop)))
	for _, d := range drop {
		p = binary.LittleEndian.AppendUint32(p, d)
	}
	p = binary.LittleEndian.AppendUint32(p, uint32(len(copies)))
	for _, c := range copies {
		p = binary.LittleEndian.AppendUint32(p, uint32(c[0]))
		p = binary.LittleEndian.AppendUint32(p, uint32(c[1]))
	}
	for i, st := range steps {
		p = binary.LittleEndian.AppendUint32(p, uint32(st))
		if i >= len(tables) || tables[i] == nil {
			p = binary.LittleEndian.AppendUint32(p, unchanged)
			continue
		}
		p = binary.LittleEndian.AppendUint32(p, uint32(len(tables[i])))
		for _, pg := range tables[i] {
			p = binary.LittleEndian.AppendUint32(p, uint32(pg))
		}
	}
	p = binary.LittleEndian.AppendUint32(p, uint32(len(ins)))
	for i, in := range ins {
		for _, v := range in {
			p = binary.LittleEndian.AppendUint32(p, uint32(v))
		}
		for _, t := range toks[i] {
			p = binary.LittleEndian.AppendUint32(p, uint32(t))
		}
	}
	return p
}

// TestFollowerRefusesBadCommands: a command the follower cannot carry out
// is an error (its caller aborts the group), never a panic or a wrong
// answer.
func TestFollowerRefusesBadCommands(t *testing.T) {
	c := testmodel.SmallConfig()
	ok := forwardPayload(nil, nil, []int{0}, [][]int{{0}}, [][4]int{{0, 0, 0, 2}}, [][]int{{1, 2}})
	two := forwardPayload(nil, nil, []int{0}, [][]int{{0}}, [][4]int{{0, 0, 0, 3}, {1, 0, 0, 1}}, [][]int{{1, 2, 3}, {2}})
	manyInputs := forwardPayload(nil, nil, []int{0}, nil, nil, nil)
	binary.LittleEndian.PutUint32(manyInputs[len(manyInputs)-4:], 1<<20)
	one := func(copies [][2]int, step int, table []int, in [4]int, toks ...int) []byte {
		return forwardPayload(nil, copies, []int{step}, [][]int{table}, [][4]int{in}, [][]int{toks})
	}
	for _, tc := range []struct {
		name string
		cmds [][2][]byte
		want string
	}{
		{"magic", [][2][]byte{{make([]byte, headerBytes), nil}}, "magic"},
		{"lost command", [][2][]byte{rawCommand(kindHeartbeat, 2, 0, 0, 0, nil)}, "lost"},
		{"kind", [][2][]byte{rawCommand(9, 1, 0, 0, 0, nil)}, "unknown command"},
		{"cut short", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, two[:len(two)-8])}, "cut short"},
		{"inputs cut short", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, ok[:26])}, "1 inputs in 2 bytes"},
		{"tokens cut short", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, ok[:len(ok)-3])}, "an input of 2 tokens in 5 bytes"},
		{"slot", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 0, []int{0}, [4]int{1, 0, 0, 1}, 1))}, "slot 1 of 1"},
		{"rows without pages", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 3, nil, [4]int{0, 3, 0, 1}, 1))}, "MirrorSlot of 3 rows in 0 pages"},
		{"start", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 0, []int{0}, [4]int{0, 2, 0, 1}, 1))}, "slot 0 is at step 0, the call says 2"},
		{"steps cut short", [][2][]byte{rawCommand(kindForward, 1, 1, 3, 8, forwardPayload(nil, nil, []int{0}, nil, nil, nil))}, "cut short"},
		{"many tokens", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 0, []int{0}, [4]int{0, 0, 0, 1 << 30}, 1))}, "tokens in"},
		{"many inputs", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, manyInputs)}, "1048576 inputs in 0 bytes"},
		{"many copies", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(slices.Repeat([][2]int{{0, 0}}, 3), 0, []int{0}, [4]int{0, 0, 0, 1}, 1)[:20])}, "3 page copies in 12 bytes"},
		{"copy of a page out of range", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one([][2]int{{0, 1}}, 0, []int{0}, [4]int{0, 0, 0, 1}, 1))}, "CopyPage of page 1 to 0, of 1"},
		{"page out of range", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 0, []int{1}, [4]int{0, 0, 0, 1}, 1))}, "MirrorSlot of page 1 of 1"},
		{"long table", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 0, []int{0, 0}, [4]int{0, 0, 0, 1}, 1))}, "a page table of 2 pages"},
		{"huge table", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 0, make([]int, 1<<20), [4]int{0, 0, 0, 1}, 1)[:24])}, "a page table of 1048576 pages in 8 bytes"},
		{"rows the table does not hold", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 0, nil, [4]int{0, 0, 0, 1}, 1))}, "takes no pages of its own"},
		{"memory shape", [][2][]byte{
			rawCommand(kindForward, 1, 1, 1, 8, ok),
			rawCommand(kindForward, 2, 1, 2, 8, ok)}, "1 × 8 in 1 pages of F32/F32 here, 2 × 8 in 2 pages of F32/F32 on rank 0"},
		{"model refuses", [][2][]byte{rawCommand(kindForward, 1, 1, 1, 8, one(nil, 0, []int{0}, [4]int{0, 0, 0, 1}, c.VocabSize))}, "vocabulary"},
		{"no memory", [][2][]byte{rawCommand(kindForward, 1, 1, 0, 8, ok)}, "KV memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c0, _, _, wait := group(t, 2, c, time.Hour)
			for _, cmd := range tc.cmds {
				if c0.Bcast(cmd[0], 0) != nil {
					break
				}
				if len(cmd[1]) > 0 && c0.Bcast(cmd[1], 0) != nil {
					break
				}
			}
			_, errs := wait()
			if errs[1] == nil || !strings.Contains(errs[1].Error(), tc.want) {
				t.Fatalf("follower: %v, want an error with %q", errs[1], tc.want)
			}
		})
	}
}

func TestAgree(t *testing.T) {
	base := Identity{Build: "grok dev+0123", Config: Digest("cfg"), Tensors: Digest("t"), Files: Digest("f")}
	other := base
	other.Build = "grok dev+4567"
	other.Tensors = Digest("t2")
	for _, tc := range []struct {
		name string
		ids  []Identity
		want []string // in every rank's error; nil: agreement
	}{
		{"same", []Identity{base, base, base}, nil},
		{"rank 2 differs", []Identity{base, base, other}, []string{"rank 2 has the build, the tensor table different"}},
		{"files", []Identity{base, {Build: base.Build, Config: base.Config, Tensors: base.Tensors}}, []string{"rank 1 has the model files' sizes different"}},
		{"none opened", []Identity{{State: NotOpened}, {State: NotOpened}}, nil},
		{"rank 1 failed", []Identity{base, {State: Failed}, base}, []string{"rank 1 could not open the model"}},
		{"rank 0 failed", []Identity{{State: Failed}, base}, []string{"rank 0 could not open the model"}},
		{"rank 1 ended early", []Identity{base, {State: NotOpened}}, []string{"rank 1 ended before opening the model"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, err := comm.NewLocal(len(tc.ids))
			if err != nil {
				t.Fatal(err)
			}
			errs := make([]error, len(cs))
			var wg sync.WaitGroup
			for r := range cs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[r] = Agree(cs[r], tc.ids[r]) }()
			}
			wg.Wait()
			for r, err := range errs {
				if tc.want == nil {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
					continue
				}
				if err == nil {
					t.Fatalf("rank %d agreed", r)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("rank %d: %v, want %q", r, err, w)
					}
				}
			}
			if tc.name == "rank 2 differs" && !strings.Contains(errs[2].Error(), `this rank runs "grok dev+4567", rank 0 "grok dev+0123"`) {
				t.Fatalf("rank 2's error does not name the builds: %v", errs[2])
			}
		})
	}
}

// TestFollowersFreeWhatTheLeaderFreed: a slot rank 0 resets without a call
// (a finished request) gives its pages back on the followers before the
// next call takes pages, so a pool that rank 0 can reuse does not run out
// on them.
func TestFollowersFreeWhatTheLeaderFreed(t *testing.T) {
	c := testmodel.SmallConfig()
	c0, recs, _, wait := group(t, 2, c, time.Hour)
	lm := newModel(t, c)
	lead := NewLeader(c0, time.Hour)
	lm.Hook = lead
	mem, err := lm.NewPagedKVMemory(model.KVOptions{Slots: 2, SeqLen: 32, Pages: 2})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]int, 20) // two pages of 16 rows
	for i := range toks {
		toks[i] = 1 + i
	}
	var want [][]float32
	for _, slot := range []int{0, 1, 0} {
		out, err := lm.Forward(mem, []model.Input{{Slot: slot, Tokens: toks}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, slices.Clone(out))
		mem.Reset(slot) // the request is done: its pages are free on rank 0
	}
	if err := lead.Close(0); err != nil {
		t.Fatal(err)
	}
	_, errs := wait()
	if errs[1] != nil {
		t.Fatalf("follower: %v", errs[1])
	}
	for i := range want {
		if d := testmodel.MaxAbsDiff(recs[1].logits[i], want[i]); d != 0 {
			t.Fatalf("call %d: logits differ by %g", i, d)
		}
	}
}

// TestFollowersMirrorCachedPages: what a prefix cache does to rank 0's
// memory between calls (keep a finished slot's pages, Attach them to
// another slot, a match ending mid-page that the next write copies,
// ReplacePage, pages freed and taken again) the followers follow: every
// call computes the same logits on every rank, their page tables are rank
// 0's, and a call the pool has no pages for is refused on rank 0 before
// anything is sent.
func TestFollowersMirrorCachedPages(t *testing.T) {
	c := testmodel.SmallConfig()
	for _, n := range []int{2, 4} {
		c0, recs, fols, wait := group(t, n, c, time.Hour)
		lm := newModel(t, c)
		lead := NewLeader(c0, time.Hour)
		lm.Hook = lead
		mem, err := lm.NewPagedKVMemory(model.KVOptions{Slots: 3, SeqLen: 48, Pages: 8})
		if err != nil {
			t.Fatal(err)
		}
		seq := func(from, n int) []int {
			s := make([]int, n)
			for i := range s {
				s[i] = 1 + (from+7*i)%(c.VocabSize-1)
			}
			return s
		}
		var want [][]float32
		call := func(in ...model.Input) {
			t.Helper()
			out, err := lm.Forward(mem, in)
			if err != nil {
				t.Fatalf("n=%d call %d: %v", n, len(want), err)
			}
			want = append(want, slices.Clone(out))
		}
		var cache []int // the pages a cache holds a reference to
		keep := func(slot int) []int {
			pages := slices.Clone(mem.PageTable(slot))
			for _, p := range pages {
				mem.Retain(p)
			}
			cache = append(cache, pages...)
			return pages
		}
		a, b := seq(3, 20), seq(5, 20)
		call(model.Input{Slot: 0, Tokens: a, AllLogits: true}) // 2 pages, the second of 4 rows
		pa := keep(0)
		mem.Reset(0)
		call(model.Input{Slot: 1, Tokens: b}) // pages of its own: a's are cached
		// a again, then more: its pages attached, the partial one copied.
		if err := mem.Attach(2, pa, len(a)); err != nil {
			t.Fatal(err)
		}
		call(model.Input{Slot: 2, Tokens: seq(9, 3), AllLogits: true}, model.Input{Slot: 1, Tokens: seq(11, 1)})
		// A match that ends mid-page: 10 rows of a's first page.
		if err := mem.Attach(0, pa[:1], 10); err != nil {
			t.Fatal(err)
		}
		call(model.Input{Slot: 0, Tokens: seq(13, 5), AllLogits: true})
		// Slot 1 recomputes a's first page, which the cache then swaps
		// for its own copy.
		mem.Reset(1)
		call(model.Input{Slot: 1, Tokens: a[:17]})
		mem.ReplacePage(1, 0, pa[0])
		call(model.Input{Slot: 1, Tokens: seq(15, 2), AllLogits: true}, model.Input{Slot: 2, Tokens: seq(17, 1)})
		// The pool is short: refused before it is sent.
		calls := len(want)
		if _, err := lm.Forward(mem, []model.Input{{Slot: 0, Tokens: seq(19, 30)}, {Slot: 1, Tokens: seq(20, 20)}, {Slot: 2, Tokens: seq(21, 20)}}); !errors.Is(err, model.ErrNoPages) {
			t.Fatalf("n=%d: a call beyond the pool: %v, want ErrNoPages", n, err)
		}
		// The cache lets go; the freed pages are taken again.
		for _, p := range cache {
			mem.Release(p)
		}
		mem.Reset(2)
		call(model.Input{Slot: 2, Tokens: seq(21, 40)}, model.Input{Slot: 0, Tokens: seq(23, 1)})
		if err := lead.Close(0); err != nil {
			t.Fatal(err)
		}
		_, errs := wait()
		for r := 1; r < n; r++ {
			if errs[r] != nil {
				t.Fatalf("n=%d rank %d: %v", n, r, errs[r])
			}
			if fols[r].Calls != calls+1 || len(recs[r].logits) != len(want) {
				t.Fatalf("n=%d rank %d: %d calls, want %d", n, r, fols[r].Calls, len(want))
			}
			for i := range want {
				if d := testmodel.MaxAbsDiff(recs[r].logits[i], want[i]); d != 0 || len(recs[r].logits[i]) != len(want[i]) {
					t.Fatalf("n=%d rank %d call %d: logits differ by %g", n, r, i, d)
				}
			}
			m := fols[r].Memory(1)
			for slot := range mem.Slots {
				if !slices.Equal(m.PageTable(slot), mem.PageTable(slot)) || m.Step(slot) != mem.Step(slot) {
					t.Fatalf("n=%d rank %d slot %d: pages %v at step %d, rank 0's %v at %d", n, r, slot,
						m.PageTable(slot), m.Step(slot), mem.PageTable(slot), mem.Step(slot))
				}
			}
		}
	}
}

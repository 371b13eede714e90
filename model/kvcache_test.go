package model_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// kvConfig is SmallConfig with a key size q8_0 can store (a multiple of
// 32) and a context of several pages.
func kvConfig() model.Config {
	c := testmodel.SmallConfig()
	c.KeySize = 32
	c.SequenceLen = 96
	return c
}

var kvTypes = []struct {
	name   string
	kt, vt tensor.DType
}{
	{"f32", tensor.F32, tensor.F32},
	{"f16", tensor.F16, tensor.F16},
	{"bf16", tensor.BF16, tensor.BF16},
	{"q8_0", tensor.Q8_0, tensor.Q8_0},
	{"f16-keys-q8_0-values", tensor.F16, tensor.Q8_0},
}

func typedMemory(t *testing.T, c *model.Config, slots int, kt, vt tensor.DType) *model.KVMemory {
	t.Helper()
	mem, err := model.NewPagedKVMemory(c, model.KVOptions{Slots: slots, KType: kt, VType: vt})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

func typedFull(t *testing.T, lm *model.LanguageModel, toks []int, kt, vt tensor.DType) []float32 {
	t.Helper()
	mem := typedMemory(t, &lm.Config, 1, kt, vt)
	out, err := lm.Forward(mem, []model.Input{{Tokens: toks, AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Clone(out)
}

// For every cache type, incremental decoding equals one full pass and a
// ragged batch gives each sequence what it gets alone, bit for bit: the
// rounding to the cache type is per row, and the pages change no sum.
func TestKVTypesIncrementalAndRagged(t *testing.T) {
	c := kvConfig()
	lm := mustModel(t, c, testmodel.Random(c, 21))
	rng := rand.New(rand.NewPCG(5, 5))
	toks := randTokens(rng, 53, c.VocabSize, true) // 3 pages and part of a 4th
	for _, ty := range kvTypes {
		t.Run(ty.name, func(t *testing.T) {
			want := typedFull(t, lm, toks, ty.kt, ty.vt)
			for _, chunks := range [][]int{{1, 15, 1, 16, 20}, {17, 17, 19}, {33, 1, 1, 1, 17}} {
				mem := typedMemory(t, &c, 1, ty.kt, ty.vt)
				var got []float32
				pos := 0
				for _, n := range chunks {
					out, err := lm.Forward(mem, []model.Input{{Tokens: toks[pos : pos+n], AllLogits: true}})
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, out...)
					pos += n
				}
				if d := testmodel.MaxAbsDiff(got, want); d != 0 {
					t.Errorf("chunks %v: incremental vs full max |Δ| = %g, want 0", chunks, d)
				}
			}
			// Ragged: three sequences at different steps in one call.
			mem := typedMemory(t, &c, 3, ty.kt, ty.vt)
			seqs := [][]int{toks[:40], toks[3:9], toks[10:30]}
			pre := []int{20, 0, 17}
			var in []model.Input
			for i, s := range seqs {
				if pre[i] > 0 {
					in = append(in, model.Input{Slot: i, Tokens: s[:pre[i]]})
				}
			}
			if _, err := lm.Forward(mem, in); err != nil {
				t.Fatal(err)
			}
			in = in[:0]
			for i, s := range seqs {
				in = append(in, model.Input{Slot: i, Tokens: s[pre[i]:], AllLogits: true})
			}
			batch, err := lm.Forward(mem, in)
			if err != nil {
				t.Fatal(err)
			}
			batch = slices.Clone(batch)
			off := 0
			for i, s := range seqs {
				alone := typedFull(t, lm, s, ty.kt, ty.vt)[pre[i]*c.VocabSize:]
				if d := testmodel.MaxAbsDiff(batch[off:off+len(alone)], alone); d != 0 {
					t.Errorf("sequence %d: batch vs alone max |Δ| = %g, want 0", i, d)
				}
				off += len(alone)
			}
		})
	}
}

// The cache type is really used: f16, bf16 and q8_0 logits differ from
// f32 ones, and stay of the same shape (this random model's attention is
// sharp, so q8_0 keys move its logits by up to a quarter of their range;
// exactness is TestKVGatherDecodesStoredRows').
func TestKVTypesCloseToF32(t *testing.T) {
	c := kvConfig()
	lm := mustModel(t, c, testmodel.Random(c, 22))
	toks := randTokens(rand.New(rand.NewPCG(6, 6)), 40, c.VocabSize, false)
	ref := typedFull(t, lm, toks, tensor.F32, tensor.F32)
	for _, ty := range kvTypes[1:] {
		got := typedFull(t, lm, toks, ty.kt, ty.vt)
		d := testmodel.MaxAbsDiff(got, ref)
		if d == 0 || d > testmodel.MaxAbsDiff(ref, make([]float32, len(ref)))/2 {
			t.Errorf("%s: max |Δ| vs f32 = %g, want small but not 0", ty.name, d)
		}
	}
}

// A slot attached to another's pages (a shared prefix, the last page in
// part) continues as if it had computed them, and its writes never reach
// the shared pages: the first slot's later logits are unchanged too.
func TestAttachSharedPages(t *testing.T) {
	c := kvConfig()
	lm := mustModel(t, c, testmodel.Random(c, 23))
	rng := rand.New(rand.NewPCG(7, 7))
	a := randTokens(rng, 40, c.VocabSize, false)
	b := append(slices.Clone(a[:37]), randTokens(rng, 12, c.VocabSize, false)...)
	for _, ty := range kvTypes {
		t.Run(ty.name, func(t *testing.T) {
			mem := typedMemory(t, &c, 2, ty.kt, ty.vt)
			if _, err := lm.Forward(mem, []model.Input{{Slot: 0, Tokens: a[:40]}}); err != nil {
				t.Fatal(err)
			}
			pages := slices.Clone(mem.PageTable(0))
			if err := mem.Attach(1, pages[:3], 37); err != nil {
				t.Fatal(err)
			}
			free := mem.FreePages()
			if mem.PagesNeeded(1, 12) != 2 { // a copy of page 2, and page 3
				t.Errorf("PagesNeeded = %d, want 2", mem.PagesNeeded(1, 12))
			}
			out, err := lm.Forward(mem, []model.Input{{Slot: 1, Tokens: b[37:], AllLogits: true}})
			if err != nil {
				t.Fatal(err)
			}
			out = slices.Clone(out)
			want := typedFull(t, lm, b, ty.kt, ty.vt)[37*c.VocabSize:]
			if d := testmodel.MaxAbsDiff(out, want); d != 0 {
				t.Errorf("attached slot: max |Δ| vs its full pass = %g", d)
			}
			if free-mem.FreePages() != 2 {
				t.Errorf("the attached slot took %d pages, want 2", free-mem.FreePages())
			}
			if got := mem.PageTable(1); !slices.Equal(got[:2], pages[:2]) || got[2] == pages[2] {
				t.Errorf("page tables %v and %v: want the full pages shared and the partial one copied", pages, got)
			}
			more := randTokens(rng, 5, c.VocabSize, false)
			out, err = lm.Forward(mem, []model.Input{{Slot: 0, Tokens: more, AllLogits: true}})
			if err != nil {
				t.Fatal(err)
			}
			out = slices.Clone(out)
			want = typedFull(t, lm, append(slices.Clone(a), more...), ty.kt, ty.vt)[40*c.VocabSize:]
			if d := testmodel.MaxAbsDiff(out, want); d != 0 {
				t.Errorf("the first slot after sharing: max |Δ| = %g", d)
			}
			mem.Reset(0)
			mem.Reset(1)
			if mem.FreePages() != mem.Pages() {
				t.Errorf("%d of %d pages free after both resets", mem.FreePages(), mem.Pages())
			}
		})
	}
}

// A call the pool cannot back fails with ErrNoPages before writing
// anything; with a page freed it succeeds.
func TestForwardNoPages(t *testing.T) {
	c := kvConfig()
	lm := mustModel(t, c, testmodel.Random(c, 24))
	mem, err := model.NewPagedKVMemory(&c, model.KVOptions{Slots: 2, Pages: 3, KType: tensor.F16, VType: tensor.F16})
	if err != nil {
		t.Fatal(err)
	}
	toks := randTokens(rand.New(rand.NewPCG(8, 8)), 33, c.VocabSize, false)
	if _, err := lm.Forward(mem, []model.Input{{Slot: 0, Tokens: toks[:20]}}); err != nil {
		t.Fatal(err)
	}
	_, err = lm.Forward(mem, []model.Input{{Slot: 0, Tokens: toks[20:21]}, {Slot: 1, Tokens: toks[:17]}})
	if !errors.Is(err, model.ErrNoPages) {
		t.Fatalf("err = %v, want ErrNoPages", err)
	}
	if mem.Step(0) != 20 || mem.Step(1) != 0 || mem.FreePages() != 1 {
		t.Errorf("a refused call changed the memory: steps %d, %d, %d free", mem.Step(0), mem.Step(1), mem.FreePages())
	}
	if err := mem.Truncate(0, 16); err != nil {
		t.Fatal(err)
	}
	if _, err := lm.Forward(mem, []model.Input{{Slot: 1, Tokens: toks[:17]}}); err != nil {
		t.Fatalf("after Truncate freed a page: %v", err)
	}
}

func TestNewPagedKVMemoryErrors(t *testing.T) {
	small := testmodel.SmallConfig() // key size 8
	for _, tc := range []struct {
		name string
		c    model.Config
		o    model.KVOptions
		want string
	}{
		{"q8_0 keys of 8", small, model.KVOptions{Slots: 1, KType: tensor.Q8_0}, "multiple of 32"},
		{"q4_0", kvConfig(), model.KVOptions{Slots: 1, VType: tensor.Q4_0}, "not a KV memory type"},
		{"no slot", kvConfig(), model.KVOptions{}, "at least one slot"},
		{"absurd pool", kvConfig(), model.KVOptions{Slots: 1, Pages: 1 << 40}, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := model.NewPagedKVMemory(&tc.c, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// KVMemoryBytes and KVPageBytes state what NewPagedKVMemory allocates.
func TestKVBytesMatchAllocation(t *testing.T) {
	c := kvConfig()
	for _, ty := range kvTypes {
		mem := typedMemory(t, &c, 3, ty.kt, ty.vt)
		want := float64(model.KVPages(3, c.SequenceLen)) * model.KVPageBytes(&c, ty.kt, ty.vt)
		if float64(mem.Bytes()) != want {
			t.Errorf("%s: Bytes %d, KVPageBytes says %g", ty.name, mem.Bytes(), want)
		}
	}
	mem, _ := model.NewKVMemory(&c, 2, 40)
	if got := model.KVMemoryBytes(&c, 2, 40); got != float64(mem.Bytes()) {
		t.Errorf("KVMemoryBytes %g, allocated %d", got, mem.Bytes())
	}
}

// NewTP's shards share one book of pages: a prefix attached to another
// slot of the model's memory, in a 16-bit cache, serves every shard, and
// the attached slot continues as its own full pass does.
func TestTPAttachSharedPages(t *testing.T) {
	c := eightKV()
	c.SequenceLen = 64
	tp, err := model.NewTP(c, testmodel.Random(c, 9), 2, parallel.New(1))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	rng := rand.New(rand.NewPCG(10, 10))
	a := randTokens(rng, 40, c.VocabSize, false)
	b := append(slices.Clone(a[:35]), randTokens(rng, 9, c.VocabSize, false)...)
	mem, err := tp.NewPagedKVMemory(model.KVOptions{Slots: 2, KType: tensor.BF16, VType: tensor.F16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.Forward(mem, []model.Input{{Slot: 0, Tokens: a}}); err != nil {
		t.Fatal(err)
	}
	if err := mem.Attach(1, slices.Clone(mem.PageTable(0)[:3]), 35); err != nil {
		t.Fatal(err)
	}
	got, err := tp.Forward(mem, []model.Input{{Slot: 1, Tokens: b[35:], AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	got = slices.Clone(got)
	fresh, err := tp.NewPagedKVMemory(model.KVOptions{Slots: 1, KType: tensor.BF16, VType: tensor.F16})
	if err != nil {
		t.Fatal(err)
	}
	want, err := tp.Forward(fresh, []model.Input{{Tokens: b, AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	if d := testmodel.MaxAbsDiff(got, want[35*c.VocabSize:]); d != 0 {
		t.Errorf("attached slot of a TP model: max |Δ| vs its full pass = %g", d)
	}
	mem.Reset(0)
	mem.Reset(1)
	if mem.FreePages() != mem.Pages() {
		t.Errorf("%d of %d pages free after the resets", mem.FreePages(), mem.Pages())
	}
}

// A memory that mirrors another's pages (MirrorSlot, CopyPage: a cluster
// follower's) computes the same logits from the copies PreparePages
// reports and the page tables it leaves, through shared pages and a
// match that ends mid-page; it takes no pages of its own, and bad ids
// are errors.
func TestMirrorSlot(t *testing.T) {
	c := kvConfig()
	lm := mustModel(t, c, testmodel.Random(c, 25))
	rng := rand.New(rand.NewPCG(9, 9))
	a := randTokens(rng, 40, c.VocabSize, false)
	opts := model.KVOptions{Slots: 2, Pages: 8, KType: tensor.F16, VType: tensor.F16}
	lead, err := model.NewPagedKVMemory(&c, opts)
	if err != nil {
		t.Fatal(err)
	}
	mirror, err := model.NewPagedKVMemory(&c, opts)
	if err != nil {
		t.Fatal(err)
	}
	var copies []model.PageCopy
	call := func(in ...model.Input) {
		t.Helper()
		n := len(copies)
		var err error
		if copies, err = lead.PreparePages(in, copies); err != nil {
			t.Fatal(err)
		}
		for _, pc := range copies[n:] {
			if err := mirror.CopyPage(pc.Dst, pc.Src); err != nil {
				t.Fatal(err)
			}
		}
		for slot := range lead.Slots {
			if err := mirror.MirrorSlot(slot, lead.PageTable(slot), lead.Step(slot)); err != nil {
				t.Fatal(err)
			}
		}
		want, err := lm.Forward(lead, in)
		if err != nil {
			t.Fatal(err)
		}
		want = slices.Clone(want)
		got, err := lm.Forward(mirror, in)
		if err != nil {
			t.Fatal(err)
		}
		if d := testmodel.MaxAbsDiff(got, want); d != 0 {
			t.Fatalf("call with %d copies: the mirror's logits differ by %g", len(copies), d)
		}
	}
	call(model.Input{Slot: 0, Tokens: a[:37]})
	pages := slices.Clone(lead.PageTable(0))
	for _, p := range pages {
		lead.Retain(p) // a cache's references
	}
	lead.Reset(0)
	if err := lead.Attach(1, pages, 37); err != nil {
		t.Fatal(err)
	}
	if err := lead.Attach(0, pages[:1], 9); err != nil {
		t.Fatal(err)
	}
	call(model.Input{Slot: 1, Tokens: a[37:], AllLogits: true}, model.Input{Slot: 0, Tokens: a[20:24], AllLogits: true})
	if len(copies) != 2 || copies[0].Src != pages[2] || copies[1].Src != pages[0] {
		t.Fatalf("copies %v, want of pages %d and %d", copies, pages[2], pages[0])
	}
	mirror.Reset(1) // references count the tables: no panic, no page freed to take
	if mirror.FreePages() != 0 {
		t.Errorf("a mirror has %d free pages", mirror.FreePages())
	}
	if _, err := lm.Forward(mirror, []model.Input{{Slot: 1, Tokens: a[:1]}}); err == nil || !strings.Contains(err.Error(), "takes no pages of its own") {
		t.Errorf("a mirror's Forward beyond its tables: %v", err)
	}
	if _, err := mirror.PreparePages([]model.Input{{Slot: 1, Tokens: a[:1]}}, nil); err == nil {
		t.Error("PreparePages on a mirror succeeded")
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"slot", mirror.MirrorSlot(2, nil, 0), "slot 2 of 2"},
		{"page", mirror.MirrorSlot(0, []int{8}, 1), "page 8 of 8"},
		{"negative page", mirror.MirrorSlot(0, []int{-1}, 1), "page -1 of 8"},
		{"rows beyond the pages", mirror.MirrorSlot(0, []int{1}, 17), "17 rows in 1 pages"},
		{"more pages than the context", mirror.MirrorSlot(0, make([]int, 7), 1), "1 rows in 7 pages"},
		{"copy", mirror.CopyPage(0, 8), "page 8 to 0"},
		{"prepare: slot", errOf(lead.PreparePages([]model.Input{{Slot: 2, Tokens: a[:1]}}, nil)), "slot 2 of 2"},
		{"prepare: beyond the context", errOf(lead.PreparePages([]model.Input{{Slot: 0, Tokens: make([]int, 84)}}, nil)), "84 rows after 13"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, tc.err, tc.want)
		}
	}
}

func errOf[T any](_ T, err error) error { return err }

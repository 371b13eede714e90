package runner

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// A file may declare a context far larger than the machine (2^26 tokens,
// or the most a uint32 holds): the KV memory is sized from the context
// asked for, capped by default to what fits, and an explicit context or
// pool that does not fit is refused before anything is allocated.
func TestContextFitsMemory(t *testing.T) {
	c := testmodel.SmallConfig()
	page := model.KVPageBytes(&c, tensor.F32, tensor.F32)    // bytes per page of PageRows rows
	page16 := model.KVPageBytes(&c, tensor.F16, tensor.BF16) // the same in 16 bits
	const limit = 64 << 20
	fit := func(slots int, page float64) int { // the default takes at most half the limit
		return int(limit/2/(float64(slots)*page)) * model.PageRows
	}
	for _, tc := range []struct {
		name      string
		seqLen    int
		opts      Options
		want      int // the context the engine gets; 0: a *MemoryError
		wantPages int // 0: Slots × Context
		wantSlot  int // slots named by the error
	}{
		{"small model, default", 64, Options{Slots: 1}, 64, 0, 0},
		{"2^26 declared, default", 1 << 26, Options{Slots: 1}, fit(1, page), 0, 0},
		{"2^31-1 declared, default, 4 slots", math.MaxInt32, Options{Slots: 4}, fit(4, page), 0, 0},
		{"16-bit cache, default", 1 << 26, Options{Slots: 1, KType: tensor.F16, VType: tensor.BF16}, fit(1, page16), 0, 0},
		{"explicit context that fits", 1 << 26, Options{Slots: 1, Context: 4096}, 4096, 0, 0},
		{"explicit context too large", 1 << 26, Options{Slots: 1, Context: 1 << 26}, 0, 0, 1},
		{"explicit context too large for 8 slots", 1 << 26, Options{Slots: 8, Context: fit(1, page) + model.PageRows}, 0, 0, 8},
		{"not one page fits", 1 << 26, Options{Slots: 1, MemoryLimit: int64(page)}, 0, 0, 1},
		{"pool in tokens", 1 << 26, Options{Slots: 4, KVTokens: 1000}, 1008, 63, 0},
		{"pool in tokens, context given", 1 << 26, Options{Slots: 4, KVTokens: 1000, Context: 300}, 300, 63, 0},
		{"pool in bytes", 1 << 26, Options{Slots: 2, KVMemory: int64(10*page + 1)}, 160, 10, 0},
		{"pool too large", 1 << 26, Options{Slots: 2, KVTokens: 1 << 24}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.SequenceLen = tc.seqLen
			lm, err := model.New(c, testmodel.Random(c, 1))
			if err != nil {
				t.Fatal(err)
			}
			o := tc.opts
			if o.MemoryLimit == 0 {
				o.MemoryLimit = limit
			}
			e, err := New(lm, nil, o)
			var me *MemoryError
			if tc.want == 0 {
				if !errors.As(err, &me) {
					t.Fatalf("New: %v, want a *MemoryError", err)
				}
				if me.Slots != tc.wantSlot || me.Need <= me.Available || me.Available > float64(limit) {
					t.Errorf("MemoryError %+v", me)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if e.Context() != tc.want {
				t.Errorf("context %d, want %d", e.Context(), tc.want)
			}
			want := tc.wantPages
			if want == 0 {
				want = model.KVPages(o.Slots, tc.want)
			}
			if e.KV().Pages != want || e.mem.Pages() != want {
				t.Errorf("%d pages (%d allocated), want %d", e.KV().Pages, e.mem.Pages(), want)
			}
			if float64(e.mem.Bytes()) != e.KV().Bytes || e.KV().Bytes > float64(limit) {
				t.Errorf("the KV memory takes %d bytes, planned %g, limit %d", e.mem.Bytes(), e.KV().Bytes, limit)
			}
		})
	}
}

func TestPlanKVErrors(t *testing.T) {
	c := testmodel.SmallConfig() // key size 8
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"q8_0 of key size 8", Options{KType: tensor.Q8_0}, "multiple of 32"},
		{"context beyond the pool", Options{KVTokens: 32, Context: 48}, "does not fit in a KV memory of 32 tokens"},
		{"pool under a page", Options{KVMemory: 100}, "not one page"},
		{"negative pool", Options{KVTokens: -1}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PlanKV(&c, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

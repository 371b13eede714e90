package runner

import (
	"errors"
	"math"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
)

// A file may declare a context far larger than the machine (2^26 tokens,
// or the most a uint32 holds): the KV memory is sized from the context
// asked for, capped by default to what fits, and an explicit context that
// does not fit is refused before anything is allocated.
func TestContextFitsMemory(t *testing.T) {
	c := testmodel.SmallConfig()
	perRow := model.KVMemoryBytes(&c, 1, 1) // bytes per slot and row
	const limit = 64 << 20
	fit := int(limit / 2 / perRow) // the default takes at most half the limit
	for _, tc := range []struct {
		name     string
		seqLen   int
		slots    int
		context  int
		limit    int64
		want     int // the context the engine gets; 0: a *MemoryError
		wantSlot int // slots named by the error
	}{
		{"small model, default", 64, 1, 0, limit, 64, 0},
		{"2^26 declared, default", 1 << 26, 1, 0, limit, fit, 0},
		{"2^31-1 declared, default, 4 slots", math.MaxInt32, 4, 0, limit, fit / 4, 0},
		{"explicit context that fits", 1 << 26, 1, 4096, limit, 4096, 0},
		{"explicit context too large", 1 << 26, 1, 1 << 26, limit, 0, 1},
		{"explicit context too large for 8 slots", 1 << 26, 8, fit, limit, 0, 8},
		{"not one row fits", 1 << 26, 1, 0, int64(perRow), 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.SequenceLen = tc.seqLen
			lm, err := model.New(c, testmodel.Random(c, 1))
			if err != nil {
				t.Fatal(err)
			}
			e, err := New(lm, nil, Options{Slots: tc.slots, Context: tc.context, MemoryLimit: tc.limit})
			var me *MemoryError
			if tc.want == 0 {
				if !errors.As(err, &me) {
					t.Fatalf("New: %v, want a *MemoryError", err)
				}
				if me.Slots != tc.wantSlot || me.Need <= me.Available || me.Available > float64(tc.limit) {
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
			if got := model.KVMemoryBytes(&c, tc.slots, e.Context()); got > float64(tc.limit) {
				t.Errorf("the KV memory takes %g bytes, over the limit of %d", got, tc.limit)
			}
		})
	}
}

func TestKVMemoryBytesMatchesAllocation(t *testing.T) {
	c := testmodel.SmallConfig()
	m, err := model.NewKVMemory(&c, 3, 40)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := model.KVMemoryBytes(&c, 3, 40), float64(m.Bytes())+3*40; got != want {
		t.Errorf("KVMemoryBytes = %g, want %g (K/V %d + pad flags)", got, want, m.Bytes())
	}
}

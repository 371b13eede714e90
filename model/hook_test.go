package model_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
)

type recordHook struct {
	calls, ends int
	slots       []int
	starts      []int
	err         error
}

func (h *recordHook) BeginForward(mem *model.KVMemory, in []model.Input) error {
	h.calls++
	for _, x := range in {
		h.slots = append(h.slots, x.Slot)
		h.starts = append(h.starts, mem.Step(x.Slot))
	}
	return h.err
}

func (h *recordHook) EndForward() { h.ends++ }

func TestForwardHook(t *testing.T) {
	c := testmodel.SmallConfig()
	lm := mustModel(t, c, testmodel.Random(c, 1))
	mem, err := model.NewKVMemory(&c, 2, 16)
	if err != nil {
		t.Fatal(err)
	}
	h := &recordHook{}
	lm.Hook = h
	for _, tc := range []struct {
		in      []model.Input
		hookErr error
	}{
		{[]model.Input{{Slot: 1, Tokens: []int{3, 4}}, {Slot: 0, Tokens: []int{5}}}, nil},
		{[]model.Input{{Slot: 1, Tokens: []int{6}}}, nil},
		{[]model.Input{{Slot: 0, Tokens: []int{c.VocabSize}}}, nil}, // refused before the hook
		{[]model.Input{{Slot: 0, Tokens: []int{7}}}, errors.New("the followers are gone")},
	} {
		h.err = tc.hookErr
		before := []int{mem.Step(0), mem.Step(1)}
		_, err := lm.Forward(mem, tc.in)
		if tc.hookErr != nil && !errors.Is(err, tc.hookErr) {
			t.Fatalf("Forward with a failing hook: %v", err)
		}
		if err != nil && !slices.Equal(before, []int{mem.Step(0), mem.Step(1)}) {
			t.Fatalf("a refused Forward moved the steps from %v to %d, %d", before, mem.Step(0), mem.Step(1))
		}
	}
	if h.calls != 3 || h.ends != 2 {
		t.Fatalf("hook: %d calls, %d ends; want 3 and 2 (a bad token is refused before the hook)", h.calls, h.ends)
	}
	if !slices.Equal(h.slots, []int{1, 0, 1, 0}) || !slices.Equal(h.starts, []int{0, 0, 2, 1}) {
		t.Fatalf("hook saw slots %v at steps %v", h.slots, h.starts)
	}
}

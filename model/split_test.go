package model_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// tpSource serves a model's experts the way xai-org/grok-2's files hold
// them: one tensor per expert, each split into tp slices (w1, w3 by output
// rows, w2 along its input axis) in memory of their own, through
// model.SplitSource. Looking a split expert up whole joins its slices, and
// joined counts the bytes.
type tpSource struct {
	src    testmodel.Source
	tp     int
	joined int64
}

// expert parses blk.N.ffn_X.E.weight into the merged tensor and E.
func (s *tpSource) expert(name string) (*tensor.Tensor, int, bool) {
	var l, e int
	var kind string
	if _, err := fmt.Sscanf(strings.ReplaceAll(name, ".", " "), "blk %d ffn_%s %d weight", &l, &kind, &e); err != nil {
		return nil, 0, false
	}
	t, ok := s.src[fmt.Sprintf("blk.%d.ffn_%s_exps.weight", l, kind)]
	return t, e, ok
}

// matrix returns expert e of a merged F32 tensor [E, out, in].
func matrix(t *tensor.Tensor, e int) *tensor.Tensor {
	out, in := t.Shape[1], t.Shape[2]
	per := out * in * 4
	return &tensor.Tensor{Name: t.Name, Type: t.Type, Shape: []int{out, in}, Data: t.Data[e*per : (e+1)*per]}
}

func (s *tpSource) Lookup(name string) (*tensor.Tensor, bool) {
	if strings.HasSuffix(name, "_exps.weight") {
		return nil, false // served per expert only
	}
	if t, e, ok := s.expert(name); ok {
		m := matrix(t, e)
		m.Name = name
		m.Data = append([]byte(nil), m.Data...) // joined from the slices
		s.joined += int64(len(m.Data))
		return m, true
	}
	return s.src.Lookup(name)
}

func (s *tpSource) Split(name string) ([]*tensor.Tensor, int, bool, error) {
	t, e, ok := s.expert(name)
	if !ok {
		return nil, 0, false, nil
	}
	m := matrix(t, e)
	out, in := m.Shape[0], m.Shape[1]
	axis := 0
	if strings.Contains(name, "ffn_down") {
		axis = 1
	}
	parts := make([]*tensor.Tensor, s.tp)
	for r := range parts {
		p := &tensor.Tensor{Name: name, Type: tensor.F32}
		if axis == 0 {
			k := out / s.tp
			p.Shape = []int{k, in}
			p.Data = append([]byte(nil), m.Data[r*k*in*4:(r+1)*k*in*4]...)
		} else {
			k := in / s.tp
			p.Shape = []int{out, k}
			for i := range out {
				p.Data = append(p.Data, m.Data[(i*in+r*k)*4:(i*in+(r+1)*k)*4]...)
			}
		}
		parts[r] = p
	}
	return parts, axis, true, nil
}

// A model whose experts come in tensor-parallel slices computes the bits
// of the same model with merged experts, over a ragged prefill and decode
// steps on 1 to 3 threads, and whole and split two ways in process. It
// multiplies the slices in place — w2's too when they lie on the kernels'
// summation grid (2048 inputs) — and a decode step then allocates nothing;
// off the grid only w2 is joined.
func TestSplitExpertsInPlace(t *testing.T) {
	for _, tc := range []struct {
		ffn, tp    int
		joinedDown bool
	}{{4096, 2, false}, {96, 2, true}, {96, 4, true}} {
		c := withGrok2(midConfig(), 160)
		c.FFNSize = tc.ffn
		merged := testmodel.Random(c, 5)
		for _, shards := range []int{1, 2} {
			name := fmt.Sprintf("F%d/TP%d/shards%d", tc.ffn, tc.tp, shards)
			build := func(src model.TensorSource) *model.LanguageModel {
				t.Helper()
				var lm *model.LanguageModel
				var err error
				if shards > 1 {
					lm, err = model.NewTP(c, src, shards, nil)
				} else {
					lm, err = model.New(c, src)
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				return lm
			}
			split := &tpSource{src: merged, tp: tc.tp}
			lm := build(split)
			var want int64
			if tc.joinedDown {
				// Each shard looks w2 up whole (tpSource joins each time).
				want = int64(shards*c.NumLayers*c.NumExperts*c.EmbSize*c.FFNSize) * 4
			}
			if split.joined != want {
				t.Errorf("%s: %d bytes joined, want %d", name, split.joined, want)
			}
			ref := build(merged)
			for _, threads := range []int{1, 2, 3} {
				p := parallel.New(threads)
				lm.Pool, ref.Pool = p, p
				got, exp := script(t, lm, 9), script(t, ref, 9)
				for i := range exp {
					if math.Float32bits(got[i]) != math.Float32bits(exp[i]) {
						t.Fatalf("%s, %d threads: logit %d is %v from the slices, %v merged", name, threads, i, got[i], exp[i])
					}
				}
				if !tc.joinedDown && shards == 1 && !raceEnabled {
					step := decodeSetup(t, lm, 8, 100)
					step()
					if a := testing.AllocsPerRun(50, step); a != 0 {
						t.Errorf("%s, %d threads: %v allocations per decode step", name, threads, a)
					}
				}
				p.Close()
			}
			lm.Close()
			ref.Close()
		}
	}
}

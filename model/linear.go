package model

import (
	"errors"
	"fmt"
	"slices"

	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/tensor"
)

// Linear is model.py's Linear (543-578) without bias: y = x·w, with w held in
// whatever type the file stores (F32, F16, BF16, Q8_0, or QuantizedWeight8bit
// int8 with per-channel and per-shard scales). Dequantisation happens inside
// the kernel, row by row, as model.py does inside its shard_map; the weights
// themselves are never copied.
type Linear struct {
	W kernels.Mat
}

// Forward computes dst = x·w for n rows of x (n×In → n×Out).
func (l *Linear) Forward(dst, x []float32, n int) {
	kernels.MatMul(dst[:n*l.W.Out], x[:n*l.W.In], n, &l.W)
}

// newLinears builds one Linear per leading index of t, which must hold
// count matrices of out×in (count = 1 for a plain matrix, with or without a
// leading axis of 1). Shape is [count,] out, in — or in, out when Transposed.
func newLinears(t *tensor.Tensor, count, out, in int) ([]Linear, error) {
	rows, cols := out, in
	if t.Transposed {
		rows, cols = in, out
	}
	want := []int{count, rows, cols}
	shape := t.Shape
	if len(shape) == 2 && count == 1 {
		shape = []int{1, shape[0], shape[1]}
	}
	if !slices.Equal(shape, want) {
		if count == 1 {
			want = want[1:]
		}
		return nil, fmt.Errorf("model: tensor %q has shape %v, want %v", t.Name, t.Shape, want)
	}
	if t.Transposed && t.Type == tensor.Q8_0 {
		return nil, fmt.Errorf("model: tensor %q: Q8_0 blocks must run along the input axis", t.Name)
	}
	var scales []float32
	shards := 0
	if t.Type == tensor.I8 {
		if t.Scales == nil {
			return nil, fmt.Errorf("model: int8 tensor %q has no scales", t.Name)
		}
		ss := t.Scales.Shape
		if len(ss) == 2 && count == 1 {
			ss = []int{1, ss[0], ss[1]}
		}
		if len(ss) != 3 || ss[0] != count || ss[2] != out || ss[1] <= 0 || in%ss[1] != 0 {
			return nil, fmt.Errorf("model: tensor %q: scales shape %v does not fit %d×%d×%d", t.Name, t.Scales.Shape, count, in, out)
		}
		shards = ss[1]
		var err error
		if scales, err = t.Scales.Float32s(); err != nil {
			return nil, fmt.Errorf("model: tensor %q scales: %w", t.Name, err)
		}
	}
	per := len(t.Data) / count
	ls := make([]Linear, count)
	for e := range ls {
		m := kernels.Mat{Type: t.Type, Out: out, In: in, Data: t.Data[e*per : (e+1)*per], Transposed: t.Transposed}
		if shards > 0 {
			m.Shards = shards
			m.Scales = scales[e*shards*out : (e+1)*shards*out]
		}
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("model: tensor %q: %w", t.Name, err)
		}
		ls[e].W = m
	}
	return ls, nil
}

func loadLinear(src TensorSource, name string, out, in int) (Linear, error) {
	if ss, ok := src.(SplitSource); ok {
		l, inPlace, err := splitLinear(ss, name, out, in)
		if inPlace || err != nil {
			return l, err
		}
	}
	t, err := need(src, name)
	if err != nil {
		return Linear{}, err
	}
	ls, err := newLinears(t, 1, out, in)
	if err != nil {
		return Linear{}, err
	}
	return ls[0], nil
}

// loadExperts reads E expert matrices, either merged (llama.cpp's
// blk.N.ffn_X_exps.weight, [E, out, in]) or one per expert
// (blk.N.ffn_X.E.weight).
func loadExperts(src TensorSource, layer int, kind string, E, out, in int) ([]Linear, error) {
	if t, ok := src.Lookup(fmt.Sprintf("blk.%d.ffn_%s_exps.weight", layer, kind)); ok {
		if err := t.Check(); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		return newLinears(t, E, out, in)
	}
	ls := make([]Linear, E)
	for e := range ls {
		var err error
		if ls[e], err = loadLinear(src, fmt.Sprintf("blk.%d.ffn_%s.%d.weight", layer, kind, e), out, in); err != nil {
			return nil, fmt.Errorf("%w (nor merged blk.%d.ffn_%s_exps.weight)", err, layer, kind)
		}
	}
	return ls, nil
}

// SplitSource is a TensorSource that also serves a tensor its files store
// in pieces — xai-org/grok-2's experts, split across its *-TP-00N files —
// as those pieces, in order, and the axis they join along: 0 (rows follow
// each other) or 1 (each row is the pieces' rows side by side). ok is
// false for a tensor stored whole. New multiplies by the pieces where they
// lie (kernels.Parted) and looks such a tensor up whole only when that
// would change the bits of its product (PartsInPlace).
type SplitSource interface {
	TensorSource
	Split(name string) (parts []*tensor.Tensor, axis int, ok bool, err error)
}

// splitLinear builds the Linear of a tensor src stores in pieces over the
// pieces themselves. inPlace is false when src holds it whole, or when its
// pieces cannot be multiplied in place (PartsInPlace): the caller then
// looks it up whole.
func splitLinear(src SplitSource, name string, out, in int) (l Linear, inPlace bool, err error) {
	parts, axis, ok, err := src.Split(name)
	if err != nil {
		return Linear{}, false, fmt.Errorf("model: %w", err)
	}
	if !ok {
		return Linear{}, false, nil
	}
	m, err := partedMat(parts, axis)
	if err != nil {
		return Linear{}, false, nil
	}
	if m.Out != out || m.In != in {
		return Linear{}, false, fmt.Errorf("model: tensor %q has shape [%d %d], want [%d %d]", name, m.Out, m.In, out, in)
	}
	return Linear{W: m}, true, nil
}

// partedMat is the matrix of a tensor's pieces (see SplitSource).
func partedMat(parts []*tensor.Tensor, axis int) (kernels.Mat, error) {
	if axis != 0 && axis != 1 {
		return kernels.Mat{}, fmt.Errorf("model: pieces joined along axis %d", axis)
	}
	mats := make([]kernels.Mat, len(parts))
	for i, p := range parts {
		if err := p.Check(); err != nil {
			return kernels.Mat{}, fmt.Errorf("model: %w", err)
		}
		if len(p.Shape) != 2 || p.Transposed || p.Scales != nil {
			return kernels.Mat{}, fmt.Errorf("model: piece %d of %q is not a plain [out, in] matrix", i, p.Name)
		}
		ls, err := newLinears(p, 1, p.Shape[0], p.Shape[1])
		if err != nil {
			return kernels.Mat{}, err
		}
		mats[i] = ls[0].W
	}
	m, err := kernels.Parted(mats, axis == 1)
	if err != nil {
		return kernels.Mat{}, fmt.Errorf("model: tensor %q: %w", parts[0].Name, err)
	}
	return m, nil
}

// PartsInPlace reports why New cannot multiply by a tensor's pieces (from
// SplitSource.Split) where they lie, and so has it joined: a type without
// kernels for parts, or input-axis pieces whose boundaries are off the
// kernels' summation grid (their product would not have the joined
// matrix's bits). nil if it can.
func PartsInPlace(parts []*tensor.Tensor, axis int) error {
	_, err := partedMat(parts, axis)
	var se *kernels.SplitError
	if errors.As(err, &se) {
		return fmt.Errorf("model: tensor %q: a piece starts at input %d, off the kernels' summation grid of %d inputs", parts[0].Name, se.Lo, se.Unit)
	}
	return err
}

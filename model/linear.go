package model

import (
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

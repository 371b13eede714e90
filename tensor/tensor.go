package tensor

import (
	"fmt"
	"math"
)

// Tensor is a named, typed, shaped view over raw bytes.
//
// Shape is in numpy order (outermost axis first). A matrix used by a Linear
// layer is stored either as [out, in] (ggml, PyTorch; Transposed false) or as
// [in, out] (Haiku's `w`, xAI's checkpoint; Transposed true); experts add a
// leading axis E. For I8 tensors, Scales holds xAI's QuantizedWeight8bit
// scales with shape [..., S, out]: S = 1 for column-parallel layers, S > 1 for
// row-parallel layers whose input rows are split into S equal blocks, each
// with its own per-output-column scale (semantics §2).
type Tensor struct {
	Name       string
	Type       DType
	Shape      []int
	Data       []byte
	Transposed bool
	Scales     *Tensor
}

// Elements returns the product of the shape, or an error if it overflows.
func Elements(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("tensor: negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt/4/d {
			return 0, fmt.Errorf("tensor: shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// ByteSize returns the number of bytes a tensor of this type and shape needs.
// The innermost axis is the one Q8_0 blocks run along.
func ByteSize(t DType, shape []int) (int, error) {
	n, err := Elements(shape)
	if err != nil {
		return 0, err
	}
	if len(shape) == 0 {
		return t.RowBytes(1)
	}
	inner := shape[len(shape)-1]
	if inner == 0 {
		return 0, nil
	}
	rb, err := t.RowBytes(inner)
	if err != nil {
		return 0, err
	}
	return n / inner * rb, nil
}

// Check verifies that Data holds exactly the bytes the type and shape imply.
func (t *Tensor) Check() error {
	want, err := ByteSize(t.Type, t.Shape)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	if len(t.Data) != want {
		return fmt.Errorf("tensor %q: %v %v needs %d bytes, have %d", t.Name, t.Type, t.Shape, want, len(t.Data))
	}
	return nil
}

// Float32s decodes the whole tensor to float32 (dequantising I8 with its
// scales). It allocates: use it for small tensors (norms, router) and tests.
func (t *Tensor) Float32s() ([]float32, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	n, _ := Elements(t.Shape)
	out := make([]float32, n)
	if t.Type == I8 {
		return out, t.dequantI8(out)
	}
	if err := DecodeRow(out, t.Type, t.Data); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return out, nil
}

// dequantI8 applies QuantizedWeight8bit scales: w[..., r, c] * scales[..., r/(R/S), c]
// for the stored [.., R, C] layout (R rows of the stored matrix, C columns).
func (t *Tensor) dequantI8(out []float32) error {
	if t.Scales == nil || len(t.Shape) < 2 {
		return fmt.Errorf("tensor %q: I8 tensor needs scales and a matrix shape", t.Name)
	}
	sc, err := t.Scales.Float32s()
	if err != nil {
		return err
	}
	R, C := t.Shape[len(t.Shape)-2], t.Shape[len(t.Shape)-1]
	ss := t.Scales.Shape
	if len(ss) < 2 || ss[len(ss)-1] != C {
		return fmt.Errorf("tensor %q: scales shape %v does not fit weight %v", t.Name, ss, t.Shape)
	}
	S := ss[len(ss)-2]
	if S <= 0 || R%S != 0 {
		return fmt.Errorf("tensor %q: %d rows do not split into %d scale shards", t.Name, R, S)
	}
	mats := len(out) / (R * C)
	if len(sc) != mats*S*C {
		return fmt.Errorf("tensor %q: scales hold %d values, want %d", t.Name, len(sc), mats*S*C)
	}
	blk := R / S
	for m := 0; m < mats; m++ {
		for r := 0; r < R; r++ {
			srow := sc[(m*S+r/blk)*C:][:C]
			base := (m*R + r) * C
			for c := 0; c < C; c++ {
				out[base+c] = float32(int8(t.Data[base+c])) * srow[c]
			}
		}
	}
	return nil
}

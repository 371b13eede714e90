// Package kernels holds the hot loops of the engine: matrix products over every
// weight type, and the vector functions of the model (RMSNorm, softmax, gelu,
// RoPE). Each function takes plain slices and sizes, never model types, so a
// SIMD version can replace the pure-Go one without touching the model; the
// pure-Go versions here are the reference the fast ones are tested against.
package kernels

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/grok-go/grok/tensor"
)

// Mat is a weight matrix W of Out×In (y = W·x) as stored in a model file.
//
// Data holds Out rows of In elements (the ggml/PyTorch [out, in] layout), or,
// with InOut set, In rows of Out elements (Haiku's [in, out] `w`, used by
// xAI's checkpoint). For I8 (QuantizedWeight8bit) Scales holds Shards×Out
// per-output-column scales: the In axis is split into Shards equal blocks and
// block s uses row s of the scales (semantics §2, row-parallel layers).
type Mat struct {
	Type    tensor.DType
	Out, In int
	Data    []byte
	InOut   bool
	Scales  []float32
	Shards  int
}

// Validate checks that the matrix's bytes and scales agree with its sizes.
func (m *Mat) Validate() error {
	if m.Out <= 0 || m.In <= 0 {
		return fmt.Errorf("kernels: matrix %d×%d has no elements", m.Out, m.In)
	}
	rows, cols := m.Out, m.In
	if m.InOut {
		rows, cols = m.In, m.Out
	}
	rb, err := m.Type.RowBytes(cols)
	if err != nil {
		return err
	}
	if len(m.Data) != rows*rb {
		return fmt.Errorf("kernels: %v matrix %d×%d needs %d bytes, have %d", m.Type, m.Out, m.In, rows*rb, len(m.Data))
	}
	if m.Type == tensor.I8 {
		if m.Shards <= 0 || m.In%m.Shards != 0 {
			return fmt.Errorf("kernels: %d input rows do not split into %d scale shards", m.In, m.Shards)
		}
		if len(m.Scales) != m.Shards*m.Out {
			return fmt.Errorf("kernels: I8 matrix needs %d scales, have %d", m.Shards*m.Out, len(m.Scales))
		}
	}
	return nil
}

var scratchPool = sync.Pool{New: func() any { return new([]float32) }}

func getScratch(n int) *[]float32 {
	p := scratchPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// f32View reinterprets little-endian float32 bytes without copying when the
// bytes are suitably aligned (always true for GGUF's 32-byte alignment).
func f32View(b []byte, n int) ([]float32, bool) {
	if n == 0 || len(b) < 4*n || uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		return nil, false
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n), true
}

// rowF32 returns row data as float32, decoding into buf unless the row is
// already F32 and aligned.
func rowF32(buf []float32, t tensor.DType, b []byte) []float32 {
	if t == tensor.F32 {
		if v, ok := f32View(b, len(buf)); ok {
			return v
		}
	}
	if err := tensor.DecodeRow(buf, t, b); err != nil {
		panic(err) // unreachable: Validate checked the sizes and type
	}
	return buf
}

// MatMul computes dst[i] = W·x[i] for n input vectors: x is n×In, dst is
// n×Out, both row-major. Each weight row is read once for all n inputs.
// The matrix must have passed Validate.
func MatMul(dst, x []float32, n int, m *Mat) {
	MatMulRows(dst, x, n, m, 0, m.Out)
}

// MatMulRows computes output columns [lo, hi) of MatMul only (dst is still
// n×Out); disjoint ranges may run concurrently.
func MatMulRows(dst, x []float32, n int, m *Mat, lo, hi int) {
	if m.InOut {
		matMulInOut(dst, x, n, m, lo, hi)
		return
	}
	In, Out := m.In, m.Out
	rb, _ := m.Type.RowBytes(In)
	sp := getScratch(In)
	defer scratchPool.Put(sp)
	if m.Type == tensor.I8 {
		blk := In / m.Shards
		for r := lo; r < hi; r++ {
			row := rowF32(*sp, tensor.I8, m.Data[r*rb:(r+1)*rb])
			for i := 0; i < n; i++ {
				xi := x[i*In : (i+1)*In]
				var acc float32
				for s := 0; s < m.Shards; s++ {
					acc += m.Scales[s*Out+r] * Dot(row[s*blk:(s+1)*blk], xi[s*blk:(s+1)*blk])
				}
				dst[i*Out+r] = acc
			}
		}
		return
	}
	for r := lo; r < hi; r++ {
		row := rowF32(*sp, m.Type, m.Data[r*rb:(r+1)*rb])
		for i := 0; i < n; i++ {
			dst[i*Out+r] = Dot(row, x[i*In:(i+1)*In])
		}
	}
}

// matMulInOut handles the [in, out] layout: y = Σ_r x[r]·W[r, :], one weight
// row at a time, with per-shard scales applied once per shard.
func matMulInOut(dst, x []float32, n int, m *Mat, lo, hi int) {
	In, Out := m.In, m.Out
	w := hi - lo
	rb, _ := m.Type.RowBytes(Out)
	esz := rb / Out // bytes per element (no block types in this layout)
	if m.Type == tensor.Q8_0 {
		panic("kernels: Q8_0 weights must be stored [out, in]") // Validate-level invariant of the loaders
	}
	rowp := getScratch(w)
	defer scratchPool.Put(rowp)
	shards := 1
	if m.Type == tensor.I8 {
		shards = m.Shards
	}
	blk := In / shards
	accp := getScratch(n * w)
	defer scratchPool.Put(accp)
	acc := *accp
	for i := 0; i < n; i++ {
		clear(dst[i*Out+lo : i*Out+hi])
	}
	for s := 0; s < shards; s++ {
		clear(acc)
		for r := s * blk; r < (s+1)*blk; r++ {
			row := rowF32(*rowp, m.Type, m.Data[r*rb+lo*esz:r*rb+hi*esz])
			for i := 0; i < n; i++ {
				Axpy(acc[i*w:(i+1)*w], x[i*In+r], row)
			}
		}
		for i := 0; i < n; i++ {
			d := dst[i*Out+lo : i*Out+hi]
			a := acc[i*w : (i+1)*w]
			if m.Type == tensor.I8 {
				sc := m.Scales[s*Out+lo : s*Out+hi]
				for c := range d {
					d[c] += sc[c] * a[c]
				}
			} else {
				for c := range d {
					d[c] += a[c]
				}
			}
		}
	}
}

// Dot returns Σ a[i]·b[i] over len(a) elements, accumulated in float32 with
// four independent partial sums (the order a SIMD kernel will also use).
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Axpy computes y += a·x.
func Axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// EmbeddingRow decodes row r of an [rows, cols] matrix of type t into dst.
func EmbeddingRow(dst []float32, t tensor.DType, data []byte, r int) error {
	rb, err := t.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if (r+1)*rb > len(data) || r < 0 {
		return fmt.Errorf("kernels: row %d is outside the matrix", r)
	}
	return tensor.DecodeRow(dst, t, data[r*rb:(r+1)*rb])
}

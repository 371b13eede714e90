// Package kernels holds the hot loops of the engine: matrix products over every
// weight type, and the vector functions of the model (RMSNorm, softmax, gelu,
// RoPE). Each function takes plain slices and sizes, never model types, so a
// SIMD version can replace the pure-Go one without touching the model.
//
// On amd64 the loops are assembly generated with avo (kernels/_asm), in an
// AVX2+FMA+F16C and an AVX-512 (F, BW, VL, DQ, plus VNNI for int8) variant
// chosen at start-up; build with -tags noasm for the pure-Go versions, which
// are also the reference the SIMD ones are tested against (ref.go).
package kernels

import (
	"fmt"
	"sync"
	"sync/atomic"
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
//
// By default (ExactQuant) every weight type multiplies float32 activations:
// Q8_0 and I8 weights are dequantised in registers, as model.py dequantises
// inside Linear. With ExactQuant false, products with Q8_0 weights, and with
// I8 weights in the [out, in] layout, quantise the activations to int8 in
// blocks of 32 the way llama.cpp's quantize_row_q8_0 does (d = max|x|/127, q = round(x/d) halfway away from
// zero; the scale d is kept in float32 where llama.cpp rounds it to fp16)
// and multiply in integers. For I8 the blocks restart at every shard
// boundary, so no block straddles two scale shards. The relative error this
// adds to a dot product is of order 1/254 per term, random in sign: about
// what model.py's bf16 activations carry (2^-9). F32, F16, BF16 and
// [in, out] I8 weights always multiply float32 activations.
type Mat struct {
	Type    tensor.DType
	Out, In int
	Data    []byte
	InOut   bool
	Scales  []float32
	Shards  int
}

// ExactQuant makes Q8_0 and [out, in] I8 products use float32 activations
// (weights dequantised in registers) instead of int8-quantised ones (VNNI).
// It is read by every MatMul call; set it before starting any.
//
// It is on by default: on this project's AVX-512 machines the exact path is
// as fast as the int8 one (Q8_0 GEMV 18.5 vs 15.5 GB/s of weights, GEMM 139
// vs 125 GFLOP/s with AVX512-VNNI, measured in one run: the per-block float
// rescaling of the integer path costs what the FMAs it replaces cost), and it
// adds no error beyond the weights' own rounding.
var ExactQuant = true

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
	if m.Type == tensor.Q8_0 && m.InOut {
		return fmt.Errorf("kernels: Q8_0 blocks must run along the input axis")
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

// MatMul computes dst[i] = W·x[i] for n input vectors: x is n×In, dst is
// n×Out, both row-major. Each weight row is read from memory once for all n
// inputs. The matrix must have passed Validate. See Mat for the arithmetic
// of each weight type.
func MatMul(dst, x []float32, n int, m *Mat) {
	MatMulRows(dst, x, n, m, 0, m.Out)
}

// MatMulRows computes output columns [lo, hi) of MatMul only (dst is still
// n×Out); disjoint ranges may run concurrently. The result does not depend
// on how the columns are split.
func MatMulRows(dst, x []float32, n int, m *Mat, lo, hi int) {
	if n <= 0 || lo >= hi {
		return
	}
	// The assembly trusts these sizes; Validate covered Data and Scales.
	if lo < 0 || hi > m.Out || len(x) < n*m.In || len(dst) < n*m.Out {
		panic(fmt.Sprintf("kernels: MatMulRows(%d×%d, n=%d, [%d,%d)) with len(x)=%d, len(dst)=%d", m.Out, m.In, n, lo, hi, len(x), len(dst)))
	}
	quant := !ExactQuant && !m.InOut && (m.Type == tensor.Q8_0 || m.Type == tensor.I8)
	ks := active
	switch {
	case ks == nil && quant:
		matMulQuantRef(dst, x, n, m, lo, hi)
	case ks == nil:
		matMulRef(dst, x, n, m, lo, hi)
	case m.InOut:
		ks.inoutMatMul(dst, x, n, m, lo, hi)
	case quant:
		ks.intMatMul(dst, x, n, m, lo, hi)
	default:
		ks.dotMatMul(dst, x, n, m, lo, hi)
	}
}

// Shards of int8 [in, out] matrices (xAI's row-parallel layers: attention
// output, expert linear_1) can be computed shard by shard: MatMulShard gives
// one shard's product without its scales over every column, CombineShards
// adds the scaled shards in order. Together they give the bits MatMulRows
// gives, with another split of the work: a thread that computes a whole
// shard streams one contiguous block of weights, where a range of columns
// is a short run out of every row (two threads: 29-38 GB/s against 11-20,
// measured on 4096×1536 and 1536×4096 int8 matrices).

// ShardParts is the number of shards MatMulShard and CombineShards split m
// into: its scale shards for an I8 [in, out] matrix with more than one, else
// 0 (use MatMulRows).
func (m *Mat) ShardParts() int {
	if m.InOut && m.Type == tensor.I8 && m.Shards > 1 {
		return m.Shards
	}
	return 0
}

// MatMulShard computes shard s of an I8 [in, out] product (ShardParts > 0)
// without the shard's scales: part[t][c] = Σ_{k in shard s} x[t][k]·W[k][c]
// for n inputs (x is n×In) and every output column (part is n×Out).
func MatMulShard(part, x []float32, n int, m *Mat, s int) {
	seg := m.In / m.Shards
	if s < 0 || s >= m.Shards || len(x) < n*m.In || len(part) < n*m.Out {
		panic(fmt.Sprintf("kernels: MatMulShard(shard %d of %d, n=%d) with len(x)=%d, len(part)=%d", s, m.Shards, n, len(x), len(part)))
	}
	sub := Mat{Type: tensor.I8, Out: m.Out, In: seg, InOut: true, Shards: 1,
		Data: m.Data[s*seg*m.Out : (s+1)*seg*m.Out], Scales: ones(m.Out)}
	xs := x[s*seg : (s+1)*seg]
	if n > 1 {
		p := getScratch(n * seg)
		defer scratchPool.Put(p)
		xs = (*p)[:n*seg]
		for t := 0; t < n; t++ {
			copy(xs[t*seg:(t+1)*seg], x[t*m.In+s*seg:])
		}
	}
	// Unit scales: the per-shard step d += 1·acc of a one-shard product
	// leaves acc exactly.
	MatMulRows(part, xs, n, &sub, 0, m.Out)
}

// CombineShards computes output columns [lo, hi) of the I8 [in, out]
// product from its ShardParts partial products (parts[s] is n×Out, from
// MatMulShard): dst[t][c] = Σ_s scale[s][c]·parts[s][t][c], shards in order,
// with MatMulRows' rounding.
func CombineShards(dst []float32, parts [][]float32, n int, m *Mat, lo, hi int) {
	Out := m.Out
	for t := 0; t < n; t++ {
		d := dst[t*Out+lo : t*Out+hi]
		clear(d)
		for s, p := range parts[:m.Shards] {
			addScaled(d, m.Scales[s*Out+lo:s*Out+hi], p[t*Out+lo:t*Out+hi])
		}
	}
}

// addScaled adds sc[c]·a[c] to d[c], rounding the product and the sum each
// once (the conversion forbids a fused multiply-add): the one place the
// per-shard scales are applied, so that every path rounds them alike.
func addScaled(d, sc, a []float32) {
	sc, a = sc[:len(d)], a[:len(d)]
	for c := range d {
		d[c] += float32(sc[c] * a[c])
	}
}

var (
	onesMu sync.Mutex
	onesP  atomic.Pointer[[]float32]
)

// ones returns n float32 ones, from a slice shared and only ever grown.
func ones(n int) []float32 {
	if p := onesP.Load(); p != nil && len(*p) >= n {
		return (*p)[:n]
	}
	onesMu.Lock()
	defer onesMu.Unlock()
	if p := onesP.Load(); p != nil && len(*p) >= n {
		return (*p)[:n]
	}
	v := make([]float32, max(n, 4096))
	for i := range v {
		v[i] = 1
	}
	onesP.Store(&v)
	return v[:n]
}

// F32Mat returns float32 values, already in memory, as an F32 matrix of
// Out×In (y = W·x) without copying them: Out rows of In values, or with
// inOut set In rows of Out values. Attention uses it to multiply by its
// key and value memory.
func F32Mat(data []float32, out, in int, inOut bool) Mat {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), 4*len(data))
	return Mat{Type: tensor.F32, Out: out, In: in, Data: b, InOut: inOut}
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

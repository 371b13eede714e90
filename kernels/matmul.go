// Package kernels holds the hot loops of the engine: matrix products over every
// weight type, and the vector functions of the model (RMSNorm, softmax, gelu,
// RoPE). Each function takes plain slices and sizes, never model types, so a
// SIMD version can replace the pure-Go one without touching the model.
//
// On amd64 the loops are assembly generated with avo (kernels/_asm), in an
// AVX2+FMA+F16C and an AVX-512 (F, BW, VL, DQ, plus VNNI for int8) variant
// chosen at start-up (AVX2 CPUs with AVX-VNNI get VEX VPDPBUSD for int8); build with -tags noasm for the pure-Go versions, which
// are also the reference the SIMD ones are tested against (ref.go).
package kernels

import (
	"fmt"
	"unsafe"

	"github.com/grok-go/grok/tensor"
)

// Mat is a weight matrix W of Out×In (y = W·x) as stored in a model file.
//
// Data holds Out rows of In elements (the ggml/PyTorch [out, in] layout), or,
// with Transposed set (as in tensor.Tensor), In rows of Out elements
// (Haiku's [in, out] `w`, used by xAI's checkpoint). For I8 (QuantizedWeight8bit) Scales holds Shards×Out
// per-output-column scales: the In axis is split into Shards equal parts and
// part s uses row s of the scales (semantics §2, row-parallel layers). In
// the [in, out] layout the sum over In runs in row blocks (Blocks).
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
//
// Stride, if not 0, is the bytes from the start of one stored row to the
// next (0: rows are packed, RowBytes apart). A slice of a larger matrix
// along the axis its rows run (SliceIn of [out, in], SliceOut of [in, out])
// is strided: it stays a view into the larger matrix's bytes.
//
// Parts, if not nil, hold the matrix as pieces that lie apart in memory
// (a model file's tensor-parallel slices, see Parted); Data is then nil.
// PartsIn says which axis they cut: the input axis, or (false) the outputs.
type Mat struct {
	Type       tensor.DType
	Out, In    int
	Data       []byte
	Transposed bool
	Scales     []float32
	Shards     int
	Stride     int
	Parts      []Mat
	PartsIn    bool
}

// stride returns the bytes from one stored row to the next.
func (m *Mat) stride() int {
	if m.Stride != 0 {
		return m.Stride
	}
	rb, _ := m.Type.RowBytes(m.rowLen())
	return rb
}

// rowLen is the elements of one stored row: In, or Out when Transposed.
func (m *Mat) rowLen() int {
	if m.Transposed {
		return m.Out
	}
	return m.In
}

// rowBytes is the bytes of one stored row's elements.
func (m *Mat) rowBytes() int {
	rb, _ := m.Type.RowBytes(m.rowLen())
	return rb
}

// ExactQuant makes Q8_0 and [out, in] I8 products use float32 activations
// (weights dequantised in registers) instead of int8-quantised ones (VNNI).
// It is read by every MatMul call; set it before starting any.
//
// It is on by default: it adds no error beyond the weights' own rounding,
// and on AVX-512 it is at least as fast as the int8 path, whose per-block
// float rescaling costs what the FMAs it replaces cost (figures:
// bench/README.md).
var ExactQuant = true

// Validate checks that the matrix's bytes and scales agree with its sizes.
func (m *Mat) Validate() error {
	if m.Out <= 0 || m.In <= 0 {
		return fmt.Errorf("kernels: matrix %d×%d has no elements", m.Out, m.In)
	}
	if m.Parts != nil {
		return m.validateParts()
	}
	rows, cols := m.Out, m.In
	if m.Transposed {
		rows, cols = m.In, m.Out
	}
	rb, err := m.Type.RowBytes(cols)
	if err != nil {
		return err
	}
	need := rows * rb
	if m.Stride != 0 {
		if m.Stride < rb {
			return fmt.Errorf("kernels: %v matrix %d×%d: row stride %d is shorter than a row (%d bytes)", m.Type, m.Out, m.In, m.Stride, rb)
		}
		need = (rows-1)*m.Stride + rb
	}
	if len(m.Data) != need {
		return fmt.Errorf("kernels: %v matrix %d×%d needs %d bytes, have %d", m.Type, m.Out, m.In, need, len(m.Data))
	}
	if m.Transposed && m.Type != tensor.F32 && m.Type != tensor.F16 && m.Type != tensor.BF16 && m.Type != tensor.I8 {
		return fmt.Errorf("kernels: %v blocks must run along the input axis", m.Type)
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
// on how the columns are split, and a token's outputs do not depend on the
// other tokens of the call (dotSpan).
func MatMulRows(dst, x []float32, n int, m *Mat, lo, hi int) {
	if n <= 0 || lo >= hi {
		return
	}
	// The assembly trusts these sizes; Validate covered Data and Scales.
	if lo < 0 || hi > m.Out || len(x) < n*m.In || len(dst) < n*m.Out {
		panic(fmt.Sprintf("kernels: MatMulRows(%d×%d, n=%d, [%d,%d)) with len(x)=%d, len(dst)=%d", m.Out, m.In, n, lo, hi, len(x), len(dst)))
	}
	if m.Parts != nil {
		matMulParts(dst, x, n, m, lo, hi)
		return
	}
	quant := !ExactQuant && !m.Transposed && (m.Type == tensor.Q8_0 || m.Type == tensor.I8)
	ks := active
	switch {
	case ks == nil && quant:
		matMulQuantRef(dst, x, n, m, lo, hi)
	case ks == nil:
		matMulRef(dst, x, n, m, lo, hi)
	case !hasDotKernels(m.Type):
		ks.dequantMatMul(dst, x, n, m, lo, hi)
	case m.Transposed:
		ks.inoutMatMul(dst, x, n, m, lo, hi)
	case quant:
		ks.intMatMul(dst, x, n, m, lo, hi)
	default:
		ks.dotMatMul(dst, x, n, m, lo, hi)
	}
}

// AddInOut adds x·W to dst for the n tokens of x, where m is an [in, out]
// matrix (Transposed) of F32, F16 or BF16: dst[t][c] += Σ_k x[t][k]·W[k][c].
// Each weight row's terms are added to dst in row order, one row at a
// time, exactly as MatMulRows adds them to a cleared dst; so a product
// split by rows into consecutive calls on the same dst (attention's values,
// page by page) has the bits of one MatMulRows over all the rows.
func AddInOut(dst, x []float32, n int, m *Mat) {
	if !m.Transposed || m.Parts != nil || m.blockScaled() || !(m.Type == tensor.F32 || m.Type == tensor.F16 || m.Type == tensor.BF16) {
		panic(fmt.Sprintf("kernels: AddInOut of a %v matrix (transposed %v, scaled %v)", m.Type, m.Transposed, m.blockScaled()))
	}
	if len(x) < n*m.In || len(dst) < n*m.Out {
		panic(fmt.Sprintf("kernels: AddInOut(%d×%d, n=%d) with len(x)=%d, len(dst)=%d", m.In, m.Out, n, len(x), len(dst)))
	}
	if n == 0 || m.In == 0 {
		return
	}
	if ks := active; ks != nil {
		ks.inoutProduct(dst, x, n, m, 0, m.Out, true)
		return
	}
	rowp := getScratch(m.Out)
	defer scratchPool.Put(rowp)
	addInOutRef(dst, x, n, m, 0, m.Out, *rowp)
}

// An int8 [in, out] product (xAI's layout) is a sum over row blocks: the
// In axis splits into the matrix's scale shards, and each shard into
// blocks of BlockRows rows (the last block of a shard may be shorter).
// Each block's product accumulates from zero over its rows in order, and
// dst receives the blocks in order, each times its shard's per-column
// scale. The blocks fix the order of the sums whatever the split of the
// work, so a product can also run block by block: MatMulBlock gives one
// block's product without its scales over every column, CombineBlocks
// adds the scaled blocks in order, and together they give MatMulRows' bits.
// A thread that computes a whole block streams one contiguous run of
// weights, where a range of columns is a short run out of every row, which
// keeps too few bytes in flight (figures: bench/README.md).

// BlockRows is the most rows of a block of an int8 [in, out] product:
// large enough that a block is a long contiguous stream (256 rows of 1536
// to 32768 bytes), small enough to give two threads several blocks even of
// the small attention matrices.
const BlockRows = 256

// Blocks is the number of row blocks of an I8 [in, out] matrix, else 0
// (use MatMulRows).
func (m *Mat) Blocks() int {
	if !m.Transposed || m.Type != tensor.I8 {
		return 0
	}
	return m.Shards * m.shardBlocks()
}

// shardBlocks is the number of row blocks of each scale shard.
func (m *Mat) shardBlocks() int {
	return (m.In/m.Shards + BlockRows - 1) / BlockRows
}

// blockRange returns block b's rows [k0, k1).
func (m *Mat) blockRange(b int) (k0, k1 int) {
	seg, per := m.In/m.Shards, m.shardBlocks()
	s, j := b/per, b%per
	k0 = s*seg + j*BlockRows
	return k0, min(k0+BlockRows, (s+1)*seg)
}

// blockScaled reports whether the product sums over scaled row blocks:
// I8 matrices, except MatMulBlock's sub-matrices of one block, which have
// no scales and accumulate their rows plainly.
func (m *Mat) blockScaled() bool { return m.Type == tensor.I8 && m.Scales != nil }

// blockShard returns the scale shard of block b.
func (m *Mat) blockShard(b int) int { return b / m.shardBlocks() }

// MatMulBlock computes block b of an I8 [in, out] product (Blocks > 0)
// without its scales: part[t][c] = Σ_{k in block b} x[t][k]·W[k][c] for n
// inputs (x is n×In) and every output column (part is n×Out).
func MatMulBlock(part, x []float32, n int, m *Mat, b int) {
	if b < 0 || b >= m.Blocks() || len(x) < n*m.In || len(part) < n*m.Out {
		panic(fmt.Sprintf("kernels: MatMulBlock(block %d of %d, n=%d) with len(x)=%d, len(part)=%d", b, m.Blocks(), n, len(x), len(part)))
	}
	k0, k1 := m.blockRange(b)
	rows := k1 - k0
	// Unscaled: accumulated straight into part, as an F32 product is.
	st := m.stride()
	sub := Mat{Type: tensor.I8, Out: m.Out, In: rows, Transposed: true, Shards: 1,
		Data: m.Data[k0*st : (k1-1)*st+m.Out], Stride: m.Stride}
	xs := x[k0:k1]
	if n > 1 {
		p := getScratch(n * rows)
		defer scratchPool.Put(p)
		xs = (*p)[:n*rows]
		for t := 0; t < n; t++ {
			copy(xs[t*rows:(t+1)*rows], x[t*m.In+k0:])
		}
	}
	MatMulRows(part, xs, n, &sub, 0, m.Out)
}

// CombineBlocks computes output columns [lo, hi) of the I8 [in, out]
// product from its Blocks partial products (parts[b] is n×Out, from
// MatMulBlock): dst[t][c] = Σ_b scale[shard(b)][c]·parts[b][t][c], blocks
// in order, with MatMulRows' rounding.
func CombineBlocks(dst []float32, parts [][]float32, n int, m *Mat, lo, hi int) {
	Out := m.Out
	for t := 0; t < n; t++ {
		d := dst[t*Out+lo : t*Out+hi]
		clear(d)
		for b, p := range parts[:m.Blocks()] {
			s := m.blockShard(b)
			addScaled(d, m.Scales[s*Out+lo:s*Out+hi], p[t*Out+lo:t*Out+hi])
		}
	}
}

// addScaled adds sc[c]·a[c] to d[c], rounding the product and the sum each
// once (the conversion forbids a fused multiply-add; the SIMD kernel
// multiplies, then adds): the one place the per-shard scales are applied,
// so that every path rounds them alike.
func addScaled(d, sc, a []float32) {
	sc, a = sc[:len(d)], a[:len(d)]
	nv := 0
	if ks := active; ks != nil {
		nv = len(d) / ks.vecWidth()
		if nv > 0 {
			ks.vec.addScaled.call(&d[0], &sc[0], &a[0], nv)
		}
		nv *= ks.vecWidth()
	}
	for c := nv; c < len(d); c++ {
		d[c] += float32(sc[c] * a[c])
	}
}

// F32Mat returns float32 values, already in memory, as an F32 matrix of
// Out×In (y = W·x) without copying them: Out rows of In values, or with
// inOut set In rows of Out values. Attention uses it to multiply by its
// key and value memory.
func F32Mat(data []float32, out, in int, inOut bool) Mat {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(data))), 4*len(data))
	return Mat{Type: tensor.F32, Out: out, In: in, Data: b, Transposed: inOut}
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

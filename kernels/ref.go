package kernels

import (
	"sync/atomic"
	"unsafe"

	"github.com/grok-go/grok/tensor"
)

// This file holds the pure-Go matrix products: the fallback where no SIMD
// level is available and the reference the assembly is tested against.

// scratchPool holds the products' float32 scratch buffers for reuse.
var scratchPool = freeList[[]float32]{sizeOf: func(p *[]float32) int { return cap(*p) }}

// freeList is a free list of scratch objects. Unlike a sync.Pool it is
// never emptied by the garbage collector, and unlike a mutex it never
// parks a thread (which costs the runtime an allocation), so once it holds
// an object for each product that runs at once, a decode step allocates
// nothing. An object put back when every slot is full is left to the GC.
type freeList[T any] struct {
	slots [64]atomic.Pointer[T]
	// sizeOf, if set, is an object's capacity, noted when it is put back
	// so that Fit can prefer one large enough: buffers of many sizes share
	// the list, and one that a small product took would otherwise have to
	// grow for a large one. The note is only a hint; callers still check.
	sizeOf func(*T) int
	sizes  [64]atomic.Int64
}

// Get returns a free object, or a new zero one.
func (s *freeList[T]) Get() *T { return s.Fit(0) }

// Fit returns a free object whose noted size is at least n if there is
// one, else any free object, else a new zero one.
func (s *freeList[T]) Fit(n int) *T {
	if n > 0 && s.sizeOf != nil {
		for i := range s.slots {
			if p := s.slots[i].Load(); p != nil && s.sizes[i].Load() >= int64(n) && s.slots[i].CompareAndSwap(p, nil) {
				return p
			}
		}
	}
	for i := range s.slots {
		if s.slots[i].Load() != nil {
			if p := s.slots[i].Swap(nil); p != nil {
				return p
			}
		}
	}
	return new(T)
}

// Put returns p to the free list.
func (s *freeList[T]) Put(p *T) {
	size := 0
	if s.sizeOf != nil {
		size = s.sizeOf(p) // before p is in the list: another Get may take it at once
	}
	for i := range s.slots {
		if s.slots[i].Load() == nil && s.slots[i].CompareAndSwap(nil, p) {
			s.sizes[i].Store(int64(size))
			return
		}
	}
}

// getScratch returns a scratch buffer of n elements; give it back with
// scratchPool.Put.
func getScratch(n int) *[]float32 {
	p := scratchPool.Fit(n)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// getBytes returns a byte scratch buffer of n bytes; give it back with
// bytePool.Put.
func getBytes(n int) *[]byte {
	p := bytePool.Fit(n)
	if cap(*p) < n {
		*p = make([]byte, n)
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

// matMulRef is MatMulRows with float32 activations: each weight row is
// decoded to float32 and dotted with every input.
func matMulRef(dst, x []float32, n int, m *Mat, lo, hi int) {
	if m.Transposed {
		matMulInOutRef(dst, x, n, m, lo, hi)
		return
	}
	In, Out := m.In, m.Out
	rb, rl := m.stride(), m.rowBytes()
	sp := getScratch(In)
	defer scratchPool.Put(sp)
	if m.Type == tensor.I8 {
		blk := In / m.Shards
		for r := lo; r < hi; r++ {
			row := rowF32(*sp, tensor.I8, m.Data[r*rb:r*rb+rl])
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
		row := rowF32(*sp, m.Type, m.Data[r*rb:r*rb+rl])
		for i := 0; i < n; i++ {
			dst[i*Out+r] = Dot(row, x[i*In:(i+1)*In])
		}
	}
}

// matMulInOutRef handles the [in, out] layout: y = Σ_r x[r]·W[r, :], one
// weight row at a time; I8 by row blocks, each scaled once (Mat.Blocks).
func matMulInOutRef(dst, x []float32, n int, m *Mat, lo, hi int) {
	In, Out := m.In, m.Out
	w := hi - lo
	rb := m.stride()
	esz := m.rowBytes() / Out // bytes per element (no block types in this layout)
	rowp := getScratch(w)
	defer scratchPool.Put(rowp)
	if !m.blockScaled() {
		// Each row added into dst in turn: AddInOut's order.
		for i := 0; i < n; i++ {
			clear(dst[i*Out+lo : i*Out+hi])
		}
		addInOutRef(dst, x, n, m, lo, hi, *rowp)
		return
	}
	blocks := 1
	if m.blockScaled() {
		blocks = m.Blocks()
	}
	accp := getScratch(n * w)
	defer scratchPool.Put(accp)
	acc := *accp
	for i := 0; i < n; i++ {
		clear(dst[i*Out+lo : i*Out+hi])
	}
	for b := 0; b < blocks; b++ {
		clear(acc)
		k0, k1 := 0, In
		if m.blockScaled() {
			k0, k1 = m.blockRange(b)
		}
		for r := k0; r < k1; r++ {
			row := rowF32(*rowp, m.Type, m.Data[r*rb+lo*esz:r*rb+hi*esz])
			for i := 0; i < n; i++ {
				axpyRef(acc[i*w:(i+1)*w], x[i*In+r], row)
			}
		}
		for i := 0; i < n; i++ {
			d := dst[i*Out+lo : i*Out+hi]
			a := acc[i*w : (i+1)*w]
			if m.blockScaled() {
				addScaled(d, m.Scales[m.blockShard(b)*Out+lo:m.blockShard(b)*Out+hi], a)
			} else {
				for c := range d {
					d[c] += a[c]
				}
			}
		}
	}
}

// addInOutRef adds x·W over the columns [lo, hi) of an [in, out] matrix
// without block scales into dst, one weight row after another (row: scratch
// of hi-lo).
func addInOutRef(dst, x []float32, n int, m *Mat, lo, hi int, row []float32) {
	rb, esz := m.stride(), m.rowBytes()/m.Out
	for r := 0; r < m.In; r++ {
		w := rowF32(row, m.Type, m.Data[r*rb+lo*esz:r*rb+hi*esz])
		for i := 0; i < n; i++ {
			axpyRef(dst[i*m.Out+lo:i*m.Out+hi], x[i*m.In+r], w)
		}
	}
}

// matMulQuantRef is the quantised-activation product of Q8_0 and [out, in]
// I8 weights, the exact computation the integer kernels perform: quantise
// each input (quantizeActs), take the integer dot product of every block,
// and scale it: Q8_0 by the weight block's fp16 d times the activation
// block's d; I8 by the activation block's d, summed over the shard and then
// multiplied by the shard's per-column scale.
func matMulQuantRef(dst, x []float32, n int, m *Mat, lo, hi int) {
	qa := quantizeActs(0, x, n, m)
	defer qbufPool.Put(qa)
	In, Out := m.In, m.Out
	rb, rl := m.stride(), m.rowBytes()
	for r := lo; r < hi; r++ {
		row := m.Data[r*rb : r*rb+rl]
		for t := 0; t < n; t++ {
			xq, dx := qa.token(t)
			var v float32
			if m.Type == tensor.Q8_0 {
				for b := 0; b < In/tensor.Q8BlockSize; b++ {
					v += q8BlockTerm(row[b*tensor.Q8BlockBytes:], xq[b*32:], dx[b*8])
				}
			} else {
				seg := In / m.Shards
				nbs := qa.nbs
				for s := 0; s < m.Shards; s++ {
					var acc float32
					for b := 0; b < nbs; b++ {
						k0 := s*seg + b*32
						nk := min(32, seg-b*32)
						acc += i8BlockTerm(row[k0:k0+nk], xq[(s*nbs+b)*32:], dx[(s*nbs+b)*8])
					}
					v += m.Scales[s*Out+r] * acc
				}
			}
			dst[t*Out+r] = v
		}
	}
}

// q8BlockTerm is one Q8_0 block's contribution dw·dx·Σ w·x.
func q8BlockTerm(blk, xq []byte, dx float32) float32 {
	dw := tensor.HalfToFloat(uint16(blk[0]) | uint16(blk[1])<<8)
	return dw * dx * float32(dotI8(blk[2:2+32], xq))
}

// i8BlockTerm is one activation block's contribution dx·Σ w·x to an I8 row
// (w may be a shard's partial last block).
func i8BlockTerm(w, xq []byte, dx float32) float32 {
	return dx * float32(dotI8(w, xq))
}

// dotI8 is the exact integer dot product of int8 vectors w and x[:len(w)].
func dotI8(w, x []byte) int32 {
	x = x[:len(w)]
	var s int32
	for i := range w {
		s += int32(int8(w[i])) * int32(int8(x[i]))
	}
	return s
}

// dotRef returns Σ a[i]·b[i] over len(a) elements, accumulated in float32 with
// four independent partial sums.
func dotRef(a, b []float32) float32 {
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

// axpyRef computes y += a·x.
func axpyRef(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

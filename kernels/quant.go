package kernels

import (
	"math"

	"github.com/grok-go/grok/tensor"
)

// minQ8Scale is the smallest block scale d = amax/127 that is quantised:
// 1/d must be finite, so d must be a normal float32. Smaller blocks (amax
// below about 1.5e-36) quantise to zero with d = 0, as all-zero blocks do.
const minQ8Scale = 0x1p-126

// quantizeBlockRef quantises x (at most 32 values; a shorter block is
// padded with zero quants) exactly as llama.cpp's quantize_row_q8_0_ref:
// amax = max|x|, d = amax/127, id = 1/d, q = round(x·id) with halfway cases
// away from zero, all in float32. The scale is written to dx[0:8] (repeated
// so that the SIMD kernels can load it as a vector) and kept in float32,
// where llama.cpp rounds it to fp16: the quants are identical, the scale
// more precise.
//
// cr[0:8] receives -128·(q[4i]+q[4i+1]+q[4i+2]+q[4i+3]): the VNNI kernels,
// which multiply w+128 (unsigned) by q, start lane i from it so that the
// lane ends as the exact Σ w·q of its four products.
//
// Degenerate blocks: d < 2^-126 gives d = 0 and zero quants; an infinite
// amax gives d = +Inf and zero quants, and a NaN anywhere d = NaN and zero
// quants, so that either poisons the products as it would in float32.
func quantizeBlockRef(xq []byte, dx []float32, cr []int32, x []float32) {
	xq = xq[:32]
	var amax float32
	nan := false
	for _, v := range x {
		if v != v {
			nan = true
		}
		if a := float32(math.Abs(float64(v))); a > amax {
			amax = a
		}
	}
	d := amax / 127
	ok := d >= minQ8Scale && d <= math.MaxFloat32
	switch {
	case nan:
		d, ok = float32(math.NaN()), false
	case d < minQ8Scale:
		d = 0
	}
	var id float32
	if ok {
		id = 1 / d
	}
	clear(xq)
	if ok {
		for j, v := range x {
			xq[j] = byte(int8(roundHalfAway(v * id)))
		}
	}
	for j := range dx[:8] {
		dx[j] = d
		cr[j] = -128 * (int32(int8(xq[4*j])) + int32(int8(xq[4*j+1])) + int32(int8(xq[4*j+2])) + int32(int8(xq[4*j+3])))
	}
}

// roundHalfAway is C's roundf for |v| < 2^31.
func roundHalfAway(v float32) int32 {
	return int32(math.Round(float64(v)))
}

// qbuf holds n quantised activation vectors: per token nbt blocks, quants
// 32 bytes a block in xq, the scale 8 times a block in dx and the lane
// corrections, 8 a block, in cr (stride nbt·32 bytes in all three).
type qbuf struct {
	xq       []byte
	dx       []float32
	cr       []int32
	nbt, nbs int // blocks per token, blocks per shard
}

func (q *qbuf) token(t int) ([]byte, []float32) {
	return q.xq[t*q.nbt*32 : (t+1)*q.nbt*32], q.dx[t*q.nbt*8 : (t+1)*q.nbt*8]
}

// qbufPool holds the quantised activations' buffers (see freeList).
var qbufPool freeList[qbuf]

// quantizeActs quantises the n inputs of a Q8_0 or I8 product: blocks of 32
// along In, restarting at every I8 shard boundary. With a kernel it uses the
// SIMD quantiser for whole blocks; partial blocks (I8 shards whose length is
// not a multiple of 32) always take quantizeBlockRef, which is also what
// the quantiser kernels are tested to equal bit for bit.
func quantizeActs(qk quantKernel, x []float32, n int, m *Mat) *qbuf {
	shards := 1
	if m.Type == tensor.I8 {
		shards = m.Shards
	}
	seg := m.In / shards
	q := qbufPool.Get()
	q.nbs = (seg + 31) / 32
	q.nbt = shards * q.nbs
	nb := n * q.nbt
	if cap(q.xq) < nb*32 {
		q.xq = make([]byte, nb*32)
		q.dx = make([]float32, nb*8)
		q.cr = make([]int32, nb*8)
	}
	q.xq, q.dx, q.cr = q.xq[:nb*32], q.dx[:nb*8], q.cr[:nb*8]
	for t := 0; t < n; t++ {
		for s := 0; s < shards; s++ {
			xs := x[t*m.In+s*seg : t*m.In+(s+1)*seg]
			b0 := t*q.nbt + s*q.nbs
			full := 0
			if qk != 0 && seg >= 32 {
				full = seg / 32
				qk.call(&xs[0], full, &q.xq[b0*32], &q.dx[b0*8], &q.cr[b0*8])
			}
			for b := full; b < q.nbs; b++ {
				quantizeBlockRef(q.xq[(b0+b)*32:], q.dx[(b0+b)*8:], q.cr[(b0+b)*8:], xs[b*32:min(seg, (b+1)*32)])
			}
		}
	}
	return q
}

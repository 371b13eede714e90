package kernels

import (
	"fmt"
	"math"
	"sync"

	"github.com/grok-go/grok/tensor"
)

// Precision chooses the arithmetic of a product (MatMulRowsP).
type Precision int

const (
	// Exact multiplies float32 activations by the weights as stored
	// (MatMulRows; see Mat and ExactQuant).
	Exact Precision = iota
	// Fast quantises each token's activations to int8 in blocks of 32
	// (quantizeBlockRef, llama.cpp's quantize_row_q8_0) and multiplies in
	// integers where the weights are int8 (Q8_0, [out, in] I8) and the CPU
	// has AVX-512 VNNI; everything else runs as Exact. Each token is
	// quantised alone and its sums follow a fixed grid, so its bits still
	// do not depend on its batch.
	Fast
)

// String names the precision as the command line does.
func (p Precision) String() string {
	if p == Fast {
		return "fast"
	}
	return "exact"
}

// ParsePrecision reads "exact" or "fast".
func ParsePrecision(s string) (Precision, bool) {
	switch s {
	case "exact":
		return Exact, true
	case "fast":
		return Fast, true
	}
	return Exact, false
}

// FastTypes reports whether products with weights of type t run in
// integers under Fast on this machine (else they run as Exact).
func FastTypes(t tensor.DType) bool {
	ks := active
	return ks != nil && ks.fast != nil && (t == tensor.Q8_0 || t == tensor.I8)
}

// fastFor reports whether the fast path takes m: int8 weights along the
// input axis, I8 shards whole blocks of 32 (so that no activation block
// straddles two scales).
func fastFor(m *Mat) bool {
	if m.Transposed {
		return false
	}
	switch m.Type {
	case tensor.Q8_0:
		return true
	case tensor.I8:
		return (m.In/m.Shards)%32 == 0
	}
	return false
}

// MatMulRowsP is MatMulRows at precision p. Under Fast the kernels in use
// decide (FastTypes): with AVX-512 VNNI, Q8_0 and [out, in] I8 products
// take fastMatMul; without it, and for every other type, the product is
// MatMulRows' own.
func MatMulRowsP(dst, x []float32, n int, m *Mat, lo, hi int, p Precision) {
	if p != Fast || !fastFor(m) || active == nil || active.fast == nil {
		MatMulRows(dst, x, n, m, lo, hi)
		return
	}
	if n <= 0 || lo >= hi {
		return
	}
	// The assembly trusts these sizes; Validate covered Data and Scales.
	if lo < 0 || hi > m.Out || len(x) < n*m.In || len(dst) < n*m.Out {
		panic(fmt.Sprintf("kernels: MatMulRowsP(%d×%d, n=%d, [%d,%d)) with len(x)=%d, len(dst)=%d", m.Out, m.In, n, lo, hi, len(x), len(dst)))
	}
	active.fastMatMul(dst, x, n, m, lo, hi)
}

// fastLanes is the tokens of one activation vector.
const fastLanes = 16

// fastActs holds the activations of a fast product, quantised per token
// in blocks of 32 (quantizeBlockRef) and interleaved 16 tokens to a vector
// group: per group and block, 8 × 64 bytes of quants (lane l: 4 quants of
// token 16g+l), 16 float32 scales dx and 16 int32 corrections -128·Σ q
// (fastBlock bytes). Lanes past the last token are zero.
type fastActs struct {
	buf    []byte
	groups int // vector groups: ⌈n/16⌉
	nbt    int // blocks per token
}

const (
	fastBlock = 640 // bytes of one block of one group
	fastDX    = 512
	fastCR    = 576
)

// stride is the bytes of one group.
func (a *fastActs) stride() int { return a.nbt * fastBlock }

var fastPool = sync.Pool{New: func() any { return new(fastActs) }}

// quantizeFast quantises n tokens of In activations (In a multiple of 32)
// into a pooled fastActs.
func quantizeFast(qk quantKernel, x []float32, n, In int) *fastActs {
	a := fastPool.Get().(*fastActs)
	a.nbt = In / 32
	a.groups = (n + fastLanes - 1) / fastLanes
	size := a.groups * a.stride()
	if cap(a.buf) < size {
		a.buf = make([]byte, size)
	}
	a.buf = a.buf[:size]
	if n%fastLanes != 0 {
		clear(a.buf[(a.groups-1)*a.stride():])
	}
	tq := qbufPool.Get().(*qbuf) // one token's blocks
	defer qbufPool.Put(tq)
	nb := a.nbt
	if cap(tq.xq) < nb*32 {
		tq.xq, tq.dx, tq.cr = make([]byte, nb*32), make([]float32, nb*8), make([]int32, nb*8)
	}
	xq, dx, cr := tq.xq[:nb*32], tq.dx[:nb*8], tq.cr[:nb*8]
	for t := 0; t < n; t++ {
		xs := x[t*In : (t+1)*In]
		if qk != 0 {
			qk.call(&xs[0], nb, &xq[0], &dx[0], &cr[0])
		} else {
			for b := 0; b < nb; b++ {
				quantizeBlockRef(xq[b*32:], dx[b*8:], cr[b*8:], xs[b*32:(b+1)*32])
			}
		}
		g, l := t/fastLanes, t%fastLanes
		base := a.buf[g*a.stride():]
		for b := 0; b < nb; b++ {
			blk := base[b*fastBlock : (b+1)*fastBlock]
			q := xq[b*32 : b*32+32]
			for j := 0; j < 8; j++ {
				o := 64*j + 4*l
				blk[o], blk[o+1], blk[o+2], blk[o+3] = q[4*j], q[4*j+1], q[4*j+2], q[4*j+3]
			}
			var c int32
			for _, v := range cr[b*8 : b*8+8] {
				c += v
			}
			putF32(blk[fastDX+4*l:], dx[b*8])
			putU32(blk[fastCR+4*l:], uint32(c))
		}
	}
	return a
}

func putF32(b []byte, v float32) { putU32(b, math.Float32bits(v)) }

func putU32(b []byte, v uint32) {
	b = b[:4]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

func getF32(b []byte) float32 {
	b = b[:4]
	return math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}

func getI32(b []byte) int32 {
	b = b[:4]
	return int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}

// A fastFamily is the fast kernels of one weight kind: R rows (full) or 1
// row (one) by 1..V vectors of 16 tokens (index V-1).
type fastFamily struct {
	R, V      int
	full, one []fastKernel
}

// fastMatMul is MatMulRowsP's fast product. Rows go in blocks of
// fastRows, each block in tiles of the kernels' R rows (single rows at the
// end of the range), and each tile span by span (dotSpan elements,
// restarting at every I8 shard) meets every group of tokens while its
// weights are in L1, so each weight byte is read from memory once per
// call. A kernel call adds the span's sums to the block's float32 tiles,
// which thus receive the spans in order from zero, the same order for
// every token in any batch; the block is then stored to dst, a cache line
// of each token's outputs at a time. I8 instead adds each span's tiles to
// dst times the shard's scale (each product rounded, as the exact path
// does).
func (ks *kernelSet) fastMatMul(dst, x []float32, n int, m *Mat, lo, hi int) {
	ik := ikQ8
	if m.Type == tensor.I8 {
		ik = ikI8
	}
	var fam *fastFamily
	if ks != nil && ks.fast != nil {
		fam = &ks.fast[ik]
	}
	var qk quantKernel
	if ks != nil {
		qk = ks.quant
	}
	a := quantizeFast(qk, x, n, m.In)
	defer fastPool.Put(a)
	In, Out := m.In, m.Out
	rb, _ := m.Type.RowBytes(In)
	scaled := m.Type == tensor.I8
	shards, seg, bpb := 1, In, tensor.Q8BlockBytes
	if scaled {
		shards, seg, bpb = m.Shards, In/m.Shards, 32
		for t := 0; t < n; t++ {
			clear(dst[t*Out+lo : t*Out+hi])
		}
	}
	R, V := 4, 2
	if fam != nil {
		R, V = fam.R, fam.V
	}
	const gsz = fastRows * fastLanes // a group's tiles: [row][lane]
	tp := getScratch(a.groups * gsz)
	defer scratchPool.Put(tp)
	tiles := *tp
	nbs, span := seg/32, dotSpan/32
	// tile runs the kernel (or its twin) over rows [r0, r0+rows) of the
	// block starting at p0, for blocks [kb, kb+nb) of every group.
	tile := func(p0, r0, rows, kb, nb int) {
		wo := r0*rb + kb*bpb
		for g := 0; g < a.groups; g += V {
			v := min(V, a.groups-g)
			xo := g*a.stride() + kb*fastBlock
			out := tiles[g*gsz+(r0-p0)*fastLanes:]
			if fam != nil {
				kern := fam.full
				if rows < R {
					kern = fam.one
				}
				kern[v-1].call(&m.Data[wo], rb, &a.buf[xo], a.stride(), nb, &out[0], 4*gsz)
			} else {
				fastTileRef(out, gsz, m.Data[wo:], rb, m.Type, a.buf[xo:], a.stride(), nb, rows, v)
			}
		}
	}
	// each calls f(r0, rows) for the tiles of the block [p0, p1).
	each := func(p0, p1 int, f func(r0, rows int)) {
		for r0 := p0; r0 < p1; {
			rows := R
			if p1-r0 < R {
				rows = 1
			}
			f(r0, rows)
			r0 += rows
		}
	}
	for p0 := lo; p0 < hi; p0 += fastRows {
		p1 := min(p0+fastRows, hi)
		clear(tiles)
		if !scaled {
			each(p0, p1, func(r0, rows int) {
				for b0 := 0; b0 < nbs; b0 += span {
					tile(p0, r0, rows, b0, min(span, nbs-b0))
				}
			})
			fastScatter(dst, tiles, n, Out, p0, p1, nil)
			continue
		}
		for s := 0; s < shards; s++ {
			for b0 := 0; b0 < nbs; b0 += span {
				each(p0, p1, func(r0, rows int) {
					tile(p0, r0, rows, s*nbs+b0, min(span, nbs-b0))
				})
				fastScatter(dst, tiles, n, Out, p0, p1, m.Scales[s*Out:(s+1)*Out])
				clear(tiles)
			}
		}
	}
}

// fastRows is the rows of a block of fastMatMul: a 64-byte line of each
// token's outputs.
const fastRows = 16

// fastScatter moves the tiles of rows [p0, p1) to dst: stored, or with
// scales added to dst times the row's scale. Tiles are laid out
// [group][row][lane], fastRows rows a group.
func fastScatter(dst, tiles []float32, n, Out, p0, p1 int, sc []float32) {
	for t := 0; t < n; t++ {
		src := tiles[(t/fastLanes)*fastRows*fastLanes+t%fastLanes:]
		d := dst[t*Out+p0 : t*Out+p1]
		if sc != nil {
			s := sc[p0:p1]
			for r := range d {
				d[r] += float32(s[r] * src[r*fastLanes])
			}
			continue
		}
		for r := range d {
			d[r] = src[r*fastLanes]
		}
	}
}

// fastTileRef is the fast kernels' arithmetic in Go, the reference they
// are tested to equal bit for bit: for rows weight rows and v vectors of
// tokens, lane by lane, each block's exact integer Σ w·q converted to
// float32 and added with one rounding (fma32) times dx (I8) or times
// dw·dx rounded (Q8_0), from zero over nb blocks; the sum is then added
// to tile[j·ldo + 16r + l] (ldo in floats).
func fastTileRef(tile []float32, ldo int, w []byte, ldw int, t tensor.DType, xa []byte, ldx, nb, rows, v int) {
	bpb, qoff := 32, 0
	if t == tensor.Q8_0 {
		bpb, qoff = tensor.Q8BlockBytes, 2
	}
	for r := 0; r < rows; r++ {
		for j := 0; j < v; j++ {
			for l := 0; l < fastLanes; l++ {
				var acc float32
				for b := 0; b < nb; b++ {
					wb := w[r*ldw+b*bpb:]
					xb := xa[j*ldx+b*fastBlock:]
					var s int32
					for k := 0; k < 32; k++ {
						s += int32(int8(wb[qoff+k])) * int32(int8(xb[64*(k/4)+4*l+k%4]))
					}
					f := float32(s)
					dx := getF32(xb[fastDX+4*l:])
					c := dx
					if t == tensor.Q8_0 {
						c = float32(tensor.HalfToFloat(uint16(wb[0])|uint16(wb[1])<<8) * dx)
					}
					acc = fma32(f, c, acc)
				}
				tile[j*ldo+r*fastLanes+l] += acc
			}
		}
	}
}

// matMulFastRef is the whole fast product in Go (fastMatMul without
// kernels), for tests.
func matMulFastRef(dst, x []float32, n int, m *Mat, lo, hi int) {
	var ks *kernelSet
	ks.fastMatMul(dst, x, n, m, lo, hi)
}

// fma32 returns a·b+c rounded once to float32, as VFMADD231PS does. The
// product is exact in float64; the float64 sum s is within half an ulp of
// the exact sum, so rounding s to float32 is right unless s falls exactly
// halfway between two float32 values while the exact sum does not (its
// error e is not zero), where s is moved one float64 ulp toward the exact
// sum first.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	bv := s - p
	e := (p - (s - bv)) + (float64(c) - bv)
	r := float32(s)
	if e == 0 || math.IsInf(s, 0) || s != s {
		return r
	}
	other := math.Nextafter32(r, float32(math.Inf(1)))
	if float64(r) > s {
		other = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	if (float64(r)+float64(other))/2 == s {
		return float32(math.Nextafter(s, math.Copysign(math.Inf(1), e)))
	}
	return r
}

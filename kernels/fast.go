package kernels

import (
	"fmt"
	"math"

	"github.com/grok-go/grok/tensor"
)

// Precision chooses the arithmetic of a product (MatMulRowsP).
type Precision int

const (
	// Exact multiplies float32 activations by the weights as stored
	// (MatMulRows; see Mat and ExactQuant).
	Exact Precision = iota
	// Fast quantises each token's activations to int16 with a scale per
	// 256 (quantizeGroup16) and multiplies in integers (VPDPWSSD) where the
	// weights are blocks of 32 small integers times one scale, less a
	// min, or a scale per 16 (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
	// IQ4_XS, Q2_K–Q6_K; [out, in] I8) or small integers once decoded
	// (the codebook i-quants: codebookFactor), and the CPU has AVX-512
	// VNNI; everything else runs as Exact (F32, F16 and BF16 weights
	// requantised to int16 ran slower than exact). Each token is quantised
	// alone and its sums follow a fixed grid, so its bits still do not
	// depend on its batch.
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
	return ks != nil && ks.fast != nil && (fastKind(t) >= 0 || codebookFactor(t) > 0)
}

// fastWeightMax bounds the integers the codebook i-quants widen to: a
// block's 32 products with int16 activations then sum to at most
// 32·2047·32767 < 2^31 in VPDPWSSD's int32 lanes.
const fastWeightMax = 2047

// codebookFactor is the F of a codebook i-quant, whose fast product
// decodes each tile's rows as the exact path does and divides them by
// their super-block's d/F, which gives integers of at most fastWeightMax
// exactly, d its fp16 scale (ggml's formulas, tensor/dequant_iq.go:
// IQ3_S d·(1+2s)·g, g ≤ 15; IQ3_XXS d·(0.5+s)·0.5·g, g ≤ 62; IQ2_XXS, IQ2_XS and IQ2_S
// d·(0.5+s)·0.25·g, g ≤ 43; IQ1_S and IQ1_M d·(2s+1)·(g±1/8), |g| ≤ 1;
// every product exact in float32). 0 for the other types.
func codebookFactor(t tensor.DType) float32 {
	switch t {
	case tensor.IQ3_S:
		return 1
	case tensor.IQ3_XXS:
		return 4
	case tensor.IQ2_XXS, tensor.IQ2_XS, tensor.IQ2_S, tensor.IQ1_S, tensor.IQ1_M:
		return 8
	}
	return 0
}

// codebookScale is d/F of the codebook block b (codebookFactor).
func codebookScale(t tensor.DType, b []byte) float32 {
	h := uint16(b[0]) | uint16(b[1])<<8
	if t == tensor.IQ1_M {
		// The fp16 d in the top nibbles of the four scale words at 48.
		sc := func(i int) uint16 { return uint16(b[48+2*i]) | uint16(b[49+2*i])<<8 }
		h = sc(0)>>12 | sc(1)>>8&0x00f0 | sc(2)>>4&0x0f00 | sc(3)&0xf000
	}
	return tensor.HalfToFloat(h) / codebookFactor(t)
}

// quantizeScaled is the widening of the codebook i-quants: q = x·(1/d),
// rounded to the nearest (halfway to even), for the 32 weights x of a
// block of scale d; all zero for a d of zero or not finite. The weights are
// d times integers k, |k| ≤ fastWeightMax, so q = k exactly: the rounded
// reciprocal and product move x·(1/d) by at most |k|·2^-23 < 1/2.
func quantizeScaled(q []int16, x []float32, d float32) {
	q = q[:32]
	clear(q)
	if d == 0 || math.IsInf(float64(d), 0) || d != d {
		return
	}
	id := 1 / d
	for j, v := range x[:32] {
		q[j] = int16(min(max(int32(math.RoundToEven(float64(v*id))), math.MinInt16), math.MaxInt16))
	}
}

// Weight types the fast product widens (widenKernel), in the generator's
// order: each a block of 32 small integers times one scale.
const (
	fkQ8 = iota
	fkI8
	fkQ4_0
	fkIQ4_NL
	fkQ4_K // with a min per block (fastMKernel)
	fkQ5_K // with a min per block
	fkQ4_1 // with a min per block
	fkQ5_0
	fkQ5_1 // with a min per block
	fkQ6_K // with a scale per 16 weights (fastHKernel)
	fkIQ4_XS
	fkQ3_K // each 16 widened times its scale (by super-blocks: fastS)
	fkQ2_K // a min per 16 weights, each 16 widened times its scale (fastHMKernel, by super-blocks)
	numFK
)

// fastKind returns t's widening, or -1.
func fastKind(t tensor.DType) int {
	switch t {
	case tensor.Q8_0:
		return fkQ8
	case tensor.I8:
		return fkI8
	case tensor.Q4_0:
		return fkQ4_0
	case tensor.IQ4_NL:
		return fkIQ4_NL
	case tensor.Q4_K:
		return fkQ4_K
	case tensor.Q5_K:
		return fkQ5_K
	case tensor.Q4_1:
		return fkQ4_1
	case tensor.Q5_0:
		return fkQ5_0
	case tensor.Q5_1:
		return fkQ5_1
	case tensor.Q6_K:
		return fkQ6_K
	case tensor.IQ4_XS:
		return fkIQ4_XS
	case tensor.Q3_K:
		return fkQ3_K
	case tensor.Q2_K:
		return fkQ2_K
	}
	return -1
}

// hasMins reports whether t's blocks have a min (a term times the sum of
// the activations: fastMKernel).
func hasMins(t tensor.DType) bool {
	switch t {
	case tensor.Q4_K, tensor.Q5_K, tensor.Q4_1, tensor.Q5_1, tensor.Q2_K:
		return true
	}
	return false
}

// fastFor reports whether the fast path takes m: weights of a fastKind
// along the input axis in one piece (rows Stride apart; Parted matrices
// stay exact), I8 shards whole blocks of 32 (so that no activation block
// straddles two scales) and, past one shard, whole groups of
// fastScaleBlocks (the kernels' spans restart at every shard and must
// start on the activations' grid of scales).
func fastFor(m *Mat) bool {
	switch {
	case m.Transposed || m.Parts != nil:
		return false
	case codebookFactor(m.Type) > 0:
		return true
	case fastKind(m.Type) < 0:
		return false
	}
	if m.Type != tensor.I8 {
		return true
	}
	seg := m.In / m.Shards
	return seg%32 == 0 && (m.Shards == 1 || seg%(32*fastScaleBlocks) == 0)
}

// MatMulRowsP is MatMulRows at precision p. Under Fast the kernels in use
// decide (FastTypes): with AVX-512 VNNI, products with the types of
// fastKind take fastMatMul; without it, and for every other type, the
// product is MatMulRows' own.
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
	var q FastActs
	q.Prepare(n, m.In)
	q.QuantizeRows(x, 0, n)
	active.fastMatMul(dst, q.a, 0, n, m, lo, hi)
	q.Release()
}

// FastActs holds activations quantised for Fast products, so that the
// products sharing an input, and every range of outputs of each, quantise
// it once: Prepare sizes it for n tokens of In, QuantizeRows fills tokens
// (disjoint ranges may run concurrently; ranges that start at multiples of
// FastGroup share no cache line), and MatMulRowsFast multiplies. Its
// buffer comes from a pool; Release returns it.
type FastActs struct {
	a     *fastActs
	n, In int
}

// Prepare sizes q for n tokens of In activations (In a multiple of 32),
// every token zero until quantised.
func (q *FastActs) Prepare(n, In int) {
	if q.a == nil {
		q.a = fastPool.Get()
	}
	q.n, q.In = n, In
	q.a.prepare(n, In)
}

// QuantizeRows quantises tokens [t0, t1) of x (n×In, as Prepare was told).
func (q *FastActs) QuantizeRows(x []float32, t0, t1 int) {
	var qk quant16Kernel
	if ks := active; ks != nil {
		qk = ks.quant16
	}
	q.a.quantize(x[:q.n*q.In], q.In, t0, t1, qk)
}

// Release returns q's buffer to its pool.
func (q *FastActs) Release() {
	if q.a != nil {
		fastPool.Put(q.a)
		q.a = nil
	}
}

// UsesFast reports whether MatMulRowsFast can multiply by m on this
// machine (else a Fast product of m is MatMulRows').
func UsesFast(m *Mat) bool {
	return fastFor(m) && active != nil && active.fast != nil
}

// MatMulRowsFast computes output columns [lo, hi) of tokens [t0, t1) of
// a Fast product from q's quantised tokens (dst is n×Out, q as Prepare
// made it for n tokens of m.In); UsesFast(m) must hold. A token's outputs
// have MatMulRowsP's bits, whatever its range.
func MatMulRowsFast(dst []float32, q *FastActs, t0, t1 int, m *Mat, lo, hi int) {
	if !UsesFast(m) || q.a == nil || q.In != m.In || t0 < 0 || t1 > q.n || lo < 0 || hi > m.Out || len(dst) < q.n*m.Out {
		panic(fmt.Sprintf("kernels: MatMulRowsFast(%v %d×%d, tokens [%d,%d) of %d×%d, rows [%d,%d)) with len(dst)=%d", m.Type, m.Out, m.In, t0, t1, q.n, q.In, lo, hi, len(dst)))
	}
	if t0 >= t1 || lo >= hi {
		return
	}
	active.fastMatMul(dst, q.a, t0, t1, m, lo, hi)
}

// fastTokenGroup is the most tokens fastMatMul multiplies at once, whole
// groups of fastLanes; each group widens the weights again.
const fastTokenGroup = 128

// fastLanes is the tokens of one activation vector.
const fastLanes = 16

// FastGroup is the tokens whose quantised activations FastActs interleaves
// in the same cache lines: concurrent QuantizeRows ranges that start at
// its multiples never write the same line (the cores would trade the
// lines at every store otherwise).
const FastGroup = fastLanes

// fastActs holds the activations of a fast product, quantised per token
// to int16 with one scale for each fastScaleBlocks blocks of 32 from the
// row's start (quantizeGroup16) and interleaved 16 tokens to a vector
// group: per group and block, 16 × 64 bytes of quants (pair p, lane l:
// quants 2p and 2p+1 of token 16g+l), then 16 float32 scales d (the
// block's group's), 16 float32 sums Σq (exact in float32), which the
// weights with a min per block multiply, and the same over the block's two
// halves of 16, for Q2_K's mins per 16 (fastBlock bytes). Lanes past the
// last token are zero.
type fastActs struct {
	buf    []byte
	groups int // vector groups: ⌈n/16⌉
	nbt    int // blocks per token
}

const (
	fastBlock = 1280 // bytes of one block of one group
	fastDX    = 1024
	fastSX    = 1088 // Σq, for the weights with mins
	fastSX0   = 1152 // Σq over the block's first 16 (mins per 16: Q2_K)
	fastSX1   = 1216 // and its last 16
)

// fastScaleBlocks is the blocks of 32 activations that share a scale in a
// fast product (256, as ggml's Q8_K, with 2^8 times finer steps): the
// kernels then sum a group's blocks in units of its scale and multiply
// by it once, instead of multiplying each block's weight scale by its own
// (a multiply every 16 VPDPWSSD; figures: bench/README.md). Spans
// (fastSpan) hold whole groups.
const fastScaleBlocks = 8

// stride is the bytes of one group.
func (a *fastActs) stride() int { return a.nbt * fastBlock }

// fastPool holds FastActs' buffers (see freeList).
var fastPool freeList[fastActs]

// quantizeGroup16 quantises activations x (a group of at most
// fastScaleBlocks blocks of 32) to int16 q with one scale d: d =
// max|x|/32767, q = round(x/d) halfway away from zero, in float32, as
// quantizeBlockRef does for int8 blocks of 32 but with 2^15 steps. Int8
// activations per 32 (llama.cpp's quantize_row_q8_0) move the demo model's
// logits by up to 1 (top-2 expert routing flips at near ties); 16 bits
// per 256 keep them within 1e-3. Degenerate groups as quantizeBlockRef's
// blocks: d below 2^-126 gives d = 0, an infinite max d = +Inf, a NaN
// d = NaN, all with zero quants.
func quantizeGroup16(q []int16, x []float32) float32 {
	q = q[:len(x)]
	var amax float32
	nan := false
	for _, v := range x {
		if v != v {
			nan = true
		}
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 32767
	clear(q)
	switch {
	case nan:
		return float32(math.NaN())
	case d < minQ8Scale:
		return 0
	case d > math.MaxFloat32:
		return d
	}
	id := 1 / d
	for j, v := range x {
		q[j] = int16(min(max(roundHalfAway(v*id), -32767), 32767))
	}
	return d
}

// prepare sizes a for n tokens of In activations, all zero.
func (a *fastActs) prepare(n, In int) {
	a.nbt = In / 32
	a.groups = (n + fastLanes - 1) / fastLanes
	size := a.groups * a.stride()
	if cap(a.buf) < size {
		a.buf = make([]byte, size)
	}
	a.buf = a.buf[:size]
	clear(a.buf)
}

// quantize quantises tokens [t0, t1) of x (In activations a token) into
// their lanes, with qk if not 0 (tested to equal quantizeGroup16).
func (a *fastActs) quantize(x []float32, In, t0, t1 int, qk quant16Kernel) {
	var q [32 * fastScaleBlocks]int16
	for t := t0; t < t1; t++ {
		xs := x[t*In : (t+1)*In]
		g, l := t/fastLanes, t%fastLanes
		base := a.buf[g*a.stride():]
		if qk != 0 {
			_ = base[(a.nbt-1)*fastBlock+fastDX+4*l+3] // the last byte the kernel writes
			qk.call(&xs[0], a.nbt, &base[4*l])
			continue
		}
		for b0 := 0; b0 < a.nbt; b0 += fastScaleBlocks {
			b1 := min(b0+fastScaleBlocks, a.nbt)
			d := quantizeGroup16(q[:], xs[b0*32:b1*32])
			for b := b0; b < b1; b++ {
				blk := base[b*fastBlock : (b+1)*fastBlock]
				qb := q[(b-b0)*32:]
				var sum [2]int32
				for p := 0; p < 16; p++ {
					putU32(blk[64*p+4*l:], uint32(uint16(qb[2*p]))|uint32(uint16(qb[2*p+1]))<<16)
					sum[p/8] += int32(qb[2*p]) + int32(qb[2*p+1])
				}
				putF32(blk[fastDX+4*l:], d)
				putF32(blk[fastSX+4*l:], float32(sum[0]+sum[1]))
				putF32(blk[fastSX0+4*l:], float32(sum[0]))
				putF32(blk[fastSX1+4*l:], float32(sum[1]))
			}
		}
	}
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

// A fastFamily is the fast product kernels: R rows (full) or 1 row (one)
// by 1..V vectors of 16 tokens, at index v-1, and at V+v-1 the same with
// the last vector's first 8 tokens only (for a last group of at most 8).
type fastFamily struct {
	R, V        int
	full, one   []fastKernel
	fullM, oneM []fastMKernel // with mins
	fullH, oneH []fastHKernel // with a scale per 16 weights
	// with a scale and a min per 16 weights, by super-blocks (Q2_K)
	fullHM, oneHM []fastHMKernel
	// plain by super-blocks (Q3_K): a group's 8 blocks summed in int32
	fullS, oneS []fastKernel
}

// fastRows is the rows of a block of fastMatMul: two 64-byte lines of
// each token's outputs.
const fastRows = 32

// fastSpan is the elements of the fast product's span: each kernel call's
// sums over one span are added to the tiles in order, a fixed grid, so a
// token's bits do not depend on its batch. At 512, a span's activations of
// one vector of 16 tokens (20 KiB) stay in L1 while a block's tiles of
// rows pass them (figures: bench/README.md).
const fastSpan = 512

// fastMatMul is MatMulRowsP's fast product. Rows go in blocks of
// fastRows, and each block span by span (fastSpan elements, restarting at
// every I8 shard), each span in tiles of the kernels' R rows (single rows
// at the end of the range): a tile's span of weights is widened to int16
// once (widenKernel, into L1) and meets every group of tokens there, so
// each weight byte is read from memory once per call; the tile's first
// kernel call prefetches the next tile's weights as it multiplies, and a
// last group of at most 8 tokens goes through the kernels of 8 lanes. A
// kernel call adds the span's sums to the block's float32 tiles, which
// thus receive the spans in order from zero, the same order for every
// token in any batch; the block is then stored to dst, transposed 16 rows
// of 16 tokens at a time (fastStoreKernel). I8 instead adds the tiles to
// dst times the shard's scale after every dotSpan elements of the shard
// and at its end (each product rounded, as the exact path does).
func (ks *kernelSet) fastMatMul(dst []float32, a *fastActs, t0, t1 int, m *Mat, lo, hi int) {
	if g := fastTokenGroup; t1-t0 > g {
		// As dotAdd's tokenGroup: past it a span's activations of all the
		// groups spill from L2 while the rows stream.
		for s := t0; s < t1; {
			e := min(t1, (s/g+1)*g)
			ks.fastMatMul(dst, a, s, e, m, lo, hi)
			s = e
		}
		return
	}
	var fam *fastFamily
	var widen widenKernel
	decoded := codebookFactor(m.Type) > 0
	if ks != nil && ks.fast != nil {
		fam = ks.fast
		if !decoded {
			widen = ks.widen[fastKind(m.Type)]
		}
	}
	In, Out := m.In, m.Out
	rb := m.stride()
	scaled, mins := m.Type == tensor.I8, hasMins(m.Type)
	halves := m.Type == tensor.Q6_K || m.Type == tensor.Q2_K
	// Q2_K's and Q3_K's blocks sum a group in int32 (by super-blocks): a
	// super-block of 256 is a group with one d, and its weights, widened
	// times their scales (at most 45 and 128), times 256 int16 quants stay
	// below 2^31.
	super := m.Type == tensor.Q2_K || m.Type == tensor.Q3_K
	parts := 1 // scales a block
	if halves {
		parts = 2
	}
	shards, seg := 1, In
	if scaled {
		shards, seg = m.Shards, In/m.Shards
		for t := t0; t < t1; t++ {
			clear(dst[t*Out+lo : t*Out+hi])
		}
	}
	g0, g1 := t0/fastLanes, (t1+fastLanes-1)/fastLanes // the groups of the tokens
	R, V := 4, 2
	if fam != nil {
		R, V = fam.R, fam.V
	}
	const gsz = fastRows * fastLanes // a group's tiles: [row][lane]
	nbs, span := seg/32, fastSpan/32
	tp := getScratch((g1-g0)*gsz + 4*R*span)
	defer scratchPool.Put(tp)
	tiles, ds := (*tp)[:(g1-g0)*gsz], (*tp)[(g1-g0)*gsz:] // ds: scales, then mins

	wp := getBytes(R * span * 64)
	defer bytePool.Put(wp)
	ws := *wp
	var fs []float32 // codebook types: a tile's rows as float32
	if decoded {
		fp := getScratch(R * span * 32)
		defer scratchPool.Put(fp)
		fs = *fp
	}
	// tile widens rows [r0, r0+rows) of the block starting at p0, blocks
	// [kb, kb+nb), and runs the kernel (or its twin) over every group.
	bs, bb := m.Type.BlockSize(), m.Type.BlockBytes() // weightOffset's, without its lookups a tile (1.5 % of a prefill)
	pfStep := (32*bb + bs - 1) / bs                   // bytes of weights a block of 32, rounded up
	tile := func(p0, r0, rows, kb, nb int, next []byte) {
		w := m.Data[r0*rb+kb*32/bs*bb:]
		switch {
		case decoded:
			_ = w[(rows-1)*rb+nb*32/bs*bb-1]
			ks.widenDecoded(ws, ds, fs, w, rb, m.Type, rows, nb)
		case fam != nil:
			_ = w[(rows-1)*rb+nb*32/bs*bb-1] // the kernel reads these bytes
			widen.call(&ws[0], &ds[0], &w[0], rb, rows, nb)
		default:
			widenRef(ws, ds, w, rb, m.Type, rows, nb)
		}
		dm := ds[parts*rows*nb:] // mins, for the types with mins
		for g := g0; g < g1; g += V {
			v := min(V, g1-g)
			k := v - 1 // the kernel's index in its family
			if g+v == g1 && t1-(g1-1)*fastLanes <= fastLanes/2 {
				k += V
			}
			// The first call prefetches the next tile's weights (rows
			// rb apart); the others the same line again, from L1.
			pf, pfld, pfs := &ws[0], 0, 0
			if g == g0 && next != nil {
				pf, pfld, pfs = &next[0], rb, pfStep
			}
			xo := g*a.stride() + kb*fastBlock
			out := tiles[(g-g0)*gsz+(r0-p0)*fastLanes:]
			switch {
			case fam == nil:
				var mn []float32
				if mins {
					mn = dm
				}
				fastTileRef(out, gsz, ws, ds, mn, halves, super, nb, a.buf[xo:], a.stride(), rows, v)
			case halves && mins:
				kern := fam.fullHM
				if rows < R {
					kern = fam.oneHM
				}
				kern[k].call(&ws[0], nb*64, &ds[0], &dm[0], nb*8, &a.buf[xo], a.stride(), nb, &out[0], 4*gsz, pf, pfld, pfs)
			case halves:
				kern := fam.fullH
				if rows < R {
					kern = fam.oneH
				}
				kern[k].call(&ws[0], nb*64, &ds[0], nb*8, &a.buf[xo], a.stride(), nb, &out[0], 4*gsz, pf, pfld, pfs)
			case mins:
				kern := fam.fullM
				if rows < R {
					kern = fam.oneM
				}
				kern[k].call(&ws[0], nb*64, &ds[0], &dm[0], nb*4, &a.buf[xo], a.stride(), nb, &out[0], 4*gsz, pf, pfld, pfs)
			default: // plain, or by super-blocks
				kern := fam.full
				if super {
					kern = fam.fullS
				}
				if rows < R {
					kern = fam.one
					if super {
						kern = fam.oneS
					}
				}
				kern[k].call(&ws[0], nb*64, &ds[0], nb*4, &a.buf[xo], a.stride(), nb, &out[0], 4*gsz, pf, pfld, pfs)
			}
		}
	}
	// each calls f(r0, rows, next) for the tiles of the block [p0, p1) at
	// block kb, next the weights of the tile after it (nil for the last;
	// at the block's end the first tile of kb+span, or else of the next
	// block of rows from block 0; the scaled types' kb goes shard by shard).
	each := func(p0, p1, kb int, f func(r0, rows int, next []byte)) {
		at := func(r0, kb int) []byte { return m.Data[r0*rb+kb*32/bs*bb:] }
		for r0 := p0; r0 < p1; {
			rows := R
			if p1-r0 < R {
				rows = 1
			}
			var next []byte
			switch {
			case r0+rows < p1:
				next = at(r0+rows, kb)
			case kb+span < nbs*shards:
				next = at(p0, min(kb+span, (kb/nbs+1)*nbs))
			case p1 < hi:
				next = at(p1, 0)
			}
			f(r0, rows, next)
			r0 += rows
		}
	}
	for p0 := lo; p0 < hi; p0 += fastRows {
		p1 := min(p0+fastRows, hi)
		clear(tiles)
		if !scaled {
			for b0 := 0; b0 < nbs; b0 += span {
				each(p0, p1, b0, func(r0, rows int, next []byte) {
					tile(p0, r0, rows, b0, min(span, nbs-b0), next)
				})
			}
			ks.scatter(dst, tiles, t0, t1, Out, p0, p1, nil)
			continue
		}
		for s := 0; s < shards; s++ {
			for b0 := 0; b0 < nbs; b0 += span {
				each(p0, p1, s*nbs+b0, func(r0, rows int, next []byte) {
					tile(p0, r0, rows, s*nbs+b0, min(span, nbs-b0), next)
				})
				if e := b0 + span; e%(dotSpan/32) == 0 || e >= nbs {
					ks.scatter(dst, tiles, t0, t1, Out, p0, p1, m.Scales[s*Out:(s+1)*Out])
					clear(tiles)
				}
			}
		}
	}
}

// scatter is fastScatter with the level's transposing kernels (16 rows of
// a group's 16 tokens at a time) where it has them.
func (ks *kernelSet) scatter(dst, tiles []float32, t0, t1, Out, p0, p1 int, sc []float32) {
	var k fastStoreKernel
	if ks != nil {
		k = ks.store
		if sc != nil {
			k = ks.storeScaled
		}
	}
	if k == 0 {
		fastScatter(dst, tiles, t0, t1, Out, p0, p1, sc)
		return
	}
	rows := p1 - p0 // 1..fastRows
	m0, m1 := 1<<min(rows, 16)-1, 0
	if rows > 16 {
		m1 = 1<<(rows-16) - 1
	}
	var scp *float32
	if sc != nil {
		scp = &sc[p0:p1][0]
	}
	g0 := t0 / fastLanes
	for g := g0; g*fastLanes < t1; g++ {
		l0, l1 := max(t0-g*fastLanes, 0), min(t1-g*fastLanes, fastLanes)
		tg := tiles[(g-g0)*fastRows*fastLanes:][:fastRows*fastLanes] // the rows the kernel loads
		_ = dst[(g*fastLanes+l1-1)*Out+p1-1]                         // the last element it writes
		k.call(&dst[g*fastLanes*Out+p0], 4*Out, &tg[0], l0, l1, m0, m1, scp)
	}
}

// fastScatter moves the tiles of rows [p0, p1) of tokens [t0, t1) to
// dst: stored, or with scales added to dst times the row's scale. Tiles
// are laid out [group][row][lane], fastRows rows a group, from t0's group.
func fastScatter(dst, tiles []float32, t0, t1, Out, p0, p1 int, sc []float32) {
	g0 := t0 / fastLanes
	for t := t0; t < t1; t++ {
		src := tiles[(t/fastLanes-g0)*fastRows*fastLanes+t%fastLanes:]
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

// widenDecoded widens nb blocks of each of rows rows of a codebook i-quant
// t (stride ldw bytes) as widenRef lays them out: each row decoded to
// float32 in fs with the exact path's decoders, then divided by its
// super-blocks' d/F (quantizeScaled), with the level's kernels when it has
// them (ks nil: all in Go). A level with a widenCB kernel for t writes the
// same integers and scales without the float32 detour.
func (ks *kernelSet) widenDecoded(ws []byte, ds, fs []float32, w []byte, ldw int, t tensor.DType, rows, nb int) {
	if ks != nil && ks.widenCB != nil {
		if k := ks.widenCB[dqKind(t)]; k != 0 {
			k.call(&ws[0], &ds[0], &w[0], ldw, rows, nb)
			return
		}
	}
	n := nb * 32
	per, bb := t.BlockSize()/32, t.BlockBytes()
	for r := 0; r < rows; r++ {
		row := w[r*ldw:]
		f := fs[r*n : (r+1)*n]
		for b := 0; b < nb; b += per {
			d := codebookScale(t, row[b/per*bb:])
			for j := range per {
				ds[r*nb+b+j] = d
			}
		}
		ks.decodeBlocks(f, t, row) // nil ks: tensor.DecodeRow
		if ks != nil && ks.quantS16 != 0 {
			ks.quantS16.call(&f[0], nb, &ws[r*nb*64], &ds[r*nb])
			continue
		}
		var q [32]int16
		for b := 0; b < nb; b++ {
			quantizeScaled(q[:], f[32*b:32*(b+1)], ds[r*nb+b])
			o := ws[(r*nb+b)*64:]
			for j, v := range q {
				o[2*j], o[2*j+1] = byte(v), byte(uint16(v)>>8)
			}
		}
	}
}

// widenRef is widenKernel in Go: nb blocks of each of rows weight rows of
// type t (a fastKind; stride ldw bytes) as int16 at ws (row r, block b at
// (r·nb+b)·64 bytes) and their scales at ds[r·nb+b]: Q8_0 and I8 the
// quants, Q4_0 nibble-8, IQ4_NL kvaluesIQ4NL[nibble], Q4_1 the nibble,
// Q5_0 and Q5_1 the nibble plus 16 for its fifth bit (Q5_0 less 16;
// element j the low nibble of byte j, j+16 its high one), each times the
// block's fp16 d (I8: 1), and for Q4_1 and Q5_1 the block's fp16 min at
// ds[rows·nb+r·nb+b]. tensor.DecodeRow gives d times these integers (plus
// the min).
func widenRef(ws []byte, ds []float32, w []byte, ldw int, t tensor.DType, rows, nb int) {
	if codebookFactor(t) > 0 {
		(*kernelSet)(nil).widenDecoded(ws, ds, make([]float32, rows*nb*32), w, ldw, t, rows, nb)
		return
	}
	if t == tensor.Q4_K || t == tensor.Q5_K {
		widenQKRef(ws, ds, w, ldw, t == tensor.Q5_K, rows, nb)
		return
	}
	if t == tensor.Q6_K {
		widenQ6KRef(ws, ds, w, ldw, rows, nb)
		return
	}
	if t == tensor.IQ4_XS {
		widenIQ4XSRef(ws, ds, w, ldw, rows, nb)
		return
	}
	if t == tensor.Q3_K {
		widenQ3KRef(ws, ds, w, ldw, rows, nb)
		return
	}
	if t == tensor.Q2_K {
		widenQ2KRef(ws, ds, w, ldw, rows, nb)
		return
	}
	bpb := t.BlockBytes()
	if t == tensor.I8 {
		bpb = 32
	}
	var q [32]int16
	for r := 0; r < rows; r++ {
		for b := 0; b < nb; b++ {
			blk := w[r*ldw+b*bpb:]
			switch t {
			case tensor.I8:
				for j := range q {
					q[j] = int16(int8(blk[j]))
				}
			case tensor.Q8_0:
				for j := range q {
					q[j] = int16(int8(blk[2+j]))
				}
			default:
				qs, qh := 2, uint32(0)
				switch t {
				case tensor.Q4_1:
					qs = 4
				case tensor.Q5_0:
					qs, qh = 6, uint32(blk[2])|uint32(blk[3])<<8|uint32(blk[4])<<16|uint32(blk[5])<<24
				case tensor.Q5_1:
					qs, qh = 8, uint32(blk[4])|uint32(blk[5])<<8|uint32(blk[6])<<16|uint32(blk[7])<<24
				}
				for j := 0; j < 16; j++ {
					lo, hi := int16(blk[qs+j]&15), int16(blk[qs+j]>>4)
					lo += int16(qh>>j&1) << 4
					hi += int16(qh>>(j+16)&1) << 4
					switch t {
					case tensor.IQ4_NL:
						lo, hi = int16(kvaluesIQ4NL[lo]), int16(kvaluesIQ4NL[hi])
					case tensor.Q4_0:
						lo, hi = lo-8, hi-8
					case tensor.Q5_0:
						lo, hi = lo-16, hi-16
					}
					q[j], q[j+16] = lo, hi
				}
				if t == tensor.Q4_1 || t == tensor.Q5_1 {
					ds[rows*nb+r*nb+b] = tensor.HalfToFloat(uint16(blk[2]) | uint16(blk[3])<<8)
				}
			}
			o := (r*nb + b) * 64
			for j, v := range q {
				ws[o+2*j], ws[o+2*j+1] = byte(uint16(v)), byte(uint16(v)>>8)
			}
			ds[r*nb+b] = 1
			if t != tensor.I8 {
				ds[r*nb+b] = tensor.HalfToFloat(uint16(blk[0]) | uint16(blk[1])<<8)
			}
		}
	}
}

// widenQKRef is widenRef for Q4_K and Q5_K (nb blocks of 32, whole
// super-blocks): block 2i of a super-block the low nibbles of its quant
// bytes 32i..32i+31, block 2i+1 their high ones (Q5_K: plus 16 where bit
// 2i, resp. 2i+1, of the matching qh byte is set), ds = d·sc and, at
// ds[rows·nb:], dm = -(dmin·m) for each block's 6-bit scale and min
// (ggml's get_scale_min_k4), rounded as tensor's dequantiser rounds them.
func widenQKRef(ws []byte, ds []float32, w []byte, ldw int, q5 bool, rows, nb int) {
	dm := ds[rows*nb:]
	put := func(o int, v int16) { ws[o], ws[o+1] = byte(uint16(v)), byte(uint16(v)>>8) }
	sb, qs := 144, 16
	if q5 {
		sb, qs = 176, 48
	}
	for r := 0; r < rows; r++ {
		for s := 0; s < nb/8; s++ {
			blk := w[r*ldw+s*sb : r*ldw+(s+1)*sb]
			d := tensor.HalfToFloat(uint16(blk[0]) | uint16(blk[1])<<8)
			dmin := tensor.HalfToFloat(uint16(blk[2]) | uint16(blk[3])<<8)
			sc := blk[4:16]
			b0 := r*nb + 8*s
			for j := 0; j < 8; j++ {
				var s6, m6 byte
				if j < 4 {
					s6, m6 = sc[j]&63, sc[j+4]&63
				} else {
					s6, m6 = sc[j+4]&0x0f|sc[j-4]>>6<<4, sc[j+4]>>4|sc[j]>>6<<4
				}
				ds[b0+j] = d * float32(s6)
				dm[b0+j] = -float32(dmin * float32(m6))
			}
			for i := 0; i < 4; i++ {
				for k, v := range blk[qs+32*i : qs+32*i+32] {
					lo, hi := int16(v&15), int16(v>>4)
					if q5 {
						h := blk[16+k]
						lo += int16(h>>(2*i)&1) << 4
						hi += int16(h>>(2*i+1)&1) << 4
					}
					put((b0+2*i)*64+2*k, lo)
					put((b0+2*i+1)*64+2*k, hi)
				}
			}
		}
	}
}

// widenQ6KRef is widenRef for Q6_K (nb blocks of 32, whole super-blocks):
// block 4n+t of a super-block the quants minus 32 of tensor's dequantQ6_K
// (q1..q4 of its half n), and two scales a block, ds[2·(r·nb+b)+h] =
// d·sc[2j+h] for the block's j-th place in its super-block and its halves
// of 16.
func widenQ6KRef(ws []byte, ds []float32, w []byte, ldw, rows, nb int) {
	put := func(o int, v int16) { ws[o], ws[o+1] = byte(uint16(v)), byte(uint16(v)>>8) }
	for r := 0; r < rows; r++ {
		for s := 0; s < nb/8; s++ {
			blk := w[r*ldw+s*210 : r*ldw+(s+1)*210]
			d := tensor.HalfToFloat(uint16(blk[208]) | uint16(blk[209])<<8)
			b0 := r*nb + 8*s
			for n := 0; n < 2; n++ {
				ql, qh := blk[64*n:64*n+64], blk[128+32*n:128+32*n+32]
				for l := 0; l < 32; l++ {
					put((b0+4*n)*64+2*l, int16(ql[l]&15|(qh[l]&3)<<4)-32)
					put((b0+4*n+1)*64+2*l, int16(ql[l+32]&15|(qh[l]>>2&3)<<4)-32)
					put((b0+4*n+2)*64+2*l, int16(ql[l]>>4|(qh[l]>>4&3)<<4)-32)
					put((b0+4*n+3)*64+2*l, int16(ql[l+32]>>4|(qh[l]>>6&3)<<4)-32)
				}
			}
			for j := 0; j < 16; j++ {
				ds[2*b0+j] = d * float32(int8(blk[192+j]))
			}
		}
	}
}

// widenIQ4XSRef is widenRef for IQ4_XS (nb blocks of 32, whole
// super-blocks): block ib kvaluesIQ4NL of its 16 bytes' nibbles (low
// nibbles first) and its scale d·(ls-32), ls from scales_l and scales_h.
func widenIQ4XSRef(ws []byte, ds []float32, w []byte, ldw, rows, nb int) {
	put := func(o int, v int16) { ws[o], ws[o+1] = byte(uint16(v)), byte(uint16(v)>>8) }
	for r := 0; r < rows; r++ {
		for s := 0; s < nb/8; s++ {
			blk := w[r*ldw+s*136 : r*ldw+(s+1)*136]
			d := tensor.HalfToFloat(uint16(blk[0]) | uint16(blk[1])<<8)
			sh := uint16(blk[2]) | uint16(blk[3])<<8
			b0 := r*nb + 8*s
			for ib := 0; ib < 8; ib++ {
				ls := int(blk[4+ib/2]>>(4*(ib%2))&15) | int(sh>>(2*ib)&3)<<4
				ds[b0+ib] = d * float32(ls-32)
				for j, v := range blk[8+16*ib : 8+16*ib+16] {
					put((b0+ib)*64+2*j, int16(kvaluesIQ4NL[v&15]))
					put((b0+ib)*64+2*(j+16), int16(kvaluesIQ4NL[v>>4]))
				}
			}
		}
	}
}

// widenQ3KRef is widenRef for Q3_K (nb blocks of 32, whole super-blocks):
// block 4n+t of a super-block the 2-bit quants at bits 2t of bytes
// 32+32n.., less 4 unless bit 4n+t of the matching hmask byte is set,
// times their half's scale sc-32 (the scales unpacked as tensor's
// dequantQ3_K unpacks them; |(sc-32)·q| ≤ 128), and the super-block's d
// at every block's scale: d·(sc-32) and its product with q are exact in
// float32, so d times the widened weight is the dequantiser's value, and
// a super-block sums at once with one scale (the fastS kernels).
func widenQ3KRef(ws []byte, ds []float32, w []byte, ldw, rows, nb int) {
	put := func(o int, v int16) { ws[o], ws[o+1] = byte(uint16(v)), byte(uint16(v)>>8) }
	le := func(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24 }
	for r := 0; r < rows; r++ {
		for s := 0; s < nb/8; s++ {
			blk := w[r*ldw+s*110 : r*ldw+(s+1)*110]
			d := tensor.HalfToFloat(uint16(blk[108]) | uint16(blk[109])<<8)
			b0 := r*nb + 8*s
			a0, a1, tmp := le(blk[96:]), le(blk[100:]), le(blk[104:])
			words := [4]uint32{a0&0x0f0f0f0f | (tmp&0x03030303)<<4, a1&0x0f0f0f0f | (tmp>>2&0x03030303)<<4,
				a0>>4&0x0f0f0f0f | (tmp>>4&0x03030303)<<4, a1>>4&0x0f0f0f0f | (tmp>>6&0x03030303)<<4}
			scale := func(j int) int16 { return int16(byte(words[j/4]>>(8*(j%4)))) - 32 } // sub-block j
			for n := 0; n < 2; n++ {
				for t := 0; t < 4; t++ {
					for l := 0; l < 32; l++ {
						v := int16(blk[32+32*n+l] >> (2 * t) & 3)
						if blk[l]>>(4*n+t)&1 == 0 {
							v -= 4
						}
						put((b0+4*n+t)*64+2*l, v*scale(2*(4*n+t)+l/16))
					}
					ds[b0+4*n+t] = d
				}
			}
		}
	}
}

// widenQ2KRef is widenRef for Q2_K (nb blocks of 32, whole super-blocks):
// block 4n+j of a super-block the 2-bit quants at bits 2j of bytes
// 16+32n.. times their half's 4-bit scale sc&15, and for each half of 16
// the super-block's d at ds[2·(r·nb+b)+h] (d·(sc&15)·q is exact in float32,
// so d times the widened weight is the dequantiser's (d·sc)·q) and its
// min, negated, -(dmin·(sc>>4)), at ds[2·rows·nb+2·(r·nb+b)+h]. The
// products then sum a block at once, with one scale.
func widenQ2KRef(ws []byte, ds []float32, w []byte, ldw, rows, nb int) {
	dm := ds[2*rows*nb:]
	put := func(o int, v int16) { ws[o], ws[o+1] = byte(uint16(v)), byte(uint16(v)>>8) }
	for r := 0; r < rows; r++ {
		for s := 0; s < nb/8; s++ {
			blk := w[r*ldw+s*84 : r*ldw+(s+1)*84]
			d := tensor.HalfToFloat(uint16(blk[80]) | uint16(blk[81])<<8)
			dmin := tensor.HalfToFloat(uint16(blk[82]) | uint16(blk[83])<<8)
			b0 := r*nb + 8*s
			for n := 0; n < 2; n++ {
				for j := 0; j < 4; j++ {
					for l, v := range blk[16+32*n : 16+32*n+32] {
						sc := blk[8*n+2*j+l/16] & 15 // sub-block 2(4n+j) + l/16
						put((b0+4*n+j)*64+2*l, int16(v>>(2*j)&3)*int16(sc))
					}
				}
			}
			for k, sc := range blk[:16] {
				ds[2*b0+k] = d
				dm[2*b0+k] = -float32(dmin * float32(sc>>4))
			}
		}
	}
}

// kvaluesIQ4NL is ggml's kvalues_iq4nl, the levels of IQ4_NL's nibbles
// (tensor's own copy is tested equal through tensor.DecodeRow).
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// fastTileRef is the fast kernels' arithmetic in Go, the reference they
// are tested to equal bit for bit: for rows rows of widened weights (ws,
// ds as widenRef leaves them, nb blocks a row) and v vectors of tokens,
// lane by lane, each block's exact integer Σ w·q converted to float32 and
// added with one rounding (fma32) times ds, and with dm (the types with
// mins) dm·Σq added with one rounding, from zero over each group of
// fastScaleBlocks blocks (the call's nb blocks start a group), whose sum
// times its dx is added to the call's with one rounding; that is then
// added to tile[j·ldo + 16r + l] (ldo in floats). With super (Q2_K and
// Q3_K, see fastMatMul), the group's integer sums are added up first and their sum, converted,
// is added times the group's last ds after the group's mins.
func fastTileRef(tile []float32, ldo int, ws []byte, ds, dm []float32, halves, super bool, nb int, xa []byte, ldx, rows, v int) {
	parts, per := 1, 32 // weights a scale
	minParts := 1       // mins a block
	slots := 1          // ds and dm entries a block
	switch {
	case halves && dm != nil:
		// Q2_K: one sum and one scale a block (ds[2b], the weights carry
		// their scale per 16), a min per 16.
		minParts, slots = 2, 2
	case halves:
		parts, per, slots = 2, 16, 2
	}
	for r := 0; r < rows; r++ {
		for j := 0; j < v; j++ {
			for l := 0; l < fastLanes; l++ {
				var acc, og float32
				var sg int32 // the group's sum, by super-blocks
				for b := 0; b < nb; b++ {
					wb := ws[(r*nb+b)*64:]
					xb := xa[j*ldx+b*fastBlock:]
					for h := 0; h < parts; h++ {
						var s int32
						for k := h * per; k < (h+1)*per; k++ {
							o := 64*(k/2) + 4*l + 2*(k%2)
							w := int16(uint16(wb[2*k]) | uint16(wb[2*k+1])<<8)
							x := int16(uint16(xb[o]) | uint16(xb[o+1])<<8)
							s += int32(w) * int32(x)
						}
						i := (r*nb+b)*slots + h
						if super {
							sg += s
						} else {
							og = fma32(float32(s), ds[i], og)
						}
						if dm == nil {
							continue
						}
						for mh := 0; mh < minParts; mh++ {
							sx, mi := fastSX, i
							if halves {
								sx, mi = fastSX0+64*(h+mh), i+mh
							}
							og = fma32(getF32(xb[sx+4*l:]), dm[mi], og)
						}
					}
					if (b+1)%fastScaleBlocks == 0 || b == nb-1 {
						if super {
							og = fma32(float32(sg), ds[(r*nb+b)*slots], og)
							sg = 0
						}
						acc = fma32(og, getF32(xb[fastDX+4*l:]), acc)
						og = 0
					}
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
	var q FastActs
	q.Prepare(n, m.In)
	q.a.quantize(x[:n*m.In], m.In, 0, n, 0)
	ks.fastMatMul(dst, q.a, 0, n, m, lo, hi)
	q.Release()
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

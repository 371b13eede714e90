package kernels

import (
	"unsafe"

	"github.com/grok-go/grok/tensor"
)

// The drivers below tile a product into calls of the register-blocked
// kernels of a kernelSet. They own all bounds reasoning: MatMulRows has
// checked dst and x, Validate the weights, and every pointer handed to a
// kernel is to an element that exists, with the kernel reading only within
// the rows, steps and tokens it is told.
//
// Cache blocking (prefill): the input axis is cut into chunks so that the
// chunk of all n activation vectors stays in L2 while every weight row's
// chunk is streamed once; within a chunk a tile of R weight rows (a few KiB,
// in L1) meets every group of T tokens. Each weight byte is thus read from
// memory once per call, whatever n is.

// bytePool holds the products' byte scratch buffers (see freeList).
var bytePool = freeList[[]byte]{sizeOf: func(p *[]byte) int { return cap(*p) }}

// l2Budget is the activation bytes a chunk may hold (1 MiB L2 per core on
// the machines this is tuned for, half of it left to weights and dst).
const l2Budget = 384 << 10

func dotKind(t tensor.DType) int {
	switch t {
	case tensor.F32:
		return wkF32
	case tensor.F16:
		return wkF16
	case tensor.BF16:
		return wkBF16
	case tensor.I8:
		return wkI8
	}
	return wkQ8
}

// weightOffset is the byte offset of element k in a row of type t (k a
// multiple of 32 for Q8_0).
func weightOffset(t tensor.DType, k int) int {
	switch t {
	case tensor.F32:
		return 4 * k
	case tensor.F16, tensor.BF16:
		return 2 * k
	case tensor.I8:
		return k
	case tensor.Q8_0:
		return k / tensor.Q8BlockSize * tensor.Q8BlockBytes
	}
	n, _ := t.RowBytes(k) // other block types: k is a whole number of blocks
	return n
}

// dotSpan is the grid on which the dot-form kernels sum along the input
// axis: each product of a weight row with a token's activations is summed
// in registers over spans of dotSpan elements, counted from the start of
// the row (of each scale shard, for I8), and the spans' sums are added to
// the output in order. The grid is the same for every number of tokens and
// every chunking, so a token's result has the same bits in a batch of any
// size, in a prompt or decoded alone (TestTokenAloneEqualsInBatch), and
// what a server returns for a request does not depend on what else it is
// decoding. Without the grid, prefill chunks that depended on the number
// of tokens changed the sums of rows longer than a chunk (768 elements for
// 128 tokens). Every family's step (E, 32·B) divides it, and the kernels
// count it themselves (sumSpan, generated), so one call can cover a whole
// row: decode reads F32 and Q8_0 rows front to back (dotDecode).
const dotSpan = 2048

// tokenGroup is the most tokens dotAdd multiplies at once, a multiple of
// the kernels' T: past it, a chunk's activations (dotSpan floats a token)
// would spill from L2 to L3 while the rows stream, so the tokens go in
// groups, each reading the weights again. A token's sums do not depend on
// its group.
func tokenGroup(T int) int { return max(T, 96/T*T) }

// chunk returns the input-axis chunk for n tokens: all of seg when the
// activations fit in l2Budget, else a whole number of spans of span units
// (at least one), so that every chunk starts on the grid of dotSpan.
func chunk(n, seg, bytesPerElem, span int) int {
	c := l2Budget / (n * bytesPerElem) / span * span
	return min(seg, max(c, span))
}

// forTiles runs unit(s, c0, c1, r0, R) over every row block [r0, r0+R) of
// [lo, hi) and every chunk [c0, c1) of every shard s (chunks of c units,
// shards of seg units). Prefill (many tokens) runs chunk by chunk, each
// over all rows, so that a chunk of the activations stays in L2 while the
// weights stream once. Decode (n ≤ T, no chunking) runs row block by row
// block instead, so that a row with several shards is still read front to
// back. Either way each output element receives its chunks in the same
// order, and every chunk starts on the dotSpan grid, so the result does not
// depend on the order, nor on n, lo and hi.
func forTiles(n, T, lo, hi, Rmax, shards, seg, c int, unit func(s, c0, c1, r0, R int)) {
	rows := func(s, c0, c1 int) {
		for r0 := lo; r0 < hi; {
			R := Rmax
			if hi-r0 < R {
				R = 1
			}
			unit(s, c0, c1, r0, R)
			r0 += R
		}
	}
	if n <= T && c >= seg {
		for r0 := lo; r0 < hi; {
			R := Rmax
			if hi-r0 < R {
				R = 1
			}
			for s := 0; s < shards; s++ {
				unit(s, 0, seg, r0, R)
			}
			r0 += R
		}
		return
	}
	for s := 0; s < shards; s++ {
		for c0 := 0; c0 < seg; c0 += c {
			rows(s, c0, min(c0+c, seg))
		}
	}
}

// dotMatMul is MatMulRows over [out, in] weights with float32 activations
// (F32, F16, BF16, and Q8_0/I8 under ExactQuant). The kernels add their
// sums (I8: times the shard's column scales) straight into dst, which is
// cleared first; Q8_0 prefills go through dequantTwoPass.
func (ks *kernelSet) dotMatMul(dst, x []float32, n int, m *Mat, lo, hi int) {
	for t := 0; t < n; t++ {
		clear(dst[t*m.Out+lo : t*m.Out+hi])
	}
	if m.Type == tensor.Q8_0 && q8TwoPass && n >= q8TwoPassTokens && m.In%ks.dot[wkQ8].E == 0 {
		// Prefill: a tile's float32 weights decoded once for all the
		// tokens cost less than their dequantisation in registers for
		// every group of T (the same bits: d·q, then the F32 kernels'
		// products on the same grid; a row of whole steps, so that no
		// tail is summed apart from its span).
		ks.dequantTwoPass(dst, x, n, m, lo, hi)
		return
	}
	ks.dotAdd(dst, m.Out, x, m.In, n, m, lo, hi)
}

// dotAdd adds Σ_k W[r][k]·x[t][k] to dst[t·ldo+r] for rows [lo, hi) and n
// tokens whose activations are ldx apart: dotMatMul without the clearing,
// so that the input-axis parts of a matrix (parts.go) can add theirs in
// turn, each on the dotSpan grid from its first input.
func (ks *kernelSet) dotAdd(dst []float32, ldo int, x []float32, ldx, n int, m *Mat, lo, hi int) {
	fam := &ks.dot[dotKind(m.Type)]
	In, Out := m.In, m.Out
	rb := m.stride()
	wstep := weightOffset(m.Type, fam.E)
	shards, seg := 1, In
	scaled := m.Type == tensor.I8
	if scaled {
		shards, seg = m.Shards, In/m.Shards
	}
	if g := tokenGroup(fam.T); n > g {
		for t0 := 0; t0 < n; t0 += g {
			ks.dotAdd(dst[t0*ldo:], ldo, x[t0*ldx:], ldx, min(g, n-t0), m, lo, hi)
		}
		return
	}
	c := chunk(n, seg, 4, dotSpan)
	if n <= fam.T && !scaled && c >= seg {
		dotDecode(dst, ldo, x, ldx, n, m, lo, hi, fam, rb)
		return
	}
	var tail [4][64]float32 // decoded weights past the last whole step
	forTiles(n, fam.T, lo, hi, fam.R, shards, seg, c, func(s, c0, c1, r0, R int) {
		k0, k1 := s*seg+c0, s*seg+c1
		steps := (k1 - k0) / fam.E
		kt := k0 + steps*fam.E
		for r := 0; r < R && kt < k1; r++ {
			row := m.Data[(r0+r)*rb:]
			if err := tensor.DecodeRow(tail[r][:k1-kt], m.Type, row[weightOffset(m.Type, kt):]); err != nil {
				panic(err) // unreachable: Validate checked the sizes
			}
		}
		wp := &m.Data[r0*rb+weightOffset(m.Type, k0)]
		var sc *float32 // I8: the shard's scales of these rows
		if scaled {
			sc = &m.Scales[s*Out+r0]
		}
		for t0 := 0; t0 < n; t0 += fam.T {
			T := min(fam.T, n-t0)
			fam.tile(n, R, T).callGrid(wp, rb, &x[t0*ldx+k0], 4*ldx, steps, &dst[t0*ldo+r0], 4*ldo, sc, fam.E, wstep)
			for t := 0; t < T && kt < k1; t++ {
				xt := x[(t0+t)*ldx+kt : (t0+t)*ldx+k1]
				for r := 0; r < R; r++ {
					v := dotRef(tail[r][:k1-kt], xt)
					if scaled {
						v *= m.Scales[s*Out+r0+r]
					}
					dst[(t0+t)*ldo+r0+r] += v
				}
			}
		}
	})
}

// accPiece is the elements of a span's piece in dequantTwoPass's pieced
// tiles: 4 rows and 6 tokens of it are 40 KiB, within a 48 KiB L1.
const accPiece = 1024

// Accumulator modes of dotFamily.acc.
const (
	accInit = iota
	accMid
	accEnd
)

// q8TwoPassTokens is the fewest tokens for which an exact Q8_0 product
// decodes its tiles to float32 scratch (dequantTwoPass) instead of
// dequantising in registers: measured faster from 40–64 tokens on the
// experts' shapes (figures: bench/README.md).
const q8TwoPassTokens = 48

// q8TwoPass turns that route on: set at start-up where it was measured
// faster (Intel; on AMD Zen, whose four vector pipes make the in-register
// dequantisation cheaper, it stays off: no faster on Zen 4, figures in
// bench/README.md, unmeasured on Zen 5).
var q8TwoPass bool

// tile returns the kernel for a tile of R rows (fam.R or 1) and T tokens
// of a product of n tokens: a prefill's full tiles take the kernel without
// the next rows' prefetch (pre), the others full or one.
func (fam *dotFamily) tile(n, R, T int) dotKernel {
	switch {
	case R < fam.R:
		return fam.one[T-1]
	case n > fam.T && T == fam.T && fam.pre != 0:
		return fam.pre
	}
	return fam.full[T-1]
}

// dotDecode is dotMatMul for a decode step: at most T tokens, one chunk, no
// scales (I8 keeps forTiles). It makes one kernel call per tile of rows in
// row order, then adds the elements past the last whole step: forTiles's
// order (each output gets its kernel sum, then its tail), so the same bits.
// It only leaves out forTiles's bookkeeping per tile, which shows when a
// tile of short rows streams in under a microsecond.
//
// F16 and BF16 rows longer than dotSpan are walked span by span instead:
// every tile's first span, then every tile's second, each call one span (so
// the same bits). A span's activations (8 KiB) then stay in L1 while the
// rows stream, where a whole row's are re-read for every tile. F32 gains
// nothing from it and Q8_0 loses (a call per span costs its heavier loop
// more), so they read whole rows (figures: bench/README.md).
func dotDecode(dst []float32, ldo int, x []float32, ldx, n int, m *Mat, lo, hi int, fam *dotFamily, rb int) {
	In := m.In
	steps := In / fam.E
	wstep := weightOffset(m.Type, fam.E)
	full, one := fam.full[n-1], fam.one[n-1]
	span := steps // one call a tile: each row front to back
	if m.Type == tensor.F16 || m.Type == tensor.BF16 {
		span = dotSpan / fam.E
	}
	for s0 := 0; s0 < steps; s0 += span {
		ns := min(span, steps-s0)
		wo := weightOffset(m.Type, s0*fam.E)
		r0 := lo
		for ; r0+fam.R <= hi; r0 += fam.R {
			full.callGrid(&m.Data[r0*rb+wo], rb, &x[s0*fam.E], 4*ldx, ns, &dst[r0], 4*ldo, nil, fam.E, wstep)
		}
		for ; r0 < hi; r0++ {
			one.callGrid(&m.Data[r0*rb+wo], rb, &x[s0*fam.E], 4*ldx, ns, &dst[r0], 4*ldo, nil, fam.E, wstep)
		}
	}
	kt := steps * fam.E
	if kt == In {
		return
	}
	var tail [64]float32 // decoded weights past the last whole step
	for r := lo; r < hi; r++ {
		if err := tensor.DecodeRow(tail[:In-kt], m.Type, m.Data[r*rb+weightOffset(m.Type, kt):r*rb+m.rowBytes()]); err != nil {
			panic(err) // unreachable: Validate checked the sizes
		}
		for t := 0; t < n; t++ {
			dst[t*ldo+r] += dotRef(tail[:In-kt], x[t*ldx+kt:t*ldx+In])
		}
	}
}

// callGrid is call for a run of steps that starts on the dotSpan grid.
// The kernels that load a step ahead fold a last span of exactly one step
// into the span before it, so such a span runs as a call of its own, which
// starts a new span as the grid defines (the 4-row and 1-row kernels then
// agree, and a row's bits do not depend on the tile it falls in). wstep is
// the weight bytes of one step of E elements.
func (k dotKernel) callGrid(w *byte, ldw int, x *float32, ldx, steps int, out *float32, ldo int, scale *float32, E, wstep int) {
	per := dotSpan / E
	if steps <= per || steps%per != 1 {
		k.call(w, ldw, x, ldx, steps, out, ldo, scale)
		return
	}
	k.call(w, ldw, x, ldx, steps-1, out, ldo, scale)
	last := steps - 1
	k.call((*byte)(unsafe.Add(unsafe.Pointer(w), last*wstep)), ldw,
		(*float32)(unsafe.Add(unsafe.Pointer(x), 4*last*E)), ldx, 1, out, ldo, scale)
}

// hasDotKernels reports whether the kernel sets multiply weights of type t
// directly; the other (block) types go through dequantMatMul.
func hasDotKernels(t tensor.DType) bool {
	switch t {
	case tensor.F32, tensor.F16, tensor.BF16, tensor.I8, tensor.Q8_0:
		return true
	}
	return false
}

// dequantMatMul is MatMulRows over [out, in] weights of a block type that
// has no kernels of its own (the K-quants and i-quants): every tile of R
// rows × one span is dequantised once into float32 scratch, with ggml's
// bits (tensor.DecodeRow), and multiplied by the F32 kernels for all the
// tokens. The spans are those of the fixed grid, so the product has exactly
// the bits of the F32 matrix of the dequantised weights, for any n.
//
// The types with fused kernels multiply the blocks without the scratch
// (fusedMatMul), with the same bits, up to N tokens, and past N too where
// fusedPastN and fusesPastN say so.
func (ks *kernelSet) dequantMatMul(dst, x []float32, n int, m *Mat, lo, hi int) {
	In, Out := m.In, m.Out
	rb := m.stride()
	for t := 0; t < n; t++ {
		clear(dst[t*Out+lo : t*Out+hi])
	}
	if ff := ks.fusedFamily(m.Type); ff != nil && In%ff.E == 0 && !noFused && (n <= ff.N || fusedPastN && (fusesPastN(m.Type) || ff.tab != nil)) {
		fusedMatMul(dst, x, n, m, lo, hi, ff, rb)
		return
	}
	ks.dequantTwoPass(dst, x, n, m, lo, hi)
}

// noFused turns the fused kernels off, for tests comparing them with the
// two-pass path; noTables turns off their variant that reads tables
// (fusedTables), for benchmarks comparing the two.
var noFused, noTables bool

// fusedPastN makes the fused kernels take products of more than N tokens
// too (fusesPastN's types and those with table kernels), on CPUs whose L1
// data cache is under 48 KiB (Zen 4): there the two-pass path's float32
// span of a tile (4 rows × dotSpan, 32 KiB) fills L1 and the tokens'
// activations evict it. With 48 KiB (Zen 5, Intel since Ice Lake) the
// two-pass path measured faster past N for every type, before the table
// kernels (unmeasured there). Set at start-up.
var fusedPastN bool

// fusesPastN reports whether t's fused kernels beat the two-pass path past
// N tokens where fusedPastN holds: Q4_0 and Q4_K, whose one-token kernels
// are the cheapest a weight (and, on AVX-512, the table kernels of these
// and the IQ4 types, fusedTables). The others' fused kernels (Q6_K, Q2_K,
// Q3_K, Q5_K, the legacy types, the codebook i-quants) cost more a weight
// than decoding a tile's float32 span once for many tokens, which since
// the pieced F32 tiles beats them on Zen 4 too (figures: bench/README.md).
func fusesPastN(t tensor.DType) bool {
	return t == tensor.Q4_0 || t == tensor.Q4_K
}

// fusedFamily returns the fused kernels of t, or nil.
func (ks *kernelSet) fusedFamily(t tensor.DType) *dotFamily {
	k := dqKind(t)
	if k < 0 || ks == nil || ks.fused == nil || len(ks.fused[k].full) == 0 {
		return nil
	}
	return &ks.fused[k]
}

// fusedMatMul is dequantMatMul with t's fused kernels. Up to N tokens
// (decode, batched decode) each tile of rows is read front to back, one
// call a tile, the kernels counting the spans; more tokens go in groups of
// tokenGroup, each over chunks of whole spans whose activations stay in L2
// (chunk), every tile of rows through a chunk for all the group's tokens
// while its blocks stay in L1: each row then leaves memory once per group,
// where the two-pass path's float32 span of a tile (32 KiB) would crowd the
// activations out of L1. Within a call the tokens go in balanced groups of
// at most T (5 as 2 and 3), each group's call right after the last on the
// same rows; the rows past the last whole tile go one by one, as the
// two-pass path takes them. Every chunk starts on the dotSpan grid and each
// output gets its spans in order, so a token's sums depend neither on its
// group nor on n. Validate checked that every row is In/E whole blocks.
func fusedMatMul(dst, x []float32, n int, m *Mat, lo, hi int, fam *dotFamily, rb int) {
	if g := tokenGroup(fam.T); n > fam.N && n > g {
		for t0 := 0; t0 < n; t0 += g {
			fusedMatMul(dst[t0*m.Out:], x[t0*m.In:], min(g, n-t0), m, lo, hi, fam, rb)
		}
		return
	}
	In, Out := m.In, m.Out
	kc := In
	if n > fam.N {
		kc = chunk(n, In, 4, dotSpan)
	}
	groups := (n + fam.T - 1) / fam.T
	var tabs []float32
	if n > fam.N && fam.tab != nil && !noTables {
		tp := getScratch(fam.R * tabFloats)
		defer scratchPool.Put(tp)
		tabs = *tp
	}
	forTiles(n, fam.T, lo, hi, fam.R, 1, In, kc, func(_, k0, k1, r0, R int) {
		if tabs != nil && R == fam.R {
			fusedTables(dst, x, n, m, k0, k1, r0, fam, rb, tabs)
			return
		}
		kerns := fam.full
		if R < fam.R {
			kerns = fam.one
		}
		steps := (k1 - k0) / fam.E
		wo := weightOffset(m.Type, k0)
		for g, t0 := 0, 0; g < groups; g++ {
			c := (n - t0) / (groups - g)
			kr := R // the rows of a call
			if R > 1 && fam.rows != nil {
				kr = fam.rows[c-1]
			}
			for r := r0; r < r0+R; r += kr {
				kerns[c-1].call(&m.Data[r*rb+wo], rb, &x[t0*In+k0], 4*In, steps, &dst[t0*Out+r], 4*Out, nil)
			}
			t0 += c
		}
	})
}

// tabFloats is the float32 a row's tables of one span take in fusedTables:
// 16 levels every 32 weights (a Q4_0 or IQ4_NL block, a Q4_K or IQ4_XS
// sub-block; the kernels' tabRow bytes).
const tabFloats = dotSpan / 32 * 16

// fusedTables is fusedMatMul's unit for a full tile of rows [r0, r0+R)
// over the chunk [k0, k1) with fam's table kernels: span by span, each
// row's levels made once into tabs (by fam.tables, or by the first group's
// kernel, fam.tabMake, which writes the levels it makes), then every group
// of tokens through the span reading them, where the kernels that make the
// levels in registers make them again for every group (one FMA operation
// of nine in Q4_K's 4x4 step). A span's sums and their order are the
// same, so the same bits.
func fusedTables(dst, x []float32, n int, m *Mat, k0, k1, r0 int, fam *dotFamily, rb int, tabs []float32) {
	In, Out := m.In, m.Out
	groups := (n + fam.T - 1) / fam.T
	for s0 := k0; s0 < k1; s0 += dotSpan {
		steps := (min(s0+dotSpan, k1) - s0) / fam.E
		wo := weightOffset(m.Type, s0)
		if fam.tabMake == nil {
			for r := 0; r < fam.R; r++ {
				fam.tables.call(&tabs[r*tabFloats], &m.Data[(r0+r)*rb+wo], steps)
			}
		}
		for g, t0 := 0, 0; g < groups; g++ {
			c := (n - t0) / (groups - g)
			k := fam.tab[c-1]
			if g == 0 && fam.tabMake != nil {
				k = fam.tabMake[c-1]
			}
			k.call(&m.Data[r0*rb+wo], rb, &x[t0*In+s0], 4*In, steps, &dst[t0*Out+r0], 4*Out, &tabs[0])
			t0 += c
		}
	}
}

// pieces adds one span of steps of a full tile of rows (w, ldw bytes
// apart, wstep bytes a step) times the first tokens (a multiple of fam.T;
// x and dst with strides ldx and ldo) to dst, the span cut in pieces of
// accPiece elements, every tile of tokens through a piece before the next
// (fam.acc; a span of one piece takes the tile kernel). It calls after
// after each kernel call.
func pieces(fam *dotFamily, tokens, steps int, accs []float32, w *byte, ldw, wstep int, x []float32, ldx int, dst []float32, ldo int, after func()) {
	ps := accPiece / fam.E
	if steps <= ps {
		k := fam.full[fam.T-1]
		if fam.pre != 0 {
			k = fam.pre
		}
		for t0 := 0; t0 < tokens; t0 += fam.T {
			k.call(w, ldw, &x[t0*ldx], 4*ldx, steps, &dst[t0*ldo], 4*ldo, nil)
			after()
		}
		return
	}
	for p0 := 0; p0 < steps; p0 += ps {
		p1 := min(p0+ps, steps)
		mode := accMid
		switch {
		case p0 == 0:
			mode = accInit
		case p1 == steps:
			mode = accEnd
		}
		wp := (*byte)(unsafe.Add(unsafe.Pointer(w), p0*wstep))
		for t0 := 0; t0 < tokens; t0 += fam.T {
			fam.acc[mode].call(wp, ldw, &x[t0*ldx+p0*fam.E], 4*ldx, p1-p0, &dst[t0*ldo], 4*ldo, &accs[t0*fam.R*16])
			after()
		}
	}
}

// dequantTwoPass is dequantMatMul through float32 scratch (dst cleared),
// and dotMatMul's for Q8_0 from q8TwoPassTokens tokens.
func (ks *kernelSet) dequantTwoPass(dst, x []float32, n int, m *Mat, lo, hi int) {
	fam := &ks.dot[wkF32]
	In, Out := m.In, m.Out
	if g := tokenGroup(fam.T); n > g {
		// As dotAdd: a group's chunk of activations stays in L2, at the
		// cost of decoding each tile once per group.
		for t0 := 0; t0 < n; t0 += g {
			ks.dequantTwoPass(dst[t0*Out:], x[t0*In:], min(g, n-t0), m, lo, hi)
		}
		return
	}
	rb := m.stride()
	wp := getScratch(fam.R * min(In, dotSpan))
	defer scratchPool.Put(wp)
	w := *wp
	var accs []float32 // the pieces' accumulators, a full tile's after another
	if fam.acc[0] != 0 && n > fam.T {
		ap := getScratch(n / fam.T * fam.R * fam.T * 16)
		defer scratchPool.Put(ap)
		accs = *ap
	}
	// span decodes and multiplies one span of rows [r0, r0+R), prefetching
	// the same span of the next rows' weights, a share after each kernel
	// call: without it the decoding waited for memory (15 % of a
	// real-shape Q8_0 prefill), and prefetching them all at once stalled
	// on the line fill buffers. Where the kernels have them, the full
	// tiles of a span longer than accPiece go through it in pieces (the
	// tokens' activations of a piece and the tile's weights then stay in
	// L1), every piece for every tile before the next piece.
	span := func(k0, k1, r0, R, next int) {
		kc := k1 - k0
		for r := 0; r < R; r++ {
			row := m.Data[(r0+r)*rb:]
			ks.decodeBlocks(w[r*kc:(r+1)*kc], m.Type, row[weightOffset(m.Type, k0):])
		}
		steps := kc / fam.E
		kt := k0 + steps*fam.E
		wb := (*byte)(unsafe.Pointer(&w[0]))
		o0 := weightOffset(m.Type, k0)
		lines := (weightOffset(m.Type, k1) - o0 + 63) / 64 // of each next row
		if ks.prefetch == nil {
			next = 0
		}
		pieced := 0 // tokens multiplied in pieces: the full tiles
		if accs != nil && R == fam.R && steps > 0 {
			pieced = n / fam.T * fam.T
		}
		calls := (n + fam.T - 1) / fam.T
		if ps := accPiece / fam.E; pieced > 0 && steps > ps {
			calls += (pieced / fam.T) * ((steps+ps-1)/ps - 1)
		}
		call, done := 0, 0
		prefetchShare := func() {
			call++
			for upto := next * lines * call / calls; done < upto; {
				r, l := done/lines, done%lines
				c := min(upto-done, lines-l)
				ks.prefetch(&m.Data[(r0+R+r)*rb+o0+64*l], 64*c) // a prefetch past the data never faults
				done += c
			}
		}
		if pieced > 0 {
			pieces(fam, pieced, steps, accs, wb, 4*kc, 4*fam.E, x[k0:], In, dst[r0:], Out, prefetchShare)
		}
		for t0 := 0; t0 < n; t0 += fam.T {
			T := min(fam.T, n-t0)
			if steps > 0 && t0 >= pieced {
				fam.tile(n, R, T).call(wb, 4*kc, &x[t0*In+k0], 4*In, steps, &dst[t0*Out+r0], 4*Out, nil)
				prefetchShare()
			}
			for t := 0; t < T && kt < k1; t++ {
				xt := x[(t0+t)*In+kt : (t0+t)*In+k1]
				for r := 0; r < R; r++ {
					dst[(t0+t)*Out+r0+r] += dotRef(w[r*kc+kt-k0:(r+1)*kc], xt)
				}
			}
		}
	}
	if n > fam.T {
		// Chunks of whole spans whose activations fit in L2 (a whole row
		// for a few tokens), each tile of rows through a chunk span by
		// span: each row is then read front to back, not one span on
		// every pass over the matrix. Each output gets its spans in order.
		forTiles(n, fam.T, lo, hi, fam.R, 1, In, chunk(n, In, 4, dotSpan), func(_, c0, c1, r0, R int) {
			for k0 := c0; k0 < c1; k0 += dotSpan {
				span(k0, min(k0+dotSpan, c1), r0, R, min(R, hi-r0-R))
			}
		})
		return
	}
	// Decode: each tile of rows span by span, so that the weights stream
	// front to back (forTiles would walk the first span of every row, then
	// the second). Each output still gets its spans in order: the same bits.
	for r0 := lo; r0 < hi; {
		R := fam.R
		if hi-r0 < R {
			R = 1
		}
		for k0 := 0; k0 < In; k0 += dotSpan {
			span(k0, min(k0+dotSpan, In), r0, R, 0)
		}
		r0 += R
	}
}

// decodeBlocks decodes len(dst) elements, whole blocks of type t, from the
// front of src with the level's dequantiser, or tensor.DecodeRow where it
// has none.
func (ks *kernelSet) decodeBlocks(dst []float32, t tensor.DType, src []byte) {
	if t == tensor.Q8_0 && ks != nil && ks.vec != nil && ks.vec.q8 != 0 && len(dst)%tensor.Q8BlockSize == 0 && len(dst) > 0 {
		nb := len(dst) / tensor.Q8BlockSize
		src = src[:nb*tensor.Q8BlockBytes] // bounds checked here: the kernel reads exactly these
		ks.vec.q8.call(&dst[0], &src[0], nb)
		return
	}
	if k := dqKind(t); k >= 0 && ks != nil && ks.dequant != nil && ks.dequant[k] != 0 && len(dst) > 0 {
		nb := len(dst) / t.BlockSize()
		src = src[:nb*t.BlockBytes()] // bounds checked here: the kernel reads exactly these
		if nb*t.BlockSize() == len(dst) {
			ks.dequant[k].call(&dst[0], &src[0], nb)
			return
		}
	}
	if err := tensor.DecodeRow(dst, t, src); err != nil {
		panic(err) // unreachable: Validate checked the sizes
	}
}

// intMatMul is MatMulRows over Q8_0 or [out, in] I8 weights with int8
// activations: the same arithmetic as matMulQuantRef, block for block.
func (ks *kernelSet) intMatMul(dst, x []float32, n int, m *Mat, lo, hi int) {
	ik := ikQ8
	if m.Type == tensor.I8 {
		ik = ikI8
	}
	fam := &ks.int8[ik]
	qa := quantizeActs(ks.quant, x, n, m)
	defer qbufPool.Put(qa)
	In, Out := m.In, m.Out
	rb, rl := m.stride(), m.rowBytes()
	shards, seg := 1, In
	scaled := m.Type == tensor.I8
	if scaled {
		shards, seg = m.Shards, In/m.Shards
	}
	for t := 0; t < n; t++ {
		clear(dst[t*Out+lo : t*Out+hi])
	}
	nbs, ldx := qa.nbs, qa.nbt*32
	full := seg / 32 // whole blocks a shard
	// Chunks and shards are counted in activation blocks.
	forTiles(n, fam.T, lo, hi, fam.R, shards, nbs, chunk(n, nbs, 96, dotSpan/32), func(s, b0, b1, r0, R int) {
		steps := max(0, min(b1, full)-b0) / fam.B
		bt := b0 + steps*fam.B // first block left to Go
		kern := fam.full
		if R < fam.R {
			kern = fam.one
		}
		wp := &m.Data[r0*rb+weightOffset(m.Type, s*seg+b0*32)]
		var sc *float32 // I8: the shard's scales of these rows
		if scaled {
			sc = &m.Scales[s*Out+r0]
		}
		for t0 := 0; t0 < n; t0 += fam.T {
			T := min(fam.T, n-t0)
			qb := t0*qa.nbt + s*nbs + b0
			kern[T-1].call(wp, rb, &qa.xq[qb*32], &qa.dx[qb*8], &qa.cr[qb*8], ldx, steps, &dst[t0*Out+r0], 4*Out, sc)
			for t := 0; t < T && bt < b1; t++ {
				xq, dx := qa.token(t0 + t)
				for r := 0; r < R; r++ {
					var v float32
					row := m.Data[(r0+r)*rb : (r0+r)*rb+rl]
					for b := bt; b < b1; b++ {
						qb := s*nbs + b
						if m.Type == tensor.Q8_0 {
							v += q8BlockTerm(row[b*tensor.Q8BlockBytes:], xq[qb*32:], dx[qb*8])
						} else {
							k0 := s*seg + b*32
							v += i8BlockTerm(row[k0:k0+min(32, seg-b*32)], xq[qb*32:], dx[qb*8])
						}
					}
					if scaled {
						v *= m.Scales[s*Out+r0+r]
					}
					dst[(t0+t)*Out+r0+r] += v
				}
			}
		}
	})
}

// inoutMatMul is MatMulRows over the [in, out] layout (inoutAcc). I8
// accumulates a row block at a time (Mat.Blocks) in scratch and adds it,
// scaled, to dst; the other types, and the unscaled blocks of MatMulBlock,
// accumulate in dst directly, over all rows.
func (ks *kernelSet) inoutMatMul(dst, x []float32, n int, m *Mat, lo, hi int) {
	ks.inoutProduct(dst, x, n, m, lo, hi, false)
}

// inoutProduct is inoutMatMul, or with add (weights without block scales
// only) AddInOut's dst += x·W over the columns [lo, hi).
func (ks *kernelSet) inoutProduct(dst, x []float32, n int, m *Mat, lo, hi int, add bool) {
	V := ks.inout[dotKind(m.Type)].V
	vhi := lo + (hi-lo)/V*V
	if vhi < hi {
		ks.inoutTail(dst, x, n, m, vhi, hi, add)
	}
	if vhi == lo {
		return
	}
	if !m.blockScaled() {
		ks.inoutAcc(dst[lo:], m.Out, x, n, m, lo, vhi, 0, m.In, add)
		return
	}
	Out := m.Out
	P := chunk(n, vhi-lo, 4, V)
	accp := getScratch(n * P)
	defer scratchPool.Put(accp)
	for p0 := lo; p0 < vhi; p0 += P {
		pw := min(P, vhi-p0)
		for b := 0; b < m.Blocks(); b++ {
			k0, k1 := m.blockRange(b)
			ks.inoutAcc(*accp, pw, x, n, m, p0, p0+pw, k0, k1, false)
			s := m.blockShard(b)
			for t := 0; t < n; t++ {
				d := dst[t*Out+p0 : t*Out+p0+pw]
				if b == 0 {
					clear(d)
				}
				addScaled(d, m.Scales[s*Out+p0:s*Out+p0+pw], (*accp)[t*pw:(t+1)*pw])
			}
		}
	}
}

// inoutAcc sets acc[t][c-lo] (row stride lda) to Σ_{k0 ≤ k < k1}
// x[t][k]·W[k][c] (with add: adds it) for the columns [lo, hi), a whole
// number of vectors: for
// a panel of columns, every input row k adds x[t][k]·W[k][panel] to the
// panel's accumulators, the kernels looping over groups of K rows
// themselves. The panel is as wide as keeps the n accumulator rows within
// l2Budget; for one token it is the whole range, so each weight row is
// read as one contiguous run.
func (ks *kernelSet) inoutAcc(acc []float32, lda int, x []float32, n int, m *Mat, lo, hi, k0, k1 int, add bool) {
	fam := &ks.inout[dotKind(m.Type)]
	In := m.In
	rb := m.stride()
	esz := m.rowBytes() / m.Out
	var xp *[]float32
	if n > 1 {
		xp = getScratch(fam.T * inoutPiece) // one size: a pooled buffer grows once
		defer scratchPool.Put(xp)
	}
	P := chunk(n, hi-lo, 4, fam.V)
	for p0 := lo; p0 < hi; p0 += P {
		pw := min(P, hi-p0)
		a := acc[p0-lo:]
		for t := 0; t < n && !add; t++ {
			clear(a[t*lda : t*lda+pw])
		}
		for k := k0; k < k1; k += inoutPiece {
			rows := min(inoutPiece, k1-k)
			for t0 := 0; t0 < n; t0 += fam.T {
				T := min(fam.T, n-t0)
				ks.inoutRows(fam, a[t0*lda:], lda, m.Data[k*rb+p0*esz:], rb, x[t0*In+k:], In, T, rows, pw/fam.V, xp)
			}
		}
	}
}

// inoutPiece is the most weight rows inoutRows is given at once (the
// activations of T tokens for them are packed in scratch).
const inoutPiece = 256

// inoutRows adds rows weight rows (w, stride rb bytes) times T tokens'
// activations (x, stride In) to T accumulator rows (acc, stride lda) over
// nv column vectors: the K-row kernel over whole groups, the one-row
// kernel over the rest. One token's activations are read in place; T > 1
// are packed group by group (xp) in the order the kernels read them.
func (ks *kernelSet) inoutRows(fam *inoutFamily, acc []float32, lda int, w []byte, rb int, x []float32, In, T, rows, nv int, xp *[]float32) {
	K := fam.K
	g := rows / K
	xs, xr := x, x[g*K:]
	if T > 1 {
		buf := *xp
		for t := 0; t < T; t++ {
			packGroups(buf[t*K:], T*K, x[t*In:t*In+g*K], K)
		}
		for r := g * K; r < rows; r++ {
			for t := 0; t < T; t++ {
				buf[r*T+t] = x[t*In+r]
			}
		}
		xs, xr = buf, buf[g*K*T:]
	}
	if g > 0 {
		fam.full[T-1].call(&acc[0], 4*lda, &w[0], rb, &xs[0], nv, g)
	}
	if r := rows - g*K; r > 0 {
		fam.one[T-1].call(&acc[0], 4*lda, &w[g*K*rb], rb, &xr[0], nv, r)
	}
}

// packGroups copies the g = len(x)/K groups of K values of x to dst, group
// i at dst[i·stride:]. It is inoutRows's packing, a few elements at a time:
// a copy call per group cost a quarter of an xAI checkpoint's prefill.
func packGroups(dst []float32, stride int, x []float32, K int) {
	if K != 4 {
		for i := 0; i*K < len(x); i++ {
			copy(dst[i*stride:i*stride+K], x[i*K:])
		}
		return
	}
	for i, o := 0, 0; i+4 <= len(x); i, o = i+4, o+stride {
		d, s := dst[o:o+4:o+4], x[i:i+4:i+4]
		d[0], d[1], d[2], d[3] = s[0], s[1], s[2], s[3]
	}
}

// inoutTail computes the last hi-lo < V columns of an [in, out] product by
// running the kernels on a zero-padded copy of those columns, so that every
// column goes through the same fused multiply-add chain wherever a range
// split puts it: the results do not depend on how MatMulRows is split.
func (ks *kernelSet) inoutTail(dst, x []float32, n int, m *Mat, lo, hi int, add bool) {
	V := ks.inout[dotKind(m.Type)].V
	c := hi - lo
	rb := m.stride()
	esz := m.rowBytes() / m.Out
	tm := *m
	tm.Out, tm.Stride = V, 0
	bp := getBytes(m.In * V * esz)
	defer bytePool.Put(bp)
	tm.Data = *bp
	clear(tm.Data)
	for k := 0; k < m.In; k++ {
		copy(tm.Data[k*V*esz:k*V*esz+c*esz], m.Data[k*rb+lo*esz:])
	}
	if m.blockScaled() {
		sp := getScratch(m.Shards * V)
		defer scratchPool.Put(sp)
		tm.Scales = *sp
		clear(tm.Scales)
		for s := 0; s < m.Shards; s++ {
			copy(tm.Scales[s*V:s*V+c], m.Scales[s*m.Out+lo:])
		}
	}
	tp := getScratch(n * V)
	defer scratchPool.Put(tp)
	td := *tp
	if add {
		for t := 0; t < n; t++ {
			copy(td[t*V:t*V+c], dst[t*m.Out+lo:t*m.Out+hi])
		}
	}
	ks.inoutProduct(td, x, n, &tm, 0, V, add)
	for t := 0; t < n; t++ {
		copy(dst[t*m.Out+lo:t*m.Out+hi], td[t*V:])
	}
}

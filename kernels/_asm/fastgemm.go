package main

import (
	"fmt"
	"math"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The fast-precision GEMM (kernels/fast.go) multiplies weights widened to
// int16 by activations quantised per token to int16 with a scale per 8
// blocks of 32, with VPDPWSSD, tokens across the lanes:
//
//   - a widening kernel turns a tile of weight rows, one span of blocks,
//     into int16 (row r, block b at (r·nb+b)·64 bytes) and float32 block
//     scales (row r, block b at (r·nb+b)·4), once per call, in L1;
//   - the product kernel then, for every vector of 16 tokens (each lane
//     holding 2 consecutive int16 activations of its token), broadcasts a
//     pair of a row's widened weights to every lane and adds the pair's
//     products of all 16 tokens with one VPDPWSSD. A row's lanes end a
//     block holding each token's exact Σ w·q, which is converted to
//     float32 once per block and accumulated times dw, lane-wise; each
//     group of 8 blocks' sum is then added times its dx.
//
// The product kernel is the same for every weight type; only the widening
// knows the type. Every lane runs the same instruction sequence whatever
// the tile, so a token's bits do not depend on which tokens share its
// vector. Activation block (per vector of 16 tokens): 16 pairs × 64 bytes,
// then 16 float32 scales dx (the block's group's) and 16 float32 sums Σq.
// Weight types with a min per block (Q4_K) take the kernels with mins,
// which add the block's -dmin·m (a third side buffer) times Σq.
const (
	fastBlock = 1280
	fastDX    = 1024
	fastSX    = 1088 // Σq: the block's sum, for the types with mins
	fastSX0   = 1152 // Σq over its first 16, for mins per 16 (Q2_K)
	fastSX1   = 1216 // and over its last 16
	// fastScaleBlocks is the blocks sharing an activation scale (from a
	// call's first block; kernels.fastScaleBlocks).
	fastScaleBlocks = 8
)

var (
	fastHMGroup = newGroup("fastHMKernel", "ws *byte, ldw int, ds *float32, dm *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int", "ws, ldw, ds, dm, ldd, xa, ldx, nb, out, ldo, pf, pfld, pfstep")
	fastHGroup  = newGroup("fastHKernel", "ws *byte, ldw int, ds *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int", "ws, ldw, ds, ldd, xa, ldx, nb, out, ldo, pf, pfld, pfstep")
	fastMGroup  = newGroup("fastMKernel", "ws *byte, ldw int, ds *float32, dm *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int", "ws, ldw, ds, dm, ldd, xa, ldx, nb, out, ldo, pf, pfld, pfstep")
	fastGroup   = newGroup("fastKernel", "ws *byte, ldw int, ds *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int", "ws, ldw, ds, ldd, xa, ldx, nb, out, ldo, pf, pfld, pfstep")
	widenGroup  = newGroup("widenKernel", "dst *byte, ds *float32, w *byte, ldw int, rows int, nb int", "dst, ds, w, ldw, rows, nb")
)

// fastShape is the register tile: R rows × V vectors of 16 tokens
// (R·V int32 and R·V float32 accumulators, V activation vectors).
func fastShape() (R, V int) { return 4, 2 }

// A fast product kernel's variant: plain, with a min per block (mins),
// or with a scale per half block of 16 (halves: ds holds two a block).
type fastVariant int

const (
	fvPlain fastVariant = iota
	fvMins
	fvHalves
	fvHalvesMins // a min per 16, weights widened times their scale per 16 (Q2_K), by super-blocks
	fvSuper      // plain by super-blocks (Q3_K)
)

// bySuperBlock reports whether fv's kernels sum a group's 8 blocks in
// int32 and convert once: the weights of Q2_K and Q3_K (widened times
// their scale per 16, at most 45 and 128 in magnitude) share one scale d
// in a super-block of 256, which is a group of the activations' scale, and
// 256 products of them by int16 quants stay below 2^31.
func (fv fastVariant) bySuperBlock() bool { return fv == fvHalvesMins || fv == fvSuper }

// fastName names a kernel; y marks the ones whose last vector is a ymm of
// 8 tokens (the group's lanes 0..7).
func fastName(R, V int, fv fastVariant, y bool) string {
	s := ""
	if y {
		s = "y"
	}
	return fmt.Sprintf("fast16%s_%dx%d%s_VNNI", [...]string{"", "m", "h", "hm", "s"}[fv], R, V, s)
}

// genFast emits the product kernel of R rows by V vectors of 16 tokens,
// or with y the last vector only its first 8 tokens, in ymm registers:
// a group's tail of at most 8 tokens then costs half the instructions'
// width (a zmm operation issues as two halves on Zen 4, and VPDPWSSD ymm
// twice as often as zmm on Intel's cores), each lane's operations the
// same.
func genFast(R, V int, fv fastVariant, y bool) {
	mins, halves := fv == fvMins || fv == fvHalvesMins, fv == fvHalves || fv == fvHalvesMins
	name := fastName(R, V, fv, y)
	vec := func(v int) VecVirtual {
		if y && v == V-1 {
			return YMM()
		}
		return ZMM()
	}
	if mins {
		TEXT(name, NOSPLIT, "func(ws *byte, ldw int, ds *float32, dm *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int)")
	} else {
		TEXT(name, NOSPLIT, "func(ws *byte, ldw int, ds *float32, ldd int, xa *byte, ldx int, nb int, out *float32, ldo int, pf *byte, pfld int, pfstep int)")
	}
	Pragma("noescape")
	extra := ""
	if mins {
		extra = " + dm[r][b]·sx[v][l][b]"
	}
	if halves {
		extra = " (ds: two scales a block, one for each 16 weights)"
	}
	if halves && mins {
		extra = " + Σ_h dm[r][b][h]·sx[v][l][b][h] (ds: two a block, the first used; dm and the sums: two a block, one for each 16 weights)"
	}
	if fv.bySuperBlock() {
		extra += " (a group's 8 blocks summed in int32 and multiplied by the last one's ds: whole super-blocks of one scale)"
	}
	lanes := ""
	if y {
		lanes = " (the last vector's lanes l < 8 only; out's others untouched)"
	}
	Doc(fmt.Sprintf("%s adds to out[v·ldo/4 + 16r + l] the sum over the groups of 8 of the nb blocks of dx[v][l] (the group's) times the group's sum over blocks b of ds[r][b]·Σ_j ws[r][b][j]·xq[v][l][b][j]%s for %d rows of widened weights (ws: int16, stride ldw bytes; ds: float32 scales, stride ldd bytes) and %d interleaved activation vectors of 16 tokens%s (stride ldx bytes; kernels.fastActs); each block also prefetches pf + b·pfstep + r·pfld for its %d rows r.",
		name, extra, R, V, lanes, R))
	ws := newStrided(Load(Param("ws"), GP64()), Load(Param("ldw"), GP64()), R)
	ldd := Load(Param("ldd"), GP64())
	ds := newStrided(Load(Param("ds"), GP64()), ldd, R)
	var dm *strided
	if mins {
		dm = &strided{base: Load(Param("dm"), GP64()), stride: ldd, stride3: ds.stride3, rows: R}
	}
	xa := Load(Param("xa"), GP64())
	ldx := Load(Param("ldx"), GP64())
	nb := Load(Param("nb"), GP64())
	// The next tile's weights, a few lines a block, so that they arrive
	// while this tile multiplies: the widening that follows would wait on
	// memory with the vector units idle (the hardware prefetchers do not
	// follow tiles of rows a few KiB apart, and a burst of prefetches
	// there stalls as its misses do).
	pf, pfld := Load(Param("pf"), GP64()), Load(Param("pfld"), GP64())
	var pf2 GPVirtual
	if R > 3 {
		pf2 = GP64()
		LEAQ(Mem{Base: pf, Index: pfld, Scale: 1}, pf2)
	}
	pfstep, err := Param("pfstep").Resolve()
	if err != nil {
		panic(err)
	}
	xat := func(v, off int) Mem {
		if v == 0 {
			return Mem{Base: xa, Disp: off}
		}
		return Mem{Base: xa, Index: ldx, Scale: 1, Disp: off}
	}
	// out sums the groups (kernels.fastScaleBlocks blocks sharing the
	// activations' scale dx, from the call's first block) times their dx;
	// og a group's blocks, in units of its dx.
	out, og := make([][]VecVirtual, R), make([][]VecVirtual, R)
	for r := range out {
		out[r], og[r] = make([]VecVirtual, V), make([]VecVirtual, V)
		for v := range out[r] {
			out[r][v], og[r][v] = vec(v), vec(v)
			VXORPS(out[r][v], out[r][v], out[r][v])
		}
	}
	// With one vector of tokens, R chains of VPDPWSSD would wait on its
	// latency: each row's pairs then alternate between two accumulators,
	// added at the block's end (integers: the same sum), or by
	// super-blocks at the group's.
	chains := 1
	if V == 1 {
		chains = 2
	}
	newAcc := func() [][][]VecVirtual {
		acc := make([][][]VecVirtual, chains)
		for c := range acc {
			acc[c] = make([][]VecVirtual, R)
			for r := range acc[c] {
				acc[c][r] = make([]VecVirtual, V)
				for v := range acc[c][r] {
					acc[c][r][v] = vec(v)
				}
			}
		}
		return acc
	}
	zero := func(acc [][][]VecVirtual) {
		for c := range acc {
			for r := range acc[c] {
				for _, a := range acc[c][r] {
					VXORPS(a, a, a)
				}
			}
		}
	}
	// addChains adds the chains into acc[0] and converts it to float32.
	addChains := func(acc [][][]VecVirtual) {
		for c := 1; c < chains; c++ {
			for r := 0; r < R; r++ {
				for v := 0; v < V; v++ {
					VPADDD(acc[c][r][v], acc[0][r][v], acc[0][r][v])
				}
			}
		}
		for r := 0; r < R; r++ {
			for v := 0; v < V; v++ {
				VCVTDQ2PS(acc[0][r][v], acc[0][r][v])
			}
		}
	}
	super := fv.bySuperBlock()
	var sacc [][][]VecVirtual // the group's sums, by super-blocks
	if super {
		sacc = newAcc()
	}
	g := GP64()
	Label("group")
	MOVQ(U32(fastScaleBlocks), g)
	CMPQ(nb, g)
	CMOVQLT(nb, g) // the group's blocks: min(8, the call's left)
	SUBQ(g, nb)
	for r := range og {
		for v := range og[r] {
			VXORPS(og[r][v], og[r][v], og[r][v])
		}
	}
	if super {
		zero(sacc)
	}
	Label("loop")
	for r := 0; r < R; r++ {
		switch r {
		case 0:
			PREFETCHT0(Mem{Base: pf})
		case 3:
			PREFETCHT0(Mem{Base: pf2, Index: pfld, Scale: 2})
		default:
			PREFETCHT0(Mem{Base: pf, Index: pfld, Scale: uint8(r)})
		}
	}
	ADDQ(pfstep.Addr, pf)
	if R > 3 {
		ADDQ(pfstep.Addr, pf2)
	}
	// Pairs [p0, p1) of the block into fresh accumulators, then added
	// with scale (ds row offset) so: the whole block at once, or with
	// halves each 16 weights with its own scale; and with mins, each min
	// at dm row offset mo[i] times the sums at sxo[i].
	// By super-blocks the pairs go into the group's sums instead and only
	// the mins are added a block.
	part := func(p0, p1, so int, mo, sxo []int) {
		acc := sacc
		if !super {
			acc = newAcc()
			zero(acc)
		}
		for p := p0; p < p1; p++ {
			a := acc[(p-p0)%chains]
			xv := make([]VecVirtual, V)
			for v := range xv {
				xv[v] = vec(v)
				VMOVDQU32(xat(v, 64*p), xv[v])
			}
			for r := 0; r < R; r++ {
				if V == 1 {
					VPDPWSSD_BCST(ws.at(r, 4*p), xv[0], a[r][0]) // exact Σ w·q per token lane
					continue
				}
				// One broadcast for the V vectors: fewer loads than
				// V embedded broadcasts, which bound the loop.
				wv := ZMM()
				VPBROADCASTD(ws.at(r, 4*p), wv)
				for v := 0; v < V; v++ {
					w := Op(wv)
					if y && v == V-1 {
						w = wv.AsY()
					}
					VPDPWSSD(w, xv[v], a[r][v])
				}
			}
		}
		if !super {
			addChains(acc)
		}
		sx := make([][]VecVirtual, len(sxo))
		for i, o := range sxo {
			sx[i] = make([]VecVirtual, V)
			for v := range sx[i] {
				sx[i][v] = vec(v)
				VMOVUPS(xat(v, o), sx[i][v])
			}
		}
		for r := 0; r < R; r++ {
			for v := 0; v < V; v++ {
				if !super {
					VFMADD231PS_BCST(ds.at(r, so), acc[0][r][v], og[r][v]) // + dw·Σ w·q
				}
				for i := range mo {
					VFMADD231PS_BCST(dm.at(r, mo[i]), sx[i][v], og[r][v]) // + (-dmin·m)·Σq
				}
			}
		}
	}
	switch {
	case halves && mins:
		// Q2_K: the widened weights carry their 4-bit scale (sc·q), so
		// the block is one sum and one scale (d, at both halves' place),
		// and each half adds its own min.
		part(0, 16, 0, []int{0, 4}, []int{fastSX0, fastSX1})
	case halves:
		part(0, 8, 0, nil, nil)
		part(8, 16, 4, nil, nil)
	case mins:
		part(0, 16, 0, []int{0}, []int{fastSX})
	default: // plain, and by super-blocks
		part(0, 16, 0, nil, nil)
	}
	ws.advance(64)
	step := 4
	if halves {
		step = 8
	}
	ds.advance(step)
	if mins {
		ADDQ(U32(step), dm.base)
	}
	ADDQ(U32(fastBlock), xa)
	DECQ(g)
	JNZ(LabelRef("loop"))
	if super {
		addChains(sacc)
	}
	for r := 0; r < R; r++ {
		for v := 0; v < V; v++ {
			if super {
				VFMADD231PS_BCST(ds.at(r, -step), sacc[0][r][v], og[r][v]) // + d·Σ w·q, the last block's d (the super-block's)
			}
			VFMADD231PS(xat(v, fastDX-fastBlock), og[r][v], out[r][v]) // + dx·(the group's sum), the last block's dx
		}
	}
	TESTQ(nb, nb)
	JNZ(LabelRef("group"))
	outp := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	for r := 0; r < R; r++ {
		for v := 0; v < V; v++ {
			m := Mem{Base: outp, Disp: 64 * r}
			if v == 1 {
				m = Mem{Base: outp, Index: ldo, Scale: 1, Disp: 64 * r}
			}
			VADDPS(m, out[r][v], out[r][v])
			VMOVUPS(out[r][v], m)
		}
	}
	VZEROUPPER()
	RET()
}

// wkinds are the weight types the fast product widens (kernels' fk
// constants, in this order).
type fkind int

const (
	fQ8 fkind = iota
	fI8
	fQ4_0
	fIQ4NL
	fQ4K
	fQ5K
	fQ4_1
	fQ5_0
	fQ5_1
	fQ6K
	fIQ4XS
	fQ3K
	fQ2K
)

var fkindNames = [...]string{"Q8", "I8", "Q4_0", "IQ4_NL", "Q4_K", "Q5_K", "Q4_1", "Q5_0", "Q5_1", "Q6_K", "IQ4_XS", "Q3_K", "Q2_K"}

// legacyLayout is where a 32-element block of nibbles keeps its parts: the
// fp16 min (the _1 types; -1: none), the 32 fifth bits (Q5; -1: none), the
// 16 bytes of nibbles, and its size.
var legacyLayout = map[fkind]struct{ m, qh, qs, size int }{
	fQ4_0:  {-1, -1, 2, 18},
	fIQ4NL: {-1, -1, 2, 18},
	fQ4_1:  {2, -1, 4, 20},
	fQ5_0:  {-1, 2, 6, 22},
	fQ5_1:  {2, 4, 8, 24},
}

// widenText declares a widening kernel (the signature every widen* shares)
// with doc as its comment, and loads its arguments.
func widenText(name, doc string) (dst, ds, w, ldw, rows, nb Register) {
	TEXT(name, NOSPLIT, "func(dst *byte, ds *float32, w *byte, ldw int, rows int, nb int)")
	Pragma("noescape")
	Doc(doc)
	dst = Load(Param("dst"), GP64())
	ds = Load(Param("ds"), GP64())
	w = Load(Param("w"), GP64())
	ldw = Load(Param("ldw"), GP64())
	rows = Load(Param("rows"), GP64())
	nb = Load(Param("nb"), GP64())
	return
}

// widenRowStart begins a widening kernel's row loop (label "row"): p
// the row's first weight, j its count of blocks or super-blocks (n), and
// the inner loop's label.
func widenRowStart(w, n Register, inner string) (p, j GPVirtual) {
	Label("row")
	p = GP64()
	MOVQ(w, p)
	j = GP64()
	MOVQ(n, j)
	Label(inner)
	return p, j
}

// widenNextSuperBlock ends a widening kernel's super-block loop: each
// pointer advances by its step in bytes, and j counts the super-blocks down.
func widenNextSuperBlock(j Register, ptrs []Register, steps []int) {
	for i, p := range ptrs {
		ADDQ(U32(steps[i]), p)
	}
	DECQ(j)
	JNZ(LabelRef("sb"))
}

// widenNextRow ends a widening kernel's row loop (label "row") and the
// function: the next weight row, until rows are done.
func widenNextRow(w, ldw, rows Register) {
	ADDQ(ldw, w)
	DECQ(rows)
	JNZ(LabelRef("row"))
	VZEROUPPER()
	RET()
}

// genWiden emits the widening of k's blocks: per row, nb blocks of 32
// weights as int16 (Q8_0 and I8: the quants sign-extended; Q4_0: nibble-8;
// IQ4_NL: kvalues_iq4nl[nibble]; Q4_1: nibble; Q5_0, Q5_1: nibble plus 16
// for the element's fifth bit, Q5_0 minus 16; element j the low nibble of
// byte j and j+16 its high one) and the block's scale (its fp16 d; I8: 1);
// Q4_1 and Q5_1 also their fp16 min m, at ds + 4·rows·nb.
func genWiden(k fkind) string {
	if k == fQ4K || k == fQ5K {
		return genWidenQK(k == fQ5K)
	}
	if k == fQ6K {
		return genWidenQ6K()
	}
	if k == fIQ4XS {
		return genWidenIQ4XS()
	}
	if k == fQ3K {
		return genWidenQ3K()
	}
	if k == fQ2K {
		return genWidenQ2K()
	}
	name := fmt.Sprintf("widen%s_VNNI", strings.ReplaceAll(fkindNames[k], "_", ""))
	dst, ds, w, ldw, rows, nb := widenText(name, fmt.Sprintf("%s widens nb blocks of each of rows %s weight rows (stride ldw bytes) to int16 at dst (row r, block b at (r·nb+b)·64 bytes) and their scales to float32 at ds (at r·nb+b).", name, fkindNames[k]))
	var one, mask, tbl VecVirtual
	switch k {
	case fI8:
		one = XMM()
		g := GP32()
		MOVL(U32(0x3f800000), g)
		VMOVD(g, one)
	case fQ4_0, fIQ4NL, fQ4_1, fQ5_0, fQ5_1:
		mask, tbl = XMM(), XMM()
		VMOVDQU(avx512.constVec("bytes0f", 0x0f0f0f0f), mask)
		switch k {
		case fIQ4NL:
			VMOVDQU((&dq{a: avx512}).levels(), tbl)
		case fQ4_0:
			VMOVDQU(avx512.constVec("bytes08", 0x08080808), tbl)
		}
	}
	qoff, step := 2, 34
	lay, legacy := legacyLayout[k]
	var b1, spread, bits VecVirtual
	var dmp GPVirtual
	switch {
	case k == fI8:
		qoff, step = 0, 32
	case legacy:
		qoff, step = lay.qs, lay.size
		if lay.m >= 0 {
			dmp = GP64()
			MOVQ(rows, dmp)
			IMULQ(nb, dmp)
			LEAQ(Mem{Base: ds, Index: dmp, Scale: 4}, dmp)
		}
		if lay.qh >= 0 {
			// Byte j of the fifth bits' vector: byte j/8 of qh (VPSHUFB
			// within each lane of the broadcast dword), then bit j%8.
			spread, bits, b1 = YMM(), YMM(), YMM()
			var sp, bt [32]byte
			for j := range sp {
				sp[j], bt[j] = byte(j/8%4), 1<<(j%8)
			}
			VMOVDQU(constBytes("fast_qh_spread", sp[:]), spread)
			VMOVDQU(constBytes("fast_qh_bits", bt[:]), bits)
			VMOVDQU(avx512.constVec("bytes10", 0x10101010), b1)
		}
	}
	p, j := widenRowStart(w, nb, "blk")
	z := ZMM()
	switch {
	case k == fQ8 || k == fI8:
		VPMOVSXBW(Mem{Base: p, Disp: qoff}, z)
	case k == fIQ4NL || k == fQ4_0:
		x, lo, hi := XMM(), XMM(), XMM()
		VMOVDQU(Mem{Base: p, Disp: qoff}, x)
		VPANDD(mask, x, lo)
		VPSRLW(U8(4), x, hi)
		VPANDD(mask, hi, hi)
		if k == fIQ4NL {
			VPSHUFB(lo, tbl, lo)
			VPSHUFB(hi, tbl, hi)
		} else {
			VPSUBB(tbl, lo, lo)
			VPSUBB(tbl, hi, hi)
		}
		y := YMM()
		VINSERTI32X4(U8(1), hi, lo.AsY(), y)
		VPMOVSXBW(y, z)
	default: // Q4_1, Q5_0, Q5_1
		x, lo, hi := XMM(), XMM(), XMM()
		VMOVDQU(Mem{Base: p, Disp: qoff}, x)
		VPANDD(mask, x, lo)
		VPSRLW(U8(4), x, hi)
		VPANDD(mask, hi, hi)
		y := YMM()
		VINSERTI32X4(U8(1), hi, lo.AsY(), y)
		if lay.qh >= 0 {
			h := YMM()
			VPBROADCASTD(Mem{Base: p, Disp: lay.qh}, h)
			VPSHUFB(spread, h, h)
			VPAND(bits, h, h)
			VPCMPEQB(bits, h, h)
			VPAND(b1, h, h)
			VPOR(h, y, y)
			if k == fQ5_0 {
				VPSUBB(b1, y, y) // -16
			}
		}
		VPMOVSXBW(y, z)
	}
	VMOVDQU32(z, Mem{Base: dst})
	if k == fI8 {
		VMOVSS(one, Mem{Base: ds})
	} else {
		h, f := XMM(), XMM()
		g := GP32()
		MOVWLZX(Mem{Base: p}, g)
		VMOVD(g, h)
		VCVTPH2PS(h, f)
		VMOVSS(f, Mem{Base: ds})
	}
	if dmp != nil {
		h, f := XMM(), XMM()
		g := GP32()
		MOVWLZX(Mem{Base: p, Disp: lay.m}, g)
		VMOVD(g, h)
		VCVTPH2PS(h, f)
		VMOVSS(f, Mem{Base: dmp})
		ADDQ(U32(4), dmp)
	}
	ADDQ(U32(step), p)
	ADDQ(U32(64), dst)
	ADDQ(U32(4), ds)
	DECQ(j)
	JNZ(LabelRef("blk"))
	widenNextRow(w, ldw, rows)
	return name
}

// genWidenQK widens Q4_K (or Q5_K): per super-block of 256 (8 blocks of
// 32), the nibbles zero-extended (block 2i the low nibbles of bytes
// 32i..32i+31 of the quants, block 2i+1 their high ones; Q5_K adds bit 2i,
// resp. 2i+1, of the matching byte of qh as 16), ds = d·sc and dm =
// -(dmin·m) for each block's 6-bit scale and min (ggml's
// get_scale_min_k4), each product rounded to float32 as tensor's
// dequantiser rounds it. nb counts blocks of 32 (a multiple of 8).
func genWidenQK(q5 bool) string {
	name := "widenQ4K_VNNI"
	sbBytes, qs := 144, 16
	if q5 {
		name, sbBytes, qs = "widenQ5K_VNNI", 176, 48
	}
	dst, ds, w, ldw, rows, nb := widenText(name, name+" widens nb/8 super-blocks of each of rows weight rows (stride ldw bytes) to int16 at dst (row r, block b at (r·nb+b)·64 bytes), their scales d·sc at ds (at r·nb+b) and -(dmin·m) at ds + 4·rows·nb.")
	// dm = ds + 4·rows·nb
	dm := GP64()
	MOVQ(rows, dm)
	IMULQ(nb, dm)
	LEAQ(Mem{Base: ds, Index: dm, Scale: 4}, dm)
	SHRQ(U8(3), nb) // super-blocks
	mask := YMM()
	VMOVDQU(avx512.constVec("bytes0f", 0x0f0f0f0f), mask)
	var b1 VecVirtual
	if q5 {
		b1 = YMM()
		VMOVDQU(avx512.constVec("bytes01", 0x01010101), b1)
	}
	sign := XMM()
	VMOVSS(avx512.constVec("signmask", 0x80000000), sign)
	p, j := widenRowStart(w, nb, "sb")
	d, dmin := XMM(), XMM()
	g := GP32()
	MOVWLZX(Mem{Base: p}, g)
	VMOVD(g, d)
	VCVTPH2PS(d, d)
	MOVWLZX(Mem{Base: p, Disp: 2}, g)
	VMOVD(g, dmin)
	VCVTPH2PS(dmin, dmin)
	var qh VecVirtual
	if q5 {
		qh = YMM()
		VMOVDQU(Mem{Base: p, Disp: 16}, qh)
	}
	for i := 0; i < 4; i++ {
		y, lo, hi := YMM(), YMM(), YMM()
		VMOVDQU(Mem{Base: p, Disp: qs + 32*i}, y)
		VPAND(mask, y, lo)
		VPSRLW(U8(4), y, hi)
		VPAND(mask, hi, hi)
		if q5 {
			// Bit 2i (1+2i) of each qh byte as 16: the shifts move
			// whole words, the mask keeps bit 0 of each byte.
			for h, v := range []VecVirtual{lo, hi} {
				t := YMM()
				if sh := 2*i + h; sh > 0 {
					VPSRLW(U8(sh), qh, t)
					VPAND(b1, t, t)
				} else {
					VPAND(b1, qh, t)
				}
				VPSLLW(U8(4), t, t)
				VPOR(t, v, v)
			}
		}
		zl, zh := ZMM(), ZMM()
		VPMOVZXBW(lo, zl)
		VPMOVZXBW(hi, zh)
		VMOVDQU32(zl, Mem{Base: dst, Disp: 128 * i})
		VMOVDQU32(zh, Mem{Base: dst, Disp: 128*i + 64})
	}
	sc := func(b int) Mem { return Mem{Base: p, Disp: 4 + b} }
	for jj := 0; jj < 8; jj++ {
		s, m, t := GP32(), GP32(), GP32()
		if jj < 4 {
			MOVBLZX(sc(jj), s)
			ANDL(U32(63), s)
			MOVBLZX(sc(jj+4), m)
			ANDL(U32(63), m)
		} else {
			MOVBLZX(sc(jj+4), s)
			ANDL(U32(15), s)
			MOVBLZX(sc(jj-4), t)
			SHRL(U8(6), t)
			SHLL(U8(4), t)
			ORL(t, s)
			MOVBLZX(sc(jj+4), m)
			SHRL(U8(4), m)
			MOVBLZX(sc(jj), t)
			SHRL(U8(6), t)
			SHLL(U8(4), t)
			ORL(t, m)
		}
		fs, fm := XMM(), XMM()
		VXORPS(fs, fs, fs)
		VCVTSI2SSL(s, fs, fs)
		VMULSS(d, fs, fs)
		VMOVSS(fs, Mem{Base: ds, Disp: 4 * jj})
		VXORPS(fm, fm, fm)
		VCVTSI2SSL(m, fm, fm)
		VMULSS(dmin, fm, fm)
		VXORPS(sign, fm, fm)
		VMOVSS(fm, Mem{Base: dm, Disp: 4 * jj})
	}
	widenNextSuperBlock(j, []Register{p, dst, ds, dm}, []int{sbBytes, 8 * 64, 32, 32})
	widenNextRow(w, ldw, rows)
	return name
}

// genWidenQ6K widens Q6_K: per super-block of 256 (8 blocks of 32), block
// 4n+t of half n the 6-bit quants minus 32 (t = 0: low nibbles of ql[64n:],
// 1: of ql[64n+32:], 2, 3: their high nibbles; the top two bits from
// qh[32n:] at bits 2t), sign-extended, and two scales a block, d·sc[2j+h]
// for its 16-weight halves (ggml's d·sc, rounded to float32 as tensor's
// dequantiser rounds it; ds two floats a block). nb counts blocks of 32.
func genWidenQ6K() string {
	name := "widenQ6K_VNNI"
	dst, ds, w, ldw, rows, nb := widenText(name, name+" widens nb/8 Q6_K super-blocks of each of rows weight rows (stride ldw bytes) to int16 at dst (row r, block b at (r·nb+b)·64 bytes) and the scales of the 16-weight halves to float32 at ds (at 2·(r·nb+b)+h).")
	SHRQ(U8(3), nb) // super-blocks
	m0f, m03, c32 := YMM(), YMM(), YMM()
	VMOVDQU(avx512.constVec("bytes0f", 0x0f0f0f0f), m0f)
	VMOVDQU(avx512.constVec("bytes03", 0x03030303), m03)
	VMOVDQU(avx512.constVec("bytes20", 0x20202020), c32)
	p, j := widenRowStart(w, nb, "sb")
	for n := 0; n < 2; n++ {
		l0, l1, h := YMM(), YMM(), YMM()
		VMOVDQU(Mem{Base: p, Disp: 64 * n}, l0)
		VMOVDQU(Mem{Base: p, Disp: 64*n + 32}, l1)
		VMOVDQU(Mem{Base: p, Disp: 128 + 32*n}, h)
		for t := 0; t < 4; t++ {
			q, hb := YMM(), YMM()
			src := l0
			if t%2 == 1 {
				src = l1
			}
			if t < 2 {
				VPAND(m0f, src, q)
			} else {
				VPSRLW(U8(4), src, q)
				VPAND(m0f, q, q)
			}
			if t > 0 {
				VPSRLW(U8(2*t), h, hb)
				VPAND(m03, hb, hb)
			} else {
				VPAND(m03, h, hb)
			}
			VPSLLW(U8(4), hb, hb)
			VPOR(hb, q, q)
			VPSUBB(c32, q, q)
			z := ZMM()
			VPMOVSXBW(q, z)
			VMOVDQU32(z, Mem{Base: dst, Disp: 64 * (4*n + t)})
		}
	}
	d, sc := ZMM(), ZMM()
	g := GP32()
	MOVWLZX(Mem{Base: p, Disp: 208}, g)
	dx := XMM()
	VMOVD(g, dx)
	VCVTPH2PS(dx, dx)
	VBROADCASTSS(dx, d)
	VPMOVSXBD(Mem{Base: p, Disp: 192}, sc)
	VCVTDQ2PS(sc, sc)
	VMULPS(sc, d, sc) // d·sc, rounded
	VMOVUPS(sc, Mem{Base: ds})
	widenNextSuperBlock(j, []Register{p, dst, ds}, []int{210, 8 * 64, 64})
	widenNextRow(w, ldw, rows)
	return name
}

// genWidenIQ4XS widens IQ4_XS: per super-block of 256 (8 blocks of 32),
// block ib kvalues_iq4nl of the nibbles of its 16 bytes (low nibbles the
// first 16 weights), and its scale d·(ls-32), ls the 6-bit scale from
// scales_l's nibble and scales_h's bit pair (rounded as tensor's
// dequantiser rounds it). nb counts blocks of 32.
func genWidenIQ4XS() string {
	name := "widenIQ4XS_VNNI"
	dst, ds, w, ldw, rows, nb := widenText(name, name+" widens nb/8 IQ4_XS super-blocks of each of rows weight rows (stride ldw bytes) to int16 at dst (row r, block b at (r·nb+b)·64 bytes) and their scales to float32 at ds (at r·nb+b).")
	SHRQ(U8(3), nb) // super-blocks
	mask, tbl := XMM(), XMM()
	VMOVDQU(avx512.constVec("bytes0f", 0x0f0f0f0f), mask)
	VMOVDQU((&dq{a: avx512}).levels(), tbl)
	p, j := widenRowStart(w, nb, "sb")
	d := XMM()
	g := GP32()
	MOVWLZX(Mem{Base: p}, g)
	VMOVD(g, d)
	VCVTPH2PS(d, d)
	sh := GP32()
	MOVWLZX(Mem{Base: p, Disp: 2}, sh)
	for ib := 0; ib < 8; ib++ {
		x, lo, hi := XMM(), XMM(), XMM()
		VMOVDQU(Mem{Base: p, Disp: 8 + 16*ib}, x)
		VPANDD(mask, x, lo)
		VPSRLW(U8(4), x, hi)
		VPANDD(mask, hi, hi)
		VPSHUFB(lo, tbl, lo)
		VPSHUFB(hi, tbl, hi)
		y := YMM()
		VINSERTI32X4(U8(1), hi, lo.AsY(), y)
		z := ZMM()
		VPMOVSXBW(y, z)
		VMOVDQU32(z, Mem{Base: dst, Disp: 64 * ib})
		ls := iq4XSLs(Mem{Base: p, Disp: 4}, sh, ib)
		f := XMM()
		VXORPS(f, f, f)
		VCVTSI2SSL(ls, f, f)
		VMULSS(f, d, f) // d·(ls-32)
		VMOVSS(f, Mem{Base: ds, Disp: 4 * ib})
	}
	widenNextSuperBlock(j, []Register{p, dst, ds}, []int{136, 8 * 64, 32})
	widenNextRow(w, ldw, rows)
	return name
}

// genWidenQ3K widens Q3_K: per super-block of 256 (8 blocks of 32), block
// 4n+t the 2-bit quants at bits 2t of bytes 32+32n.., less 4 unless bit
// 4n+t of the matching hmask byte is set, times their half's 6-bit scale
// less 32 (|(sc-32)·q| ≤ 128), and the super-block's d at every block's
// scale (ds): d·(sc-32) and its product with q are exact in float32, so
// the plain kernels, one scale a block, give the dequantiser's products.
func genWidenQ3K() string {
	name := "widenQ3K_VNNI"
	dst, ds, w, ldw, rows, nb := widenText(name, name+" widens nb/8 Q3_K super-blocks of each of rows weight rows (stride ldw bytes) to int16 times their 16-weight half's scale at dst (row r, block b at (r·nb+b)·64 bytes) and the super-block's d to float32 at ds (at r·nb+b).")
	SHRQ(U8(3), nb) // super-blocks
	m03, m01, c4 := YMM(), YMM(), YMM()
	VMOVDQU(avx512.constVec("bytes03", 0x03030303), m03)
	VMOVDQU(avx512.constVec("bytes01", 0x01010101), m01)
	VMOVDQU(avx512.constVec("bytes04", 0x04040404), c4)
	// Block k's halves are sub-blocks 2k and 2k+1: VPERMW's indices of
	// their scales, each in the lanes of its half.
	var idx [8]VecVirtual
	for k := range idx {
		ix := make([]uint16, 32)
		for i := range ix {
			ix[i] = uint16(2*k + i/16)
		}
		idx[k] = ZMM()
		VMOVDQU32(avx512.constWords(fmt.Sprintf("q3k_scale%d", k), ix), idx[k])
	}
	p, j := widenRowStart(w, nb, "sb")
	// The scales: four words from a0 = bytes 96..99, a1 = 100..103 and
	// tmp = 104..107, 16 bytes sc, then as words sc-32.
	a0, a1, tmp := GP32(), GP32(), GP32()
	MOVL(Mem{Base: p, Disp: 96}, a0)
	MOVL(Mem{Base: p, Disp: 100}, a1)
	MOVL(Mem{Base: p, Disp: 104}, tmp)
	word := func(a GPVirtual, ashift, tshift int) GPVirtual {
		x, y := GP32(), GP32()
		MOVL(a, x)
		if ashift > 0 {
			SHRL(U8(ashift), x)
		}
		ANDL(U32(0x0f0f0f0f), x)
		MOVL(tmp, y)
		if tshift > 0 {
			SHRL(U8(tshift), y)
		}
		ANDL(U32(0x03030303), y)
		SHLL(U8(4), y)
		ORL(y, x)
		return x
	}
	sx := XMM()
	VMOVD(word(a0, 0, 0), sx)
	VPINSRD(U8(1), word(a1, 0, 2), sx, sx)
	VPINSRD(U8(2), word(a0, 4, 4), sx, sx)
	VPINSRD(U8(3), word(a1, 4, 6), sx, sx)
	sw := ZMM()
	VPMOVZXBW(sx, sw.AsY())
	VPSUBW(avx512.constVec("w32", 0x00200020), sw, sw) // sc-32; the upper half unused
	hm := YMM()
	VMOVDQU(Mem{Base: p}, hm)
	for n := 0; n < 2; n++ {
		q := YMM()
		VMOVDQU(Mem{Base: p, Disp: 32 + 32*n}, q)
		for t := 0; t < 4; t++ {
			v, h := YMM(), YMM()
			if t > 0 {
				VPSRLW(U8(2*t), q, v)
				VPAND(m03, v, v)
			} else {
				VPAND(m03, q, v)
			}
			if sh := 4*n + t; sh > 0 {
				VPSRLW(U8(sh), hm, h)
				VPAND(m01, h, h)
			} else {
				VPAND(m01, hm, h)
			}
			VPSLLW(U8(2), h, h) // 4 where the high bit is set
			VPOR(h, v, v)
			VPSUBB(c4, v, v)
			z, scw := ZMM(), ZMM()
			VPMOVSXBW(v, z)
			VPERMW(sw, idx[4*n+t], scw)
			VPMULLW(scw, z, z)
			VMOVDQU32(z, Mem{Base: dst, Disp: 64 * (4*n + t)})
		}
	}
	g := GP32()
	MOVWLZX(Mem{Base: p, Disp: 108}, g)
	dx, d := XMM(), YMM()
	VMOVD(g, dx)
	VCVTPH2PS(dx, dx)
	VBROADCASTSS(dx, d)
	VMOVUPS(d, Mem{Base: ds})
	widenNextSuperBlock(j, []Register{p, dst, ds}, []int{110, 8 * 64, 32})
	widenNextRow(w, ldw, rows)
	return name
}

// genWidenQ2K widens Q2_K: per super-block of 256 (8 blocks of 32), block
// 4n+j the 2-bit quants at bits 2j of bytes 16+32n.., zero-extended and
// times their half's 4-bit scale sc&15 (at most 45), the super-block's d at
// both halves' scales (ds), and each half's -(dmin·(sc>>4)) (dm at ds +
// 8·rows·nb: two a block), rounded as tensor's dequantiser rounds it
// (d·(sc&15)·q is exact in float32 either way). nb counts blocks of 32.
func genWidenQ2K() string {
	name := "widenQ2K_VNNI"
	dst, ds, w, ldw, rows, nb := widenText(name, name+" widens nb/8 Q2_K super-blocks of each of rows weight rows (stride ldw bytes) to int16 times their 16-weight half's scale at dst (row r, block b at (r·nb+b)·64 bytes), the super-block's d to float32 at ds (at 2·(r·nb+b)+h) and the halves' mins, negated, at ds + 8·rows·nb.")
	dm := GP64()
	MOVQ(rows, dm)
	IMULQ(nb, dm)
	LEAQ(Mem{Base: ds, Index: dm, Scale: 8}, dm)
	SHRQ(U8(3), nb) // super-blocks
	m03 := YMM()
	VMOVDQU(avx512.constVec("bytes03", 0x03030303), m03)
	m15w, sign, halfShift := ZMM(), ZMM(), ZMM()
	VMOVDQU32(avx512.constVec("w15", 0x000f000f), m15w)
	VMOVDQU32(avx512.constVec("signmask", 0x80000000), sign)
	sh := make([]uint16, 32)
	for i := 16; i < 32; i++ {
		sh[i] = 8 // the second half's scale is the high byte of the pair
	}
	VMOVDQU32(avx512.constWords("q2k_halfshift", sh), halfShift)
	p, j := widenRowStart(w, nb, "sb")
	for n := 0; n < 2; n++ {
		q := YMM()
		VMOVDQU(Mem{Base: p, Disp: 16 + 32*n}, q)
		for t := 0; t < 4; t++ {
			v := YMM()
			if t > 0 {
				VPSRLW(U8(2*t), q, v)
				VPAND(m03, v, v)
			} else {
				VPAND(m03, q, v)
			}
			z := ZMM()
			VPMOVZXBW(v, z)
			// Block 4n+t's halves are sub-blocks 8n+2t and 8n+2t+1: their
			// scale bytes' low nibbles, a word in each lane of its half.
			scw := ZMM()
			VPBROADCASTW(Mem{Base: p, Disp: 8*n + 2*t}, scw)
			VPSRLVW(halfShift, scw, scw)
			VPANDD(m15w, scw, scw)
			VPMULLW(scw, z, z)
			VMOVDQU32(z, Mem{Base: dst, Disp: 64 * (4*n + t)})
		}
	}
	sc, mn, d, dmin := ZMM(), ZMM(), ZMM(), ZMM()
	VPMOVZXBD(Mem{Base: p}, sc)
	VPSRLD(U8(4), sc, mn)
	VCVTDQ2PS(mn, mn)
	g := GP32()
	x := XMM()
	MOVWLZX(Mem{Base: p, Disp: 80}, g)
	VMOVD(g, x)
	VCVTPH2PS(x, x)
	VBROADCASTSS(x, d)
	MOVWLZX(Mem{Base: p, Disp: 82}, g)
	VMOVD(g, x)
	VCVTPH2PS(x, x)
	VBROADCASTSS(x, dmin)
	VMULPS(mn, dmin, mn) // dmin·(sc>>4)
	VPXORD(sign, mn, mn) // negated
	VMOVUPS(d, Mem{Base: ds})
	VMOVUPS(mn, Mem{Base: dm})
	widenNextSuperBlock(j, []Register{p, dst, ds, dm}, []int{84, 8 * 64, 64, 64})
	widenNextRow(w, ldw, rows)
	return name
}

// finiteNonzero returns the mask of the lanes of s that are finite and
// not zero (false for NaN).
func finiteNonzero(a arch, s VecVirtual) OpmaskVirtual {
	as := ZMM()
	VANDPS(a.constVec("absmask", 0x7fffffff), s, as)
	kq, kz := K(), K()
	VCMPPS(U8(cmpLEOQ), a.constVec("maxfloat", math.Float32bits(math.MaxFloat32)), as, kq)
	VCMPPS(U8(cmpNEQOQ), a.constVec("zero", 0), s, kz)
	KANDW(kz, kq, kq)
	return kq
}

// genWidenCB emits the widening of a codebook i-quant k (kernels'
// widenDecoded): per super-block of 256, the integers d/F divides its
// weights into (the decoder's ints mode), 32 int16s a block at dst, and
// d/F at ds for each of its 8 blocks. nb counts blocks of 32 (a multiple
// of 8). Without it each tile was decoded to float32 and divided back.
func genWidenCB(k dqkind) string {
	name := fmt.Sprintf("widen%s_VNNI", strings.ReplaceAll(k.String(), "_", ""))
	dst, ds, w, ldw, rows, nb := widenText(name, fmt.Sprintf("%s widens nb/8 super-blocks of each of rows %s weight rows (stride ldw bytes) to int16 at dst (row r, block b at (r·nb+b)·64 bytes) and d/F to float32 at ds (at r·nb+b): the integers and scales kernels.widenDecoded makes.", name, k))
	a := avx512
	g := &dq{a: a, ints: true, local: AllocLocal(128)}
	g.iqr = g.iqBases(k)
	F := iqKinds[k].factor
	inv := XMM()
	VMOVSS(a.constVec(fmt.Sprintf("inv%g", F), math.Float32bits(1/F)), inv)
	SHRQ(U8(3), nb) // super-blocks
	bytes := dqBlock[k].bytes
	p, j := widenRowStart(w, nb, "sb")
	g.src, g.dst = p, dst
	g.iquant(k)
	d := XMM()
	VMULSS(inv, g.dx, d)
	y := YMM()
	VBROADCASTSS(d, y)
	VMOVUPS(y, Mem{Base: ds})
	widenNextSuperBlock(j, []Register{p, dst, ds}, []int{bytes, 8 * 64, 32})
	widenNextRow(w, ldw, rows)
	return name
}

// genFastTable generates the fast kernels and their tables fastVNNI,
// widenVNNI and widenCBVNNI.
func genFastTable(tb *strings.Builder) {
	R, V := fastShape()
	var full, one, fullM, oneM, fullH, oneH, fullHM, oneHM, fullS, oneS []string
	for _, y := range []bool{false, true} { // kernels.fastFamily's index V·y + v-1
		for v := 1; v <= V; v++ {
			for _, fv := range []fastVariant{fvPlain, fvMins, fvHalves, fvHalvesMins, fvSuper} {
				genFast(R, v, fv, y)
				genFast(1, v, fv, y)
			}
			fullHM = append(fullHM, fastHMGroup.add(fastName(R, v, fvHalvesMins, y)))
			oneHM = append(oneHM, fastHMGroup.add(fastName(1, v, fvHalvesMins, y)))
			full = append(full, fastGroup.add(fastName(R, v, fvPlain, y)))
			one = append(one, fastGroup.add(fastName(1, v, fvPlain, y)))
			fullM = append(fullM, fastMGroup.add(fastName(R, v, fvMins, y)))
			oneM = append(oneM, fastMGroup.add(fastName(1, v, fvMins, y)))
			fullH = append(fullH, fastHGroup.add(fastName(R, v, fvHalves, y)))
			oneH = append(oneH, fastHGroup.add(fastName(1, v, fvHalves, y)))
			fullS = append(fullS, fastGroup.add(fastName(R, v, fvSuper, y)))
			oneS = append(oneS, fastGroup.add(fastName(1, v, fvSuper, y)))
		}
	}
	fmt.Fprintf(tb, "\nvar fastVNNI = fastFamily{R: %d, V: %d, full: []fastKernel{%s}, one: []fastKernel{%s}, fullM: []fastMKernel{%s}, oneM: []fastMKernel{%s}, fullH: []fastHKernel{%s}, oneH: []fastHKernel{%s}, fullHM: []fastHMKernel{%s}, oneHM: []fastHMKernel{%s}, fullS: []fastKernel{%s}, oneS: []fastKernel{%s}}\n",
		R, V, strings.Join(full, ", "), strings.Join(one, ", "), strings.Join(fullM, ", "), strings.Join(oneM, ", "), strings.Join(fullH, ", "), strings.Join(oneH, ", "), strings.Join(fullHM, ", "), strings.Join(oneHM, ", "), strings.Join(fullS, ", "), strings.Join(oneS, ", "))
	var widen []string
	for k := fQ8; k <= fQ2K; k++ {
		widen = append(widen, widenGroup.add(genWiden(k)))
	}
	fmt.Fprintf(tb, "\nvar widenVNNI = [...]widenKernel{%s}\n", strings.Join(widen, ", "))
	fmt.Fprintf(tb, "\nvar widenCBVNNI = [numDQ]widenKernel{\n")
	for k := dqkind(0); k < numDQ; k++ {
		if isIQ(k) {
			fmt.Fprintf(tb, "\tdq%s: %s,\n", k, widenGroup.add(genWidenCB(k)))
		}
	}
	fmt.Fprintf(tb, "}\n")
	fmt.Fprintf(tb, "\nconst fastStoreVNNI = %s\n", fastStoreGroup.add(genFastStore(false)))
	fmt.Fprintf(tb, "\nconst fastStoreScaledVNNI = %s\n", fastStoreGroup.add(genFastStore(true)))
	fmt.Fprintf(tb, "\nconst quant16VNNI = %s\n", quant16Group.add(genQuant16()))
	fmt.Fprintf(tb, "\nconst quantS16VNNI = %s\n", quantS16Group.add(genQuantScaled()))
}

var fastStoreGroup = newGroup("fastStoreKernel", "dst *float32, ldd int, tiles *float32, l0 int, l1 int, m0 int, m1 int, sc *float32", "dst, ldd, tiles, l0, l1, m0, m1, sc")

// genFastStore emits kernels.fastScatter for one group of 16 tokens: the
// tiles hold up to 32 rows of 16 lanes ([row][lane], 64 bytes a row); two
// chunks of 16 rows (row masks m0 and m1, m1 zero for none) are each
// transposed in registers (64 shuffles for 256 floats) and token l's 16
// rows, for l0 ≤ l < l1, stored at dst + l·ldd (+64 bytes for the second
// chunk), or, scaled, added to dst times the rows' scales at sc (the
// product rounded, then the sum, as the Go twin).
func genFastStore(scaled bool) string {
	name := "fastStore_VNNI"
	if scaled {
		name = "fastStoreScaled_VNNI"
	}
	TEXT(name, NOSPLIT, "func(dst *float32, ldd int, tiles *float32, l0 int, l1 int, m0 int, m1 int, sc *float32)")
	Pragma("noescape")
	if scaled {
		Doc(name + " adds tiles' rows of lanes l0..l1-1, times their scales at sc, to dst + l·ldd, transposed, rows masked by m0 and m1 (kernels.fastScatter with scales).")
	} else {
		Doc(name + " stores tiles' rows of lanes l0..l1-1 to dst + l·ldd, transposed, rows masked by m0 and m1 (kernels.fastScatter).")
	}
	dst := Load(Param("dst"), GP64())
	ldd := Load(Param("ldd"), GP64())
	tiles := Load(Param("tiles"), GP64())
	l0 := Load(Param("l0"), GP64())
	l1 := Load(Param("l1"), GP64())
	var sc Register
	if scaled {
		sc = Load(Param("sc"), GP64())
	}
	for c := 0; c < 2; c++ {
		m := GP64()
		Load(Param([]string{"m0", "m1"}[c]), m)
		if c == 1 {
			TESTQ(m, m)
			JZ(LabelRef("done"))
		}
		k := K()
		KMOVW(m.As32(), k)
		var r [16]VecVirtual
		for i := range r {
			r[i] = ZMM()
			VMOVUPS(Mem{Base: tiles, Disp: 64 * (16*c + i)}, r[i])
		}
		// Pairs of rows interleaved, then quads: c4[m][q] holds in its
		// 128-bit lane j the rows 4q..4q+3 of token 4j+m.
		var t [16]VecVirtual
		for i := 0; i < 16; i += 2 {
			t[i], t[i+1] = ZMM(), ZMM()
			VUNPCKLPS(r[i+1], r[i], t[i])
			VUNPCKHPS(r[i+1], r[i], t[i+1])
		}
		var c4 [4][4]VecVirtual
		for q := 0; q < 4; q++ {
			for h := 0; h < 2; h++ {
				a, b := t[4*q+h], t[4*q+2+h]
				c4[2*h][q], c4[2*h+1][q] = ZMM(), ZMM()
				VUNPCKLPD(b, a, c4[2*h][q])
				VUNPCKHPD(b, a, c4[2*h+1][q])
			}
		}
		// Then the 4×4 of 128-bit lanes of each m: token 4j+m.
		var out [16]VecVirtual
		for mm := 0; mm < 4; mm++ {
			x := [4]VecVirtual{ZMM(), ZMM(), ZMM(), ZMM()}
			VSHUFF32X4(U8(0x44), c4[mm][1], c4[mm][0], x[0])
			VSHUFF32X4(U8(0xee), c4[mm][1], c4[mm][0], x[1])
			VSHUFF32X4(U8(0x44), c4[mm][3], c4[mm][2], x[2])
			VSHUFF32X4(U8(0xee), c4[mm][3], c4[mm][2], x[3])
			for j := 0; j < 4; j++ {
				o := ZMM()
				VSHUFF32X4(U8([]uint8{0x88, 0xdd}[j%2]), x[2+j/2], x[j/2], o)
				out[4*j+mm] = o
			}
		}
		var s VecVirtual
		if scaled {
			s = ZMM()
			VMOVUPS_Z(Mem{Base: sc, Disp: 64 * c}, k, s)
		}
		p := GP64()
		MOVQ(dst, p)
		for l := 0; l < 16; l++ {
			skip := fmt.Sprintf("skip%d_%d", c, l)
			CMPQ(l0, U8(l))
			JG(LabelRef(skip))
			CMPQ(l1, U8(l))
			JLE(LabelRef(skip))
			at := Mem{Base: p, Disp: 64 * c}
			if scaled {
				d := ZMM()
				VMULPS(s, out[l], out[l])
				VMOVUPS_Z(at, k, d)
				VADDPS(out[l], d, d)
				VMOVUPS(d, k, at)
			} else {
				VMOVUPS(out[l], k, at)
			}
			Label(skip)
			if l < 15 {
				ADDQ(ldd, p)
			}
		}
	}
	Label("done")
	VZEROUPPER()
	RET()
	return name
}

var (
	quant16Group  = newGroup("quant16Kernel", "x *float32, nb int, dst *byte", "x, nb, dst")
	quantS16Group = newGroup("quantS16Kernel", "x *float32, nb int, dst *byte, ds *float32", "x, nb, dst, ds")
)

// packWords returns the 32 dwords of r[0] and r[1] as int16s, saturated.
func packWords(r [2]VecVirtual) VecVirtual {
	q, h := ZMM(), YMM()
	VPMOVSDW(r[0], q.AsY())
	VPMOVSDW(r[1], h)
	VINSERTI64X4(U8(1), h, q, q)
	return q
}

// genQuantScaled emits kernels.quantizeScaled: per block b of 32 float32s
// at x, q = x·(1/ds[b]) (exact for weights that are ds[b] times integers),
// rounded to the nearest, stored as 32 int16s at dst (64 bytes a block);
// all zero where ds[b] is zero or not finite. One scalar division a block:
// two VDIVPS a block cost more than the block's decoding.
func genQuantScaled() string {
	a := avx512
	name := "quantS16_VNNI"
	TEXT(name, NOSPLIT, "func(x *float32, nb int, dst *byte, ds *float32)")
	Pragma("noescape")
	Doc(name + " divides nb blocks of 32 float32s at x by their scales at ds and stores the quotients as 32 int16s a block at dst (kernels.quantizeScaled).")
	x := Load(Param("x"), GP64())
	n := Load(Param("nb"), GP64())
	dst := Load(Param("dst"), GP64())
	ds := Load(Param("ds"), GP64())
	one := XMM()
	VMOVSS(a.constVec("one", math.Float32bits(1)), one)
	TESTQ(n, n)
	JZ(LabelRef("done"))
	Label("loop")
	s := ZMM()
	VBROADCASTSS(Mem{Base: ds}, s)
	kq := finiteNonzero(a, s)
	r, id := XMM(), ZMM()
	VDIVSS(Mem{Base: ds}, one, r)
	VBROADCASTSS(r, id)
	var v [2]VecVirtual
	for u := range v {
		v[u] = ZMM()
		VMULPS(Mem{Base: x, Disp: 64 * u}, id, v[u])
		VCVTPS2DQ_Z(v[u], kq, v[u])
	}
	VMOVDQU64(packWords(v), Mem{Base: dst})
	ADDQ(U32(128), x)
	ADDQ(U32(64), dst)
	ADDQ(U32(4), ds)
	DECQ(n)
	JNZ(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
	return name
}

// genQuant16 emits kernels.quantizeGroup16 for the nb blocks of one token,
// in groups of 8 blocks from the first (the last group the blocks left):
// per group of float32s at x, d = max|x|/32767 (NaN if any x is NaN),
// q = round(x/d) halfway away from zero (degenerate groups as genQuant's
// blocks), each block's 16 pairs of int16 quants scattered to dst + 64p
// (the token's lane of its group's block), d to dst + fastDX and the
// block's Σq (whole, first and last 16) as float32 to dst + fastSX,
// fastSX0, fastSX1; x advances 128 bytes and dst fastBlock a block.
func genQuant16() string {
	a := avx512
	name := "quant16_VNNI"
	TEXT(name, NOSPLIT, "func(x *float32, nb int, dst *byte)")
	Pragma("noescape")
	Doc(name + " quantises nb blocks of 32 float32s at x, with one scale for each 8 blocks, to int16 pairs at dst+64p, the scale at dst+1024 and the block's sums of quants at dst+1088.., a block every 1280 bytes of dst (kernels.fastActs' lane of one token).")
	x := Load(Param("x"), GP64())
	n := Load(Param("nb"), GP64())
	dst := Load(Param("dst"), GP64())

	absMask := a.constVec("absmask", 0x7fffffff)
	signMask := a.constVec("signmask", 0x80000000)
	one := a.constVec("one", math.Float32bits(1))
	half := a.constVec("half", math.Float32bits(0.5))
	c32767 := a.constVec("c32767", math.Float32bits(32767))
	tiny := a.constVec("minscale", minScale)
	fmax := a.constVec("maxfloat", math.Float32bits(math.MaxFloat32))
	idx := GLOBL("fast_scatter64", RODATA|NOPTR)
	for i := 0; i < 16; i++ {
		DATA(4*i, U32(uint32(64*i)))
	}
	ix := ZMM()
	VMOVDQU32(idx, ix)

	TESTQ(n, n)
	JZ(LabelRef("done"))
	Label("group")
	g := GP64()
	MOVQ(U32(fastScaleBlocks), g)
	CMPQ(n, g)
	CMOVQLT(n, g) // the group's blocks
	SUBQ(g, n)
	// The group's max |x|, and whether any x is NaN.
	m, kn := ZMM(), K()
	VXORPS(m, m, m)
	KXORW(kn, kn, kn)
	xp, c := GP64(), GP64()
	MOVQ(x, xp)
	MOVQ(g, c)
	Label("max")
	for o := 0; o < 128; o += 64 {
		v, k := ZMM(), K()
		VMOVUPS(Mem{Base: xp, Disp: o}, v)
		VCMPPS(U8(cmpUNORDQ), v, v, k)
		KORW(k, kn, kn)
		VANDPS(absMask, v, v)
		VMAXPS(v, m, m)
	}
	ADDQ(U32(128), xp)
	DECQ(c)
	JNZ(LabelRef("max"))
	my := m.AsY()
	ty := YMM()
	VEXTRACTF64X4(U8(1), m, ty)
	VMAXPS(ty, my, my)
	mx, t := m.AsX(), XMM()
	VEXTRACTF32X4(U8(1), my, t)
	VMAXPS(t, mx, mx)
	VPERMILPS(U8(0x4E), mx, t)
	VMAXPS(t, mx, mx)
	VPERMILPS(U8(0xB1), mx, t)
	VMAXPS(t, mx, mx)
	d := ZMM()
	VBROADCASTSS(mx, d)
	KORTESTW(kn, kn)
	JZ(LabelRef("finite"))
	VMOVUPS(a.constVec("nan", 0x7fc00000), d) // NaN: d NaN, no quants
	Label("finite")
	VDIVPS(c32767, d, d) // d = amax/32767
	id := ZMM()
	VMOVUPS(one, id)
	VDIVPS(d, id, id) // id = 1/d
	kq, k2, kd := K(), K(), K()
	VCMPPS(U8(cmpGEOQ), tiny, d, kq)
	VCMPPS(U8(cmpLEOQ), fmax, d, k2)
	KANDW(k2, kq, kq)
	VCMPPS(U8(cmpNLTUQ), tiny, d, kd)
	VMOVAPS_Z(d, kd, d)
	Label("block")
	VMOVSS(d.AsX(), Mem{Base: dst, Disp: fastDX})
	var r [2]VecVirtual
	for u := range r {
		v := ZMM()
		VMOVUPS(Mem{Base: x, Disp: 64 * u}, v)
		VMULPS(id, v, v)
		r[u] = a.roundHalfAway(v, absMask, signMask, one, half)
		VCVTPS2DQ_Z(r[u], kq, r[u])
	}
	q := packWords(r)
	// Σq over each half and the whole: the pairs' sums (VPMADDWD by
	// ones: dwords 0-7 the first 16 quants, 8-15 the last), then the
	// lanes' (exact in int32 and in float32).
	sq := ZMM()
	VPMADDWD(a.constVec("ones16", 0x00010001), q, sq)
	hsum := func(y VecVirtual) VecVirtual { // the 8 dwords of a ymm, in lane 0
		sxm, tx := XMM(), XMM()
		VEXTRACTI32X4(U8(1), y, sxm)
		VPADDD(sxm, y.AsX(), sxm)
		VPSHUFD(U8(0x4E), sxm, tx)
		VPADDD(tx, sxm, sxm)
		VPSHUFD(U8(0xB1), sxm, tx)
		VPADDD(tx, sxm, sxm)
		return sxm
	}
	shi := YMM()
	VEXTRACTI64X4(U8(1), sq, shi)
	s0, s1 := hsum(sq.AsY().(VecVirtual)), hsum(shi)
	st := XMM()
	VPADDD(s1, s0, st)
	for _, o := range []struct {
		v   VecVirtual
		off int
	}{{st, fastSX}, {s0, fastSX0}, {s1, fastSX1}} {
		VCVTDQ2PS(o.v, o.v)
		VMOVSS(o.v, Mem{Base: dst, Disp: o.off})
	}
	ks := K()
	KXNORW(ks, ks, ks)
	VPSCATTERDD(q, ks, Mem{Base: dst, Index: ix, Scale: 1})
	ADDQ(U32(128), x)
	ADDQ(U32(fastBlock), dst)
	DECQ(g)
	JNZ(LabelRef("block"))
	TESTQ(n, n)
	JNZ(LabelRef("group"))
	Label("done")
	VZEROUPPER()
	RET()
	return name
}

// constBytes returns read-only bytes.
func constBytes(name string, b []byte) Mem {
	if m, ok := constVecs[name]; ok {
		return m
	}
	m := GLOBL(name, RODATA|NOPTR)
	for i, v := range b {
		DATA(i, U8(v))
	}
	constVecs[name] = m
	return m
}

package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// wkind is a weight encoding the float kernels read, converting to float32
// in registers.
type wkind int

const (
	wF32  wkind = iota
	wF16        // VCVTPH2PS
	wBF16       // zero-extend to 32 bits, shift left 16
	wI8         // sign-extend to 32 bits, convert (scales applied by the caller)
	wQ8         // Q8_0 block: fp16 d, 32 int8; dequantised in registers
)

var wkindNames = [...]string{"F32", "F16", "BF16", "I8", "Q8"}

func (k wkind) String() string { return wkindNames[k] }

// stepElems is how many weights of a row one loop step consumes.
func stepElems(a arch, k wkind) int {
	if k == wQ8 {
		return 32
	}
	return a.V
}

// stepBytes is how many weight bytes of a row one loop step consumes.
func stepBytes(a arch, k wkind) int {
	switch k {
	case wF32:
		return 4 * a.V
	case wF16, wBF16:
		return 2 * a.V
	case wI8:
		return a.V
	}
	return 34
}

// dotStepElems is how many weights of a row one step of a dot kernel
// consumes: whole 64-byte cache lines of float weights (F32: one vector,
// F16 and BF16: two on zmm, four on ymm; I8: four zmm vectors), two Q8_0
// blocks (68 bytes): a step of half a line per row kept fewer bytes in
// flight and decoded slower (figures: bench/README.md). Unrolling changes
// no result: the vectors of a step go into the same accumulators, in order.
func dotStepElems(a arch, k wkind) int {
	if k == wQ8 {
		return 2 * 32
	}
	return max(1, 64/(stepBytes(a, k))) * a.V
}

// dotStepBytes is how many weight bytes of a row one step consumes.
func dotStepBytes(a arch, k wkind) int {
	if k == wQ8 {
		return 2 * 34
	}
	return dotStepElems(a, k) / a.V * stepBytes(a, k)
}

// dotShape is the register tile of a family: R weight rows by up to T
// tokens; R×T accumulators must fit the register file next to R weight
// vectors (and R Q8_0 scale vectors).
type dotShape struct{ R, T int }

func dotShapes(a arch, k wkind) dotShape {
	switch {
	case a.zmm && k == wQ8:
		return dotShape{4, 5} // 20 acc + 4 w + 4 d + x = 29 of 32
	case a.zmm:
		return dotShape{4, 6} // 24 acc + 4 w + x = 29 of 32
	case k == wQ8:
		return dotShape{2, 3} // 6 acc + 2 w + 2 d + x + tmp = 12 of 16
	}
	return dotShape{4, 2} // 8 acc + 4 w + x = 13 of 16
}

func dotName(a arch, k wkind, R, T int) string {
	return fmt.Sprintf("dot%s_%dx%d_%s", k, R, T, a.name)
}

// dotPrefillName names the kernel of a prefill's full tiles: R rows, T
// tokens, without the next rows' prefetch (genDotPrefill).
func dotPrefillName(a arch, k wkind, R, T int) string {
	return fmt.Sprintf("dot%s_%dx%dp_%s", k, R, T, a.name)
}

// genDotPrefill emits genDot's kernel for the full tiles of a prefill,
// without the prefetch of the next rows: prefill reuses a tile's rows for
// every group of tokens, so the next rows' lines would only be fetched
// early once, and the prefetches took load slots from the products (Intel
// Xeon: F32 and F16 products faster without; figures: bench/README.md).
// Same arithmetic, so the same bits.
func genDotPrefill(a arch, k wkind, R, T int) {
	genDotNamed(a, k, R, T, dotPrefillName(a, k, R, T), false)
}

// genDot emits the dot-form kernel for R rows of W ([out][in] layout) and T
// tokens: out[t·ldo/4+r] += Σ_{k < n·E} W[r][k]·x[t][k], E = dotStepElems,
// summed in registers over spans of sumSpan elements from k = 0, each span's
// sum added to out in turn. Each weight vector is loaded and converted once
// per step and used for all T tokens; each token vector once and used for
// all R rows.
func genDot(a arch, k wkind, R, T int) { genDotNamed(a, k, R, T, dotName(a, k, R, T), true) }

// genDotNamed is genDot under the given name, with or without the next
// rows' prefetch (genDot, genDotPrefill).
func genDotNamed(a arch, k wkind, R, T int, name string, prefetch bool) {
	TEXT(name, NOSPLIT, "func(w *byte, ldw int, x *float32, ldx int, n int, out *float32, ldo int, scale *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds Σ W[r][k]·x[t][k] over n steps of %d elements, span by span of %d elements, to out[t][r] for %d %s weight rows (stride ldw bytes), %d float32 token vectors (stride ldx bytes) and output rows of stride ldo bytes (I8: times scale[r]; other kinds ignore scale).",
		name, dotStepElems(a, k), sumSpan, R, k, T))
	rows := R
	if prefetch {
		rows = prefetchRows(R)
	}
	w := newStrided(Load(Param("w"), GP64()), Load(Param("ldw"), GP64()), rows)
	x := newStrided(Load(Param("x"), GP64()), Load(Param("ldx"), GP64()), T)
	n := Load(Param("n"), GP64())
	out := newStrided(Load(Param("out"), GP64()), Load(Param("ldo"), GP64()), T)

	acc := a.newAccs(T, R)
	span := newSpanCounter(sumSpan / dotStepElems(a, k))
	if pipelined(a, k, R, T) {
		genDotPipelined(a, k, w, x, n, acc, span, out, prefetch, a.q8Area(k, R))
		a.finish(acc, out, k == wI8)
		return
	}
	TESTQ(n, n)
	JZ(LabelRef("reduce"))
	Label("loop")
	if prefetch {
		a.prefetchNextRows(k, w, R)
	}
	a.dotLoopStep(k, w, x, acc)
	a.next(n, "reduce", span, "loop", acc, out, k == wI8)

	a.finish(acc, out, k == wI8)
}

// dotLoopStep emits one step of a dot-form kernel (dotStepElems weights of
// each row of acc[0], each token of acc) and advances w and x past it:
// each weight vector loaded and converted once and used for every token,
// each token vector once for every row. The span kernels and the piece
// kernels (genDotAcc) share it, so their accumulators get the same chains.
// Their Q8_0 scales stay in registers (q8Scale): through the stack
// (q8Scales), which the decode kernels gain by, a tile of 5 tokens ran 2-5 %
// slower (bench/README.md).
func (a arch) dotLoopStep(k wkind, w, x *strided, acc [][]VecVirtual) {
	T, R := len(acc), len(acc[0])
	E := dotStepElems(a, k)
	var d []VecVirtual
	for u := 0; u < E/a.V; u++ {
		if k == wQ8 && u*a.V%32 == 0 {
			// A new block: its scale d for every row.
			d = make([]VecVirtual, R)
			for r := range d {
				d[r] = a.q8Scale(w.at(r, u*a.V/32*34))
			}
		}
		wv := make([]VecVirtual, R)
		for r := range wv {
			wv[r] = a.vec()
			a.loadW(k, w, r, u, wv[r])
			if k == wQ8 {
				VMULPS(d[r], wv[r], wv[r])
			}
		}
		for t := 0; t < T; t++ {
			xv := a.vec()
			VMOVUPS(x.at(t, 4*a.V*u), xv)
			for r := 0; r < R; r++ {
				VFMADD231PS(wv[r], xv, acc[t][r])
			}
		}
	}
	w.advance(dotStepBytes(a, k))
	x.advance(4 * E)
}

// prefetchNextRows prefetches this step's lines of the R rows after the
// tile's (where the next call starts; prefetchRows) into L2: a tile ahead is
// 4 rows of 6144 F16 weights, 48 KiB, which a 32 KiB L1 (Zen 4) does not
// hold until the next call (figures: bench/README.md).
func (a arch) prefetchNextRows(k wkind, w *strided, R int) {
	for r := 0; r < R; r++ {
		for off := 0; off < dotStepBytes(a, k); off += 64 {
			PREFETCHT1(w.at(r+R, off))
		}
	}
}

// loadW loads vector u of the current step of weight row r as float32
// (Q8_0: vector u of the step's blocks, before their scales).
func (a arch) loadW(k wkind, w *strided, r, u int, dst VecVirtual) {
	switch k {
	case wF32:
		VMOVUPS(w.at(r, 4*a.V*u), dst)
	case wF16:
		VCVTPH2PS(w.at(r, 2*a.V*u), dst)
	case wBF16:
		VPMOVZXWD(w.at(r, 2*a.V*u), dst)
		VPSLLD(U8(16), dst, dst)
	case wI8:
		VPMOVSXBD(w.at(r, a.V*u), dst)
		VCVTDQ2PS(dst, dst)
	case wQ8:
		b, v := u*a.V/32, u*a.V%32 // block of the step, element in it
		VPMOVSXBD(w.at(r, 34*b+2+v), dst)
		VCVTDQ2PS(dst, dst)
	}
}

// q8Area is a Q8_0 decode kernel's stack area on zmm (genDotPipelined): a
// float32 scale for each of its R rows (q8Scales); no area (nil Base)
// otherwise.
func (a arch) q8Area(k wkind, R int) Mem {
	if !a.zmm || k != wQ8 {
		return Mem{}
	}
	return AllocLocal((4*R + 7) / 8 * 8) // frames in whole words
}

// q8Scales returns the fp16 scales d of R rows' blocks at off as float32
// for mulBy: with an area each converted from memory into its slot (no
// shuffle, where a zmm broadcast and conversion take Zen 4's shuffle and
// multiply pipes and Intel's port 5: bench/README.md), else q8Scale's
// registers.
func (a arch) q8Scales(w *strided, R, off int, area Mem) []Op {
	d := make([]Op, R)
	for r := range d {
		if area.Base == nil {
			d[r] = a.q8Scale(w.at(r, off))
			continue
		}
		h := XMM()
		VCVTPH2PS(w.at(r, off), h) // d and the block's first 6 quants' bytes
		VMOVSS(h, area.Offset(4*r))
		d[r] = area.Offset(4 * r)
	}
	return d
}

// mulBy multiplies v by d: a register, or on zmm a float32 in memory read
// as the multiply's broadcast operand.
func (a arch) mulBy(d Op, v VecVirtual) {
	m, ok := d.(Mem)
	switch {
	case !ok:
		VMULPS(d, v, v)
	case a.zmm:
		VMULPS_BCST(m, v, v)
	default:
		panic("mulBy: a scale in memory on ymm")
	}
}

// q8Scale broadcasts the fp16 scale d at m to every float32 lane.
func (a arch) q8Scale(m Mem) VecVirtual {
	d := a.vec()
	if a.zmm {
		h := YMM()
		VPBROADCASTW(m, h)
		VCVTPH2PS(h, d)
	} else {
		h := XMM()
		VPBROADCASTW(m, h)
		VCVTPH2PS(h, d)
	}
	return d
}

// pipelined reports whether the dot kernel of R rows and T tokens loads
// each step's weights one step ahead (genDotPipelined): decode-sized
// kernels (T ≤ 2), when the registers (32 zmm, 16 ymm) hold the
// accumulators, a step's weights as stored, their float32 conversions (one
// at a time for one token, a row's each for two), the Q8_0 scales, a token
// vector and, where a raw register holds two vectors, the extracted upper
// half. On ymm that leaves the four-row tiles of F32, F16 and BF16, Q8_0's
// two-row tile and the single-row kernels.
func pipelined(a arch, k wkind, R, T int) bool {
	if T > 2 {
		return false
	}
	limit := 32
	if !a.zmm {
		limit = 16
	}
	per := a.rawPer(k)
	regs := R*T + R*dotStepElems(a, k)/a.V/per + 1 // accumulators, raw weights, token vector
	switch {
	case T == 1:
		regs++ // one conversion at a time
	case k != wF32: // F32 is multiplied as loaded
		regs += R
	}
	if k == wQ8 {
		regs += R // scales
	}
	if per > 1 {
		regs++ // upper half
	}
	return regs <= limit
}

// genDotPipelined is the loop of a decode-sized dot kernel with its weight
// loads one step ahead of the arithmetic: step j converts the weights that
// step j-1 loaded into registers, and loads those of step j+1 in their
// place. A load that misses the cache then waits without an instruction of
// the convert-multiply-add chain waiting on it, so the core keeps issuing
// the loads (and next rows' prefetches) behind it, and the stream reaches
// the read loop's bandwidth (figures: bench/README.md). The arithmetic is
// genDot's, instruction for instruction, so the sums are the same bits.
// The last step loads nothing (the next step's bytes may be past the end
// of the weights).
func genDotPipelined(a arch, k wkind, w, x *strided, n Register, acc [][]VecVirtual, span *spanCounter, out *strided, prefetch bool, area Mem) {
	R := len(acc[0])
	E := dotStepElems(a, k)
	nr := E / a.V / a.rawPer(k)
	raw := make([][]VecVirtual, R) // raw[r][i]: raw register i of row r's step
	for r := range raw {
		raw[r] = make([]VecVirtual, nr)
		for i := range raw[r] {
			raw[r][i] = a.rawReg(k)
		}
	}
	TESTQ(n, n)
	JZ(LabelRef("reduce"))
	for r := range raw {
		for i := range raw[r] {
			a.loadRaw(k, w.at(r, a.rawOffset(k, i)), raw[r][i])
		}
	}
	DECQ(n)
	JZ(LabelRef("last"))
	Label("loop")
	if prefetch {
		a.prefetchNextRows(k, w, R)
	}
	a.dotStep(k, w, x, raw, acc, true, area)
	w.advance(dotStepBytes(a, k))
	x.advance(4 * E)
	a.next(n, "last", span, "loop", acc, out, k == wI8)
	Label("last")
	a.dotStep(k, w, x, raw, acc, false, area)
}

// dotStep is one step of genDotPipelined: converts raw into float32
// weights (Q8_0: times the block's d) and adds their products with the
// tokens into acc, in genDot's order; when next is set, each raw register
// is reloaded from the next step after its last use. One token converts,
// multiplies and reloads row by row (the fewest registers); two convert
// a vector of every row first, then multiply each token. area is
// q8Area's.
func (a arch) dotStep(k wkind, w, x *strided, raw [][]VecVirtual, acc [][]VecVirtual, next bool, area Mem) {
	R, T := len(raw), len(acc)
	per := a.rawPer(k)
	nv := len(raw[0]) * per
	reload := func(r, u int) {
		if next && u%per == per-1 {
			i := u / per
			a.loadRaw(k, w.at(r, dotStepBytes(a, k)+a.rawOffset(k, i)), raw[r][i])
		}
	}
	var d []Op
	for u := 0; u < nv; u++ {
		if k == wQ8 && u*a.V%32 == 0 {
			d = a.q8Scales(w, R, u*a.V/32*34, area)
		}
		convert := func(r int) VecVirtual {
			v := a.convertRaw(k, raw[r][u/per], u%per)
			if k == wQ8 {
				a.mulBy(d[r], v)
			}
			return v
		}
		if T == 1 {
			xv := a.vec()
			VMOVUPS(x.at(0, 4*a.V*u), xv)
			for r := 0; r < R; r++ {
				VFMADD231PS(convert(r), xv, acc[0][r])
				reload(r, u) // after the FMA: F32 multiplies raw as is
			}
			continue
		}
		wv := make([]VecVirtual, R)
		for r := range wv {
			wv[r] = convert(r)
			if k != wF32 {
				reload(r, u)
			}
		}
		for t := 0; t < T; t++ {
			xv := a.vec()
			VMOVUPS(x.at(t, 4*a.V*u), xv)
			for r := 0; r < R; r++ {
				VFMADD231PS(wv[r], xv, acc[t][r])
			}
		}
		if k == wF32 {
			for r := range wv {
				reload(r, u)
			}
		}
	}
}

// rawPer is how many weight vectors one raw register holds: on ymm two
// F16 or BF16 vectors (a 32-byte load, converted half by half) and two
// Q8_0 vectors (16 bytes), so that a tile's step fits 16 registers; else
// one.
func (a arch) rawPer(k wkind) int {
	if !a.zmm && (k == wF16 || k == wBF16 || k == wQ8) {
		return 2
	}
	return 1
}

// rawReg allocates a register for one raw register's weights as stored:
// a full vector of F32, half of one of F16 or BF16 (two halves on ymm), a
// quarter of int8 (two quarters of Q8_0 on ymm).
func (a arch) rawReg(k wkind) VecVirtual {
	switch {
	case k == wF32, (k == wF16 || k == wBF16) && a.rawPer(k) > 1:
		return a.vec()
	case k == wF16 || k == wBF16:
		return YMM()
	}
	return XMM()
}

// rawOffset is the byte offset of raw register i of a step in a weight row.
func (a arch) rawOffset(k wkind, i int) int {
	u := i * a.rawPer(k) // its first vector
	switch k {
	case wF32:
		return 4 * a.V * u
	case wF16, wBF16:
		return 2 * a.V * u
	case wI8:
		return a.V * u
	}
	b, v := u*a.V/32, u*a.V%32
	return 34*b + 2 + v
}

// loadRaw loads one vector of weights as stored: on zmm with EVEX moves,
// which can name registers 16-31; on ymm with VEX ones (an int8 vector is
// 8 bytes there).
func (a arch) loadRaw(k wkind, m Mem, dst VecVirtual) {
	switch {
	case k == wF32:
		VMOVUPS(m, dst)
	case a.zmm:
		VMOVDQU32(m, dst)
	case k == wF16 || k == wBF16 || a.rawPer(k) > 1:
		VMOVDQU(m, dst)
	default:
		VMOVQ(m, dst)
	}
}

// convertRaw returns the weights of part p of raw as float32 (before
// Q8_0's scale): the arithmetic of loadW, from a register.
func (a arch) convertRaw(k wkind, raw VecVirtual, p int) VecVirtual {
	if k == wF32 {
		return raw
	}
	var src Op = raw
	switch {
	case a.rawPer(k) == 1:
	case k == wQ8: // two 8-byte vectors in an xmm
		if p == 1 {
			h := XMM()
			VPSHUFD(U8(0xEE), raw, h)
			src = h
		}
	default: // two 16-byte vectors in a ymm
		src = raw.AsX()
		if p == 1 {
			h := XMM()
			VEXTRACTI128(U8(1), raw, h)
			src = h
		}
	}
	v := a.vec()
	switch k {
	case wF16:
		VCVTPH2PS(src, v)
	case wBF16:
		VPMOVZXWD(src, v)
		VPSLLD(U8(16), v, v)
	case wI8, wQ8:
		VPMOVSXBD(src, v)
		VCVTDQ2PS(v, v)
	}
	return v
}

// Accumulator modes of the F32 prefill kernels that cut a span in pieces
// (genDotAcc): the first piece starts from zero, the middle ones resume,
// the last resumes and reduces; all but the last store their
// accumulators.
const (
	accInit = iota
	accMid
	accEnd
	numAccModes
)

var accModeNames = [numAccModes]string{"I", "M", "E"}

// dotAccName names the piece kernel of kind k and mode m.
func dotAccName(a arch, k wkind, m, R, T int) string {
	return fmt.Sprintf("dot%sacc%s_%dx%d_%s", k, accModeNames[m], R, T, a.name)
}

// genDotAcc emits the prefill kernel of kind k (F32, F16, BF16) for one
// piece of a span: the R×T accumulators acc[t][r] (16 lanes each, at
// scale + 64·(t·R + r) bytes) start from zero (accInit) or from memory,
// take n ≥ 1 steps of the dot kernel's multiply-adds in its order, and are
// stored back, or (accEnd) reduced into out as the dot kernel reduces a
// span. A span's pieces run in order therefore give each lane of each
// accumulator the dot kernel's chain, and out its bits; the caller keeps
// every piece inside one span.
func genDotAcc(a arch, k wkind, m, R, T int) {
	name := dotAccName(a, k, m, R, T)
	TEXT(name, NOSPLIT, "func(w *byte, ldw int, x *float32, ldx int, n int, out *float32, ldo int, scale *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s is one piece of a span of the %dx%d %s kernel: n steps of %d elements into the accumulators at scale (%s), W rows ldw bytes apart, token vectors ldx bytes apart, output rows ldo bytes apart.",
		name, R, T, k, dotStepElems(a, k), [...]string{"from zero, stored", "loaded, stored", "loaded, reduced into out"}[m]))
	w := newStrided(Load(Param("w"), GP64()), Load(Param("ldw"), GP64()), R)
	x := newStrided(Load(Param("x"), GP64()), Load(Param("ldx"), GP64()), T)
	n := Load(Param("n"), GP64())
	accp := Load(Param("scale"), GP64())
	acc := make([][]VecVirtual, T)
	for t := range acc {
		acc[t] = make([]VecVirtual, R)
		for r := range acc[t] {
			acc[t][r] = a.vec()
			if m == accInit {
				a.zero(acc[t][r])
			} else {
				VMOVUPS(Mem{Base: accp, Disp: 64 * (t*R + r)}, acc[t][r])
			}
		}
	}
	Label("loop")
	a.dotLoopStep(k, w, x, acc)
	DECQ(n)
	JNZ(LabelRef("loop"))
	if m == accEnd {
		out := newStrided(Load(Param("out"), GP64()), Load(Param("ldo"), GP64()), T)
		a.reduceAdd(acc, out, nil)
	} else {
		for t := range acc {
			for r := range acc[t] {
				VMOVUPS(acc[t][r], Mem{Base: accp, Disp: 64 * (t*R + r)})
			}
		}
	}
	VZEROUPPER()
	RET()
}

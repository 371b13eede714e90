package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The integer kernels multiply int8 weights (Q8_0 blocks, or plain int8
// rows of xAI's QuantizedWeight8bit) by activations already quantised to
// int8 in blocks of 32 (kernels.quantizeQ8). Per token the activation
// buffer holds the quants, 32 bytes a block, and, in a second array with
// the same stride, the block scale repeated 8 times (32 bytes a block) so
// that it can be a full-width memory operand in either vector width.
//
// AVX-512 VNNI: VPDPBUSD multiplies unsigned by signed bytes. The weights
// are made unsigned by flipping their sign bit (w+128, one XOR per weight
// vector shared by all tokens) and the extra 128·Σx is removed exactly by
// starting each lane's accumulator at -128·(sum of that lane's four
// activations), which the quantiser stores next to the quants (the "cr"
// array). The int32 lanes then hold exact partial sums Σ x·w of four
// products, as llama.cpp's mul_sum_i8_pairs lanes do.
//
// AVX-VNNI (VEX, ymm): the same as AVX-512 VNNI, one block a step. avo
// knows only VPDPBUSD's EVEX form; the generator rewrites these kernels'
// register-only VPDPBUSD lines into VEX bytes after register allocation
// (vex.go), which needs every operand in Y0-Y15.
//
// AVX2: VPMADDUBSW with llama.cpp's sign transfer (|w| unsigned times x
// carrying w's sign; |w| ≤ 128 and |x| ≤ 127 cannot saturate the int16
// pair sums), then VPMADDWD by ones to int32.
//
// Either way the int32 lanes are converted to float32, multiplied by the
// block's activation scale and weight scale (Q8_0) and accumulated in
// float32; I8 leaves the per-channel weight scale to the caller.

type ikind int

const (
	iQ8 ikind = iota
	iI8
)

func (k ikind) String() string { return [...]string{"Q8", "I8"}[k] }

// intShape is the register tile: R rows × T tokens.
func intShape(a arch, k ikind) dotShape {
	if a.zmm {
		return dotShape{4, 4} // 16 acc + 4 w + 4 d + 0x80 + index + tmp = 27 of 32
	}
	return dotShape{2, 3} // 6 acc + 2 w + 2 |w| + 2 d + ones + x + tmp = 15 of 16
}

// intBlocks is how many 32-weight blocks one step consumes.
func intBlocks(a arch) int {
	if a.zmm {
		return 2
	}
	return 1
}

func intName(a arch, k ikind, R, T int) string {
	suffix := a.name
	if a.zmm {
		suffix = "VNNI"
	}
	return fmt.Sprintf("int%s_%dx%d_%s", k, R, T, suffix)
}

func genInt(a arch, k ikind, R, T int) {
	name := intName(a, k, R, T)
	TEXT(name, NOSPLIT, "func(w *byte, ldw int, xq *byte, dx *float32, cr *int32, ldx int, n int, out *float32, ldo int, scale *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds Σ_blocks dx[t][b]·%sΣ_j W[r][b][j]·xq[t][b][j] over n steps of %d blocks, span by span of %d blocks, to out[t][r] for %d %s weight rows (stride ldw bytes), %d quantised token vectors (xq, dx and cr with stride ldx bytes; cr is used by VNNI only) and output rows of stride ldo bytes (I8: times scale[r]; Q8 ignores scale).",
		name, map[ikind]string{iQ8: "dw[r][b]·", iI8: ""}[k], intBlocks(a), sumSpan/32, R, k, T))
	w := newStrided(Load(Param("w"), GP64()), Load(Param("ldw"), GP64()), prefetchRows(R))
	ldx := Load(Param("ldx"), GP64())
	xq := newStrided(Load(Param("xq"), GP64()), ldx, T)
	dx := &strided{base: Load(Param("dx"), GP64()), stride: ldx, stride3: xq.stride3}
	var cr *strided
	if a.zmm || a.vexVNNI {
		cr = &strided{base: Load(Param("cr"), GP64()), stride: ldx, stride3: xq.stride3}
	}
	n := Load(Param("n"), GP64())
	out := newStrided(Load(Param("out"), GP64()), Load(Param("ldo"), GP64()), T)

	acc := a.newAccs(T, R)
	var konst, idx VecVirtual
	if a.zmm {
		konst = a.bcast32(0x80808080) // the sign bit of every byte
		// VPERMW index gathering the two blocks' fp16 scales (words 0
		// and 17 of a step) into words 0-7 and 8-15.
		idx = ZMM()
		VMOVDQU32(a.constWords("q8scaleidx", []uint16{0, 0, 0, 0, 0, 0, 0, 0, 17, 17, 17, 17, 17, 17, 17, 17}), idx)
	} else if a.vexVNNI {
		konst = a.bcast32(0x80808080)
	} else {
		konst = a.bcast32(0x00010001) // int16 ones
	}
	span := newSpanCounter(sumSpan / 32 / intBlocks(a))
	TESTQ(n, n)
	JZ(LabelRef("reduce"))
	Label("loop")
	if a.zmm {
		a.intStepVNNI(k, w, xq, dx, cr, acc, konst, idx)
	} else if a.vexVNNI {
		a.intStepVEXVNNI(k, w, xq, dx, cr, acc, konst)
	} else {
		a.intStepAVX2(k, w, xq, dx, acc, konst)
	}
	wstep := 32 * intBlocks(a)
	if k == iQ8 {
		wstep = 34 * intBlocks(a)
	}
	w.advance(wstep)
	xq.advance(32 * intBlocks(a))
	dx.advance(32 * intBlocks(a))
	if cr != nil {
		cr.advance(32 * intBlocks(a))
	}
	a.next(n, "reduce", span, "loop", acc, out, k == iI8)

	a.finish(acc, out, k == iI8)
}

// accumulateInt converts the int32 lane sums s to float32 and adds them,
// times the activation scale dx (and Q8's weight scale d[r]), to acc[r].
func accumulateInt(k ikind, s VecVirtual, dx Mem, d []VecVirtual, r int, acc []VecVirtual) {
	VCVTDQ2PS(s, s)
	if k == iQ8 {
		VMULPS(dx, s, s)
		VFMADD231PS(d[r], s, acc[r])
	} else {
		VFMADD231PS(dx, s, acc[r])
	}
}

func (a arch) intStepVNNI(k ikind, w, xq, dx, cr *strided, acc [][]VecVirtual, k80, idx VecVirtual) {
	R := len(acc[0])
	wv := make([]VecVirtual, R)
	d := make([]VecVirtual, R)
	for r := 0; r < R; r++ {
		PREFETCHT0(w.at(r+R, 0)) // the next tile's rows (prefetchRows)
		wv[r] = ZMM()
		if k == iQ8 {
			// Two blocks: quants at +2 and +36, fp16 scales at +0 and +34.
			VMOVDQU32(w.at(r, 2), wv[r].AsY())
			VINSERTI64X4(U8(1), w.at(r, 36), wv[r], wv[r])
			VPXORD(k80, wv[r], wv[r])
			d[r] = ZMM()
			VPERMW(w.at(r, 0), idx, d[r])
			VCVTPH2PS(d[r].AsY(), d[r])
		} else {
			VPXORD(w.at(r, 0), k80, wv[r])
		}
	}
	for t := range acc {
		for r := 0; r < R; r++ {
			s := ZMM()
			VMOVDQU32(cr.at(t, 0), s)
			VPDPBUSD(xq.at(t, 0), wv[r], s) // exact Σ x·w per lane
			accumulateInt(k, s, dx.at(t, 0), d, r, acc[t])
		}
	}
}

// intStepVEXVNNI is intStepVNNI on ymm registers, one block a step, with
// VPDPBUSD on registers only (vex.go rewrites it into its VEX encoding).
func (a arch) intStepVEXVNNI(k ikind, w, xq, dx, cr *strided, acc [][]VecVirtual, k80 VecVirtual) {
	R := len(acc[0])
	wv := make([]VecVirtual, R)
	d := make([]VecVirtual, R)
	for r := 0; r < R; r++ {
		wv[r] = YMM()
		off := 0
		if k == iQ8 {
			off = 2
			d[r] = a.q8Scale(w.at(r, 0))
		}
		VPXOR(w.at(r, off), k80, wv[r]) // w+128: unsigned
	}
	for t := range acc {
		xv, c := YMM(), YMM()
		VMOVDQU(xq.at(t, 0), xv)
		VMOVDQU(cr.at(t, 0), c)
		for r := 0; r < R; r++ {
			s := YMM()
			VMOVDQA(c, s)
			VPDPBUSD(xv, wv[r], s) // exact Σ x·w per lane
			accumulateInt(k, s, dx.at(t, 0), d, r, acc[t])
		}
	}
}

func (a arch) intStepAVX2(k ikind, w, xq, dx *strided, acc [][]VecVirtual, ones VecVirtual) {
	R := len(acc[0])
	wv := make([]VecVirtual, R)
	aw := make([]VecVirtual, R)
	d := make([]VecVirtual, R)
	for r := 0; r < R; r++ {
		wv[r] = YMM()
		off := 0
		if k == iQ8 {
			off = 2
			d[r] = a.q8Scale(w.at(r, 0))
		}
		VMOVDQU(w.at(r, off), wv[r])
		aw[r] = YMM()
		VPABSB(wv[r], aw[r])
	}
	for t := range acc {
		xv := YMM()
		VMOVDQU(xq.at(t, 0), xv)
		for r := 0; r < R; r++ {
			s := YMM()
			VPSIGNB(wv[r], xv, s)   // x·sign(w)
			VPMADDUBSW(s, aw[r], s) // |w|·x·sign(w) in int16 pairs
			VPMADDWD(ones, s, s)    // int32 sums of four products
			accumulateInt(k, s, dx.at(t, 0), d, r, acc[t])
		}
	}
}

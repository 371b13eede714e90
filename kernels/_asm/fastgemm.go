package main

import (
	"fmt"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The fast-precision GEMM kernels (kernels/fast.go) multiply int8 weights
// in their file layout (Q8_0 blocks, or [out, in] int8 rows) by activations
// quantised per token in blocks of 32 and interleaved across tokens: the 32
// lanes of a vector are 16 tokens, each lane holding 4 consecutive quants
// of its token. Per group of 4 inputs, 4 weight bytes of a row are
// broadcast to every lane (w+128 by VPXORD with a broadcast memory operand,
// unsigned) and one VPDPBUSD adds the 4 products of all 16 tokens at once,
// so the weights need no repacking and no horizontal sums: a row's lane t
// ends a block holding token t's exact Σ w·x, which is converted to float32
// once per block and accumulated, times the block's scales, lane-wise.
// Every lane runs the same instruction sequence whatever the tile, so a
// token's bits do not depend on which tokens share its vector.
//
// Activation block (640 bytes, per vector of 16 tokens): 8 groups × 64
// bytes of quants, then 16 float32 scales dx, then 16 int32 corrections
// -128·Σ quants (which turn Σ (w+128)·x into Σ w·x exactly).
const (
	fastBlock = 640
	fastDX    = 512
	fastCR    = 576
)

var fastGroup = newGroup("fastKernel", "w *byte, ldw int, xa *byte, ldx int, nb int, out *float32, ldo int", "w, ldw, xa, ldx, nb, out, ldo")

// fastShape is the register tile: R rows × V vectors of 16 tokens
// (R·V int32 and R·V float32 accumulators, V activation vectors).
func fastShape(k ikind) (R, V int) { return 4, 2 }

func fastName(k ikind, R, V int) string {
	return fmt.Sprintf("fast%s_%dx%d_VNNI", k, R, V)
}

func genFast(k ikind, R, V int) {
	name := fastName(k, R, V)
	TEXT(name, NOSPLIT, "func(w *byte, ldw int, xa *byte, ldx int, nb int, out *float32, ldo int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds to out[v·ldo/4 + 16r + l] the sum over nb blocks of %s·Σ_j W[r][b][j]·xq[v][l][b][j] for %d %s weight rows (stride ldw bytes) and %d interleaved activation vectors of 16 tokens (stride ldx bytes; kernels.fastActs).",
		name, map[ikind]string{iQ8: "dw[r][b]·dx[v][l][b]", iI8: "dx[v][l][b]"}[k], R, k, V))
	w := newStrided(Load(Param("w"), GP64()), Load(Param("ldw"), GP64()), R)
	xa := Load(Param("xa"), GP64())
	ldx := Load(Param("ldx"), GP64())
	nb := Load(Param("nb"), GP64())
	outp := Load(Param("out"), GP64())
	ldo := Load(Param("ldo"), GP64())
	xat := func(v, off int) Mem {
		if v == 0 {
			return Mem{Base: xa, Disp: off}
		}
		return Mem{Base: xa, Index: ldx, Scale: 1, Disp: off}
	}
	out := make([][]VecVirtual, R)
	for r := range out {
		out[r] = make([]VecVirtual, V)
		for v := range out[r] {
			out[r][v] = ZMM()
			VXORPS(out[r][v], out[r][v], out[r][v])
		}
	}
	k80 := avx512.bcast32(0x80808080) // the sign bit of every byte
	qoff, wstep := 0, 32
	if k == iQ8 {
		qoff, wstep = 2, 34
	}
	Label("loop")
	acc := make([][]VecVirtual, R)
	for r := range acc {
		acc[r] = make([]VecVirtual, V)
		for v := range acc[r] {
			acc[r][v] = ZMM()
			VMOVDQU32(xat(v, fastCR), acc[r][v])
		}
	}
	for g := 0; g < 8; g++ {
		xv := make([]VecVirtual, V)
		for v := range xv {
			xv[v] = ZMM()
			VMOVDQU32(xat(v, 64*g), xv[v])
		}
		for r := 0; r < R; r++ {
			wv := ZMM()
			VPXORD_BCST(w.at(r, qoff+4*g), k80, wv) // 4 weights, +128: unsigned, in every lane
			for v := 0; v < V; v++ {
				VPDPBUSD(xv[v], wv, acc[r][v]) // exact Σ x·w per token lane
			}
		}
	}
	for r := 0; r < R; r++ {
		var dw VecVirtual
		if k == iQ8 {
			h := YMM()
			VPBROADCASTW(w.at(r, 0), h)
			dw = ZMM()
			VCVTPH2PS(h, dw)
		}
		for v := 0; v < V; v++ {
			VCVTDQ2PS(acc[r][v], acc[r][v])
			if k == iQ8 {
				c := ZMM()
				VMULPS(xat(v, fastDX), dw, c) // dw·dx, rounded
				VFMADD231PS(c, acc[r][v], out[r][v])
			} else {
				VFMADD231PS(xat(v, fastDX), acc[r][v], out[r][v])
			}
		}
	}
	w.advance(wstep)
	ADDQ(U32(fastBlock), xa)
	DECQ(nb)
	JNZ(LabelRef("loop"))
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

// genFastTable generates the fast kernels and their table fastVNNI.
func genFastTable(tb *strings.Builder) {
	fmt.Fprintf(tb, "\nvar fastVNNI = [...]fastFamily{\n")
	for k := iQ8; k <= iI8; k++ {
		R, V := fastShape(k)
		var full, one []string
		for v := 1; v <= V; v++ {
			genFast(k, R, v)
			genFast(k, 1, v)
			full = append(full, fastGroup.add(fastName(k, R, v)))
			one = append(one, fastGroup.add(fastName(k, 1, v)))
		}
		fmt.Fprintf(tb, "\tik%s: {R: %d, V: %d, full: []fastKernel{%s}, one: []fastKernel{%s}},\n",
			k, R, V, strings.Join(full, ", "), strings.Join(one, ", "))
	}
	fmt.Fprintf(tb, "}\n")
}

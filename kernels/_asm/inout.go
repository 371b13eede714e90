package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The [in][out] layout (Haiku's w, xAI's checkpoint) has output columns
// contiguous, so the natural product is the axpy form: for K consecutive
// input rows, acc[t][c] += Σ_k x[t][k]·W[k][c] over a strip of columns,
// with the K·T activation values broadcast in registers. Int8 weights take
// the float path here (VPMOVSXBD, VCVTDQ2PS, FMA) with exact float32
// activations: VPDPBUSD needs four consecutive reduction-axis bytes per
// lane, which in this layout would cost a 4-row byte interleave per vector.

func inoutShape(a arch) dotShape {
	if a.zmm {
		return dotShape{4, 6} // K=4 rows: 24 broadcasts + 4 w + acc = 29 of 32
	}
	return dotShape{4, 2} // 8 broadcasts + 4 w + acc = 13 of 16
}

func inoutName(a arch, k wkind, K, T int) string {
	return fmt.Sprintf("inout%s_%dx%d_%s", k, K, T, a.name)
}

func genInOut(a arch, k wkind, K, T int) {
	name := inoutName(a, k, K, T)
	TEXT(name, NOSPLIT, "func(acc *float32, lda int, w *byte, ldw int, xs *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes acc[t][c] += Σ_k xs[t·%d+k]·W[k][c] for %d %s weight rows (stride ldw bytes), %d accumulator rows (stride lda bytes) and n·%d columns.",
		name, K, K, k, T, a.V))
	acc := newStrided(Load(Param("acc"), GP64()), Load(Param("lda"), GP64()), T)
	w := newStrided(Load(Param("w"), GP64()), Load(Param("ldw"), GP64()), prefetchRows(K, T))
	xs := Load(Param("xs"), GP64())
	n := Load(Param("n"), GP64())

	xb := make([][]VecVirtual, T)
	for t := range xb {
		xb[t] = make([]VecVirtual, K)
		for j := range xb[t] {
			xb[t][j] = a.vec()
			VBROADCASTSS(Mem{Base: xs, Disp: 4 * (t*K + j)}, xb[t][j])
		}
	}
	TESTQ(n, n)
	JZ(LabelRef("done"))
	Label("loop")
	if w.rows > K {
		for j := 0; j < K; j++ {
			PREFETCHT0(w.at(j+K, 0))
		}
	}
	wv := make([]VecVirtual, K)
	for j := range wv {
		wv[j] = a.vec()
		a.loadW(k, w, j, 0, wv[j])
	}
	for t := 0; t < T; t++ {
		s := a.vec()
		VMOVUPS(acc.at(t, 0), s)
		for j := 0; j < K; j++ {
			VFMADD231PS(wv[j], xb[t][j], s)
		}
		VMOVUPS(s, acc.at(t, 0))
	}
	w.advance(stepBytes(a, k))
	acc.advance(4 * a.V)
	DECQ(n)
	JNZ(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

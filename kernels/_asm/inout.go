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
	TEXT(name, NOSPLIT, "func(acc *float32, lda int, w *byte, ldw int, xs *float32, n int, ng int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes acc[t][c] += Σ_k xs[t·%d+k]·W[k][c] for ng groups of %d %s weight rows (stride ldw bytes), %d accumulator rows (stride lda bytes) and n·%d columns; each group starts %d rows further on, with the next %d values of xs.",
		name, K, K, k, T, a.V, K, K*T))
	// The loop over groups is here rather than in Go: a call per group
	// cost a fifth of a one-token product over a few hundred columns.
	w0 := Load(Param("w"), GP64())
	ldw := Load(Param("ldw"), GP64())
	xs := Load(Param("xs"), GP64())
	ng := Load(Param("ng"), GP64())
	TESTQ(ng, ng)
	JZ(LabelRef("done"))
	U := max(1, 64/stepBytes(a, k)) // steps a cache line of each row
	Label("group")
	i := Load(Param("n"), GP64())
	TESTQ(i, i)
	JZ(LabelRef("done"))
	acc := newStrided(Load(Param("acc"), GP64()), Load(Param("lda"), GP64()), T)
	wp := GP64()
	MOVQ(w0, wp)
	// The kernels prefetch the next group's rows, one line per row and
	// cache line of this group's: a run out of each row is too short for
	// the hardware prefetcher, which restarts at every 4 KiB page.
	w := newStrided(wp, ldw, prefetchRows(K))
	xb := make([][]VecVirtual, T)
	for t := range xb {
		xb[t] = make([]VecVirtual, K)
		for j := range xb[t] {
			xb[t][j] = a.vec()
			VBROADCASTSS(Mem{Base: xs, Disp: 4 * (t*K + j)}, xb[t][j])
		}
	}
	step := func(u int) {
		wv := make([]VecVirtual, K)
		for j := range wv {
			wv[j] = a.vec()
			a.loadW(k, w, j, u, wv[j])
		}
		for t := 0; t < T; t++ {
			s := a.vec()
			VMOVUPS(acc.at(t, 4*a.V*u), s)
			for j := 0; j < K; j++ {
				VFMADD231PS(wv[j], xb[t][j], s)
			}
			VMOVUPS(s, acc.at(t, 4*a.V*u))
		}
	}
	if U > 1 {
		r := GP64()
		MOVQ(i, r)
		ANDQ(U32(U-1), r)
		SHRQ(U8(log2(U)), i)
		JZ(LabelRef("rest"))
		if a.zmm && T == 1 {
			a.inoutLinesAhead(k, K, U, w, acc, xb[0], i)
		} else {
			Label("loop")
			for j := 0; j < K; j++ {
				PREFETCHT0(w.at(j+K, 0))
			}
			for u := 0; u < U; u++ {
				step(u)
			}
			w.advance(U * stepBytes(a, k))
			acc.advance(U * 4 * a.V)
			DECQ(i)
			JNZ(LabelRef("loop"))
		}
		Label("rest")
		TESTQ(r, r)
		JZ(LabelRef("next"))
		Label("one")
		step(0)
		w.advance(stepBytes(a, k))
		acc.advance(4 * a.V)
		DECQ(r)
		JNZ(LabelRef("one"))
	} else {
		Label("loop")
		for j := 0; j < K; j++ {
			PREFETCHT0(w.at(j+K, 0))
		}
		step(0)
		w.advance(stepBytes(a, k))
		acc.advance(4 * a.V)
		DECQ(i)
		JNZ(LabelRef("loop"))
	}
	Label("next")
	if K == 4 {
		LEAQ(Mem{Base: w0, Index: ldw, Scale: 4}, w0)
	} else {
		ADDQ(ldw, w0)
	}
	ADDQ(U32(4*K*T), xs)
	DECQ(ng)
	JNZ(LabelRef("group"))
	Label("done")
	VZEROUPPER()
	RET()
}

// log2 returns the base-2 logarithm of a power of two.
func log2(n int) uint8 {
	var l uint8
	for 1<<l < n {
		l++
	}
	return l
}

// inoutLinesAhead is the loop over i ≥ 1 whole cache lines of a one-token
// inout kernel (K rows, U vectors a line, the K activation broadcasts xb)
// with each line's weights loaded during the line before (see
// genDotPipelined), which keeps the memory busy while the line computes
// (figures: bench/README.md). Same arithmetic, same order.
func (a arch) inoutLinesAhead(k wkind, K, U int, w, acc *strided, xb []VecVirtual, i Register) {
	raw := make([][]VecVirtual, K) // raw[j][u]: vector u of row j's line
	for j := range raw {
		raw[j] = make([]VecVirtual, U)
		for u := range raw[j] {
			raw[j][u] = a.rawReg(k)
			a.loadRaw(k, w.at(j, u*stepBytes(a, k)), raw[j][u])
		}
	}
	line := U * stepBytes(a, k)
	step := func(u int, next bool) {
		s := a.vec()
		VMOVUPS(acc.at(0, 4*a.V*u), s)
		for j := 0; j < K; j++ {
			VFMADD231PS(a.convertRaw(k, raw[j][u], 0), xb[j], s)
			if next {
				a.loadRaw(k, w.at(j, line+u*stepBytes(a, k)), raw[j][u])
			}
		}
		VMOVUPS(s, acc.at(0, 4*a.V*u))
	}
	DECQ(i)
	JZ(LabelRef("last"))
	Label("loop")
	for j := 0; j < K; j++ {
		PREFETCHT0(w.at(j+K, 0))
	}
	for u := 0; u < U; u++ {
		step(u, true)
	}
	w.advance(line)
	acc.advance(U * 4 * a.V)
	DECQ(i)
	JNZ(LabelRef("loop"))
	Label("last")
	for u := 0; u < U; u++ {
		step(u, false)
	}
	w.advance(line)
	acc.advance(U * 4 * a.V)
}

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
// blocks (68 bytes). A step that takes half a line of each of four rows
// left two threads decoding F16 at about 0.76 of the read bandwidth, whole
// lines at 0.84 (medium model, same run). Unrolling changes no result:
// the vectors of a step go into the same accumulators, in order.
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

// genDot emits the dot-form kernel for R rows of W ([out][in] layout) and T
// tokens: out[t·ldo/4+r] += Σ_{k < n·E} W[r][k]·x[t][k], E = dotStepElems. Each
// weight vector is loaded and converted once per step and used for all T
// tokens; each token vector once and used for all R rows.
func genDot(a arch, k wkind, R, T int) {
	TEXT(dotName(a, k, R, T), NOSPLIT, "func(w *byte, ldw int, x *float32, ldx int, n int, out *float32, ldo int, scale *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds Σ W[r][k]·x[t][k] over n steps of %d elements to out[t][r] for %d %s weight rows (stride ldw bytes), %d float32 token vectors (stride ldx bytes) and output rows of stride ldo bytes (I8: times scale[r]; other kinds ignore scale).",
		dotName(a, k, R, T), dotStepElems(a, k), R, k, T))
	w := newStrided(Load(Param("w"), GP64()), Load(Param("ldw"), GP64()), prefetchRows(R, T))
	x := newStrided(Load(Param("x"), GP64()), Load(Param("ldx"), GP64()), T)
	n := Load(Param("n"), GP64())
	out := newStrided(Load(Param("out"), GP64()), Load(Param("ldo"), GP64()), T)

	acc := a.newAccs(T, R)
	TESTQ(n, n)
	JZ(LabelRef("reduce"))
	Label("loop")
	E := dotStepElems(a, k)
	var d []VecVirtual
	for r := 0; r < R && w.rows > R; r++ {
		for off := 0; off < dotStepBytes(a, k); off += 64 {
			PREFETCHT0(w.at(r+R, off))
		}
	}
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
	DECQ(n)
	JNZ(LabelRef("loop"))

	a.finish(acc, out, k == wI8)
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

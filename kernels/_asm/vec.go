package main

import (
	"fmt"
	"math"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

var (
	axpyGroup      = newGroup("axpyKernel", "y *float32, alpha float32, x *float32, n int", "y, alpha, x, n")
	geluMulGroup   = newGroup("geluMulKernel", "dst, a, b *float32, n int", "dst, a, b, n")
	maxGroup       = newGroup("maxKernel", "x *float32, n int) (m float32", "x, n")
	expSubGroup    = newGroup("expSubKernel", "x *float32, n int, m float32) (sum float64", "x, n, m")
	scaleGroup     = newGroup("scaleKernel", "x *float32, n int, s float32", "x, n, s")
	addScaledGroup = newGroup("addScaledKernel", "d, sc, a *float32, n int", "d, sc, a, n")
	softcapGroup   = newGroup("softcapKernel", "x *float32, n int, mult, m2c, c float32", "x, n, mult, m2c, c")
	widenVecGroup  = newGroup("widenVecKernel", "dst *float32, src *byte, n int", "dst, src, n")
)

// genVec emits the vector functions of one arch and returns the Go table
// entries (field: kernel) for vecKernels.
func genVec(a arch) string {
	fields := []string{
		"axpy: " + axpyGroup.add(genAxpy(a)),
		"geluMul: " + geluMulGroup.add(genGeluMul(a)),
		"max: " + maxGroup.add(genMax(a)),
		"expSub: " + expSubGroup.add(genExpSub(a)),
		"scale: " + scaleGroup.add(genScale(a)),
		"softcap: " + softcapGroup.add(genSoftcap(a)),
		"addScaled: " + addScaledGroup.add(genAddScaled(a)),
		"f16: " + widenVecGroup.add(genWidenHalf(a, false)),
		"bf16: " + widenVecGroup.add(genWidenHalf(a, true)),
		"q8: " + widenVecGroup.add(genWidenQ8(a)),
	}
	return strings.Join(fields, ", ")
}

// eachVector emits a loop that runs body n times (n may be 0), advancing
// every pointer by one vector after each, then returns from the function.
func (a arch) eachVector(n Register, ptrs []Register, body func()) {
	steps := make([]int, len(ptrs))
	for i := range steps {
		steps[i] = 4 * a.V
	}
	eachStep(n, ptrs, steps, body)
}

// eachStep is eachVector advancing pointer i by steps[i] bytes.
func eachStep(n Register, ptrs []Register, steps []int, body func()) {
	TESTQ(n, n)
	JZ(LabelRef("done"))
	Label("loop")
	body()
	for i, p := range ptrs {
		ADDQ(U32(steps[i]), p)
	}
	DECQ(n)
	JNZ(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()
}

// genAxpy: y[i] += alpha·x[i] for n vectors.
func genAxpy(a arch) string {
	name := "axpy_" + a.name
	TEXT(name, NOSPLIT, "func(y *float32, alpha float32, x *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes y[i] += alpha·x[i] for n·%d elements.", name, a.V))
	y := Load(Param("y"), GP64())
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	al := a.vec()
	VBROADCASTSS(NewParamAddr("alpha", 8), al)
	a.eachVector(n, []Register{y, x}, func() {
		v := a.vec()
		VMOVUPS(Mem{Base: y}, v)
		VFMADD231PS(Mem{Base: x}, al, v)
		VMOVUPS(v, Mem{Base: y})
	})
	return name
}

// genAddScaled: d[i] += sc[i]·a[i] for n vectors, the product and the sum
// each rounded (no fused multiply-add: the scalar Go rounds twice too).
func genAddScaled(a arch) string {
	name := "addScaled_" + a.name
	TEXT(name, NOSPLIT, "func(d, sc, a *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes d[i] += sc[i]·a[i], rounding the product, for n·%d elements.", name, a.V))
	d := Load(Param("d"), GP64())
	sc := Load(Param("sc"), GP64())
	x := Load(Param("a"), GP64())
	n := Load(Param("n"), GP64())
	a.eachVector(n, []Register{d, sc, x}, func() {
		v := a.vec()
		VMOVUPS(Mem{Base: sc}, v)
		VMULPS(Mem{Base: x}, v, v)
		VADDPS(Mem{Base: d}, v, v)
		VMOVUPS(v, Mem{Base: d})
	})
	return name
}

// exp returns e^v lane by lane: Cephes' expf. k = round(v·log2 e),
// r = v - k·ln 2 (ln 2 split in two so that k·ln2_hi is exact),
// e^r = 1 + r + r²·p(r) with p of degree 5 on |r| ≤ ln2/2, then 2^k by
// VSCALEFPS (AVX-512, exact over- and underflow to Inf and 0) or by
// building the exponent bits (AVX2, v clamped to [-87, 88] so that 2^k
// stays a normal number: e^v below e^-87 ≈ 1.6e-38 comes out as e^-87).
// Relative error within 2 ulp over the range (kernels.TestExp). A NaN lane
// stays NaN.
func (a arch) exp(v VecVirtual) VecVirtual {
	lo, hi := float32(-104), float32(89)
	if !a.zmm {
		lo, hi = -87, 88
	}
	// Operand order keeps NaN: (V)MAXPS and MINPS return their second
	// source (avo's first argument) when one input is NaN.
	x := a.vec()
	VMOVUPS(a.constVec(fmt.Sprintf("explo%g", -lo), math.Float32bits(lo)), x)
	VMAXPS(v, x, x)
	h := a.vec()
	VMOVUPS(a.constVec(fmt.Sprintf("exphi%g", hi), math.Float32bits(hi)), h)
	VMINPS(x, h, x)
	k := a.vec()
	VMULPS(a.constVec("log2e", math.Float32bits(math.Log2E)), x, k)
	if a.zmm {
		VRNDSCALEPS(U8(0x08), k, k) // nearest, no precision exception
	} else {
		VROUNDPS(U8(0x08), k, k)
	}
	c := func(name string, f float32) Mem { return a.constVec(name, math.Float32bits(f)) }
	VFNMADD231PS(c("ln2hi", 0.693359375), k, x)    // x -= k·ln2_hi
	VFNMADD231PS(c("ln2lo", -2.12194440e-4), k, x) // x -= k·ln2_lo
	p := a.vec()
	VMOVUPS(c("expc5", 1.9875691500e-4), p)
	for i, cf := range []float32{1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1} {
		VFMADD213PS(c(fmt.Sprintf("expc%d", 4-i), cf), x, p) // p = p·x + c
	}
	r2 := a.vec()
	VMULPS(x, x, r2)
	VFMADD213PS(x, r2, p) // p = p·r² + r
	VADDPS(c("one", 1), p, p)
	if a.zmm {
		VSCALEFPS(k, p, p)
	} else {
		ki := a.vec()
		VCVTPS2DQ(k, ki)
		VPADDD(a.constVec("i127", 127), ki, ki)
		VPSLLD(U8(23), ki, ki)
		VMULPS(ki, p, p)
	}
	return p
}

// genGeluMul: dst[i] = gelu(a[i])·b[i] with jax's tanh form, through
// 0.5·(1 + tanh(u)) = 1/(1 + e^(-2u)): gelu(x) = x / (1 + e^t),
// t = x·(A + B·x²), A = -2·√(2/π), B = -2·0.044715·√(2/π). For x → -∞,
// e^t overflows (AVX-512) or saturates (AVX2) and the quotient goes to -0
// or a denormal-sized value, as gelu does.
func genGeluMul(a arch) string {
	name := "geluMul_" + a.name
	TEXT(name, NOSPLIT, "func(dst, a, b *float32, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s computes dst[i] = gelu(a[i])·b[i] for n·%d elements (dst may be a).", name, a.V))
	dst := Load(Param("dst"), GP64())
	pa := Load(Param("a"), GP64())
	pb := Load(Param("b"), GP64())
	n := Load(Param("n"), GP64())
	A := -2 * math.Sqrt(2/math.Pi)
	B := a.vec()
	VMOVUPS(a.constVec("geluB", math.Float32bits(float32(0.044715*A))), B)
	a.eachVector(n, []Register{pa, pb, dst}, func() {
		x := a.vec()
		VMOVUPS(Mem{Base: pa}, x)
		t := a.vec()
		VMULPS(x, x, t)
		VFMADD213PS(a.constVec("geluA", math.Float32bits(float32(A))), B, t) // t = B·x² + A
		VMULPS(x, t, t)
		e := a.exp(t)
		VADDPS(a.constVec("one", math.Float32bits(1)), e, e)
		VDIVPS(e, x, x) // x / (1 + e^t)
		VMULPS(Mem{Base: pb}, x, x)
		VMOVUPS(x, Mem{Base: dst})
	})
	return name
}

// genMax returns the largest of n vectors' lanes.
func genMax(a arch) string {
	name := "max_" + a.name
	TEXT(name, NOSPLIT, "func(x *float32, n int) (m float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s returns the largest of n·%d float32s (n ≥ 1).", name, a.V))
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	m := a.vec()
	VMOVUPS(Mem{Base: x}, m)
	Label("loop")
	VMAXPS(Mem{Base: x}, m, m)
	ADDQ(U32(4*a.V), x)
	DECQ(n)
	JNZ(LabelRef("loop"))
	h := a.hmax(m)
	Store(h, Return("m"))
	VZEROUPPER()
	RET()
	return name
}

// hmax reduces v to its largest lane (in lane 0 of the result).
func (a arch) hmax(v VecVirtual) VecVirtual {
	y := v.AsY().(VecVirtual)
	if a.zmm {
		t := YMM()
		VEXTRACTF64X4(U8(1), v, t)
		VMAXPS(t, y, t)
		y = t
	}
	h := XMM()
	if a.zmm {
		VEXTRACTF32X4(U8(1), y, h)
	} else {
		VEXTRACTF128(U8(1), y, h)
	}
	VMAXPS(h, y.AsX(), h)
	t := XMM()
	VPERMILPS(U8(0x4E), h, t)
	VMAXPS(t, h, h)
	VPERMILPS(U8(0xB1), h, t)
	VMAXPS(t, h, h)
	return h
}

// genExpSub: x[i] = e^(x[i]-m) for n vectors, returning Σ in float64.
func genExpSub(a arch) string {
	name := "expSub_" + a.name
	TEXT(name, NOSPLIT, "func(x *float32, n int, m float32) (sum float64)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s replaces each of n·%d float32s x[i] by e^(x[i]-m) and returns their sum, accumulated in float64.", name, a.V))
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	mv := a.vec()
	VBROADCASTSS(NewParamAddr("m", 16), mv)
	s0, s1 := a.vec(), a.vec()
	a.zero(s0)
	a.zero(s1)
	TESTQ(n, n)
	JZ(LabelRef("sum"))
	Label("loop")
	v := a.vec()
	VMOVUPS(Mem{Base: x}, v)
	VSUBPS(mv, v, v)
	e := a.exp(v)
	VMOVUPS(e, Mem{Base: x})
	d0, d1 := a.vec(), a.vec()
	if a.zmm {
		h := YMM()
		VCVTPS2PD(e.AsY(), d0)
		VEXTRACTF64X4(U8(1), e, h)
		VCVTPS2PD(h, d1)
	} else {
		h := XMM()
		VCVTPS2PD(e.AsX(), d0)
		VEXTRACTF128(U8(1), e, h)
		VCVTPS2PD(h, d1)
	}
	VADDPD(d0, s0, s0)
	VADDPD(d1, s1, s1)
	ADDQ(U32(4*a.V), x)
	DECQ(n)
	JNZ(LabelRef("loop"))
	Label("sum")
	VADDPD(s1, s0, s0)
	y := s0.AsY().(VecVirtual)
	if a.zmm {
		t := YMM()
		VEXTRACTF64X4(U8(1), s0, t)
		VADDPD(t, y, t)
		y = t
	}
	h := XMM()
	if a.zmm {
		VEXTRACTF64X2(U8(1), y, h)
	} else {
		VEXTRACTF128(U8(1), y, h)
	}
	VADDPD(h, y.AsX(), h)
	t := XMM()
	VPERMILPD(U8(1), h, t)
	VADDSD(t, h, h)
	Store(h, Return("sum"))
	VZEROUPPER()
	RET()
	return name
}

// genScale: x[i] *= s for n vectors.
func genScale(a arch) string {
	name := "scale_" + a.name
	TEXT(name, NOSPLIT, "func(x *float32, n int, s float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s multiplies n·%d float32s by s.", name, a.V))
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	sv := a.vec()
	VBROADCASTSS(NewParamAddr("s", 16), sv)
	a.eachVector(n, []Register{x}, func() {
		v := a.vec()
		VMULPS(Mem{Base: x}, sv, v)
		VMOVUPS(v, Mem{Base: x})
	})
	return name
}

// genSoftcap: x[i] = c·tanh(x[i]·mult/c) for n vectors (the attention
// logits' scale and cap, model.py 864-866), through tanh(y) = 2/(1 + e^(-2y))
// - 1 with k = -2/c: s = x·mult, e = e^(s·k), x = c·(2/(1 + e) - 1). For
// s·k → +∞ the exp saturates and the result goes to -c, for s·k → -∞ to c.
func genSoftcap(a arch) string {
	name := "softcap_" + a.name
	TEXT(name, NOSPLIT, "func(x *float32, n int, mult, m2c, c float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s replaces each of n·%d float32s x[i] by c·tanh(x[i]·mult/c), given m2c = -2/c.", name, a.V))
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	mv, kv, cv := a.vec(), a.vec(), a.vec()
	VBROADCASTSS(NewParamAddr("mult", 16), mv)
	VBROADCASTSS(NewParamAddr("m2c", 20), kv)
	VBROADCASTSS(NewParamAddr("c", 24), cv)
	a.eachVector(n, []Register{x}, func() {
		v := a.vec()
		VMULPS(Mem{Base: x}, mv, v)
		VMULPS(kv, v, v)
		e := a.exp(v)
		VADDPS(a.constVec("one", math.Float32bits(1)), e, e)
		two := a.vec()
		VMOVUPS(a.constVec("two", math.Float32bits(2)), two)
		VDIVPS(e, two, two) // 2/(1 + e)
		VSUBPS(a.constVec("one", math.Float32bits(1)), two, two)
		VMULPS(cv, two, two)
		VMOVUPS(two, Mem{Base: x})
	})
	return name
}

// genWidenHalf: dst[i] = the fp16 (bf: bf16) src[i], for n vectors: the
// KV memory's rows decoded exactly (both conversions are exact).
func genWidenHalf(a arch, bf bool) string {
	t := "F16"
	if bf {
		t = "BF16"
	}
	name := "widen" + t + "_" + a.name
	TEXT(name, NOSPLIT, "func(dst *float32, src *byte, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s converts n·%d %s values at src to float32 at dst.", name, a.V, t))
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	eachStep(n, []Register{src, dst}, []int{2 * a.V, 4 * a.V}, func() {
		v := a.vec()
		if bf {
			VPMOVZXWD(Mem{Base: src}, v)
			VPSLLD(U8(16), v, v)
		} else {
			VCVTPH2PS(Mem{Base: src}, v)
		}
		VMOVUPS(v, Mem{Base: dst})
	})
	return name
}

// genWidenQ8: n blocks of Q8_0 (an fp16 scale d, 32 int8 q) at src to
// float32 q·d at dst, one rounding each, as tensor.DequantizeRow does.
func genWidenQ8(a arch) string {
	name := "widenQ8_" + a.name
	TEXT(name, NOSPLIT, "func(dst *float32, src *byte, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s decodes n blocks of Q8_0 at src (34 bytes each) into n·32 float32 at dst.", name))
	dst := Load(Param("dst"), GP64())
	src := Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	eachStep(n, []Register{src, dst}, []int{34, 128}, func() {
		d := a.q8Scale(Mem{Base: src})
		for i := 0; i < 32/a.V; i++ {
			v := a.vec()
			VPMOVSXBD(Mem{Base: src, Disp: 2 + i*a.V}, v)
			VCVTDQ2PS(v, v)
			VMULPS(d, v, v)
			VMOVUPS(v, Mem{Base: dst, Disp: 4 * a.V * i})
		}
	})
	return name
}

package main

import (
	"math"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Predicates of VCMPPS.
const (
	cmpLTOQ   = 0x11
	cmpLEOQ   = 0x12
	cmpNEQOQ  = 0x0C
	cmpNLTUQ  = 0x15
	cmpGEOQ   = 0x1D
	cmpUNORDQ = 0x03
)

// minScale is the smallest block scale d = amax/127 that is quantised: 1/d
// must be finite, so d must be a normal float32 (kernels.minQ8Scale).
const minScale = 0x00800000 // 2^-126

// genQuant emits the activation quantiser: for each of n blocks of 32
// float32s, exactly llama.cpp's quantize_row_q8_0 reference arithmetic in
// float32: amax = max|x|, d = amax/127, id = 1/d, q = round(x·id) with
// halfway cases away from zero. Blocks whose d is below 2^-126 (so that 1/d
// might overflow), infinite or NaN get all-zero quants; their stored scale
// is 0 when d < 2^-126 and d itself otherwise, so an infinity or NaN in the
// input still poisons the products. The scale is stored 8 times.
func genQuant(a arch) {
	name := "quantQ8_" + a.name
	TEXT(name, NOSPLIT, "func(x *float32, n int, xq *byte, dx *float32, cr *int32)")
	Pragma("noescape")
	Doc(name + " quantises n blocks of 32 float32s at x to int8 quants at xq (32 bytes a block), scales at dx (8 copies a block) and -128·(sum of each 4 quants) at cr (8 a block).")
	x := Load(Param("x"), GP64())
	n := Load(Param("n"), GP64())
	xq := Load(Param("xq"), GP64())
	dx := Load(Param("dx"), GP64())
	cr := Load(Param("cr"), GP64())

	absMask := a.constVec("absmask", 0x7fffffff)
	signMask := a.constVec("signmask", 0x80000000)
	one := a.constVec("one", math.Float32bits(1))
	half := a.constVec("half", math.Float32bits(0.5))
	c127 := a.constVec("c127", math.Float32bits(127))
	tiny := a.constVec("minscale", minScale)
	fmax := a.constVec("maxfloat", math.Float32bits(math.MaxFloat32))
	var perm Mem
	if !a.zmm {
		perm = GLOBL("q8perm", RODATA|NOPTR)
		for i, v := range []uint32{0, 4, 1, 5, 2, 6, 3, 7} {
			DATA(4*i, U32(v))
		}
	}

	TESTQ(n, n)
	JZ(LabelRef("done"))
	Label("loop")
	U := 32 / a.V
	v := make([]VecVirtual, U)
	for u := range v {
		v[u] = a.vec()
		VMOVUPS(Mem{Base: x, Disp: 4 * a.V * u}, v[u])
	}
	// A NaN anywhere makes the block's scale NaN (and its quants 0), so
	// that it propagates; VMAXPS alone would drop it or not depending on
	// its position.
	if a.zmm {
		kn := K()
		for u := range v {
			k := K()
			VCMPPS(U8(cmpUNORDQ), v[u], v[u], k)
			if u == 0 {
				KMOVW(k, kn)
			} else {
				KORW(k, kn, kn)
			}
		}
		KORTESTW(kn, kn)
	} else {
		un := a.vec()
		VCMPPS(U8(cmpUNORDQ), v[0], v[0], un)
		for u := 1; u < U; u++ {
			t := a.vec()
			VCMPPS(U8(cmpUNORDQ), v[u], v[u], t)
			VORPS(t, un, un)
		}
		g := GP32()
		VMOVMSKPS(un, g)
		TESTL(g, g)
	}
	JNZ(LabelRef("nan"))

	// amax in every lane.
	m := a.vec()
	VANDPS(absMask, v[0], m)
	for u := 1; u < U; u++ {
		t := a.vec()
		VANDPS(absMask, v[u], t)
		VMAXPS(t, m, m)
	}
	my := m.AsY()
	if a.zmm {
		t := YMM()
		VEXTRACTF64X4(U8(1), m, t)
		VMAXPS(t, my, my)
	}
	mx := m.AsX()
	t := XMM()
	if a.zmm {
		VEXTRACTF32X4(U8(1), my, t)
	} else {
		VEXTRACTF128(U8(1), my, t)
	}
	VMAXPS(t, mx, mx)
	VPERMILPS(U8(0x4E), mx, t)
	VMAXPS(t, mx, mx)
	VPERMILPS(U8(0xB1), mx, t)
	VMAXPS(t, mx, mx)
	d := a.vec()
	VBROADCASTSS(mx, d)
	VDIVPS(c127, d, d) // d = amax/127
	id := a.vec()
	VMOVUPS(one, id)
	VDIVPS(d, id, id) // id = 1/d
	if a.zmm {
		kq, k2, kd := K(), K(), K()
		VCMPPS(U8(cmpGEOQ), tiny, d, kq)
		VCMPPS(U8(cmpLEOQ), fmax, d, k2)
		KANDW(k2, kq, kq)
		VCMPPS(U8(cmpNLTUQ), tiny, d, kd)
		VMOVAPS_Z(d, kd, d)
		VMOVUPS(d.AsY(), Mem{Base: dx})
		qb := YMM()
		for u := range v {
			VMULPS(id, v[u], v[u])
			r := a.roundHalfAway(v[u], absMask, signMask, one, half)
			VCVTPS2DQ_Z(r, kq, r)
			if u == 0 {
				VPMOVSDB(r, qb.AsX())
			} else {
				h := XMM()
				VPMOVSDB(r, h)
				VINSERTI32X4(U8(1), h, qb, qb)
			}
		}
		VMOVDQU32(qb, Mem{Base: xq})
		a.storeCorr(qb, cr)
	} else {
		kq, k2, kz := YMM(), YMM(), YMM()
		VCMPPS(U8(cmpGEOQ), tiny, d, kq)
		VCMPPS(U8(cmpLEOQ), fmax, d, k2)
		VANDPS(k2, kq, kq)
		VCMPPS(U8(cmpLTOQ), tiny, d, kz)
		VANDNPS(d, kz, d)
		VMOVUPS(d, Mem{Base: dx})
		q := make([]VecVirtual, U)
		for u := range v {
			VMULPS(id, v[u], v[u])
			q[u] = a.roundHalfAway(v[u], absMask, signMask, one, half)
			VCVTPS2DQ(q[u], q[u])
			VPAND(kq, q[u], q[u])
		}
		VPACKSSDW(q[1], q[0], q[0])
		VPACKSSDW(q[3], q[2], q[2])
		VPACKSSWB(q[2], q[0], q[0])
		p := YMM()
		VMOVDQU(perm, p)
		VPERMD(q[0], p, q[0])
		VMOVDQU(q[0], Mem{Base: xq})
		a.storeCorr(q[0], cr)
	}
	Label("next")
	ADDQ(U32(128), x)
	ADDQ(U32(32), xq)
	ADDQ(U32(32), dx)
	ADDQ(U32(32), cr)
	DECQ(n)
	JNZ(LabelRef("loop"))
	Label("done")
	VZEROUPPER()
	RET()

	Label("nan")
	nan := a.vec()
	VMOVUPS(a.constVec("nan", 0x7fc00000), nan)
	VMOVUPS(nan.AsY(), Mem{Base: dx})
	z := a.vec()
	a.zero(z)
	VMOVUPS(z.AsY(), Mem{Base: xq})
	VMOVUPS(z.AsY(), Mem{Base: cr})
	JMP(LabelRef("next"))
}

// roundHalfAway rounds v to an integral float32, halfway cases away from
// zero (C's roundf): r = trunc(v); r += copysign(1, v) where |v-r| ≥ 0.5.
// v-r is exact, so the result is correctly rounded for every input.
func (a arch) roundHalfAway(v VecVirtual, absMask, signMask, one, half Mem) VecVirtual {
	r := a.vec()
	f := a.vec()
	s := a.vec()
	if a.zmm {
		VRNDSCALEPS(U8(0x0B), v, r) // truncate, no precision exception
	} else {
		VROUNDPS(U8(0x0B), v, r)
	}
	VSUBPS(r, v, f)
	VANDPS(absMask, f, f)
	VANDPS(signMask, v, s)
	VORPS(one, s, s)
	if a.zmm {
		k := K()
		VCMPPS(U8(cmpGEOQ), half, f, k)
		VADDPS(s, r, k, r)
	} else {
		VCMPPS(U8(cmpGEOQ), half, f, f)
		VANDPS(f, s, s)
		VADDPS(s, r, r)
	}
	return r
}

// storeCorr stores -128·(sum of each four consecutive quants) of the 32
// quants in q (a ymm register) at cr: the VNNI kernels' lane corrections.
// VPMADDUBSW of 0x80 (unsigned 128) by the quants cannot saturate:
// 2·128·127 < 2^15.
func (a arch) storeCorr(q VecVirtual, cr Register) {
	mov := func(src, dst Op) { VMOVDQU(src, dst) }
	if a.zmm {
		mov = func(src, dst Op) { VMOVDQU32(src, dst) } // registers 16-31 need EVEX
	}
	t := YMM()
	mov(a.constVec("bytes80", 0x80808080), t)
	VPMADDUBSW(q, t, t)
	VPMADDWD(a.constVec("ones16", 0x00010001), t, t)
	z := YMM()
	VXORPS(z, z, z)
	VPSUBD(t, z, t)
	mov(t, Mem{Base: cr})
}

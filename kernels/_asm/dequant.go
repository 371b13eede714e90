package main

import (
	"fmt"
	"math"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The dequantisers decode whole blocks of a ggml block type into float32
// exactly as tensor.DequantizeRow does. Every product there is exact in
// float32 (an fp16 scale has 11 significant bits, the integer factors at
// most 13 together), so its order does not matter; the types with a min
// round once, at the final add or subtract, which these kernels also do
// after an unfused multiply (an FMA would round differently). Integers are
// converted before they are multiplied, as in Go, so that a zero keeps the
// sign a float product gives it.

// dqkind is a block type with a dequantiser, in the order of package
// kernels' dq constants.
type dqkind int

const (
	dQ4_0 dqkind = iota
	dQ4_1
	dQ5_0
	dQ5_1
	dQ2_K
	dQ3_K
	dQ4_K
	dQ5_K
	dQ6_K
	dIQ4_NL
	dIQ4_XS
	dIQ3_S
	dIQ3_XXS
	dIQ2_XXS
	dIQ2_XS
	dIQ2_S
	dIQ1_S
	dIQ1_M
	numDQ
)

var dqNames = [...]string{"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
	"IQ3_S", "IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M"}

func (k dqkind) String() string { return dqNames[k] }

// dqBlock is each kind's block: elements and bytes.
var dqBlock = [...]struct{ elems, bytes int }{
	dQ4_0: {32, 18}, dQ4_1: {32, 20}, dQ5_0: {32, 22}, dQ5_1: {32, 24},
	dQ2_K: {256, 84}, dQ3_K: {256, 110}, dQ4_K: {256, 144}, dQ5_K: {256, 176}, dQ6_K: {256, 210},
	dIQ4_NL: {32, 18}, dIQ4_XS: {256, 136},
	dIQ3_S: {256, 110}, dIQ3_XXS: {256, 98}, dIQ2_XXS: {256, 66}, dIQ2_XS: {256, 74}, dIQ2_S: {256, 82},
	dIQ1_S: {256, 50}, dIQ1_M: {256, 56},
}

// kvaluesIQ4NL is ggml's kvalues_iq4nl (tensor.kvaluesIQ4NL): the 16
// levels of IQ4_NL and IQ4_XS.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

var dequantGroup = newGroup("dequantKernel", "dst *float32, src *byte, n int", "dst, src, n")

// genDequantTable emits a's dequantisers and their table.
func genDequantTable(tb *strings.Builder, a arch) {
	fmt.Fprintf(tb, "\nvar dequant%s = [numDQ]dequantKernel{\n", a.tag())
	for k := dqkind(0); k < numDQ; k++ {
		var ref string
		if a.zen && !zenApart(k) {
			ref = "k_" + dequantName(avx512, k)
		} else {
			ref = dequantGroup.add(genDequant(a, k))
		}
		fmt.Fprintf(tb, "\tdq%s: %s,\n", k, ref)
	}
	fmt.Fprintf(tb, "}\n")
}

func dequantName(a arch, k dqkind) string { return fmt.Sprintf("dequant%s_%s", k, a.tag()) }

// dq is the state of one dequantiser's loop body: the block at src, its
// output at dst, and a stack area for the per-sub-block scales. In a fused
// kernel (genFused) the block is row row's of w instead, and each vector
// of weights goes to sink rather than to memory.
type dq struct {
	a        arch
	src, dst Register
	local    Mem
	w        *strided
	row      int
	sink     *fusedSink
	lanes    []Register // iquant: the current grid indices, 4 a register
	iqr      *iqRegs
	iota     VecVirtual // zmm: Q4_K's levels 0..15, Q4_0's -8..7, Q2_K's j mod 4, Q3_K's j mod 8 - 4 as float32 (newIota), or nil
	// half, on zmm, is 16 bytes of stack where halves converts a block's
	// fp16 scales (halfArea); nil Base: they are converted in registers.
	half Mem
	// scaled: the block's scales are in the stack area already (a fused
	// kernel of a scalesAhead kind makes them a block ahead, genFused).
	scaled bool
	// tab, on zmm in a fused kernel that reads tables (genFused,
	// hasTables), is this row's tables of the current block: the 16
	// levels of its s-th 32 weights at tab+64·s, made by genTables's
	// kernel. Nil Base: made in registers.
	tab Mem
	// write, in a fused kernel that makes the tables as it multiplies
	// (makeTables), is where this row's tables of the current block go,
	// laid out as tab's.
	write Mem
	// ints: a codebook i-quant's integers instead of its values (the fast
	// product's widening, genWidenCB): (2s+1) times the integer levels
	// (iqLevelsInt) as int16 at dst + 2i, zero where the block's d is zero
	// or not finite; dx is then the block's d (lane 0).
	ints bool
	dx   VecVirtual
}

// hasLocal reports whether kind k's block decoder keeps per-sub-block
// scales in the stack area.
func hasLocal(k dqkind) bool {
	switch k {
	case dQ2_K, dQ3_K, dQ4_K, dQ5_K, dQ6_K, dIQ4_XS:
		return true
	}
	return isIQ(k)
}

// block emits the decoding of one block of kind k (tbl: IQ4's levels).
// Every decoder emits its vectors in element order, so that a fused kernel
// adds them to its accumulators in the order of the F32 kernel.
func (g *dq) block(k dqkind, tbl VecVirtual) {
	switch k {
	case dQ4_0, dQ4_1, dQ5_0, dQ5_1:
		g.legacy(k)
	case dQ2_K:
		g.q2K()
	case dQ3_K:
		g.q3K()
	case dQ4_K, dQ5_K:
		g.q45K(k == dQ5_K)
	case dQ6_K:
		g.q6K()
	case dIQ4_NL:
		var d VecVirtual
		if g.tab.Base == nil {
			d = g.halves(dqBlock[dIQ4_NL].bytes, 0)[0]
		}
		g.iq4(tbl, d, 2, 0)
	case dIQ4_XS:
		g.iq4XS(tbl)
	default:
		g.iquant(k)
	}
}

func genDequant(a arch, k dqkind) string {
	name := dequantName(a, k)
	TEXT(name, NOSPLIT, "func(dst *float32, src *byte, n int)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s decodes n blocks of %s at src (%d bytes each) into n·%d float32 at dst, as tensor.DequantizeRow does.",
		name, k, dqBlock[k].bytes, dqBlock[k].elems))
	g := &dq{a: a, iota: newIota(a, k)}
	g.dst = Load(Param("dst"), GP64())
	g.src = Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	if hasLocal(k) {
		g.local = AllocLocal(128)
	}
	if n := halfArea(a, k); n > 0 {
		g.half = AllocLocal(n)
	}
	var tbl VecVirtual
	if (k == dIQ4_NL || k == dIQ4_XS) && !a.zmm {
		tbl = XMM()
		a.movdqu(g.levels(), tbl)
	}
	eachStep(n, []Register{g.src, g.dst}, []int{dqBlock[k].bytes, 4 * dqBlock[k].elems}, func() {
		// The weights stream from memory a tile's span at a time, too
		// short a run for the hardware prefetcher to ramp up on: ask for
		// what the next few blocks need (past the end it does not fault).
		for off := 0; off < dqBlock[k].bytes; off += 64 {
			PREFETCHT0(g.at(1024 + off))
		}
		g.block(k, tbl)
	})
	return name
}

func (g *dq) at(off int) Mem {
	if g.w != nil {
		return g.w.at(g.row, off)
	}
	return Mem{Base: g.src, Disp: off}
}
func (g *dq) out(i int) Mem   { return Mem{Base: g.dst, Disp: 4 * i} }
func (g *dq) loc(off int) Mem { return g.local.Offset(off) }

// u8 loads V bytes at off zero-extended to 32-bit lanes.
func (g *dq) u8(off int) VecVirtual {
	v := g.a.vec()
	VPMOVZXBD(g.at(off), v)
	return v
}

// c returns the constant vector of lanes v. On zmm, instructions read it
// as a broadcast of its first 4 bytes (the _BCST forms): the linker aligns
// it to 32 bytes only, so a 64-byte load of it may straddle two cache
// lines, which slowed some kernels by a quarter depending on the layout.
func (g *dq) c(v uint32) Mem { return g.a.constVec(fmt.Sprintf("dqc_%x", v), v) }

func (g *dq) and(v uint32, x VecVirtual) VecVirtual {
	d := g.a.vec()
	if g.a.zmm {
		VPANDD_BCST(g.c(v), x, d)
	} else {
		VPAND(g.c(v), x, d)
	}
	return d
}

func (g *dq) or(x, y VecVirtual) VecVirtual {
	d := g.a.vec()
	if g.a.zmm {
		VPORD(y, x, d)
	} else {
		VPOR(y, x, d)
	}
	return d
}

// shl shifts every lane left by s bits (right by -s).
func (g *dq) shl(s int, x VecVirtual) VecVirtual {
	if s == 0 {
		return x
	}
	d := g.a.vec()
	if s > 0 {
		VPSLLD(U8(s), x, d)
	} else {
		VPSRLD(U8(-s), x, d)
	}
	return d
}

// sub returns x - v lane by lane (integers).
func (g *dq) sub(v uint32, x VecVirtual) VecVirtual {
	d := g.a.vec()
	if g.a.zmm {
		VPSUBD_BCST(g.c(v), x, d)
	} else {
		VPSUBD(g.c(v), x, d)
	}
	return d
}

// emit stores float32(q)·scale, then minus (sub) or plus off once rounded
// when off is not nil, at out element i (fused: hands it to the sink);
// scale as mulBy takes it.
func (g *dq) emit(q VecVirtual, scale, off Op, sub bool, i int) {
	f := g.a.vec()
	VCVTDQ2PS(q, f)
	g.a.mulBy(scale, f)
	if off != nil {
		if sub {
			VSUBPS(off, f, f)
		} else {
			VADDPS(off, f, f)
		}
	}
	g.put(f, i)
}

// put stores the float32 weights f at out element i (fused: hands them to
// the sink).
func (g *dq) put(f VecVirtual, i int) {
	if g.sink != nil {
		g.sink.add(g, f, i)
		return
	}
	if g.ints {
		y := YMM()
		VPMOVDW(f, y)
		VMOVDQU(y, Mem{Base: g.dst, Disp: 2 * i})
		return
	}
	VMOVUPS(f, g.out(i))
}

// levels16 returns, on zmm, the vector of float32(base+q)·scale, minus off
// once rounded when off is not nil, for q = 0..15: the values emit gives a
// 4-bit quant, for VPERMPS to look up by the quant (the low four bits of
// each lane index it). One lookup replaces emit's convert, multiply and
// subtract, with the same bits.
func (g *dq) levels16(base int, scale, off Op) VecVirtual {
	t := g.a.vec()
	lv := g.levelConst(base, 16)
	switch {
	case off != nil:
		// scale·level is exact in float32 for every kind with a min (an
		// fp16 times integers of at most 13 bits together), so the fused
		// multiply-subtract rounds once where the multiply and the
		// subtract did: the same bits, one instruction less.
		VMOVAPS(scale, t)
		VFMSUB132PS(lv, off, t)
	default:
		VMULPS(lv, scale, t)
	}
	return t
}

// levelConst is the constant vector of float32(base + j mod m), j = 0..15.
func (g *dq) levelConst(base, m int) Mem {
	w := make([]uint32, 16)
	for q := range w {
		w[q] = math.Float32bits(float32(base + q%m))
	}
	name := fmt.Sprintf("dqlevels_%d_mod%d", base, m)
	if base < 0 {
		name = fmt.Sprintf("dqlevels_m%d_mod%d", -base, m)
	}
	return g.a.constDwords(name, w)
}

// newIota returns, on zmm, a vector of the levels (dq.iota) kept in a
// register: Q4_K's 0..15, so that a sub-block's table costs one load fewer
// (the kernel's loads, two a cycle, bind beside its shuffles), Q4_0's
// -8..7, for its table to take the scale as a broadcast operand from the
// half area (halfMems), Q2_K's 0..3 four times (q2Kzmm), Q3_K's -4..3
// twice and IQ4_XS's kvaluesIQ4NL, whose tables then take their scale as
// a broadcast operand from the stack area (q3K, iq4XSScale); nil
// otherwise.
func newIota(a arch, k dqkind) VecVirtual {
	if !a.zmm || (k != dQ4_K && k != dQ4_0 && k != dQ2_K && k != dQ3_K && k != dIQ4_XS) {
		return nil
	}
	if k == dIQ4_XS {
		v := a.vec()
		VMOVUPS(iq4LevelConst(a), v)
		return v
	}
	base, m := 0, 16
	switch k {
	case dQ4_0:
		base = -8
	case dQ2_K:
		m = 4
	case dQ3_K:
		base, m = -4, 8
	}
	v := a.vec()
	VMOVUPS((&dq{a: a}).levelConst(base, m), v)
	return v
}

// lookup puts the levels of the low four bits of each lane of q at out
// element i.
func (g *dq) lookup(levels Op, q VecVirtual, i int) {
	f := g.a.vec()
	VPERMPS(levels, q, f)
	g.put(f, i)
}

// bcast broadcasts the float32 at m into a register. On zmm it is
// VPBROADCASTD, a load alone on Zen 4 as on Intel, where VBROADCASTSS also
// issues on the shuffle pipes that the decoders' lookups and widenings
// bind (bench/README.md). A scale that only multiplies is better the
// multiply's broadcast operand (emit's scale may be a Mem).
func (g *dq) bcast(m Mem) VecVirtual {
	v := g.a.vec()
	if g.a.zmm {
		VPBROADCASTD(m, v)
		return v
	}
	VBROADCASTSS(m, v)
	return v
}

// halfY broadcasts the fp16 at m to the eight float32 lanes of a ymm.
func (g *dq) halfY(m Mem) VecVirtual {
	h, d := XMM(), YMM()
	VPBROADCASTW(m, h)
	VCVTPH2PS(h, d)
	return d
}

// halfArea is the stack a zmm decoder of kind k needs for halves, 16
// bytes (rows of a fused kernel: each its own), or 0.
func halfArea(a arch, k dqkind) int {
	switch {
	case !a.zmm:
		return 0
	case a.zen:
		// Where the decoder is built on the area (Q4_0's table takes its
		// d as a broadcast operand, Q2_K's scales made ahead read it) and
		// where broadcasts from it, loads alone (dq.bcast), measured
		// faster on Zen 4 than converting in a register: IQ4_NL and the
		// legacy kinds with a second scale or fifth bits.
		switch k {
		case dQ4_0, dQ2_K, dIQ4_NL, dQ4_1, dQ5_0, dQ5_1:
			return 16
		}
		return 0
	}
	switch k {
	case dQ4_0, dQ4_1, dQ5_0, dQ5_1, dQ2_K, dQ3_K, dIQ4_NL, dIQ4_XS:
		// Not Q6_K: its one scale a block gained nothing so.
		return 16
	}
	if isIQ(k) && k != dIQ1_M { // IQ1_M's d is spread over four words
		return 16
	}
	return 0
}

// halves returns the fp16 scales at the block's offsets offs (all within
// 8 bytes of each other) broadcast as float32, as q8Scale does. With a
// half area they come from halfMems: no shuffle, where q8Scale's
// conversion of a register takes one; on Intel every shuffle is port 5's,
// the port the decoders' widenings and lookups bind (bench/README.md).
func (g *dq) halves(bytes int, offs ...int) []VecVirtual {
	out := make([]VecVirtual, len(offs))
	if g.half.Base == nil {
		for i, off := range offs {
			out[i] = g.a.q8Scale(g.at(off))
		}
		return out
	}
	for i, m := range g.halfMems(bytes, offs...) {
		out[i] = g.bcast(m)
	}
	return out
}

// halfMems converts the fp16 scales at the block's offsets offs into
// float32 in the half area and returns where each is, for broadcasts: the
// 8 bytes ending at most at the block's end (bytes) by VCVTPH2PS from
// memory, stored whole.
func (g *dq) halfMems(bytes int, offs ...int) []Mem {
	start := min(offs[0], bytes-8)
	h := XMM()
	VCVTPH2PS(g.at(start), h)
	VMOVUPS(h, g.half)
	out := make([]Mem, len(offs))
	for i, off := range offs {
		if off < start || off+2 > start+8 {
			panic(fmt.Sprintf("halves: scale at %d outside the 8 bytes at %d", off, start))
		}
		out[i] = g.half.Offset(2 * (off - start))
	}
	return out
}

// legacy decodes the 32-element blocks: Q4_0 (q-8)·d, Q5_0 (q-16)·d, Q4_1
// and Q5_1 q·d + m; element j and j+16 share byte j's nibbles, the _1 types'
// fifth bits are a word of 32.
func (g *dq) legacy(k dqkind) {
	a := g.a
	var d, m VecVirtual
	qs, qh := 2, -1
	switch k {
	case dQ4_0:
		if !a.zmm {
			d = a.q8Scale(g.at(0))
		}
	case dQ4_1:
		ds := g.halves(dqBlock[k].bytes, 0, 2)
		d, m, qs = ds[0], ds[1], 4
	case dQ5_0:
		d = g.halves(dqBlock[k].bytes, 0)[0]
		qh, qs = 2, 6
	case dQ5_1:
		ds := g.halves(dqBlock[k].bytes, 0, 2)
		d, m, qh, qs = ds[0], ds[1], 4, 8
	}
	var h VecVirtual
	if qh >= 0 {
		h = a.vec()
		VPBROADCASTD(g.at(qh), h)
	}
	var off Op
	if m != nil {
		off = m
	}
	if k == dQ4_0 && a.zmm {
		var lv Op = g.tab
		if g.tab.Base == nil {
			lv = g.q40Levels()
		}
		v := g.u8(qs)
		g.lookup(lv, v, 0)
		g.lookup(lv, g.shl(-4, v), 16)
		return
	}
	for half := 0; half < 2; half++ {
		for l0 := 0; l0 < 16; l0 += a.V {
			v := g.u8(qs + l0)
			var q VecVirtual
			if half == 0 {
				q = g.and(0x0f, v)
			} else {
				q = g.shl(-4, v)
			}
			if qh >= 0 {
				// Bit j (low nibble) or j+16 (high) of qh to bit 4.
				sh := make([]uint32, a.V)
				for i := range sh {
					sh[i] = uint32(l0 + i + 12*half)
				}
				t := a.vec()
				VPSRLVD(g.a.constDwords(fmt.Sprintf("dqshift_%d", l0+12*half), sh), h, t)
				if half == 0 {
					t = g.shl(4, t)
				}
				q = g.or(q, g.and(0x10, t))
			}
			switch k {
			case dQ4_0:
				q = g.sub(8, q)
			case dQ5_0:
				q = g.sub(16, q)
			}
			g.emit(q, d, off, false, 16*half+l0)
		}
	}
}

// scalesTo converts the 16 (or 8) bytes of x (zero-extended, minus bias)
// times scale into float32 at the stack area from off.
func (g *dq) scalesTo(x VecVirtual, count int, bias uint32, scale VecVirtual, off int) {
	a := g.a
	for i := 0; i < count; i += a.V {
		var v VecVirtual
		src := x
		if i == 8 {
			src = XMM()
			VPSHUFD(U8(0xEE), x, src)
		}
		if count == 8 || !a.zmm {
			v = YMM()
		} else {
			v = ZMM()
		}
		VPMOVZXBD(src, v)
		if bias != 0 {
			VPSUBD(g.c(bias), v, v)
		}
		VCVTDQ2PS(v, v)
		VMULPS(scale, v, v)
		VMOVUPS(v, g.loc(off+4*i))
	}
}

// words packs four 32-bit registers into an xmm.
func words(w [4]Register) VecVirtual {
	x := XMM()
	VMOVD(w[0], x)
	for i := 1; i < 4; i++ {
		VPINSRD(U8(i), w[i], x, x)
	}
	return x
}

// q45KScales stores the float32 scales (d·sc[s]) and mins (dmin·m[s]) of
// the Q4_K/Q5_K block off bytes past the current one in the stack area,
// where q45K reads them.
func (g *dq) q45KScales(off int) {
	if g.a.zmm {
		g.q45KScalesZ(off)
		return
	}
	// ggml's unpacking of the 12 bytes at 4 into the scales (u0, u2) and
	// the mins (u1, u3), as its AVX2 dot product does.
	u0, u1, u2, u3, t := GP32(), GP32(), GP32(), GP32(), GP32()
	MOVL(g.at(off+4), u0)
	MOVL(g.at(off+8), u1)
	MOVL(g.at(off+12), u2)
	MOVL(u2, u3)
	SHRL(U8(4), u3)
	ANDL(U32(0x0f0f0f0f), u3)
	MOVL(u1, t)
	SHRL(U8(6), t)
	ANDL(U32(0x03030303), t)
	SHLL(U8(4), t)
	ORL(t, u3)
	ANDL(U32(0x3f3f3f3f), u1)
	ANDL(U32(0x0f0f0f0f), u2)
	MOVL(u0, t)
	SHRL(U8(6), t)
	ANDL(U32(0x03030303), t)
	SHLL(U8(4), t)
	ORL(t, u2)
	ANDL(U32(0x3f3f3f3f), u0)
	x := words([4]Register{u0, u2, u1, u3})
	g.scalesTo(x, 8, 0, g.halfY(g.at(off)), 0)
	xm := XMM()
	VPSHUFD(U8(0xEE), x, xm)
	g.scalesTo(xm, 8, 0, g.halfY(g.at(off+2)), 32)
}

// q45KScalesZ is q45KScales in one zmm: the 12 bytes K widened to lanes
// 0-11, lanes 12-15 made K[8..11] >> 4 and 8-15's top bits K[0..7] >> 6
// (two 128-bit lane moves), each lane's bits chosen by one VPTERNLOGD, and
// the 16 integers times d or dmin. Same integers, same products as the
// scalar unpacking, with 4 shuffles where that took 12 (VMOVD, three
// VPINSRD, conversions, widenings, a VPSHUFD) and 20 scalar instructions:
// on Intel every shuffle is port 5's, the port the nibbles' lookups bind
// (bench/README.md). The area holds sc 0-3, m 0-3, sc 4-7, m 4-7 (q45KLoc).
func (g *dq) q45KScalesZ(off int) {
	a := g.a
	k := ZMM()
	VPMOVZXBD(g.at(off+4), k) // lanes 0-11: K[0..11]; 12-15 the first quants
	lo := ZMM()
	VSHUFI32X4(U8(0xA4), k, k, lo) // lanes 12-15 = K[8..11]
	VPSRLVD(a.constDwords("q4k_shift", quarters(0, 0, 0, 4)), lo, lo)
	hi := ZMM()
	VSHUFI32X4(U8(0x40), k, k, hi) // lanes 8-15 = K[0..7]
	VPSRLD(U8(2), hi, hi)          // bits 4-5: K >> 6; lanes 0-7 below bit 6
	// hi = mask ? lo : hi: sc 0-3 and m 0-3 are the low 6 bits of K, sc
	// 4-7 and m 4-7 a nibble of K below the 2 bits of K >> 6.
	VPTERNLOGD(U8(0xd8), a.constDwords("q4k_mask", quarters(0x3f, 0x3f, 0x0f, 0x0f)), lo, hi)
	VCVTDQ2PS(hi, hi)
	dm, idx, f := ZMM(), ZMM(), ZMM()
	// d and dmin (and two halves of K, unused) into the low lanes: the
	// memory form takes no shuffle; the zeroing makes dm wholly written.
	a.zero(dm)
	VCVTPH2PS(g.at(off), dm.AsX())
	VMOVDQU32(a.constDwords("q4k_dmin", quarters(0, 1, 0, 1)), idx)
	VPERMPS(dm, idx, f)
	VMULPS(f, hi, hi)
	VMOVUPS(hi, g.loc(0))
}

// quarters is the 16 dwords of four runs of four: w, x, y, z.
func quarters(w, x, y, z uint32) []uint32 {
	q := make([]uint32, 0, 16)
	for _, v := range []uint32{w, x, y, z} {
		q = append(q, v, v, v, v)
	}
	return q
}

// q45KLoc is where the area holds sub-block s's scale (its min 16 bytes
// further on zmm, 32 on ymm): q45KScalesZ's order on zmm, sc 0-7 then m
// 0-7 on ymm.
func (g *dq) q45KLoc(s int) (scale, min Mem) {
	if g.a.zmm {
		o := 4*s + 16*(s/4)
		return g.loc(o), g.loc(o + 16)
	}
	return g.loc(4 * s), g.loc(32 + 4*s)
}

// scalesAhead reports whether a fused kernel of kind k makes each block's
// scales while the block before it multiplies (genFused, blockScales): the
// kinds whose scales are a chain of scalar unpacking, transfers and
// conversions ahead of the block's first table, 64 bytes a row. (Q6_K's,
// one widening of its bytes, gained nothing; Q2_K's cost instructions,
// not latency.)
func scalesAhead(a arch, k dqkind) bool {
	return a.zmm && (k == dQ4_K || k == dQ5_K || k == dQ3_K || k == dQ2_K)
}

// scaleArea is the bytes of a row's area of block scales in a fused
// kernel that makes them ahead: 16 float32, Q2_K's 16 scales and 16 mins
// 32.
func scaleArea(k dqkind) int {
	if k == dQ2_K {
		return 128
	}
	return 64
}

// blockScales stores the scales of the block off bytes past the current
// one at area, where block reads them once g.scaled is set.
func (g *dq) blockScales(k dqkind, off int, area Mem) {
	defer func(m Mem) { g.local = m }(g.local)
	g.local = area
	switch k {
	case dQ4_K, dQ5_K:
		g.q45KScales(off)
	case dQ3_K:
		g.q3KScales(off)
	case dQ2_K:
		g.q2KScales(off)
	default:
		panic(fmt.Sprintf("blockScales: %s", k))
	}
}

// q45K decodes Q4_K (d, dmin, 12 bytes of 6-bit scales and mins, 128
// bytes of nibbles) or Q5_K (the same, then 32 bytes of fifth bits before
// the nibbles): sub-block s of 32 is (d·sc[s])·q - dmin·m[s].
func (g *dq) q45K(five bool) {
	a := g.a
	if !g.scaled && g.tab.Base == nil {
		g.q45KScales(0)
	}
	qs := 16
	if five {
		qs = 48
	}
	var q45, q5h [2]VecVirtual
	for s := 0; s < 8; s++ {
		// Sub-block s: the low (even s) or high nibbles of bytes 32·(s/2)...
		j := s / 2
		sc, mn := g.q45KLoc(s)
		if a.zmm && !five {
			// The odd sub-block shifts the bytes its even one loaded
			// (VPMOVZXBD competes with VPERMPS for the shuffle unit).
			var lv Op
			switch {
			case g.tab.Base != nil:
				lv = g.tab.Offset(64 * s)
			case g.iota != nil:
				v := g.q4KLevels(sc, mn)
				if g.write.Base != nil {
					VMOVUPS(v, g.write.Offset(64*s))
				}
				lv = v
			default:
				lv = g.levels16(0, g.bcast(sc), g.bcast(mn))
			}
			for l0 := 0; l0 < 32; l0 += a.V {
				if s%2 == 0 {
					q45[l0/a.V] = g.u8(qs + 32*j + l0)
					g.lookup(lv, q45[l0/a.V], 32*s+l0)
				} else {
					g.lookup(lv, g.shl(-4, q45[l0/a.V]), 32*s+l0)
				}
			}
			continue
		}
		d1, m1 := g.bcast(sc), g.bcast(mn)
		if a.zmm {
			// Q5_K: the 32 levels in two tables (VPERMI2PS reads index
			// bits 0-4), the nibble and the fifth bit merged in one
			// VPTERNLOGD; the fifth bits' bytes are loaded once a block.
			lo := g.levels16(0, d1, m1)
			hi := g.levels16(16, d1, m1)
			for l0 := 0; l0 < 32; l0 += a.V {
				i := l0 / a.V
				if s == 0 {
					q5h[i] = g.u8(16 + l0)
				}
				var v VecVirtual
				if s%2 == 0 {
					q45[i] = g.u8(qs + 32*j + l0)
					v = q45[i]
				} else {
					v = g.shl(-4, q45[i])
				}
				hs := g.shl(4-s, q5h[i])
				if s == 4 {
					hs = a.vec()
					VMOVDQA32(q5h[i], hs)
				}
				VPTERNLOGD_BCST(U8(0xd8), g.c(0x0f), v, hs) // bits 0-3 of v, the rest of hs
				VPERMI2PS(hi, lo, hs)
				g.put(hs, 32*s+l0)
			}
			continue
		}
		for l0 := 0; l0 < 32; l0 += a.V {
			v := g.u8(qs + 32*j + l0)
			var q VecVirtual
			if s%2 == 0 {
				q = g.and(0x0f, v)
			} else {
				q = g.shl(-4, v)
			}
			if five {
				h := g.u8(16 + l0)
				q = g.or(q, g.and(0x10, g.shl(4-s, h)))
			}
			g.emit(q, d1, m1, true, 32*s+l0)
		}
	}
}

// q40Levels is Q4_0's 16 levels on zmm: the levels -8..7 in the iota
// register times the scale broadcast from the half area.
func (g *dq) q40Levels() VecVirtual {
	lv := g.a.vec()
	VMULPS_BCST(g.halfMems(dqBlock[dQ4_0].bytes, 0)[0], g.iota, lv)
	return lv
}

// q4KLevels is levels16's bits from two loads, not three: the broadcast
// scale sc times the levels in the iota register, minus the min mn read as
// a broadcast operand (one rounding, as levels16's).
func (g *dq) q4KLevels(sc, mn Mem) VecVirtual {
	lv := g.bcast(sc)
	VFMSUB213PS_BCST(mn, g.iota, lv)
	return lv
}

// tabRow is the bytes between two rows' tables in a fused kernel that
// reads them: a span's 16 float32 levels every 32 weights (a Q4_0 or
// IQ4_NL block, a Q4_K or IQ4_XS sub-block).
const tabRow = sumSpan / 32 * 64

// tabBlock is the bytes of one block's tables of kind k.
func tabBlock(k dqkind) int { return dqBlock[k].elems / 32 * 64 }

func tablesName(a arch, k dqkind) string { return fmt.Sprintf("tables%s_%s", k, a.tag()) }

// genTables emits the tables kernel of kind k (hasTables, not
// makesTables): each block's levels, the vectors the lookups of its zmm
// decoder index, with that decoder's instructions (so the same bits), for
// the fused kernels that read them (genFused).
func genTables(a arch, k dqkind) string {
	name := tablesName(a, k)
	TEXT(name, NOSPLIT, "func(dst *float32, src *byte, n int)")
	Pragma("noescape")
	what := map[dqkind]string{
		dQ4_0:   "d·(q-8), q = 0..15,",
		dIQ4_NL: "d·kvalues[q], q = 0..15,",
		dIQ4_XS: "(d·(ls[s]-32))·kvalues[q], q = 0..15, of the 8 sub-blocks s",
	}[k]
	Doc(fmt.Sprintf("%s writes the levels %s of n %s blocks at src (%d bytes each) as %d float32 a block at dst, as the fused %s kernels make them.",
		name, what, k, dqBlock[k].bytes, tabBlock(k)/4, k))
	g := &dq{a: a, iota: newIota(a, k)}
	g.dst = Load(Param("dst"), GP64())
	g.src = Load(Param("src"), GP64())
	n := Load(Param("n"), GP64())
	if hasLocal(k) {
		g.local = AllocLocal(128)
	}
	if n := halfArea(a, k); n > 0 {
		g.half = AllocLocal(n)
	}
	eachStep(n, []Register{g.src, g.dst}, []int{dqBlock[k].bytes, tabBlock(k)}, func() {
		switch k {
		case dQ4_0:
			VMOVUPS(g.q40Levels(), g.out(0))
		case dIQ4_NL:
			VMOVUPS(g.iq4Levels(g.halves(dqBlock[k].bytes, 0)[0]), g.out(0))
		case dIQ4_XS:
			d := g.halves(dqBlock[k].bytes, 0)[0]
			sh := GP32()
			MOVWLZX(g.at(2), sh)
			for ib := 0; ib < 8; ib++ {
				VMOVUPS(g.iq4Levels(g.iq4XSScale(d, sh, ib)), g.out(16*ib))
			}
		default:
			panic(fmt.Sprintf("genTables: %s", k))
		}
	})
	return name
}

// q6K decodes Q6_K: 128 bytes of low nibbles, 64 of high bit pairs, 16
// int8 scales, d; sub-block s of 16 is (d·sc[s])·(q-32).
func (g *dq) q6K() {
	a := g.a
	d := a.q8Scale(g.at(208))
	for i := 0; i < 16; i += a.V {
		v := a.vec()
		VPMOVSXBD(g.at(192+i), v)
		VCVTDQ2PS(v, v)
		VMULPS(d, v, v)
		VMOVUPS(v, g.loc(4*i))
	}
	if a.zmm {
		g.q6Kzmm()
		return
	}
	for n := 0; n < 2; n++ {
		// The quants of a half are put together a byte each, 32 at a time
		// (word shifts, byte masks: what a shift moves across a byte is
		// masked off), then sign-extended a vector at a time.
		h := g.loadY(g.at(128 + 32*n))
		for i := 0; i < 4; i++ {
			// Quarter i of the half: low (i < 2) or high nibbles of bytes
			// 64n + 32(i%2)..., bit pair i of bytes 128 + 32n...
			A := g.loadY(g.at(64*n + 32*(i%2)))
			if i >= 2 {
				A = g.ywords(VPSRLW, 4, A)
			}
			hs := h
			switch sh := 4 - 2*i; {
			case sh > 0:
				hs = g.ywords(VPSLLW, sh, h)
			case sh < 0:
				hs = g.ywords(VPSRLW, -sh, h)
			}
			q := g.yor(g.yand(0x0f0f0f0f, A), g.yand(0x30303030, hs))
			VPSUBB(g.c(0x20202020), q, q)
			for l0 := 0; l0 < 32; l0 += a.V {
				is := 8*n + l0/16
				g.emit(g.sx8(q, l0), g.bcast(g.loc(4*(is+2*i))), nil, false, 128*n+32*i+l0)
			}
		}
	}
}

// q6Kzmm is q6K's quants on zmm, 64 at a time: bytes 64n.. of ql hold
// quarters 0 and 1 of half n in their low nibbles, 2 and 3 in their high
// ones, and each quarter's bit pairs of qh go to bits 4-5 by a shift per
// 32-byte half of the vector; then one select, a mask and a subtract.
func (g *dq) q6Kzmm() {
	a := g.a
	c32 := a.vec()
	VPBROADCASTD(g.c(0x20202020), c32)
	for n := 0; n < 2; n++ {
		h := g.loadY(g.at(128 + 32*n))
		lo := a.vec()
		VMOVDQU32(g.at(64*n), lo)
		hi := a.vec()
		VPSRLW(U8(4), lo, hi)
		h4, h2, hr := g.ywords(VPSLLW, 4, h), g.ywords(VPSLLW, 2, h), g.ywords(VPSRLW, 2, h)
		hs := [2]VecVirtual{a.vec(), a.vec()}
		VINSERTI64X4(U8(1), h2, h4.AsZ(), hs[0]) // quarters 0, 1: qh << 4, << 2
		VINSERTI64X4(U8(1), hr, h.AsZ(), hs[1])  // quarters 2, 3: qh, qh >> 2
		for p, q := range [2]VecVirtual{lo, hi} {
			v := hs[p]
			VPTERNLOGD_BCST(U8(0xd8), g.c(0x0f0f0f0f), q, v) // bits 0-3 of q, the rest of v
			VPANDD_BCST(g.c(0x3f3f3f3f), v, v)
			VPSUBB(c32, v, v)
			for l := 0; l < 4; l++ {
				src := v.AsX()
				if l > 0 {
					src = XMM()
					VEXTRACTI32X4(U8(l), v, src)
				}
				w := a.vec()
				VPMOVSXBD(src, w)
				e := 128*n + 64*p + 16*l
				g.emit(w, g.loc(4*(e/16)), nil, false, e)
			}
		}
	}
}

// loadY loads 32 bytes into a ymm (EVEX on zmm, which can name Y16-Y31).
func (g *dq) loadY(m Mem) VecVirtual {
	y := YMM()
	if g.a.zmm {
		VMOVDQU32(m, y)
	} else {
		VMOVDQU(m, y)
	}
	return y
}

// yand returns the 32 bytes of x and the constant of lanes v.
func (g *dq) yand(v uint32, x VecVirtual) VecVirtual {
	d := YMM()
	if g.a.zmm {
		VPANDD(g.c(v), x, d)
	} else {
		VPAND(g.c(v), x, d)
	}
	return d
}

func (g *dq) yor(x, y VecVirtual) VecVirtual {
	d := YMM()
	if g.a.zmm {
		VPORD(y, x, d)
	} else {
		VPOR(y, x, d)
	}
	return d
}

// ywords shifts the words of the ymm x by s bits with op (VPSLLW, VPSRLW).
func (g *dq) ywords(op func(...Op), s int, x VecVirtual) VecVirtual {
	d := YMM()
	op(U8(s), x, d)
	return d
}

// sx8 sign-extends bytes l0.. of the ymm q into a vector of 32-bit lanes.
func (g *dq) sx8(q VecVirtual, l0 int) VecVirtual {
	src := q.AsX()
	if l0 >= 16 {
		src = XMM()
		if g.a.zmm {
			VEXTRACTI32X4(U8(1), q, src)
		} else {
			VEXTRACTI128(U8(1), q, src)
		}
	}
	if l0%16 == 8 {
		t := XMM()
		VPSHUFD(U8(0xEE), src, t)
		src = t
	}
	v := g.a.vec()
	VPMOVSXBD(src, v)
	return v
}

// q2K decodes Q2_K: 16 bytes of scale|min<<4, 64 bytes of 2-bit quants, d,
// dmin; sub-block c of 16 is (d·scale)·q - dmin·min.
func (g *dq) q2K() {
	a := g.a
	if a.zmm {
		g.q2Kzmm()
		return
	}
	dd := g.halves(dqBlock[dQ2_K].bytes, 80, 82)
	d, dmin := dd[0], dd[1]
	for i := 0; i < 16; i += a.V {
		s := g.u8(i)
		lo, hi := a.vec(), a.vec()
		VCVTDQ2PS(g.and(0x0f, s), lo)
		VMULPS(d, lo, lo)
		VCVTDQ2PS(g.shl(-4, s), hi)
		VMULPS(dmin, hi, hi)
		VMOVUPS(lo, g.loc(4*i))
		VMOVUPS(hi, g.loc(64+4*i))
	}
	for c := 0; c < 16; c++ {
		// Sub-block c: bit pair s of bytes 16 + 32n + 16·sub...
		n, s, sub := c/8, c%8/2, c%2
		for l0 := 0; l0 < 16; l0 += a.V {
			v := g.u8(16 + 32*n + 16*sub + l0)
			g.emit(g.and(3, g.shl(-2*s, v)), g.bcast(g.loc(4*c)), g.bcast(g.loc(64+4*c)), true, 16*c+l0)
		}
	}
}

// q2KScales stores the float32 scales d·scale and mins dmin·min of the 16
// sub-blocks of the Q2_K block off bytes past the current one at the stack
// area, 64 bytes each (zmm).
func (g *dq) q2KScales(off int) {
	a := g.a
	dd := g.halfMems(off+dqBlock[dQ2_K].bytes, off+80, off+82)
	s := g.u8(off)
	lo, hi := a.vec(), a.vec()
	VCVTDQ2PS(g.and(0x0f, s), lo)
	VMULPS_BCST(dd[0], lo, lo)
	VCVTDQ2PS(g.shl(-4, s), hi)
	VMULPS_BCST(dd[1], hi, hi)
	VMOVUPS(lo, g.loc(0))
	VMOVUPS(hi, g.loc(64))
}

// q2Kzmm is q2K on zmm: a table per sub-block of 16, its 16 entries the
// level of j mod 4 (the levels in a register, dq.iota, times the scale,
// minus the min: one rounding, as levels16's), so that each quant's bit
// pair, shifted to bits 0-1, needs no mask (the pairs above it in its
// lane pick the same level); the scales made ahead (scalesAhead) or here.
// Where tables of four sub-blocks spread from registers took two VPERMPS
// and a mask and offset a vector, on the one shuffle port of Intel's
// (bench/README.md).
func (g *dq) q2Kzmm() {
	if !g.scaled {
		g.q2KScales(0)
	}
	var quants [2]VecVirtual
	for c := 0; c < 16; c++ {
		// Sub-block c: bit pair s of bytes 16 + 32n + 16·sub..., loaded
		// once for the four sub-blocks that use them.
		n, s, sub := c/8, c%8/2, c%2
		lv := g.bcast(g.loc(4 * c))
		VFMSUB213PS_BCST(g.loc(64+4*c), g.iota, lv)
		if s == 0 {
			quants[sub] = g.u8(16 + 32*n + 16*sub)
		}
		g.lookup(lv, g.shl(-2*s, quants[sub]), 16*c)
	}
}

// q3K decodes Q3_K: 32 bytes of high bits, 64 bytes of low bit pairs, 12
// bytes of 6-bit scales, d; sub-block c of 16 is (d·(scale-32))·q, q the
// low pair minus 4 unless the high bit is set.
func (g *dq) q3K() {
	if !g.scaled {
		g.q3KScales(0)
	}
	a := g.a
	var q3q, q3h [2]VecVirtual // zmm: the low pairs and high bits in use
	for c := 0; c < 16; c++ {
		// Sub-block c: bit pair s of bytes 32 + 32n + 16·sub..., high bit
		// 4n+s of bytes 16·sub...
		n, s, sub := c/8, c%8/2, c%2
		if a.zmm {
			// A table per sub-block of level q-4 of the 3-bit q (entries
			// j and j+8 alike), indexed by the bit pair, moved to bits 0-1,
			// and the high bit at bit 2, merged in one VPTERNLOGD (the
			// bits above 2 are left over: VPERMPS reads bits 0-3, and bit
			// 3 picks the same level). The 16 bytes of each are loaded
			// once for all the sub-blocks that use them.
			// Its levels are the ones in the iota register times the
			// scale (a broadcast of the constant levels from memory
			// issues on Zen 4's shuffle pipes).
			lv := a.vec()
			VMULPS_BCST(g.loc(4*c), g.iota, lv)
			if s == 0 {
				q3q[sub] = g.u8(32 + 32*n + 16*sub)
			}
			if n == 0 && s == 0 {
				q3h[sub] = g.u8(16 * sub)
			}
			hs := g.shl(2-(4*n+s), q3h[sub]) // a new register when s = 0 (4n+s ≠ 2)
			var idx VecVirtual
			if s == 0 {
				idx = hs
				VPTERNLOGD_BCST(U8(0xd8), g.c(3), q3q[sub], idx) // bits 0-1 of q3q, the rest of hs
			} else {
				idx = g.shl(-2*s, q3q[sub])
				VPTERNLOGD_BCST(U8(0xe4), g.c(3), hs, idx) // bits 0-1 of idx, the rest of hs
			}
			g.lookup(lv, idx, 16*c)
			continue
		}
		for l0 := 0; l0 < 16; l0 += a.V {
			qv := g.u8(32 + 32*n + 16*sub + l0)
			hv := g.u8(16*sub + l0)
			q := g.or(g.and(3, g.shl(-2*s, qv)), g.and(4, g.shl(2-(4*n+s), hv)))
			g.emit(g.sub(4, q), g.bcast(g.loc(4*c)), nil, false, 16*c+l0)
		}
	}
}

// q3KScales stores the float32 scales d·(sc-32) of the 16 sub-blocks of
// the Q3_K block off bytes past the current one in the stack area, where
// q3K reads them.
func (g *dq) q3KScales(off int) {
	a0, a1, tmp := GP32(), GP32(), GP32()
	MOVL(g.at(off+96), a0)
	MOVL(g.at(off+100), a1)
	MOVL(g.at(off+104), tmp)
	x := XMM()
	for i := 0; i < 4; i++ {
		// Word i: low nibbles of a0 or a1 (shifted by 4 for i ≥ 2), top
		// bits from tmp >> 2i; inserted at once, so that few general
		// registers are live (a fused kernel holds many).
		r, t := GP32(), GP32()
		MOVL([2]Register{a0, a1}[i%2], r)
		if i >= 2 {
			SHRL(U8(4), r)
		}
		ANDL(U32(0x0f0f0f0f), r)
		MOVL(tmp, t)
		if i > 0 {
			SHRL(U8(2*i), t)
		}
		ANDL(U32(0x03030303), t)
		SHLL(U8(4), t)
		ORL(t, r)
		if i == 0 {
			VMOVD(r, x)
		} else {
			VPINSRD(U8(i), r, x, x)
		}
	}
	g.scalesTo(x, 16, 32, g.halves(off+dqBlock[dQ3_K].bytes, off+108)[0], 0)
}

// iq4 decodes 16 bytes of level nibbles at off into 32 elements from out
// element i: low nibbles first, each level times scale (a register, or on
// zmm with the levels in the iota register a float32 in memory).
func (g *dq) iq4(tbl VecVirtual, scale Op, off, i int) {
	a := g.a
	if a.zmm {
		var lv Op = g.tab.Offset(64 * (i / 32))
		if g.tab.Base == nil {
			lv = g.iq4Levels(scale)
		}
		v := g.u8(off)
		g.lookup(lv, v, i)
		g.lookup(lv, g.shl(-4, v), i+16)
		return
	}
	x, lo, hi := XMM(), XMM(), XMM()
	a.movdqu(g.at(off), x)
	mask := g.c(0x0f0f0f0f)
	if a.zmm {
		VPANDD(mask, x, lo)
		VPSRLW(U8(4), x, hi)
		VPANDD(mask, hi, hi)
	} else {
		VPAND(mask, x, lo)
		VPSRLW(U8(4), x, hi)
		VPAND(mask, hi, hi)
	}
	for h, idx := range []VecVirtual{lo, hi} {
		lv := XMM()
		VPSHUFB(idx, tbl, lv)
		for j := 0; j < 16; j += a.V {
			src := lv
			if j == 8 {
				src = XMM()
				VPSHUFD(U8(0xEE), lv, src)
			}
			v := a.vec()
			VPMOVSXBD(src, v)
			g.emit(v, scale, nil, false, i+16*h+j)
		}
	}
}

// iq4XS decodes IQ4_XS: d, the top bit pairs of eight 6-bit scales, their
// low nibbles, 128 bytes of level nibbles; sub-block ib of 32 is
// (d·(scale-32))·level.
func (g *dq) iq4XS(tbl VecVirtual) {
	if g.tab.Base != nil {
		for ib := 0; ib < 8; ib++ {
			g.iq4(tbl, nil, 8+16*ib, 32*ib)
		}
		return
	}
	d := g.halves(dqBlock[dIQ4_XS].bytes, 0)[0]
	sh := GP32()
	MOVWLZX(g.at(2), sh)
	for ib := 0; ib < 8; ib++ {
		g.iq4(tbl, g.iq4XSScale(d, sh, ib), 8+16*ib, 32*ib)
	}
}

// iq4XSScale is sub-block ib's scale d·(ls-32), from the block's d and
// its 16 bits of high scale bits sh: broadcast, or with the levels in the
// iota register stored to the stack for the levels' multiply to read as
// its broadcast operand (a broadcast from a register takes Zen 4's
// shuffle pipes, which the lookups bind).
func (g *dq) iq4XSScale(d VecVirtual, sh GPVirtual, ib int) Op {
	ls := iq4XSLs(g.at(4), sh, ib)
	f := XMM()
	VXORPS(f, f, f)
	VCVTSI2SSL(ls, f, f)
	VMULSS(d.AsX(), f, f)
	if g.iota != nil {
		m := g.loc(4 * ib)
		VMOVSS(f, m)
		return m
	}
	dl := g.a.vec()
	VBROADCASTSS(f, dl)
	return dl
}

// iq4XSLs is IQ4_XS sub-block ib's 6-bit scale minus 32: its low nibble
// from the 4 bytes at low, its high two bits from the block's 16 bits sh.
func iq4XSLs(low Mem, sh GPVirtual, ib int) GPVirtual {
	ls, t := GP32(), GP32()
	MOVBLZX(low.Offset(ib/2), ls)
	if ib%2 == 1 {
		SHRL(U8(4), ls)
	}
	ANDL(U32(0x0f), ls)
	MOVL(sh, t)
	if ib > 0 {
		SHRL(U8(2*ib), t)
	}
	ANDL(U32(3), t)
	SHLL(U8(4), t)
	ORL(t, ls)
	SUBL(U32(32), ls)
	return ls
}

// iq4Levels is IQ4's 16 levels on zmm: kvaluesIQ4NL times the scale, a
// register or a float32 in memory times the levels in the iota register.
func (g *dq) iq4Levels(scale Op) VecVirtual {
	lv := g.a.vec()
	if m, ok := scale.(Mem); ok {
		VMULPS_BCST(m, g.iota, lv)
		return lv
	}
	VMULPS(iq4LevelConst(g.a), scale, lv)
	return lv
}

// iq4LevelConst is the vector of kvaluesIQ4NL as float32.
func iq4LevelConst(a arch) Mem {
	w := make([]uint32, 16)
	for q, v := range kvaluesIQ4NL {
		w[q] = math.Float32bits(float32(v))
	}
	return a.constDwords("dq_iq4nl_levels", w)
}

// levels is the 16 bytes of kvaluesIQ4NL.
func (g *dq) levels() Mem {
	name := "dq_kvalues_iq4nl"
	if m, ok := constVecs[name]; ok {
		return m
	}
	m := GLOBL(name, RODATA|NOPTR)
	for i, v := range kvaluesIQ4NL {
		DATA(i, U8(uint8(v)))
	}
	constVecs[name] = m
	return m
}

// constDwords returns a read-only vector of the 32-bit lanes w.
func (a arch) constDwords(name string, w []uint32) Mem {
	name = a.name + "_" + name
	if m, ok := constVecs[name]; ok {
		return m
	}
	m := GLOBL(name, RODATA|NOPTR)
	for i, v := range w {
		DATA(4*i, U32(v))
	}
	constVecs[name] = m
	return m
}

// movdqu moves 16 bytes; on zmm with the EVEX form, which can name
// registers 16-31.
func (a arch) movdqu(m Mem, x VecVirtual) {
	if a.zmm {
		VMOVDQU32(m, x)
	} else {
		VMOVDQU(m, x)
	}
}

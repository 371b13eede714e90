package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/bits"
	"slices"
	"strconv"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The codebook i-quants (IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S,
// IQ1_M) store each group of 8 (IQ3: 4) elements as an index into a fixed
// grid of small magnitudes, with a sign bit per element (IQ1: a ±1/8
// shift per group instead) and a scale per 32 or 16 elements. A grid holds
// at most 8 distinct magnitudes, so the decoders load each group's entry
// from a copy of the grid that stores the rank of every magnitude instead
// of the magnitude, and look the ranks up (VPERMPS) in a vector
// of the scale times each magnitude: the products tensor.DequantizeRow
// computes, one rounding each. The sign comes as the rank's bit 3 (zmm:
// the table's upper half holds the negated products) or, on ymm, whose
// VPERMPS has only 8 entries, as a float sign flip: for values that are
// not NaN, -(s·m) and (s·m)·(-1) have the same bits. IQ1's shifts are the
// rank's bit 2 (IQ1_M) or a table per scale (IQ1_S).

// iqKind describes one codebook type.
type iqKind struct {
	grid  string // ggml's grid, by its name in tensor/iquant_tables.go
	entry int    // bytes (elements) an entry: 4 or 8
	int8  bool   // signed grid values (IQ1)
	half  bool   // a scale per 16 elements rather than 32
	shift bool   // IQ1: a shift of the grid values instead of signs
	// factor is F, kernels.codebookFactor: d/F times integers are the
	// weights (the fast product's widening, genWidenCB).
	factor float32
}

var iqKinds = map[dqkind]iqKind{
	dIQ3_S:   {grid: "iq3sGrid", entry: 4, factor: 1},
	dIQ3_XXS: {grid: "iq3xxsGrid", entry: 4, factor: 4},
	dIQ2_XXS: {grid: "iq2xxsGrid", entry: 8, factor: 8},
	dIQ2_XS:  {grid: "iq2xsGrid", entry: 8, half: true, factor: 8},
	dIQ2_S:   {grid: "iq2sGrid", entry: 8, half: true, factor: 8},
	dIQ1_S:   {grid: "iq1sGrid", entry: 8, int8: true, shift: true, factor: 8},
	dIQ1_M:   {grid: "iq1sGrid", entry: 8, int8: true, half: true, shift: true, factor: 8},
}

func isIQ(k dqkind) bool { _, ok := iqKinds[k]; return ok }

// iqTablesPath is tensor's copy of ggml's grids, read by the generator so
// that the kernels' tables cannot drift from the pure-Go decoders'.
const iqTablesPath = "../../tensor/iquant_tables.go"

var tensorTables map[string][]uint64

// tensorTable returns the elements of the array variable name of
// iqTablesPath.
func tensorTable(name string) []uint64 {
	if tensorTables == nil {
		tensorTables = map[string][]uint64{}
		f, err := parser.ParseFile(token.NewFileSet(), iqTablesPath, nil, 0)
		if err != nil {
			panic(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, v := range vs.Values {
					cl, ok := v.(*ast.CompositeLit)
					if !ok {
						continue
					}
					var vals []uint64
					for _, e := range cl.Elts {
						neg := false
						if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.SUB {
							neg, e = true, u.X
						}
						n, err := strconv.ParseUint(e.(*ast.BasicLit).Value, 0, 64)
						if err != nil {
							panic(err)
						}
						if neg {
							n = -n
						}
						vals = append(vals, n)
					}
					tensorTables[vs.Names[i].Name] = vals
				}
			}
		}
	}
	t, ok := tensorTables[name]
	if !ok {
		panic(iqTablesPath + " has no table " + name)
	}
	return t
}

// iqMagnitudes returns the distinct values of kind k's grid, ascending.
func iqMagnitudes(k dqkind) []int {
	s := iqKinds[k]
	var m []int
	for _, e := range tensorTable(s.grid) {
		for j := 0; j < s.entry; j++ {
			v := int(uint8(e >> (8 * j)))
			if s.int8 {
				v = int(int8(v))
			}
			if !slices.Contains(m, v) {
				m = append(m, v)
			}
		}
	}
	slices.Sort(m)
	if len(m) > 8 || s.shift && len(m) > 4 {
		panic(fmt.Sprintf("%v: %d grid values", k, len(m)))
	}
	return m
}

// entryRanks returns kind k's grid entries with every value replaced by its
// rank in iqMagnitudes, element by element.
func entryRanks(k dqkind) [][]int {
	s := iqKinds[k]
	mags := iqMagnitudes(k)
	var out [][]int
	for _, e := range tensorTable(s.grid) {
		r := make([]int, s.entry)
		for j := range r {
			v := int(uint8(e >> (8 * j)))
			if s.int8 {
				v = int(int8(v))
			}
			r[j] = slices.Index(mags, v)
		}
		out = append(out, r)
	}
	return out
}

// iqRanks is kind k's grid with every value replaced by its rank in
// iqMagnitudes, a byte each.
func (g *dq) iqRanks(k dqkind) Mem {
	s := iqKinds[k]
	return rodata(fmt.Sprintf("dq_ranks_%s", s.grid), func() {
		for i, rs := range entryRanks(k) {
			var r uint64
			for j, v := range rs {
				r |= uint64(v) << (8 * j)
			}
			if s.entry == 4 {
				DATA(4*i, U32(uint32(r)))
			} else {
				DATA(8*i, U64(r))
			}
		}
	})
}

// iqRanksWide is iqRanks with each rank widened to 32 bits (4·entry bytes
// an entry: IQ3_S 8 KiB, IQ3_XXS 4 KiB, IQ2_XXS 8 KiB, IQ2_XS 16 KiB): on
// zmm a vector's entries are then loaded and inserted as they are, where
// the byte entries needed inserts (VPINSRD: two shuffles each on Intel)
// and a widening, all on the one shuffle port (figures: bench/README.md).
func (g *dq) iqRanksWide(k dqkind) Mem {
	s := iqKinds[k]
	return rodata(fmt.Sprintf("dq_ranks32_%s", s.grid), func() {
		for i, rs := range entryRanks(k) {
			for j, v := range rs {
				DATA(4*(s.entry*i+j), U32(uint32(v)))
			}
		}
	})
}

// rodata returns the read-only global name, made by fill's DATA the first
// time it is asked for.
func rodata(name string, fill func()) Mem {
	if m, ok := constVecs[name]; ok {
		return m
	}
	m := GLOBL(name, RODATA|NOPTR)
	fill()
	constVecs[name] = m
	return m
}

// wideRanks reports whether a's decoders of codebook kind k read
// iqRanksWide (false for other kinds): on zmm, where the widened grid is
// at most 16 KiB (the larger ones would crowd L1); on Zen (arch.zen)
// IQ2_XS's only, the one kind they made faster there.
func wideRanks(a arch, k dqkind) bool {
	if !isIQ(k) {
		return false
	}
	s := iqKinds[k]
	return a.zmm && (!a.zen || k == dIQ2_XS) && len(tensorTable(s.grid))*4*s.entry <= 16<<10
}

// iqLevels is the vector the scale multiplies into kind k's lookup table:
// the magnitudes by rank, on zmm followed by their negations from entry 8;
// IQ1 the grid values plus 1/8 (minus 1/8 from entry 4 for IQ1_M; IQ1_S
// has a second vector of them, minus 1/8, after the first).
func (g *dq) iqLevels(k dqkind) Mem {
	var w []uint32
	for _, v := range g.iqLevelValues(k) {
		w = append(w, math.Float32bits(float32(v)))
	}
	return g.a.constDwords(fmt.Sprintf("dq_levels_%s", k), w)
}

// iqLevelsInt is iqLevels in integers, on zmm: a weight of kind k is
// d/F·(2s+1)·L, F its codebook factor, so L is its grid magnitude (negated
// from entry 8), IQ1's 8g+1 and 8g-1 (8 times iqLevels' g±1/8).
func (g *dq) iqLevelsInt(k dqkind) Mem {
	m := 1.0
	if iqKinds[k].shift {
		m = 1 / iq1Delta
	}
	var w []uint32
	for _, v := range g.iqLevelValues(k) {
		w = append(w, uint32(int32(v*m)))
	}
	return g.a.constDwords(fmt.Sprintf("dq_ilevels_%s", k), w)
}

// iqLevelValues is the lanes of iqLevels, each exact in float32 (unused
// lanes +0).
func (g *dq) iqLevelValues(k dqkind) []float64 {
	a, s := g.a, iqKinds[k]
	mags := iqMagnitudes(k)
	var w []float64
	switch {
	case k == dIQ1_S:
		for _, sh := range []float64{iq1Delta, -iq1Delta} {
			for i := 0; i < a.V; i++ {
				var v float64
				if i < len(mags) {
					v = float64(mags[i]) + sh
				}
				w = append(w, v)
			}
		}
	case s.shift:
		w = make([]float64, a.V)
		for i := range w {
			if r := i % 8 % 4; r < len(mags) {
				sh := iq1Delta
				if i%8 >= 4 {
					sh = -iq1Delta
				}
				w[i] = float64(mags[r]) + sh
			}
		}
	default:
		w = make([]float64, a.V)
		for i := range w {
			if r := i % 8; r < len(mags) {
				v := float64(mags[r])
				if i >= 8 {
					v = -v
				}
				w[i] = v
			}
		}
	}
	return w
}

// iq1Delta is ggml's IQ1S_DELTA (and IQ1M_DELTA).
const iq1Delta = 0.125

// iqSignTable is the ymm decoders' sign flips: 256 vectors of eight
// float32 sign masks, vector b flipping the lanes of the set bits of b;
// ksigns: 128 vectors, vector i those of ggml's ksigns_iq2xs[i].
func (a arch) iqSignTable(ksigns bool) Mem {
	name := "dq_signflips"
	n := 256
	if ksigns {
		name, n = "dq_signflips_ksigns", 128
	}
	if m, ok := constVecs[name]; ok {
		return m
	}
	ks := tensorTable("ksignsIQ2XS")
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < n; i++ {
		b := uint64(i)
		if ksigns {
			b = ks[i]
		}
		for j := 0; j < 8; j++ {
			DATA(32*i+4*j, U32(uint32(b>>j&1)<<31))
		}
	}
	constVecs[name] = m
	return m
}

// ksignsBytes is ggml's ksigns_iq2xs.
func ksignsBytes() Mem {
	name := "dq_ksigns"
	if m, ok := constVecs[name]; ok {
		return m
	}
	m := GLOBL(name, RODATA|NOPTR)
	for i, v := range tensorTable("ksignsIQ2XS") {
		DATA(i, U8(uint8(v)))
	}
	constVecs[name] = m
	return m
}

// iqSignSource says where kind k keeps its signs: at a byte offset, one
// bit per element in order (bitsAt ≥ 0), or as 7-bit ksigns indices.
func iqSignSource(k dqkind) (bitsAt int, ksigns bool) {
	switch k {
	case dIQ3_S:
		return 74, false
	case dIQ2_S:
		return 34, false
	case dIQ3_XXS, dIQ2_XXS, dIQ2_XS:
		return -1, true
	}
	return -1, false
}

// ksignsIndex puts the 7-bit ksigns index of group G (8 elements) of
// kind k's block, times mul (a power of two), into a new register.
func (g *dq) ksignsIndex(k dqkind, G int, mul int) GPVirtual {
	sh := 0 // log2 mul
	for 1<<sh < mul {
		sh++
	}
	r := GP64()
	var bit int // the index's first bit in the loaded word
	switch k {
	case dIQ2_XS:
		MOVWLZX(g.at(2+2*G), r.As32())
		bit = 9
	case dIQ2_XXS:
		MOVL(g.at(2+8*(G/4)+4), r.As32())
		bit = 7 * (G % 4)
	case dIQ3_XXS:
		MOVL(g.at(66+4*(G/4)), r.As32())
		bit = 7 * (G % 4)
	}
	switch d := bit - sh; {
	case d > 0:
		SHRL(U8(d), r.As32())
	case d < 0:
		SHLL(U8(-d), r.As32())
	}
	ANDL(U32(127<<sh), r.As32())
	return r
}

// iqD returns the block's fp16 scale d in lane 0 of an xmm.
func (g *dq) iqD(k dqkind) VecVirtual {
	r := GP32()
	if k == dIQ1_M {
		// The top nibbles of the four scale words, lowest first.
		t := GP32()
		MOVWLZX(g.at(48), r)
		SHRL(U8(12), r)
		for i, sh := range []int{8, 4, 0} {
			MOVWLZX(g.at(50+2*i), t)
			if sh > 0 {
				SHRL(U8(sh), t)
			}
			ANDL(U32(0xf0<<(4*i)), t)
			ORL(t, r)
		}
	} else {
		MOVWLZX(g.at(0), r)
	}
	x := XMM()
	VMOVD(r, x)
	VCVTPH2PS(x, x)
	return x
}

// iqScales returns the scales of kind k's block (d in lane 0 of dx, or
// with dx nil from the half area: halves) as
// float32 lanes, scale j in lane j%V of vector j/V: j = ib for a scale per
// 32 elements, j = 8h+ib for the halves h of 16 (ymm: two vectors). The
// arithmetic is tensor's, one rounding an operation: d·(2s+1), or
// (d·(0.5+s))·c.
func (g *dq) iqScales(k dqkind, dx VecVirtual) []VecVirtual {
	a := g.a
	vec := func() VecVirtual { return a.vec() }
	one := func(v VecVirtual) []VecVirtual { return []VecVirtual{v} }
	var ss []VecVirtual // 32-bit integer scales
	quarter := true
	// nibbles splits the bytes at off into low and high nibbles.
	nibbles := func(off int) []VecVirtual {
		b := YMM()
		VPMOVZXBD(g.at(off), b)
		lo, hi := YMM(), YMM()
		a.pand(g.c(15), b, lo)
		VPSRLD(U8(4), b, hi)
		if !a.zmm {
			return []VecVirtual{lo, hi}
		}
		z := ZMM()
		VINSERTI32X8(U8(1), hi, lo.AsZ(), z)
		return one(z)
	}
	switch k {
	case dIQ3_S:
		v := vec()
		VPBROADCASTD(g.at(106), v)
		VPSRLVD(a.constDwords("dq_srl_nibbles", []uint32{0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0}[:a.V]), v, v)
		a.pand(g.c(15), v, v)
		ss, quarter = one(v), false
	case dIQ3_XXS:
		v := YMM()
		a.movdquY(g.at(66), v)
		VPSRLD(U8(28), v, v)
		ss = one(v)
	case dIQ2_XXS:
		if a.zmm {
			z, v := ZMM(), YMM()
			VMOVDQU64(g.at(2), z)
			VPSRLQ(U8(60), z, z)
			VPMOVQD(z, v)
			ss = one(v)
		} else {
			p, q, v := YMM(), YMM(), YMM()
			VMOVDQU(g.at(2), p)
			VMOVDQU(g.at(34), q)
			VPSRLQ(U8(60), p, p)
			VPSRLQ(U8(60), q, q)
			VSHUFPS(U8(0x88), q, p, v) // ib 0, 1, 4, 5 | 2, 3, 6, 7
			VPERMQ(U8(0xd8), v, v)
			ss = one(v)
		}
	case dIQ2_XS:
		ss = nibbles(66)
	case dIQ2_S:
		ss = nibbles(74)
	case dIQ1_S:
		v := YMM()
		VPMOVZXWD(g.at(34), v)
		VPSRLD(U8(12), v, v)
		a.pand(g.c(7), v, v)
		ss, quarter = one(v), false
	case dIQ1_M:
		// Scale (ib, h) is bits 6(ib%2)+3h of word ib/2 at 48.
		w := vec()
		VPMOVZXWD(g.at(48), w.AsX())
		spread := []uint32{0, 0, 1, 1, 2, 2, 3, 3, 0, 0, 1, 1, 2, 2, 3, 3}
		shifts := []uint32{0, 6, 0, 6, 0, 6, 0, 6, 3, 9, 3, 9, 3, 9, 3, 9}
		sp := vec()
		a.movdquV(a.constDwords("dq_iq1m_spread", spread[:a.V]), sp)
		VPERMD(w, sp, w)
		for h := 0; h < 16/a.V; h++ {
			v := vec()
			VPSRLVD(a.constDwords(fmt.Sprintf("dq_iq1m_scales%d", h), shifts[a.V*h:a.V*h+a.V]), w, v)
			a.pand(g.c(7), v, v)
			ss = append(ss, v)
		}
		quarter = false
	}
	if g.ints {
		// The integers' scale 2s+1: a weight d·(2s+1)·g, or d·(0.5+s)·c·g
		// with F·c = 2, is d/F·(2s+1)·L (iqLevelsInt). Zero for a d of
		// zero or not finite, as the Go twin's.
		bd := ZMM()
		VBROADCASTSS(dx, bd)
		kq := finiteNonzero(a, bd)
		var out []VecVirtual
		for _, v := range ss {
			t := ZMM()
			VPSLLD(U8(1), v.AsZ(), t)
			VPORD_BCST(g.c(1), t, t)
			VMOVDQA32_Z(t, kq, t)
			out = append(out, t)
		}
		return out
	}
	var bd VecVirtual
	if dx != nil {
		bd = a.vec()
		VBROADCASTSS(dx, bd)
	} else {
		bd = g.halves(dqBlock[k].bytes, 0)[0]
	}
	var out []VecVirtual
	for _, v := range ss {
		f := a.vec()
		var vv Register = v
		if v.Size() < f.Size() {
			vv = v.AsZ()
		}
		c := float32(0.25)
		if k == dIQ3_XXS {
			c = 0.5
		}
		switch {
		case quarter && a.zmm:
			VCVTDQ2PS(vv, f)
			VADDPS_BCST(g.c(math.Float32bits(0.5)), f, f)
			VMULPS(bd, f, f)
			VMULPS_BCST(g.c(math.Float32bits(c)), f, f)
		case quarter:
			VCVTDQ2PS(vv, f)
			VADDPS(g.c(math.Float32bits(0.5)), f, f)
			VMULPS(bd, f, f)
			VMULPS(g.c(math.Float32bits(c)), f, f)
		default:
			t := a.vec()
			VPSLLD(U8(1), vv, t)
			a.por(g.c(1), t, t)
			VCVTDQ2PS(t, f)
			VMULPS(bd, f, f)
		}
		out = append(out, f)
	}
	return out
}

// iqTable returns the lookup table of scale j (iqScales) of kind k's
// block: the scale times the levels.
func (g *dq) iqTable(k dqkind, sc []VecVirtual, j, ib int) VecVirtual {
	a := g.a
	idx, bc := a.vec(), a.vec()
	lane := uint32(j % a.V)
	if a.zmm {
		VPBROADCASTD(a.constVec(fmt.Sprintf("dq_lane%d", lane), lane), idx)
	} else {
		VMOVDQU(a.constVec(fmt.Sprintf("dq_lane%d", lane), lane), idx)
	}
	VPERMPS(sc[j/a.V], idx, bc)
	t := a.vec()
	lv := g.iqLevels(k)
	if g.ints {
		lv = g.iqLevelsInt(k)
	}
	if k == dIQ1_S {
		// The levels of the block's shift sign, qh's bit 15.
		sel, base := GP64(), GP64()
		MOVWLZX(g.at(34+2*ib), sel.As32())
		SHRL(U8(15), sel.As32())
		sh := 5
		if a.zmm {
			sh = 6
		}
		SHLL(U8(sh), sel.As32())
		LEAQ(lv, base)
		lv = Mem{Base: base, Index: sel, Scale: 1}
	}
	if g.ints {
		VPMULLD(lv, bc, t)
		return t
	}
	VMULPS(lv, bc, t)
	return t
}

// movdquY loads 32 bytes; movdquV a whole vector.
func (a arch) movdquY(m Mem, y VecVirtual) {
	if a.zmm {
		VMOVDQU32(m, y)
	} else {
		VMOVDQU(m, y)
	}
}

func (a arch) movdquV(m Mem, v VecVirtual) {
	if a.zmm {
		VMOVDQU32(m, v)
	} else {
		VMOVDQU(m, v)
	}
}

// pand and por are VPAND and VPOR, in their EVEX forms on zmm (which can
// name registers 16-31).
func (a arch) pand(m Op, x, d VecVirtual) {
	if _, isMem := m.(Mem); isMem && a.zmm {
		VPANDD_BCST(m, x, d) // a constant vector (dq.c)
	} else if a.zmm {
		VPANDD(m, x, d)
	} else {
		VPAND(m, x, d)
	}
}

func (a arch) por(m Op, x, d VecVirtual) {
	if _, isMem := m.(Mem); isMem && a.zmm {
		VPORD_BCST(m, x, d) // a constant vector (dq.c)
	} else if a.zmm {
		VPORD(m, x, d)
	} else {
		VPOR(m, x, d)
	}
}

// iqIndices returns the grid indices of the entries of elements 32·ib...
// of kind k's block, a 32-bit lane each: an xmm (8-byte entries) or a
// ymm (4-byte entries).
func (g *dq) iqIndices(k dqkind, ib int) VecVirtual {
	a := g.a
	vec := XMM
	if iqKinds[k].entry == 4 {
		vec = YMM
	}
	lo := vec()
	// tops adds the index bits above the low byte: bit pos(L) of the dword
	// at off, for lane L, moved to bit 8 and masked.
	tops := func(off int, word bool, sll int, srl []uint32, mask uint32) {
		h, t := vec(), vec()
		if word {
			VPBROADCASTW(g.at(off), h)
		} else {
			VPBROADCASTD(g.at(off), h)
		}
		if sll > 0 {
			VPSLLD(U8(sll), h, h)
		}
		if srl != nil {
			cs := slices.Clone(srl)
			for len(cs) < a.V {
				cs = append(cs, 0)
			}
			name := "dq_srl"
			for _, c := range srl {
				name += fmt.Sprintf("_%d", c)
			}
			VPSRLVD(a.constDwords(name, cs), h, t)
		} else {
			t = h
		}
		a.pand(g.c(mask), t, t)
		a.por(t, lo, lo)
	}
	switch k {
	case dIQ3_S:
		VPMOVZXBD(g.at(2+8*ib), lo)
		// Bit L of qh[ib] to bit 8 of lane L: left by 8, right by L.
		tops(66+ib, false, 8, []uint32{0, 1, 2, 3, 4, 5, 6, 7}, 0x100)
	case dIQ3_XXS:
		VPMOVZXBD(g.at(2+8*ib), lo)
	case dIQ2_XXS:
		VPMOVZXBD(g.at(2+8*ib), lo)
	case dIQ2_XS:
		VPMOVZXWD(g.at(2+8*ib), lo)
		a.pand(g.c(511), lo, lo)
	case dIQ2_S:
		VPMOVZXBD(g.at(2+4*ib), lo)
		tops(66+ib, false, 8, []uint32{0, 2, 4, 6}, 0x300)
	case dIQ1_S:
		VPMOVZXBD(g.at(2+4*ib), lo)
		tops(34+2*ib, true, 8, []uint32{0, 3, 6, 9}, 0x700)
	case dIQ1_M:
		VPMOVZXBD(g.at(4*ib), lo)
		tops(32+2*ib, true, 8, []uint32{0, 4, 8, 12}, 0x700)
	}
	return lo
}

// iqRanksOf loads the ranks of elements v... of the current 32, whose
// grid indices are at the stack area's start, zero-extended to 32-bit lanes
// (wide: from iqRanksWide, already so).
func (g *dq) iqRanksOf(ranks Register, entry, v int, wide bool) VecVirtual {
	a := g.a
	q := a.vec()
	n := a.V / entry // entries a vector
	// The 4-byte kinds' indices leave their vector two at a time, one
	// 64-bit move instead of two 32-bit extracts (the vector unit is the
	// bottleneck), and are split in the general registers.
	var pair GPVirtual
	ent := func(j int) Mem {
		r := GP64()
		l := v/entry + j
		x := g.lanes[l/4]
		switch {
		case entry == 8 && l%4 == 0:
			VMOVD(x, r.As32())
		case entry == 8:
			VPEXTRD(U8(l%4), x, r.As32())
		case l%2 == 0:
			pair = GP64()
			if l%4 == 0 {
				VMOVQ(x, pair)
			} else {
				VPEXTRQ(U8(1), x, pair)
			}
			MOVL(pair.As32(), r.As32())
		default:
			SHRQ(U8(32), pair)
			r = pair
		}
		return Mem{Base: ranks, Index: r, Scale: uint8(entry)}
	}
	if n == 1 {
		VPMOVZXBD(ent(0), q)
		return q
	}
	if wide {
		// iqRanksWide: the entries as they are, 4·entry bytes each.
		at := func(j int) Mem {
			m := ent(j)
			SHLQ(U8(bits.TrailingZeros(uint(4*entry))), m.Index.(GPVirtual))
			m.Scale = 1
			return m
		}
		if entry == 4 {
			VBROADCASTI32X4(at(0), q)
			for j := 1; j < n; j++ {
				VINSERTI32X4(U8(j), at(j), q, q)
			}
		} else {
			VBROADCASTI64X4(at(0), q)
			VINSERTI64X4(U8(1), at(1), q, q)
		}
		return q
	}
	x := XMM()
	if entry == 8 {
		VMOVQ(ent(0), x)
		VPINSRQ(U8(1), ent(1), x, x)
	} else {
		VMOVD(ent(0), x)
		for j := 1; j < n; j++ {
			VPINSRD(U8(j), ent(j), x, x)
		}
	}
	VPMOVZXBD(x, q)
	return q
}

// iqRegs holds the addresses of a codebook kind's tables, which a fused
// kernel loads once for all its rows.
type iqRegs struct {
	ranks GPVirtual
	sgn   GPVirtual // ymm: the sign flips; zmm: ksigns; nil if none
}

func (g *dq) iqBases(k dqkind) *iqRegs {
	a, s := g.a, iqKinds[k]
	r := &iqRegs{ranks: GP64()}
	if wideRanks(a, k) {
		LEAQ(g.iqRanksWide(k), r.ranks)
	} else {
		LEAQ(g.iqRanks(k), r.ranks)
	}
	_, ksigns := iqSignSource(k)
	switch {
	case s.shift:
	case !a.zmm:
		r.sgn = GP64()
		LEAQ(a.iqSignTable(ksigns), r.sgn)
	case ksigns:
		r.sgn = GP64()
		LEAQ(ksignsBytes(), r.sgn)
	}
	return r
}

// iquant decodes a block of a codebook kind k.
func (g *dq) iquant(k dqkind) {
	a, s := g.a, iqKinds[k]
	// The block's d: through the half area where there is one (halves;
	// not IQ1_M's, halfArea), else converted in a register by iqD.
	var dx VecVirtual
	if g.half.Base == nil {
		dx = g.iqD(k)
	}
	g.dx = dx
	if g.iqr == nil {
		g.iqr = g.iqBases(k)
	}
	ranks, sgn := g.iqr.ranks, g.iqr.sgn
	bitsAt, _ := iqSignSource(k)
	var tbl VecVirtual
	sc := g.iqScales(k, dx)
	for ib := 0; ib < 8; ib++ {
		// The indices are extracted into general registers, which address
		// the entries: through the stack (the store does not forward to
		// the loads) or with gathers it is 1.3-1.5 times slower.
		idx := g.iqIndices(k, ib)
		lanes := []Register{idx.AsX()}
		if s.entry == 4 {
			hi := XMM()
			if a.zmm {
				VEXTRACTI32X4(U8(1), idx, hi)
			} else {
				VEXTRACTI128(U8(1), idx, hi)
			}
			lanes = append(lanes, hi)
		}
		g.lanes = lanes
		for v := 0; v < 32; v += a.V {
			e := 32*ib + v
			if v == 0 || s.half && v == 16 {
				j := ib
				if s.half {
					j = 8*(v/16) + ib
				}
				tbl = g.iqTable(k, sc, j, ib)
			}
			q := g.iqRanksOf(ranks, s.entry, v, wideRanks(a, k))
			G := e / 8 // the vector's first group of 8
			if k == dIQ1_M {
				// Group l's shift sign is bit 3 of nibble l of qh[ib]
				// (two bytes at 32+2ib), to bit 2 of its lanes.
				if a.zmm {
					h := a.vec()
					VPBROADCASTD(g.at(32+2*ib+v/16), h)
					VPSRLVD(a.constDwords("dq_iq1m_shift", []uint32{1, 1, 1, 1, 1, 1, 1, 1, 5, 5, 5, 5, 5, 5, 5, 5}), h, h)
					a.pand(g.c(4), h, h)
					a.por(h, q, q)
				} else {
					// Without a vector register to spare (4x2): a vector of
					// 4s or 0s chosen by the bit.
					r, base := GP64(), GP64()
					MOVBLZX(g.at(32+2*ib+v/16), r.As32())
					if G%2 == 0 {
						SHLL(U8(2), r.As32())
					} else {
						SHRL(U8(2), r.As32())
					}
					ANDL(U32(32), r.As32())
					LEAQ(a.constDwords("dq_iq1m_or", []uint32{0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4}), base)
					VPOR(Mem{Base: base, Index: r, Scale: 1}, q, q)
				}
			}
			if a.zmm && !s.shift {
				// Signs to bit 3 of the ranks: the table's negated half.
				km := K()
				if bitsAt >= 0 {
					KMOVW(g.at(bitsAt+G), km)
				} else {
					b0, b1 := GP32(), GP32()
					i0, i1 := g.ksignsIndex(k, G, 1), g.ksignsIndex(k, G+1, 1)
					MOVBLZX(Mem{Base: sgn, Index: i0, Scale: 1}, b0)
					MOVBLZX(Mem{Base: sgn, Index: i1, Scale: 1}, b1)
					SHLL(U8(8), b1)
					ORL(b1, b0)
					KMOVW(b0, km)
				}
				VPORD_BCST(g.c(8), q, km, q)
			}
			f := a.vec()
			VPERMPS(tbl, q, f)
			if !a.zmm && !s.shift {
				var r GPVirtual
				if bitsAt >= 0 {
					r = GP64()
					MOVBLZX(g.at(bitsAt+G), r.As32())
					SHLL(U8(5), r.As32())
				} else {
					r = g.ksignsIndex(k, G, 32)
				}
				VXORPS(Mem{Base: sgn, Index: r, Scale: 1}, f, f)
			}
			g.put(f, e)
		}
	}
}

package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// arch is one instruction-set level: AVX2+FMA+F16C on ymm registers, or
// AVX-512 (F, BW, VL, DQ) on zmm registers.
type arch struct {
	name string // suffix of the generated function names
	V    int    // float32 lanes per vector
	zmm  bool
	// vexVNNI: ymm int8 kernels with AVX-VNNI's VEX-encoded VPDPBUSD (CPUs
	// with AVX-VNNI but not AVX-512). Only the int8 family exists for it.
	vexVNNI bool
	// zen: the block decoders tuned for AMD Zen, whose two pipes take zmm
	// shuffles where Intel's one port 5 does (bench/README.md): Q3_K's,
	// IQ4_XS's and the codebook kinds' fp16 scales converted in a register
	// and byte-wide codebook ranks cost less there than the stores,
	// reloads and wider tables that spare Intel's port (halfArea,
	// wideRanks). Only the fused and
	// dequantiser kernels whose code differs exist for it (zenApart).
	zen bool
}

var (
	avx2      = arch{name: "AVX2", V: 8}
	avx512    = arch{name: "AVX512", V: 16, zmm: true}
	avx512zen = arch{name: "AVX512", V: 16, zmm: true, zen: true}
	avxvnni   = arch{name: "AVXVNNI", V: 8, vexVNNI: true}
)

// tag is the suffix of a's decoding kernels' and tables' names: its name,
// and Zen for the Zen-tuned decoders (constants are shared by name).
func (a arch) tag() string {
	if a.zen {
		return a.name + "Zen"
	}
	return a.name
}

// zenApart reports whether the Zen-tuned decoders of kind k differ from
// the AVX-512 ones; where they do not, the Zen tables name the AVX-512
// kernels.
func zenApart(k dqkind) bool {
	return halfArea(avx512, k) != halfArea(avx512zen, k) || wideRanks(avx512, k) != wideRanks(avx512zen, k)
}

// vec allocates a full-width vector register.
func (a arch) vec() VecVirtual {
	if a.zmm {
		return ZMM()
	}
	return YMM()
}

// zero clears v. VXORPS (the zmm form is AVX512DQ) is the zeroing idiom
// avo's liveness analysis knows; VPXORD x, x, x would make x look live
// around the loop.
func (a arch) zero(v VecVirtual) {
	VXORPS(v, v, v)
}

// bcast32 returns a vector with every 32-bit lane set to v.
func (a arch) bcast32(v uint32) VecVirtual {
	g := GP32()
	MOVL(U32(v), g)
	x := a.vec()
	if a.zmm {
		VPBROADCASTD(g, x)
	} else {
		t := XMM()
		VMOVD(g, t)
		VPBROADCASTD(t, x)
	}
	return x
}

// strided addresses up to eight equally spaced rows (weight rows or token
// vectors) with the fewest general registers: base, stride, 3·stride and a
// second base four rows on.
type strided struct {
	base, stride, stride3, base4 Register
	rows                         int
}

func newStrided(base, stride Register, n int) *strided {
	s := &strided{base: base, stride: stride, rows: n}
	if n >= 4 {
		s.stride3 = GP64()
		LEAQ(Mem{Base: stride, Index: stride, Scale: 2}, s.stride3)
	}
	if n >= 5 {
		s.base4 = GP64()
		LEAQ(Mem{Base: base, Index: stride, Scale: 4}, s.base4)
	}
	return s
}

func (s *strided) at(i, off int) Mem {
	b := s.base
	if i >= 4 {
		b, i = s.base4, i-4
	}
	switch i {
	case 0:
		return Mem{Base: b, Disp: off}
	case 1:
		return Mem{Base: b, Index: s.stride, Scale: 1, Disp: off}
	case 2:
		return Mem{Base: b, Index: s.stride, Scale: 2, Disp: off}
	default:
		return Mem{Base: b, Index: s.stride3, Scale: 1, Disp: off}
	}
}

func (s *strided) advance(bytes int) {
	ADDQ(U32(bytes), s.base)
	if s.base4 != nil {
		ADDQ(U32(bytes), s.base4)
	}
}

// hadd returns [a0+a1, a2+a3, b0+b1, b2+b3] in each 128-bit lane of two ymm
// registers, as VHADDPS does. AVX-512 kernels build it from EVEX shuffles
// because VHADDPS cannot name registers 16-31.
func (a arch) hadd(x, y VecVirtual) VecVirtual {
	d := YMM()
	if !a.zmm {
		VHADDPS(y, x, d)
		return d
	}
	t := YMM()
	VSHUFPS(U8(0x88), y, x, d)
	VSHUFPS(U8(0xDD), y, x, t)
	VADDPS(t, d, d)
	return d
}

// newAccs returns T×R zeroed accumulators, acc[t][r].
func (a arch) newAccs(T, R int) [][]VecVirtual {
	acc := make([][]VecVirtual, T)
	for t := range acc {
		acc[t] = make([]VecVirtual, R)
		for r := range acc[t] {
			acc[t][r] = a.vec()
			a.zero(acc[t][r])
		}
	}
	return acc
}

// finish is the end of a dot-form kernel: the "reduce" label its loop
// skips to when it has no steps, the reduction of acc into out (times the
// per-row scales of the scale parameter when scaled), and the return.
func (a arch) finish(acc [][]VecVirtual, out *strided, scaled bool) {
	a.finishWith(func() { a.reduceAddScaled(acc, out, scaled) })
}

// finishWith is finish with the reduction emitted by reduce.
func (a arch) finishWith(reduce func()) {
	Label("reduce")
	reduce()
	VZEROUPPER()
	RET()
}

// reduceAddScaled is reduceAdd with the scale parameter when scaled.
func (a arch) reduceAddScaled(acc [][]VecVirtual, out *strided, scaled bool) {
	var scale Register
	if scaled {
		scale = Load(Param("scale"), GP64())
	}
	a.reduceAdd(acc, out, scale)
}

// sumSpan is kernels.dotSpan: the dot-form kernels sum each product in
// registers over spans of this many input elements, counted from the
// call's first step, and add each span's sums to out in order, so that a
// product's bits do not depend on how many tokens share the call nor on
// how the caller chunks the input axis (it starts every call on a span).
const sumSpan = 2048

// spanCounter counts the steps left in a kernel's current span.
type spanCounter struct {
	left  GPVirtual
	steps int // steps per span
}

func newSpanCounter(steps int) *spanCounter {
	c := &spanCounter{left: GP64(), steps: steps}
	MOVQ(U32(steps), c.left)
	return c
}

// next ends a loop step: it counts the step off n and jumps to exit when
// none is left; otherwise it jumps back to loop, first adding the
// accumulators' sums to out and clearing them when the step ended a span.
func (a arch) next(n Register, exit string, c *spanCounter, loop string, acc [][]VecVirtual, out *strided, scaled bool) {
	a.nextWith(n, exit, c, loop, acc, func() { a.reduceAddScaled(acc, out, scaled) })
}

// nextWith is next with the reduction of a span's sums emitted by reduce.
func (a arch) nextWith(n Register, exit string, c *spanCounter, loop string, acc [][]VecVirtual, reduce func()) {
	DECQ(n)
	JZ(LabelRef(exit))
	DECQ(c.left)
	JNZ(LabelRef(loop))
	reduce()
	for t := range acc {
		for _, v := range acc[t] {
			a.zero(v)
		}
	}
	MOVQ(U32(c.steps), c.left)
	JMP(LabelRef(loop))
}

// reduceAdd sums the lanes of the R×T accumulators acc[t][r] and adds
// the sums, times scale[r] when scale is not nil, to out[t·ldo + 4r] (byte
// offsets). Accumulators are reduced four
// at a time in [t][r] order (fold to 8 lanes, two rounds of pairwise adds,
// fold to 4), so that with R = 4 one 16-byte load-add-store serves four
// rows; with R = 1 or 2 the four sums are split into single floats or pairs.
func (a arch) reduceAdd(acc [][]VecVirtual, out *strided, scale Register) {
	T, R := len(acc), len(acc[0])
	var ys []VecVirtual
	for t := range acc {
		for _, z := range acc[t] {
			if a.zmm {
				y := YMM()
				VEXTRACTF64X4(U8(1), z, y)
				VADDPS(y, z.AsY(), y)
				ys = append(ys, y)
			} else {
				ys = append(ys, z)
			}
		}
	}
	for g := 0; g < len(ys); g += 4 {
		var q [4]VecVirtual
		for j := range q {
			q[j] = ys[min(g+j, len(ys)-1)]
		}
		s := a.hadd(a.hadd(q[0], q[1]), a.hadd(q[2], q[3]))
		h := XMM()
		if a.zmm {
			VEXTRACTF32X4(U8(1), s, h)
		} else {
			VEXTRACTF128(U8(1), s, h)
		}
		VADDPS(h, s.AsX(), h)
		if scale != nil {
			// The group's lanes are rows g%R, (g+1)%R, ... of scale.
			sc := XMM()
			switch R {
			case 1:
				VBROADCASTSS(Mem{Base: scale}, sc)
			case 2:
				VMOVDDUP(Mem{Base: scale}, sc)
			default:
				VMOVUPS(Mem{Base: scale}, sc)
			}
			VMULPS(sc, h, h)
		}
		// Runs of consecutive rows of one token within the group.
		for j := 0; j < 4 && g+j < T*R; j += min(R, 4) {
			p := g + j
			m := out.at(p/R, 4*(p%R))
			v := h
			if j > 0 {
				v = XMM()
				VPERMILPS(U8([4]uint8{0, 0x39, 0x4E, 0x93}[j]), h, v) // lane j to lane 0
			}
			t := XMM()
			switch L := min(R, 4); L {
			case 4:
				VADDPS(m, v, t)
				VMOVUPS(t, m)
			case 2:
				VMOVQ(m, t)
				VADDPS(v, t, t)
				VMOVQ(t, m)
			default:
				VADDSS(m, v, t)
				VMOVSS(t, m)
			}
		}
	}
}

var constVecs = map[string]Mem{}

// constVec returns a read-only vector in memory with every 32-bit lane set
// to v (memory operands keep the constants out of the register file).
func (a arch) constVec(name string, v uint32) Mem {
	name = a.name + "_" + name
	if m, ok := constVecs[name]; ok {
		return m
	}
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < a.V; i++ {
		DATA(4*i, U32(v))
	}
	constVecs[name] = m
	return m
}

// constWords returns a read-only vector of 16-bit words (padded with zeros
// to the vector width).
func (a arch) constWords(name string, w []uint16) Mem {
	name = a.name + "_" + name
	if m, ok := constVecs[name]; ok {
		return m
	}
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < 2*a.V; i++ {
		var v uint16
		if i < len(w) {
			v = w[i]
		}
		DATA(2*i, U16(v))
	}
	constVecs[name] = m
	return m
}

// prefetchRows is how many weight rows a kernel for R rows (of any tokens)
// addresses: its own and the next R, which it prefetches, one cache line
// per row and step, while working on its own. In a GEMV or a decode step's
// product of a few tokens the next call starts on those rows, and rows of
// a few KiB are too short for the hardware prefetcher to have ramped up on
// its own (each new 4 KiB page restarts its training). Tiles of 3 to 6
// tokens once left it out, as prefill reuses each row for many tokens, and
// decoded a batch of 3 to 5 tokens at half a batch of 2's rate
// (bench/README.md); a prefill's full tiles have kernels without it
// (genDotPrefill).
func prefetchRows(R int) int {
	return 2 * R
}

package main

import (
	"fmt"
	"iter"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The fused kernels multiply block-quantised weights by float32 tokens
// without writing the dequantised weights anywhere: each vector of weights
// a block decoder (dq) would store is instead multiplied into the
// accumulators, as the F32 dot kernel does with the vector it loads. The
// vector is the one the dequantiser stores (the same instructions), each
// accumulator acc[t][r] receives the vectors of its row in element order
// (sink checks it) with the F32 kernel's VFMADD231PS, the span counter and
// the reduction are the F32 kernel's: so the product has exactly the bits
// of the F32 kernel over the dequantised weights, without the float32
// scratch that dequantMatMul writes and re-reads (eight times the bytes of
// a Q4_K row).

// fusedSink receives a fused kernel's weight vectors: the tokens x and the
// accumulators, and the element of the block the next vector must start at.
type fusedSink struct {
	x    *strided
	acc  [][]VecVirtual
	next int
	// yield, when set, passes control to the next row's decoder after
	// each vector (interleaved rows).
	yield func(struct{}) bool
	// shared is the token vector of the element interleaved rows are at
	// (one token), nil otherwise.
	shared *sharedX
}

type sharedX struct {
	i int
	x []VecVirtual
}

// add multiplies the weights f of elements i.. of the current row's block
// by every token's activations there and adds them to the row's
// accumulators.
func (s *fusedSink) add(g *dq, f VecVirtual, i int) {
	if i != s.next {
		panic(fmt.Sprintf("fused kernel: weights of element %d emitted where %d was next", i, s.next))
	}
	s.next += g.a.V
	if s.shared != nil {
		// Interleaved rows: the first row to reach element i loads the
		// tokens' vectors, the others reuse them.
		if s.shared.i != i || s.shared.x == nil {
			s.shared.i, s.shared.x = i, make([]VecVirtual, len(s.acc))
			for t := range s.acc {
				s.shared.x[t] = g.a.vec()
				VMOVUPS(s.x.at(t, 4*i), s.shared.x[t])
			}
		}
		for t := range s.acc {
			VFMADD231PS(s.shared.x[t], f, s.acc[t][g.row])
		}
	} else {
		for t := range s.acc {
			VFMADD231PS(s.x.at(t, 4*i), f, s.acc[t][g.row])
		}
	}
	if s.yield != nil {
		s.yield(struct{}{})
	}
}

// interleaved reports whether the fused kernel for R rows and T tokens
// decodes its rows' blocks vector by vector in turn rather than one block
// after the other: each accumulator is then a chain of a multiply-add a
// vector, and interleaving lets the rows' chains overlap (a block of a row
// alone is a chain of E/V dependent multiply-adds). It holds each row's
// decoder state at once, so only where the registers allow.
func interleaved(a arch, k dqkind, R, T int) bool {
	switch {
	case R == 1 || isIQ(k) && !(a.zmm && T == 1):
		return false
	case a.zmm:
		return T <= zmmInterleaved(k) || R == 2
	}
	// 16 ymm registers: one token, and not the kinds whose decoders hold
	// more than two vectors a row (fifth bits, a min, IQ4 levels).
	return T == 1 && k != dQ4_1 && k != dQ5_0 && k != dQ5_1 && k != dIQ4_NL && k != dIQ4_XS
}

// zmmInterleaved is the most tokens for which the 32 zmm registers hold
// four rows' accumulators and decoder state and the tokens' vectors of an
// element (the register allocator's verdict for each kind). The kinds of
// 2 interleave two rows for 3 and 4 tokens instead (fusedRows).
func zmmInterleaved(k dqkind) int {
	switch k {
	case dQ4_0, dQ4_1, dQ5_0, dQ4_K:
		return 4
	case dQ5_1:
		return 3
	}
	return 2
}

// fusedRows is how many rows the fused tile of T tokens of kind k covers:
// the family's R, or 2 where four rows interleaved would not fit the
// registers but two do (a tile of one row at a time loads each token's
// vector for every row; figures: bench/README.md).
func fusedRows(a arch, k dqkind, R, T int) int {
	if a.zmm && !isIQ(k) && zmmInterleaved(k) == 2 && T > 2 {
		return 2
	}
	return R
}

// fusedShape is the tile of the fused kernels: the F32 family's (so that
// they serve every decode-sized n the two-pass path serves), with R = 4.
//
// fusedLead is how far ahead, in bytes of weights consumed, a fused kernel
// prefetches: each row prefetches the same row of the first tile of rows
// at least fusedLead bytes ahead, at the offset it reads, so that the
// prefetches follow the order the tiles consume the matrix whatever its
// row length. A fixed distance within the address space instead fell in
// rows already being read (rows longer than the distance but not four
// times it) or too few bytes ahead (short rows). The lines go to L2: into
// L1 (PREFETCHT0), 4 rows' leads crowded Zen 4's 32 KiB out of what the
// kernel still reads. Figures: bench/README.md.
const fusedLead = 16384

func fusedShape(a arch) dotShape { return dotShapes(a, wF32) }

func fusedName(a arch, k dqkind, R, T int) string {
	return fmt.Sprintf("fused%s_%dx%d_%s", k, R, T, a.tag())
}

// tabMode is how a fused kernel of a kind with tables (hasTables) comes by
// its levels: made in registers (noTables), read from tables (readTables),
// or made and also written to the tables (makeTables), for the first group
// of tokens of a tile of rows whose other groups read them.
type tabMode int

const (
	noTables tabMode = iota
	readTables
	makeTables
)

func fusedTabName(a arch, k dqkind, R, T int, mode tabMode) string {
	verb := "Tab"
	if mode == makeTables {
		verb = "TabMake"
	}
	return fmt.Sprintf("fused%s%s_%dx%d_%s", verb, k, R, T, a.tag())
}

// makesTables reports whether kind k's tables are written by the first
// group's kernel (makeTables) rather than by a kernel of their own
// (genTables): Q4_K, whose making costs 8 zmm stores a block and row,
// which a kernel of their own does little but wait on and a kernel of
// FMAs overlaps (bench/README.md). The IQ4 kernels that make the levels
// take 2 rows past 2 tokens (registers); Q4_0's first group making its
// tables measured the same as its tables kernel.
func makesTables(k dqkind) bool { return k == dQ4_K }

// hasTables reports whether a's fused kernels of kind k include the
// variant that reads each 32 weights' 16 levels from tables (genTables)
// instead of making them: on zmm, the kinds whose levels are a table of
// 16 looked up by nibble (Q4_K, Q4_0, IQ4_NL, IQ4_XS), where making them
// is one FMA operation of nine or ten in the 4x4 tile's step and more for
// IQ4_XS's scalar scales (bench/README.md).
func hasTables(a arch, k dqkind) bool {
	return a.zmm && (k == dQ4_K || k == dQ4_0 || k == dIQ4_NL || k == dIQ4_XS)
}

// genFusedTable emits a's fused kernels and their table (a dotFamily per
// block type, E one block).
func genFusedTable(tb *strings.Builder, a arch) {
	fmt.Fprintf(tb, "\nvar fused%s = [numDQ]dotFamily{\n", a.tag())
	for k := dqkind(0); k < numDQ; k++ {
		s := fusedShape(a)
		N := s.T // the decode-sized n: up to it, dequantMatMul runs the fused kernels
		switch {
		case isIQ(k):
			// Decoding a codebook block is most of the kernel's code:
			// larger n take the two-pass path instead.
			s.T = min(s.T, 2)
			N = s.T
		case a.zmm:
			// Tiles interleave their rows up to T tokens (four rows, or
			// two for 3 and 4 tokens: fusedRows), and past T, n goes in
			// groups of such tiles, each reading the rows again from L1.
			// An interleaved tile loads each token's vector once for all
			// its rows, where a tile of one row at a time loads it for
			// every row: that cost the 5- and 6-token tiles more than a
			// second group costs, and up to 16 tokens (a decode step of
			// 16 sequences, a few an expert) the groups beat the two-pass
			// path (figures: bench/README.md).
			s.T, N = zmmInterleaved(k), 16
			if s.T == 2 {
				s.T = 4
			}
		}
		shared := a.zen && !zenApart(k) // the AVX-512 kernels serve
		var full, one, rows, tab, makers []string
		for T := 1; T <= s.T; T++ {
			R := fusedRows(a, k, s.R, T)
			if shared {
				full = append(full, "k_"+fusedName(avx512, k, R, T))
				one = append(one, "k_"+fusedName(avx512, k, 1, T))
			} else {
				genFused(a, k, R, T, noTables)
				genFused(a, k, 1, T, noTables)
				full = append(full, dotGroup.add(fusedName(a, k, R, T)))
				one = append(one, dotGroup.add(fusedName(a, k, 1, T)))
			}
			rows = append(rows, fmt.Sprint(R))
			// The table kernels are the same code on Zen (they decode no
			// scales, or the kinds' that are not apart); all of them take
			// the family's R rows.
			for _, mode := range []tabMode{readTables, makeTables} {
				list := &tab
				if mode == makeTables {
					list = &makers
				}
				switch {
				case !hasTables(a, k) || mode == makeTables && !makesTables(k):
				case a.zen:
					*list = append(*list, "k_"+fusedTabName(avx512, k, s.R, T, mode))
				default:
					genFused(a, k, s.R, T, mode)
					*list = append(*list, dotGroup.add(fusedTabName(a, k, s.R, T, mode)))
				}
			}
		}
		var tables string
		switch {
		case !hasTables(a, k):
		case makesTables(k):
			tables = fmt.Sprintf(", tab: []dotKernel{%s}, tabMake: []dotKernel{%s}", strings.Join(tab, ", "), strings.Join(makers, ", "))
		default:
			tables = "k_" + tablesName(avx512, k)
			if !a.zen {
				tables = dequantGroup.add(genTables(a, k))
			}
			tables = fmt.Sprintf(", tab: []dotKernel{%s}, tables: %s", strings.Join(tab, ", "), tables)
		}
		fmt.Fprintf(tb, "\tdq%s: {R: %d, T: %d, N: %d, E: %d, full: []dotKernel{%s}, rows: []int{%s}, one: []dotKernel{%s}%s},\n",
			k, s.R, s.T, N, dqBlock[k].elems, strings.Join(full, ", "), strings.Join(rows, ", "), strings.Join(one, ", "), tables)
	}
	fmt.Fprintf(tb, "}\n")
}

// genFused emits the fused kernel of kind k for R rows and T tokens, a
// dotKernel whose n counts blocks: genDot's loop over the steps (one block
// of each row), the span counter and the reduction, with the weights of a
// step produced by the block decoder of the dequantiser. With readTables
// (hasTables) the levels of each 32 weights are read from the tables that
// scale points at instead of made from the block's scales, so that a
// prefill's tile of rows makes them once a span for all its tokens (by
// genTables's kernel, or with makeTables by the first group's kernel,
// which writes the levels it makes there).
func genFused(a arch, k dqkind, R, T int, mode tabMode) {
	tab, write := mode == readTables, mode == makeTables
	name := fusedName(a, k, R, T)
	flags := NOSPLIT
	if scalesAhead(a, k) && 2*scaleArea(k)*R > 512 {
		// Q2_K's two areas of four rows pass the linker's limit for a
		// frame without a stack check.
		flags = 0
	}
	doc := "scale is ignored"
	switch mode {
	case readTables:
		name = fusedTabName(a, k, R, T, mode)
		maker := tablesName(a, k)
		if makesTables(k) {
			maker = fmt.Sprintf("the fusedTabMake%s kernels", k)
		}
		doc = fmt.Sprintf("the levels of row r's block b read at scale + %d·r + %d·b, made by %s; n is at most %d",
			tabRow, tabBlock(k), maker, sumSpan/dqBlock[k].elems)
	case makeTables:
		name = fusedTabName(a, k, R, T, mode)
		doc = fmt.Sprintf("the levels it makes of row r's block b written at scale + %d·r + %d·b, for %s; n is at most %d",
			tabRow, tabBlock(k), fusedTabName(a, k, R, T, readTables), sumSpan/dqBlock[k].elems)
	}
	TEXT(name, flags, "func(w *byte, ldw int, x *float32, ldx int, n int, out *float32, ldo int, scale *float32)")
	Pragma("noescape")
	Doc(fmt.Sprintf("%s adds Σ W[r][k]·x[t][k] over n blocks of %s (%d elements), span by span of %d elements, to out[t][r] for %d weight rows (stride ldw bytes), %d float32 token vectors (stride ldx bytes) and output rows of stride ldo bytes, with the bits of the F32 kernel over the dequantised weights (%s).",
		name, k, dqBlock[k].elems, sumSpan, R, T, doc))
	w := newStrided(Load(Param("w"), GP64()), Load(Param("ldw"), GP64()), R)
	x := newStrided(Load(Param("x"), GP64()), Load(Param("ldx"), GP64()), T)
	n := Load(Param("n"), GP64())
	acc := a.newAccs(T, R)
	E, bytes := dqBlock[k].elems, dqBlock[k].bytes
	span := newSpanCounter(sumSpan / E)
	// out is addressed only when a span's sums are added, from the
	// arguments each time: the general registers are needed by the loop.
	reduce := func() {
		out := newStrided(Load(Param("out"), GP64()), Load(Param("ldo"), GP64()), T)
		a.reduceAdd(acc, out, nil)
	}
	// The K-quants' scales (scalesAhead) are made a block ahead into the
	// second of two stack areas, so that the latency of the next block's
	// is hidden behind this block's products.
	ahead := scalesAhead(a, k) && !tab
	var tp Register // the tables of the current block
	if tab || write {
		tp = Load(Param("scale"), GP64())
	}
	var local Mem
	switch {
	case tab:
	case ahead:
		// Two areas a row of scaleArea bytes: the floats a block's scales are.
		local = AllocLocal(2 * scaleArea(k) * R)
	case hasLocal(k):
		local = AllocLocal(128 * R)
	}
	var tbl VecVirtual
	if (k == dIQ4_NL || k == dIQ4_XS) && !a.zmm {
		tbl = XMM()
		a.movdqu((&dq{a: a}).levels(), tbl)
	}
	var iqr *iqRegs
	if isIQ(k) {
		iqr = (&dq{a: a}).iqBases(k)
	}
	var iota VecVirtual // shared by the rows
	if !tab {
		iota = newIota(a, k)
	}
	pf := prefetchAhead(w, R)
	// With the scales ahead and four tokens (a third register for their
	// rows) the prefetch base is one general register too many: it is
	// kept as its distance from w on the stack and formed at each step.
	var pfLead Mem
	if ahead && T >= 4 {
		pfLead = AllocLocal(8)
		SUBQ(w.base, pf.base)
		MOVQ(pf.base, pfLead)
	}
	rows := make([]*dq, R)
	var halves Mem
	if n := halfArea(a, k); n > 0 && !tab {
		halves = AllocLocal(n * R)
	}
	for r := range rows {
		rows[r] = &dq{a: a, w: w, row: r, sink: &fusedSink{x: x, acc: acc}, iqr: iqr, iota: iota}
		if halves.Base != nil {
			rows[r].half = halves.Offset(halfArea(a, k) * r)
		}
		switch {
		case tab:
			rows[r].tab = Mem{Base: tp, Disp: tabRow * r}
		case hasLocal(k) && !ahead: // ahead: the areas are addressed from cur and nxt below
			rows[r].local = local.Offset(128 * r)
		}
		if write {
			rows[r].write = Mem{Base: tp, Disp: tabRow * r}
		}
	}
	TESTQ(n, n)
	JZ(LabelRef("reduce"))
	var cur, nxt GPVirtual
	if ahead {
		cur, nxt = GP64(), GP64()
		LEAQ(local, cur)
		LEAQ(local.Offset(scaleArea(k)*R), nxt)
		for r, g := range rows {
			g.blockScales(k, 0, Mem{Base: cur, Disp: scaleArea(k) * r})
		}
	}
	Label("loop")
	pfStep := pf
	if pfLead.Base != nil {
		b := GP64()
		MOVQ(pfLead, b)
		ADDQ(w.base, b)
		pfStep = &strided{base: b, stride: pf.stride, stride3: pf.stride3, rows: pf.rows}
	}
	for r := 0; r < R; r++ {
		for off := 0; off < bytes; off += 64 {
			PREFETCHT1(pfStep.at(r, off))
		}
	}
	if ahead {
		// The last block has no next one to read.
		CMPQ(n, U8(1))
		JE(LabelRef("scaled"))
		for r, g := range rows {
			g.blockScales(k, bytes, Mem{Base: nxt, Disp: scaleArea(k) * r})
		}
		Label("scaled")
		for r, g := range rows {
			g.local, g.scaled = Mem{Base: cur, Disp: scaleArea(k) * r}, true
		}
	}
	check := func(g *dq) {
		if g.sink.next != E {
			panic(fmt.Sprintf("%s: a block emitted %d of %d elements", name, g.sink.next, E))
		}
	}
	if interleaved(a, k, R, T) || tab && R > 1 {
		var nexts []func() (struct{}, bool)
		sh := &sharedX{i: -1}
		for _, g := range rows {
			g.sink.shared = sh
			next, stop := iter.Pull(func(yield func(struct{}) bool) {
				g.sink.yield = yield
				g.block(k, tbl)
			})
			defer stop()
			nexts = append(nexts, next)
		}
		for live := true; live; {
			for _, next := range nexts {
				_, live = next()
			}
		}
		for _, g := range rows {
			check(g)
		}
	} else {
		for _, g := range rows {
			g.block(k, tbl)
			check(g)
		}
	}
	if ahead {
		XCHGQ(cur, nxt)
	}
	if tab || write {
		ADDQ(U32(tabBlock(k)), tp)
	}
	w.advance(bytes)
	if pfLead.Base == nil {
		pf.advance(bytes)
	}
	x.advance(4 * E)
	a.nextWith(n, "reduce", span, "loop", acc, reduce)
	a.finishWith(reduce)
}

// prefetchAhead returns the rows of w k·R rows ahead, k the fewest tiles
// of R rows that span fusedLead bytes (at least one).
func prefetchAhead(w *strided, R int) *strided {
	tile, d := GP64(), GP64()
	MOVQ(w.stride, tile)
	if R > 1 {
		IMUL3Q(U32(R), tile, tile)
	}
	MOVQ(tile, d)
	TESTQ(d, d) // a stride of 0 (one row) has nothing ahead
	JZ(LabelRef("ahead"))
	Label("lead")
	CMPQ(d, U32(fusedLead))
	JAE(LabelRef("ahead"))
	ADDQ(tile, d)
	JMP(LabelRef("lead"))
	Label("ahead")
	ADDQ(w.base, d)
	return &strided{base: d, stride: w.stride, stride3: w.stride3, rows: w.rows}
}

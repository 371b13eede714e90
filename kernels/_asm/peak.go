package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// peakChains is the number of independent FMA chains of the peak loop: more
// than latency × FMA ports on the cores we meet (4 × 2), so the loop is
// bound by issue, not by a dependency.
const peakChains = 12

// genFMAPeak emits fmaPeak_<arch>(n): n iterations of peakChains
// register-only FMAs, the float32 FMA peak that `grok bench` compares
// prefill with (kernels.FMAPeak).
func genFMAPeak(a arch) string {
	name := "fmaPeak_" + a.name
	return genPeakLoop(a, name, fmt.Sprintf("%s runs n iterations of %d independent %d-lane FMAs on registers only.", name, peakChains, a.V), VFMADD231PS, VADDPS)
}

// genIntPeak emits intPeak_VNNI(n): n iterations of peakChains
// register-only 512-bit VPDPWSSDs, the int16 peak that `grok bench`
// compares the fast precision's prefill with (kernels.IntPeak).
func genIntPeak() string {
	name := "intPeak_VNNI"
	return genPeakLoop(avx512, name, fmt.Sprintf("%s runs n iterations of %d independent 512-bit VPDPWSSDs on registers only.", name, peakChains), VPDPWSSD, VPADDD)
}

// genPeakLoop emits name(n): n iterations of peakChains independent
// op(x, y, acc) on a's vectors, registers only.
func genPeakLoop(a arch, name, doc string, op, add func(...Op)) string {
	TEXT(name, NOSPLIT, "func(n int)")
	Doc(doc)
	n := Load(Param("n"), GP64())
	x, y := a.vec(), a.vec()
	a.zero(x)
	a.zero(y)
	acc := make([]VecVirtual, peakChains)
	for i := range acc {
		acc[i] = a.vec()
		a.zero(acc[i])
	}
	TESTQ(n, n)
	JZ(LabelRef("done"))
	Label("loop")
	for _, r := range acc {
		op(x, y, r)
	}
	DECQ(n)
	JNZ(LabelRef("loop"))
	Label("done")
	// Keep the chains live to the end so that no pass drops them.
	for _, r := range acc[1:] {
		add(r, acc[0], acc[0])
	}
	VZEROUPPER()
	RET()
	return name
}

// genPrefetchLines emits prefetchLines(p, n): a PREFETCHT0 of every 64-byte
// line of the n > 0 bytes at p, for a driver to bring a tile's weights in
// while the kernels multiply the tile before it.
func genPrefetchLines() {
	TEXT("prefetchLines", NOSPLIT, "func(p *byte, n int)")
	Doc("prefetchLines prefetches (PREFETCHT0) every 64-byte line of the n > 0 bytes at p.")
	p := Load(Param("p"), GP64())
	n := Load(Param("n"), GP64())
	Label("line")
	PREFETCHT0(Mem{Base: p})
	ADDQ(U32(64), p)
	SUBQ(U32(64), n)
	JG(LabelRef("line"))
	RET()
}

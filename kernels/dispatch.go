package kernels

import (
	"fmt"

	"github.com/grok-go/grok/tensor"
)

// The SIMD kernels are chosen once at start-up from what the CPU and the
// operating system support (cpu_amd64.go); tests switch between all the
// variants the machine can run with useLevel. Every kernel below has a
// pure-Go reference in this package that is also the fallback.

// Kernels of the generated assembly (zkernels_amd64.s, made by kernels/_asm)
// are named by small integers whose call methods (ztables_amd64.go) switch
// to the function: a direct call lets escape analysis keep the buffers
// handed to a kernel on the stack, a call through a function value would
// not. Pointers are raw so that the kernels need no bounds checks; the Go
// drivers check every size before calling them. 0 names no kernel.
type (
	// dotKernel: out[t][r] += Σ_k W[r][k]·x[t][k] for an R×T tile over n
	// steps of E weights (dotFamily), out rows ldo bytes apart, summed span
	// by span of dotSpan weights from the first step; I8 kernels multiply
	// each span's sums by scale[r] first. Call: (w *byte, ldw int,
	// x *float32, ldx int, n int, out *float32, ldo int, scale *float32).
	dotKernel uint16
	// intKernel is dotKernel over int8 weights and int8-quantised
	// activations (qbuf's xq, dx and cr, all with stride ldx): (w *byte,
	// ldw int, xq *byte, dx *float32, cr *int32, ldx int, n int,
	// out *float32, ldo int, scale *float32).
	intKernel uint16
	// inoutKernel: acc[t][c] += Σ_k xs[t·K+k]·W[k][c] for K weight rows and
	// T accumulator rows over n vectors of columns:
	// (acc *float32, lda int, w *byte, ldw int, xs *float32, n int).
	inoutKernel uint16
	// quantKernel quantises n whole blocks of 32 as quantizeBlockRef does:
	// (x *float32, n int, xq *byte, dx *float32, cr *int32).
	quantKernel uint16
	// axpyKernel: y[i] += alpha·x[i] for n vectors:
	// (y *float32, alpha float32, x *float32, n int).
	axpyKernel uint16
	// geluMulKernel: dst[i] = gelu(a[i])·b[i] for n vectors:
	// (dst, a, b *float32, n int).
	geluMulKernel uint16
	// maxKernel returns the largest element of n ≥ 1 vectors:
	// (x *float32, n int) (m float32).
	maxKernel uint16
	// expSubKernel sets x[i] = e^(x[i]-m) over n vectors and returns the
	// sum in float64: (x *float32, n int, m float32) (sum float64).
	expSubKernel uint16
	// scaleKernel: x[i] *= s over n vectors: (x *float32, n int, s float32).
	scaleKernel uint16
	// softcapKernel: x[i] = c·tanh(x[i]·mult/c) over n vectors, given
	// m2c = -2/c: (x *float32, n int, mult, m2c, c float32).
	softcapKernel uint16
	// addScaledKernel: d[i] += sc[i]·a[i], product and sum each rounded,
	// over n vectors: (d, sc, a *float32, n int).
	addScaledKernel uint16
	// fastKernel is the fast precision's GEMM tile over widened weights
	// (fastMatMul): (ws *byte, ldw int, ds *float32, ldd int, xa *byte,
	// ldx int, nb int, out *float32, ldo int).
	fastKernel uint16
	// fastMKernel is fastKernel for weights with a min per block, whose
	// -dmin·m (dm, the same stride as ds) times the activations' sums it
	// adds: (ws *byte, ldw int, ds *float32, dm *float32, ldd int,
	// xa *byte, ldx int, nb int, out *float32, ldo int).
	fastMKernel uint16
	// fastHKernel is fastKernel with a scale per 16 weights (ds holds two
	// a block; Q6_K): the same parameters.
	fastHKernel uint16
	// fastHMKernel is fastMKernel with a scale and a min per 16 weights
	// (ds and dm two a block, the activations' sums per half; Q2_K).
	fastHMKernel uint16
	// widenKernel widens nb blocks of rows weight rows to int16 and
	// float32 scales for the fast tile: (dst *byte, ds *float32, w *byte,
	// ldw int, rows int, nb int).
	widenKernel uint16
	// fastStoreKernel moves one group's tiles to a fast product's outputs
	// (fastScatter): (dst *float32, ldd int, tiles *float32, l0, l1, m0,
	// m1 int, sc *float32).
	fastStoreKernel uint16
	// quant16Kernel quantises nb blocks of one token into its lane of a
	// fastActs group (quantizeGroup16): (x *float32, nb int, dst *byte).
	quant16Kernel uint16
	// quantS16Kernel divides nb blocks of 32 float32 weights by their
	// scales to 32 int16s a block (quantizeScaled): (x *float32, nb int,
	// dst *byte, ds *float32).
	quantS16Kernel uint16
	// dequantKernel decodes n whole blocks of its type at src into float32
	// at dst, with tensor.DequantizeRow's bits: (dst *float32, src *byte,
	// n int).
	dequantKernel uint16
	// widenVecKernel decodes KV memory rows into float32 (vecKernels' f16,
	// bf16 and q8): (dst *float32, src *byte, n int).
	widenVecKernel uint16
)

// Block types with dequantisers (dequantKernel), in the generator's order.
const (
	dqQ4_0 = iota
	dqQ4_1
	dqQ5_0
	dqQ5_1
	dqQ2_K
	dqQ3_K
	dqQ4_K
	dqQ5_K
	dqQ6_K
	dqIQ4_NL
	dqIQ4_XS
	dqIQ3_S
	dqIQ3_XXS
	dqIQ2_XXS
	dqIQ2_XS
	dqIQ2_S
	dqIQ1_S
	dqIQ1_M
	numDQ
)

// dqKind returns t's dequantiser index, or -1 if it has none.
func dqKind(t tensor.DType) int {
	switch t {
	case tensor.Q4_0:
		return dqQ4_0
	case tensor.Q4_1:
		return dqQ4_1
	case tensor.Q5_0:
		return dqQ5_0
	case tensor.Q5_1:
		return dqQ5_1
	case tensor.Q2_K:
		return dqQ2_K
	case tensor.Q3_K:
		return dqQ3_K
	case tensor.Q4_K:
		return dqQ4_K
	case tensor.Q5_K:
		return dqQ5_K
	case tensor.Q6_K:
		return dqQ6_K
	case tensor.IQ4_NL:
		return dqIQ4_NL
	case tensor.IQ4_XS:
		return dqIQ4_XS
	case tensor.IQ3_S:
		return dqIQ3_S
	case tensor.IQ3_XXS:
		return dqIQ3_XXS
	case tensor.IQ2_XXS:
		return dqIQ2_XXS
	case tensor.IQ2_XS:
		return dqIQ2_XS
	case tensor.IQ2_S:
		return dqIQ2_S
	case tensor.IQ1_S:
		return dqIQ1_S
	case tensor.IQ1_M:
		return dqIQ1_M
	}
	return -1
}

// Weight kinds of the float kernels, in the generator's order.
const (
	wkF32 = iota
	wkF16
	wkBF16
	wkI8 // int8 converted to float32; the kernel applies the shard's scales
	wkQ8 // Q8_0 dequantised in registers (the ExactQuant path)
	numWK
)

// Weight kinds of the integer kernels.
const (
	ikQ8 = iota
	ikI8
	numIK
)

// A dotFamily is the set of kernels of one weight kind: a tile of R rows
// (full) or 1 row (one) by 1..T tokens (index T-1), E weights a step. A
// fused family serves up to N tokens (at least T), in groups of at most T,
// and its full kernel of T tokens may cover rows[T-1] rows, a divisor of R
// (nil: R).
type dotFamily struct {
	R, T, N, E int
	full, one  []dotKernel
	rows       []int
	pre        dotKernel // full[T-1] without the next rows' prefetch, for a prefill's full tiles (zero: none)
	// acc are F32's full tile for a span in pieces, its accumulators in
	// memory between them (scale points at them): from zero and stored,
	// loaded and stored, loaded and reduced into out. Zero: none.
	acc [3]dotKernel
	// tab are the fused full tiles that read the levels of each 32 weights
	// from tables (Q4_K, Q4_0, IQ4_NL, IQ4_XS on AVX-512), which tables
	// makes a row at a time or, where tabMake has kernels (Q4_K), the
	// first group of tokens' kernel as it multiplies (fusedTables). Nil:
	// none.
	tab, tabMake []dotKernel
	tables       dequantKernel
}

// An intFamily is like dotFamily with B blocks of 32 weights a step.
type intFamily struct {
	R, T, B   int
	full, one []intKernel
}

// An inoutFamily has K-row (full) and 1-row (one) kernels for 1..T tokens,
// V columns a step.
type inoutFamily struct {
	K, T, V   int
	full, one []inoutKernel
}

// kernelSet is everything one instruction-set level provides.
type kernelSet struct {
	name  string
	dot   *[numWK]dotFamily
	int8  *[numIK]intFamily
	inout *[wkI8 + 1]inoutFamily
	quant quantKernel
	vec   *vecKernels
	// dequant decodes blocks for dequantMatMul; a zero entry (or a nil
	// table) leaves the type to tensor.DecodeRow.
	dequant *[numDQ]dequantKernel
	// fast and widen are the fast precision's GEMM (fastMatMul); nil
	// leaves Fast products to the exact path.
	fast    *fastFamily
	widen   *[numFK]widenKernel
	quant16 quant16Kernel
	// store and storeScaled are fastScatter's transposes, without and
	// with the I8 rows' scales.
	store, storeScaled fastStoreKernel
	// quantS16 widens the weights fastMatMul decodes to float32 first.
	quantS16 quantS16Kernel
	// widenCB widens the codebook i-quants to their integers directly
	// (widenDecoded); a zero entry leaves the type to decoding and quantS16.
	widenCB *[numDQ]widenKernel
	// fused multiplies blocks of the dequantisers' types without scratch
	// for decode (dequantMatMul); a family without kernels (or a nil
	// table) leaves the type to the two-pass path.
	fused *[numDQ]dotFamily
	// fmaPeak runs n iterations of peakChains register-only FMAs of
	// lanes float32 lanes each (FMAPeak).
	fmaPeak func(n int)
	// intPeak runs n iterations of peakChains register-only 512-bit
	// VPDPWSSDs (AVX512VNNI only): the int16 peak of the fast precision.
	intPeak func(n int)
	lanes   int
	// prefetch brings n bytes at p towards L1 (prefetchLines); nil: none.
	prefetch func(p *byte, n int)
}

// active is the kernel set in use; nil means the pure-Go reference.
// It changes only at start-up and in tests (useLevel), never while a
// matmul runs.
var active *kernelSet

// levels lists the kernel sets this machine can run, best last; the
// pure-Go reference is level 0 and always present.
var levels = []*kernelSet{nil}

func init() {
	active = levels[len(levels)-1]
}

// useLevel switches to levels[i] and returns a function restoring the
// previous choice. For tests and benchmarks only: it must not race with
// running kernels.
func useLevel(i int) (restore func()) {
	prev := active
	active = levels[i]
	return func() { active = prev }
}

// Variant names the kernels in use: "Go" (the pure-Go reference), "AVX2"
// (AVX2+FMA+F16C), "AVX2VNNI" (AVX2 with AVX-VNNI for the int8 products),
// "AVX512" (AVX-512 F/BW/VL/DQ), "AVX512VNNI" or "AVX512VNNI-Zen" (its
// block decoders tuned for AMD Zen, the default there).
func Variant() string {
	for i, l := range levels {
		if l == active {
			return levelName(i)
		}
	}
	return "Go"
}

// Variants lists the variants this machine can run, best last.
func Variants() []string {
	names := make([]string, len(levels))
	for i := range levels {
		names[i] = levelName(i)
	}
	return names
}

// SetVariant selects one of Variants (to compare them, or to rule the
// assembly out). It must not be called while any kernel runs.
func SetVariant(name string) error {
	for i := range levels {
		if levelName(i) == name {
			active = levels[i]
			return nil
		}
	}
	return fmt.Errorf("kernels: no variant %q on this machine (have %v)", name, Variants())
}

// levelName names levels[i] for test and benchmark output.
func levelName(i int) string {
	if levels[i] == nil {
		return "Go"
	}
	return levels[i].name
}

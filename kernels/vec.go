package kernels

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/grok-go/grok/tensor"
)

// vecKernels are the SIMD vector functions of one level. RMSNorm, Rope and
// RopeTables have none: they take well under 1% of a forward pass (profile
// of the 676M-parameter model, prefill and decode), so they stay pure Go.
type vecKernels struct {
	axpy    axpyKernel
	geluMul geluMulKernel
	max     maxKernel
	expSub  expSubKernel
	scale   scaleKernel
	softcap softcapKernel
	// addScaled: d[i] += sc[i]·a[i] rounded twice (matmul.go's addScaled)
	addScaled addScaledKernel
	// f16, bf16: n vectors of 16-bit floats widened; q8: n Q8_0 blocks
	// decoded (DecodeKV)
	f16, bf16, q8 widenVecKernel
}

// vecWidth is the float32 lanes of the active level's vectors.
func (ks *kernelSet) vecWidth() int { return ks.inout[wkF32].V }

// Dot returns Σ a[i]·b[i] over len(a) elements in float32. The SIMD
// versions keep one partial sum per vector lane and add them pairwise at
// the end; the pure-Go one (dotRef) keeps four. The results differ by
// rounding only: both are within n·2^-24·Σ|a[i]·b[i]| of the exact sum.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	ks := active
	if ks == nil || len(a) < ks.vecWidth() {
		return dotRef(a, b)
	}
	fam := &ks.dot[wkF32]
	var s float32
	steps := len(a) / fam.E
	fam.one[0].call((*byte)(unsafe.Pointer(&a[0])), 0, &b[0], 0, steps, &s, 0, nil)
	for i := steps * fam.E; i < len(a); i++ {
		s += a[i] * b[i]
	}
	return s
}

// Axpy computes y += a·x. Every element is one fused or unfused
// multiply-add of its own, so the SIMD version (fused) differs from the
// pure-Go one only where the compiler does not fuse: by at most one
// rounding of a·x[i].
func Axpy(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	ks := active
	if ks == nil {
		axpyRef(y, a, x)
		return
	}
	V := ks.vecWidth()
	nv := len(y) / V
	if nv > 0 {
		ks.vec.axpy.call(&y[0], a, &x[0], nv)
	}
	axpyRef(y[nv*V:], a, x[nv*V:])
}

// RMSNorm writes x / sqrt(mean(x²) + eps) · scale into dst (model.py 600-624:
// fp32, learned scale multiplied as is). The mean is accumulated in float64 so
// that the result does not depend on the summation order of the SIMD kernels.
func RMSNorm(dst, x, scale []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	for i, v := range x {
		dst[i] = v * inv * scale[i]
	}
}

// Softmax normalises x in place: exp(x - max) / Σ exp(x - max), the sum in
// float64. The SIMD versions evaluate exp with a float32 polynomial
// (Cephes' expf, within 2 ulp) where the reference calls math.Exp, and scale
// by the float32-rounded 1/sum: each result is within 4 ulp of the
// reference's (TestSoftmaxLevels).
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	ks := active
	if ks == nil || len(x) < ks.vecWidth() {
		softmaxRef(x)
		return
	}
	V := ks.vecWidth()
	nv := len(x) / V
	tail := x[nv*V:]
	m := ks.vec.max.call(&x[0], nv)
	for _, v := range tail {
		if v > m {
			m = v
		}
	}
	sum := ks.vec.expSub.call(&x[0], nv, m)
	for i, v := range tail {
		e := math.Exp(float64(v - m))
		tail[i] = float32(e)
		sum += e
	}
	inv := float32(1 / sum)
	ks.vec.scale.call(&x[0], nv, inv)
	for i := range tail {
		tail[i] *= inv
	}
}

func softmaxRef(x []float32) {
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - m))
		x[i] = float32(e)
		sum += e
	}
	inv := 1 / sum
	for i := range x {
		x[i] = float32(float64(x[i]) * inv)
	}
}

// Softcap replaces each x[i] by the attention logit model.py makes of a
// raw score (864-866): s = x[i]·mult, then c·tanh(s/c) when c > 0. The
// reference evaluates tanh in float64; the SIMD versions use
// tanh(y) = 2/(1 + e^(-2y)) - 1 with Softmax's exp polynomial, within
// 2^-22·c + 2^-21·|result| of it (TestSoftcapLevels): at most about 1e-5
// for Grok's c = 30, well inside the 1e-4 the logits are held to.
func Softcap(x []float32, mult, c float32) {
	ks := active
	if c <= 0 {
		for i := range x {
			x[i] *= mult
		}
		return
	}
	if ks == nil {
		softcapRef(x, mult, c)
		return
	}
	V := ks.vecWidth()
	nv := len(x) / V
	if nv > 0 {
		ks.vec.softcap.call(&x[0], nv, mult, -2/c, c)
	}
	softcapRef(x[nv*V:], mult, c)
}

func softcapRef(x []float32, mult, c float32) {
	for i, v := range x {
		s := v * mult
		x[i] = c * float32(math.Tanh(float64(s/c)))
	}
}

// Gelu is jax.nn.gelu's default (approximate=True) form:
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), evaluated in float64.
func Gelu(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// GeluMul computes dst[i] = gelu(a[i]) · b[i], the expert's gated product
// (model.py 374); dst may be a. The SIMD versions compute gelu in float32
// as x/(1 + e^(-2u)), the same function as the float64 tanh form of Gelu,
// with the exp polynomial of Softmax: the result is within 2^-20·|a[i]·b[i]|
// + 2^-21·|dst[i]| of the reference (TestGeluMulLevels).
func GeluMul(dst, a, b []float32) {
	b = b[:len(a)]
	dst = dst[:len(a)]
	ks := active
	if ks == nil {
		geluMulRef(dst, a, b)
		return
	}
	V := ks.vecWidth()
	nv := len(a) / V
	if nv > 0 {
		ks.vec.geluMul.call(&dst[0], &a[0], &b[0], nv)
	}
	geluMulRef(dst[nv*V:], a[nv*V:], b[nv*V:])
}

func geluMulRef(dst, a, b []float32) {
	for i, v := range a {
		dst[i] = Gelu(v) * b[i]
	}
}

// RopeTables fills cos and sin (each K/2 long) for one position:
// θ_j = pos · inv_freq_j, inv_freq_j = 1/base^(2j/K) computed in fp32 as
// model.py 665-668 does.
func RopeTables(cos, sin []float32, pos int, base float32, K int) {
	for j := range cos {
		invFreq := float32(1 / math.Pow(float64(base), float64(float32(2*j)/float32(K))))
		theta := float64(float32(pos) * invFreq)
		cos[j] = float32(math.Cos(theta))
		sin[j] = float32(math.Sin(theta))
	}
}

// Rope rotates one head vector x (length K) in place, NeoX style: feature i
// pairs with i+K/2, out = x·cos θ + rotate_half(x)·sin θ with
// rotate_half([x1, x2]) = [-x2, x1] (model.py 627-691).
func Rope(x, cos, sin []float32) {
	h := len(cos)
	x1, x2 := x[:h], x[h:2*h]
	for j := 0; j < h; j++ {
		a, b := x1[j], x2[j]
		x1[j] = a*cos[j] - b*sin[j]
		x2[j] = b*cos[j] + a*sin[j]
	}
}

// Widen decodes len(dst) values of type t from src: F32, F16, BF16 (exact
// conversions) or Q8_0 (whole blocks, q·d as tensor.DecodeRow computes it),
// with the level's vector converters (a NaN stays a NaN; a signalling one
// may come back quiet). It is how attention reads KV memory rows that it
// cannot multiply where they are stored.
func Widen(dst []float32, t tensor.DType, src []byte) {
	n := len(dst)
	need, err := t.RowBytes(n)
	if err != nil || len(src) < need {
		panic(fmt.Sprintf("kernels: Widen of %d %v values from %d bytes", n, t, len(src)))
	}
	ks := active
	if n == 0 || t == tensor.F32 || ks == nil {
		if err := tensor.DecodeRow(dst, t, src[:need]); err != nil {
			panic(err)
		}
		return
	}
	V := ks.vecWidth()
	done := 0
	switch t {
	case tensor.F16:
		if nv := n / V; nv > 0 {
			ks.vec.f16.call(&dst[0], &src[0], nv)
			done = nv * V
		}
	case tensor.BF16:
		if nv := n / V; nv > 0 {
			ks.vec.bf16.call(&dst[0], &src[0], nv)
			done = nv * V
		}
	case tensor.Q8_0:
		ks.vec.q8.call(&dst[0], &src[0], n/tensor.Q8BlockSize)
		return
	}
	if done < n {
		if err := tensor.DecodeRow(dst[done:], t, src[2*done:need]); err != nil {
			panic(err)
		}
	}
}

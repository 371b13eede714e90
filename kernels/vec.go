package kernels

import "math"

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

// Softmax normalises x in place: exp(x - max) / Σ exp(x - max), in fp32 with
// a float64 sum.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
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

// Gelu is jax.nn.gelu's default (approximate=True) form:
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), evaluated in float64.
func Gelu(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// GeluMul computes dst[i] = gelu(a[i]) · b[i], the expert's gated product
// (model.py 374).
func GeluMul(dst, a, b []float32) {
	b = b[:len(a)]
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

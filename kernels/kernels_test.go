package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/tensor"
)

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// refMatMul is the plain definition y[i][o] = Σ_r W[o][r]·x[i][r] in float64
// over an already dequantised W (Out×In).
func refMatMul(w []float32, x []float32, n, out, in int) []float32 {
	y := make([]float32, n*out)
	for i := 0; i < n; i++ {
		for o := 0; o < out; o++ {
			var s float64
			for r := 0; r < in; r++ {
				s += float64(w[o*in+r]) * float64(x[i*in+r])
			}
			y[i*out+o] = float32(s)
		}
	}
	return y
}

func transpose(w []float32, rows, cols int) []float32 {
	t := make([]float32, len(w))
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			t[j*rows+i] = w[i*cols+j]
		}
	}
	return t
}

func closeEnough(t *testing.T, got, want []float32, tol float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) || math.IsNaN(d) {
			t.Fatalf("element %d: got %g want %g", i, got[i], want[i])
		}
	}
}

// MatMul over every weight type and both layouts equals the float64
// definition on the dequantised matrix, including sizes that are not
// multiples of any vector width. Q8_0 and I8 use ExactQuant here: with
// int8 activations the error is the activations' quantisation
// (TestQuantizedMatMul).
func TestMatMulAgainstDefinition(t *testing.T) {
	defer setExactQuant(true)()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		dt         tensor.DType
		inOut      bool
		n, out, in int
		shards     int
	}{
		{tensor.F32, false, 1, 7, 13, 0}, {tensor.F32, false, 5, 33, 65, 0}, {tensor.F32, true, 3, 17, 9, 0},
		{tensor.F16, false, 2, 5, 31, 0}, {tensor.F16, true, 4, 9, 10, 0},
		{tensor.BF16, false, 3, 6, 19, 0}, {tensor.BF16, true, 1, 3, 7, 0},
		{tensor.Q8_0, false, 3, 5, 64, 0}, {tensor.Q8_0, false, 1, 1, 32, 0},
		{tensor.I8, true, 2, 11, 24, 4}, {tensor.I8, true, 3, 5, 7, 1}, {tensor.I8, false, 2, 6, 16, 2},
	} {
		w := randVec(rng, tc.out*tc.in)
		var m Mat
		var deq []float32 // Out×In
		if tc.dt == tensor.I8 {
			q := make([]byte, tc.out*tc.in)
			sc := randVec(rng, tc.shards*tc.out)
			deq = make([]float32, tc.out*tc.in)
			blk := tc.in / tc.shards
			for o := 0; o < tc.out; o++ {
				for r := 0; r < tc.in; r++ {
					v := int8(rng.IntN(255) - 127)
					idx := o*tc.in + r
					if tc.inOut {
						idx = r*tc.out + o
					}
					q[idx] = byte(v)
					deq[o*tc.in+r] = float32(v) * sc[(r/blk)*tc.out+o]
				}
			}
			m = Mat{Type: tc.dt, Out: tc.out, In: tc.in, Data: q, Transposed: tc.inOut, Scales: sc, Shards: tc.shards}
		} else {
			stored := w
			rowLen := tc.in
			if tc.inOut {
				stored, rowLen = transpose(w, tc.out, tc.in), tc.out
			}
			data, err := tensor.EncodeRow(nil, tc.dt, stored)
			if err != nil {
				t.Fatal(err)
			}
			dq := make([]float32, len(stored))
			rb, _ := tc.dt.RowBytes(rowLen)
			for r := 0; r < len(stored)/rowLen; r++ {
				if err := tensor.DecodeRow(dq[r*rowLen:(r+1)*rowLen], tc.dt, data[r*rb:]); err != nil {
					t.Fatal(err)
				}
			}
			if tc.inOut {
				dq = transpose(dq, tc.in, tc.out)
			}
			deq = dq
			m = Mat{Type: tc.dt, Out: tc.out, In: tc.in, Data: data, Transposed: tc.inOut}
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		x := randVec(rng, tc.n*tc.in)
		got := make([]float32, tc.n*tc.out)
		MatMul(got, x, tc.n, &m)
		closeEnough(t, got, refMatMul(deq, x, tc.n, tc.out, tc.in), 1e-4)

		// Disjoint row ranges compose to the whole product.
		part := make([]float32, len(got))
		mid := tc.out / 2
		MatMulRows(part, x, tc.n, &m, 0, mid)
		MatMulRows(part, x, tc.n, &m, mid, tc.out)
		closeEnough(t, part, got, 0)
	}
}

func TestMatValidate(t *testing.T) {
	for _, m := range []Mat{
		{Type: tensor.F32, Out: 2, In: 3, Data: make([]byte, 20)},
		{Type: tensor.Q8_0, Out: 2, In: 30, Data: make([]byte, 68)},
		{Type: tensor.I8, Out: 2, In: 3, Data: make([]byte, 6), Shards: 2, Scales: make([]float32, 4)},
		{Type: tensor.I8, Out: 2, In: 4, Data: make([]byte, 8), Shards: 2, Scales: make([]float32, 3)},
		{Type: tensor.F32, Out: 0, In: 3},
	} {
		if err := m.Validate(); err == nil {
			t.Errorf("%+v: no error", m)
		}
	}
}

func TestVectorFunctions(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := randVec(rng, 37)
	scale := randVec(rng, 37)
	// RMSNorm against its definition.
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/37+1e-5)
	got := make([]float32, 37)
	RMSNorm(got, x, scale, 1e-5)
	for i := range x {
		if want := float64(x[i]) * inv * float64(scale[i]); math.Abs(float64(got[i])-want) > 1e-5*(1+math.Abs(want)) {
			t.Fatalf("rmsnorm[%d] = %g, want %g", i, got[i], want)
		}
	}
	// Softmax sums to one and keeps ratios.
	s := append([]float32(nil), x...)
	Softmax(s)
	var sum float64
	for i := range s {
		sum += float64(s[i])
		if r, want := math.Log(float64(s[i]/s[0])), float64(x[i]-x[0]); math.Abs(r-want) > 1e-5 {
			t.Fatalf("softmax ratio %d: %g vs %g", i, r, want)
		}
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Fatalf("softmax sums to %g", sum)
	}
	// Gelu: the tanh form, not the erf form (they differ by ~1e-3 near ±2).
	for _, v := range []float64{-3, -1, -0.5, 0, 0.5, 1, 2, 5} {
		want := 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
		if g := float64(Gelu(float32(v))); math.Abs(g-want) > 1e-6 {
			t.Errorf("gelu(%g) = %g, want %g", v, g, want)
		}
	}
	if erf := 0.5 * 2 * (1 + math.Erf(2/math.Sqrt2)); math.Abs(float64(Gelu(2))-erf) < 1e-5 {
		t.Errorf("gelu(2) looks like the erf form")
	}
}

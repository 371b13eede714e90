package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// dequantTypes are the weight types checked against their dequantised F32
// matrix; every block type without kernels of its own must be among them.
var dequantTypes = []tensor.DType{tensor.F16, tensor.BF16, tensor.Q8_0}

// The dequantising path gives exactly the bits of the F32 matrix of the
// dequantised weights, for every n (decode and prefill) and every split of
// the rows, at every kernel level: the quantised product equals its float
// reference.
func TestDequantPathEqualsF32OfDequantised(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, dt := range dequantTypes {
			bs := 32
			for _, c := range []struct{ out, in int }{{9, 1}, {37, 8}, {6, 64}, {5, 66}, {3, 193}} {
				in := c.in * bs
				tm := newTestMat(rng, dt, false, c.out, in, 1, 0)
				ref := f32OfDecoded(t, &tm.m)
				for _, n := range []int{1, 2, 5, 7, 13, 40} {
					x := randInputs(rng, n, in)
					got := make([]float32, n*c.out)
					want := make([]float32, n*c.out)
					MatMul(want, x, n, &ref)
					if ks := active; ks != nil {
						// A split of the rows must not change a bit either.
						mid := c.out / 3
						ks.dequantMatMul(got, x, n, &tm.m, 0, mid)
						ks.dequantMatMul(got, x, n, &tm.m, mid, c.out)
					} else {
						MatMul(got, x, n, &tm.m)
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %dx%d n=%d: element %d is %g, the F32 matrix gives %g", dt, c.out, in, n, i, got[i], want[i])
						}
					}
				}
			}
		}
	})
}

// f32OfDecoded returns the F32 matrix of m's dequantised weights.
func f32OfDecoded(t *testing.T, m *Mat) Mat {
	t.Helper()
	rb, _ := m.Type.RowBytes(m.In)
	vals := make([]float32, m.Out*m.In)
	for r := 0; r < m.Out; r++ {
		if err := tensor.DecodeRow(vals[r*m.In:(r+1)*m.In], m.Type, m.Data[r*rb:(r+1)*rb]); err != nil {
			t.Fatal(err)
		}
	}
	return F32Mat(vals, m.Out, m.In, false)
}

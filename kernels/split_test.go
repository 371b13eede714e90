package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// A row's product does not depend on the range of rows it is computed in
// (4-row tiles or single rows), including rows whose last span on the
// dotSpan grid is a single kernel step (2048 + one step of 16, 32 or 64
// elements), which the kernels that load a step ahead used to fold into
// the span before it; exact and int8-activation modes alike.
func TestRowSplitKeepsBits(t *testing.T) {
	for _, exact := range []bool{true, false} {
		restore := setExactQuant(exact)
		forLevels(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			for _, c := range []struct {
				dt     tensor.DType
				in     int
				shards int
			}{
				{tensor.F32, 2064, 1}, {tensor.F32, 4112, 1}, {tensor.F16, 2080, 1}, {tensor.BF16, 2080, 1},
				{tensor.Q8_0, 2112, 1}, {tensor.Q8_0, 4160, 1}, {tensor.Q8_0, 6208, 1},
				{tensor.I8, 2 * 2112, 2}, {tensor.F32, 6144, 1}, {tensor.Q8_0, 96, 1},
			} {
				tm := newTestMat(rng, c.dt, false, 6, c.in, c.shards, 0)
				for _, n := range []int{1, 2, 3, 7} {
					x := randInputs(rng, n, c.in)
					whole := make([]float32, n*6)
					split := make([]float32, n*6)
					MatMulRows(whole, x, n, &tm.m, 0, 6)
					for _, r := range [][2]int{{0, 1}, {1, 2}, {2, 3}, {3, 6}} {
						MatMulRows(split, x, n, &tm.m, r[0], r[1])
					}
					for i := range whole {
						if math.Float32bits(whole[i]) != math.Float32bits(split[i]) {
							t.Errorf("exact=%v %v in=%d n=%d: output %d is %g in one range, %g split", exact, c.dt, c.in, n, i, whole[i], split[i])
							break
						}
					}
				}
			}
		})
		restore()
	}
}

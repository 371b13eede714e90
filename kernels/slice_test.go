package kernels

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// packed copies a (possibly strided) matrix's rows into fresh packed bytes.
func packed(m Mat) Mat {
	p := m
	rb, st := m.rowBytes(), m.stride()
	rows := m.Out
	if m.Transposed {
		rows = m.In
	}
	p.Data = make([]byte, rows*rb)
	for r := 0; r < rows; r++ {
		copy(p.Data[r*rb:(r+1)*rb], m.Data[r*st:r*st+rb])
	}
	p.Stride = 0
	return p
}

// A slice of a matrix, strided or not, multiplies exactly as a packed copy
// of the same rows and columns: same bits at every kernel level, for a
// decode step and a prefill batch, with float and int8 activations, and
// by row blocks for int8 [in, out].
func TestSliceEqualsPackedCopy(t *testing.T) {
	type sliceCase struct {
		dt             tensor.DType
		inOut          bool
		out, in, shard int
		lo, hi         int
		byIn           bool
	}
	var cases []sliceCase
	for _, dt := range testTypes {
		for _, inOut := range []bool{false, true} {
			if inOut && dt == tensor.Q8_0 {
				continue
			}
			shards := 0
			if dt == tensor.I8 {
				shards = 8
			}
			cases = append(cases,
				sliceCase{dt, inOut, 96, 512, shards, 32, 64, false},
				sliceCase{dt, inOut, 96, 512, shards, 0, 96, false},
				sliceCase{dt, inOut, 70, 4096, shards, 2048, 4096, true}, // two dotSpans; I8: four of eight shards
				sliceCase{dt, inOut, 70, 512, shards, 128, 192, true},
			)
		}
	}
	cases = append(cases,
		sliceCase{tensor.Q4_K, false, 40, 1024, 0, 256, 768, true},
		sliceCase{tensor.Q4_K, false, 40, 1024, 0, 8, 24, false},
	)
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, c := range cases {
			var m Mat
			if c.dt.Quantized() && c.dt != tensor.Q8_0 {
				m = randBlockMat(t, rng, c.dt, c.out, c.in)
			} else {
				m = newTestMat(rng, c.dt, c.inOut, c.out, c.in, max(c.shard, 1), 0).m
				if c.dt != tensor.I8 {
					m.Shards = 0
				}
			}
			var s Mat
			var err error
			if c.byIn {
				s, err = m.SliceIn(c.lo, c.hi)
			} else {
				s, err = m.SliceOut(c.lo, c.hi)
			}
			if err != nil {
				t.Fatalf("%+v: %v", c, err)
			}
			p := packed(s)
			for _, exact := range []bool{true, false} {
				restore := setExactQuant(exact)
				for _, n := range []int{1, 5, 40} {
					x := randInputs(rng, n, s.In)
					got, want := make([]float32, n*s.Out), make([]float32, n*s.Out)
					MatMul(got, x, n, &s)
					MatMul(want, x, n, &p)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%+v exact=%v n=%d: output %d of the slice %g, of its copy %g", c, exact, n, i, got[i], want[i])
						}
					}
					if s.Blocks() > 0 {
						parts := make([][]float32, s.Blocks())
						for b := range parts {
							parts[b] = make([]float32, n*s.Out)
							MatMulBlock(parts[b], x, n, &s, b)
						}
						CombineBlocks(got, parts, n, &s, 0, s.Out)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%+v n=%d: output %d by blocks %g, of the copy %g", c, n, i, got[i], want[i])
							}
						}
					}
				}
				restore()
			}
		}
	})
}

// Column slices equal the columns of the whole product, bit for bit.
func TestSliceOutEqualsColumns(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, dt := range testTypes {
			for _, inOut := range []bool{false, true} {
				if inOut && dt == tensor.Q8_0 {
					continue
				}
				m := newTestMat(rng, dt, inOut, 128, 256, 8, 0).m
				if dt != tensor.I8 {
					m.Shards = 0
				}
				x := randInputs(rng, 3, 256)
				all := make([]float32, 3*128)
				MatMul(all, x, 3, &m)
				s, err := m.SliceOut(64, 128)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]float32, 3*64)
				MatMul(got, x, 3, &s)
				for tk := 0; tk < 3; tk++ {
					for j := 0; j < 64; j++ {
						if a, b := got[tk*64+j], all[tk*128+64+j]; math.Float32bits(a) != math.Float32bits(b) {
							t.Fatalf("%v inOut=%v: token %d column %d: slice %g, whole %g", dt, inOut, tk, 64+j, a, b)
						}
					}
				}
			}
		}
	})
}

func TestSliceInRefusesSplitBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	i8 := newTestMat(rng, tensor.I8, true, 16, 64, 8, 0).m
	q8 := newTestMat(rng, tensor.Q8_0, false, 16, 64, 1, 0).m
	q4 := randBlockMat(t, rng, tensor.Q4_K, 4, 512)
	for _, c := range []struct {
		m      Mat
		lo, hi int
		unit   int
	}{
		{i8, 0, 12, 8}, // 8 scale shards of 8 rows
		{q8, 16, 48, 32},
		{q4, 0, 128, 256},
	} {
		_, err := c.m.SliceIn(c.lo, c.hi)
		var se *SplitError
		if !errors.As(err, &se) || se.Unit != c.unit {
			t.Errorf("%v [%d, %d): got %v, want a SplitError of unit %d", c.m.Type, c.lo, c.hi, err, c.unit)
		}
	}
	if _, err := i8.SliceIn(0, 16); err != nil {
		t.Errorf("two whole shards: %v", err)
	}
}

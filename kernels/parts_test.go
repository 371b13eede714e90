package kernels

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// cutMat copies a joined [out, in] matrix into parts of the given sizes
// along the outputs or (in) the inputs, each in memory of its own.
func cutMat(t testing.TB, m *Mat, sizes []int, in bool) []Mat {
	t.Helper()
	rb := m.rowBytes()
	var parts []Mat
	k := 0
	for _, s := range sizes {
		p := Mat{Type: m.Type, Out: m.Out, In: m.In}
		if in {
			p.In = s
			prb, _ := m.Type.RowBytes(s)
			off := weightOffset(m.Type, k)
			for r := 0; r < m.Out; r++ {
				p.Data = append(p.Data, m.Data[r*rb+off:r*rb+off+prb]...)
			}
		} else {
			p.Out = s
			p.Data = append([]byte(nil), m.Data[k*rb:(k+s)*rb]...)
		}
		parts = append(parts, p)
		k += s
	}
	return parts
}

// firstDiff returns the first index where a and b differ in bits, or -1.
func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// A product over a matrix's parts — runs of outputs, or runs of inputs on
// the dotSpan grid (the last with a tail of less than a step) — has the
// bits of the product over the joined matrix, at every level, for decode
// and prefill sizes and any split of the outputs; so do its SliceOut and
// SliceIn views.
func TestPartsKeepBits(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			for _, c := range []struct {
				out   int
				sizes []int
				in    bool
			}{
				{37, []int{2048, 2048}, true},
				{37, []int{2048, 4096, 40}, true},
				{9, []int{4096, 2051}, true},
				{37, []int{5, 16, 3, 13}, false},
				{0, []int{4, 4}, false},
				{0, []int{1}, false},
			} {
				out, in := c.out, 2100
				sum := 0
				for _, s := range c.sizes {
					sum += s
				}
				if c.in {
					in = sum
				} else {
					out = sum
				}
				tm := newTestMat(rng, dt, false, out, in, 1, 0)
				pm, err := Parted(cutMat(t, &tm.m, c.sizes, c.in), c.in)
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("%v %d×%d parts %v in=%v", dt, out, in, c.sizes, c.in)
				for _, n := range []int{1, 2, 3, 5, 17, 70} {
					x := randInputs(rng, n, in)
					want := make([]float32, n*out)
					MatMulRows(want, x, n, &tm.m, 0, out)
					got := make([]float32, n*out)
					for i := range got {
						got[i] = float32(i) // MatMulRows must overwrite, not add
					}
					MatMulRows(got, x, n, &pm, 0, out)
					if i := firstDiff(want, got); i >= 0 {
						t.Fatalf("%s n=%d: output %d is %g in parts, %g joined", name, n, i, got[i], want[i])
					}
					split := make([]float32, n*out)
					for _, r := range [][2]int{{0, 1}, {1, 5}, {5, 21}, {21, out}} {
						if r[0] < r[1] && r[1] <= out {
							MatMulRows(split, x, n, &pm, r[0], r[1])
						}
					}
					if out >= 21 {
						if i := firstDiff(want, split); i >= 0 {
							t.Fatalf("%s n=%d split: output %d is %g, %g joined", name, n, i, split[i], want[i])
						}
					}
				}
				// Views of the parts are views of the joined matrix.
				for _, v := range []struct {
					byIn   bool
					lo, hi int
				}{{false, 1, out - 1}, {false, 0, min(out, 5)}, {true, 0, 2048}, {true, 2048, in}, {true, 0, in}} {
					if v.lo >= v.hi || v.byIn && v.hi > in {
						continue
					}
					var jv, pv Mat
					var errJ, errP error
					if v.byIn {
						jv, errJ = tm.m.SliceIn(v.lo, v.hi)
						pv, errP = pm.SliceIn(v.lo, v.hi)
					} else {
						jv, errJ = tm.m.SliceOut(v.lo, v.hi)
						pv, errP = pm.SliceOut(v.lo, v.hi)
					}
					if errJ != nil || errP != nil {
						t.Fatalf("%s slice %+v: %v, %v", name, v, errJ, errP)
					}
					for _, n := range []int{1, 17} {
						x := randInputs(rng, n, jv.In)
						want := make([]float32, n*jv.Out)
						got := make([]float32, n*jv.Out)
						MatMulRows(want, x, n, &jv, 0, jv.Out)
						MatMulRows(got, x, n, &pv, 0, pv.Out)
						if i := firstDiff(want, got); i >= 0 {
							t.Fatalf("%s slice %+v n=%d: output %d is %g in parts, %g joined", name, v, n, i, got[i], want[i])
						}
					}
				}
			}
		}
	})
}

// Input-axis parts that do not start on the dotSpan grid are refused with
// a *SplitError (the caller joins them), as are types the parts cannot
// hold and parts that do not fit together.
func TestPartedRefusals(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	bf := newTestMat(rng, tensor.BF16, false, 4, 2048, 1, 0)
	parts := cutMat(t, &bf.m, []int{1024, 1024}, true)
	_, err := Parted(parts, true)
	var se *SplitError
	if !errors.As(err, &se) || se.Unit != dotSpan || se.Lo != 1024 {
		t.Errorf("parts of 1024 inputs: %v, want a SplitError at input 1024", err)
	}
	q := newTestMat(rng, tensor.Q8_0, false, 4, 64, 1, 0)
	if _, err := Parted(cutMat(t, &q.m, []int{2, 2}, false), false); err == nil {
		t.Error("Q8_0 parts accepted")
	}
	mixed := []Mat{cutMat(t, &bf.m, []int{2, 2}, false)[0], newTestMat(rng, tensor.BF16, false, 2, 1024, 1, 0).m}
	if _, err := Parted(mixed, false); err == nil {
		t.Error("output parts of different widths accepted")
	}
	if _, err := Parted(nil, false); err == nil {
		t.Error("no parts accepted")
	}
}

// A decode step over a matrix in parts allocates nothing.
func TestPartsDecodeAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, in := range []bool{false, true} {
		tm := newTestMat(rng, tensor.BF16, false, 64, 4096, 1, 0)
		pm, err := Parted(cutMat(t, &tm.m, map[bool][]int{false: {32, 32}, true: {2048, 2048}}[in], in), in)
		if err != nil {
			t.Fatal(err)
		}
		x := randInputs(rng, 1, 4096)
		dst := make([]float32, 64)
		if a := testing.AllocsPerRun(20, func() { MatMulRows(dst, x, 1, &pm, 0, 64) }); a != 0 {
			t.Errorf("in=%v: %v allocations a decode step", in, a)
		}
	}
}

// BenchmarkGEMVParts decodes one token through Grok-2-shaped BF16 expert
// slices (a quarter of the width: 8 slices of 512 rows of w1, 8 of 2048
// inputs of w2), joined and in parts, reporting the weight bytes read per
// second: the parts should read as fast as the joined matrix.
func BenchmarkGEMVParts(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		name    string
		out, in int
		sizes   []int
		byIn    bool
	}{
		{"w1", 8 * 512, 2048, []int{512, 512, 512, 512, 512, 512, 512, 512}, false},
		{"w2", 2048, 8 * 2048, []int{2048, 2048, 2048, 2048, 2048, 2048, 2048, 2048}, true},
	} {
		tm := newTestMat(rng, tensor.BF16, false, c.out, c.in, 1, 0)
		var joined, parted []Mat
		for len(joined)*len(tm.m.Data) < 256<<20 { // more than any cache
			m := tm.m
			m.Data = append([]byte(nil), m.Data...)
			joined = append(joined, m)
			pm, err := Parted(cutMat(b, &m, c.sizes, c.byIn), c.byIn)
			if err != nil {
				b.Fatal(err)
			}
			parted = append(parted, pm)
		}
		x := randInputs(rng, 1, c.in)
		dst := make([]float32, c.out)
		for _, v := range []struct {
			name string
			mats []Mat
		}{{"joined", joined}, {"parts", parted}} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				b.SetBytes(int64(len(tm.m.Data)))
				for i := 0; b.Loop(); i++ {
					MatMul(dst, x, 1, &v.mats[i%len(v.mats)])
				}
			})
		}
	}
}

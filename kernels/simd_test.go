package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// The SIMD kernels are checked against the pure-Go reference at every
// level this machine supports (forLevels runs level "Go" too, so the
// reference is checked against the definition as well).

func forLevels(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for i := range levels {
		t.Run(levelName(i), func(t *testing.T) {
			defer useLevel(i)()
			f(t)
		})
	}
}

// testMat is a random weight matrix with its exactly dequantised values
// (Out×In, float64 so that the definition is exact enough).
type testMat struct {
	m   Mat
	deq []float64
}

var testTypes = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.I8}

// newTestMat makes a random matrix. With offset > 0 the data starts that
// many bytes into its allocation, so that no load is aligned.
func newTestMat(rng *rand.Rand, dt tensor.DType, inOut bool, out, in, shards, offset int) testMat {
	deq := make([]float64, out*in)
	if dt == tensor.I8 {
		q := make([]byte, out*in+offset)[offset:]
		sc := make([]float32, shards*out)
		for i := range sc {
			sc[i] = float32(0.5 + rng.Float64())
		}
		blk := in / shards
		for o := 0; o < out; o++ {
			for r := 0; r < in; r++ {
				v := int8(rng.IntN(256) - 128)
				idx := o*in + r
				if inOut {
					idx = r*out + o
				}
				q[idx] = byte(v)
				deq[o*in+r] = float64(v) * float64(sc[(r/blk)*out+o])
			}
		}
		return testMat{Mat{Type: dt, Out: out, In: in, Data: q, Transposed: inOut, Scales: sc, Shards: shards}, deq}
	}
	rows, cols := out, in
	if inOut {
		rows, cols = in, out
	}
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	enc, err := tensor.EncodeRow(nil, dt, w)
	if err != nil {
		panic(err)
	}
	data := append(make([]byte, offset), enc...)[offset:]
	rb, _ := dt.RowBytes(cols)
	row := make([]float32, cols)
	for r := 0; r < rows; r++ {
		if err := tensor.DecodeRow(row, dt, data[r*rb:]); err != nil {
			panic(err)
		}
		for c, v := range row {
			if inOut {
				deq[c*in+r] = float64(v)
			} else {
				deq[r*in+c] = float64(v)
			}
		}
	}
	return testMat{Mat{Type: dt, Out: out, In: in, Data: data, Transposed: inOut}, deq}
}

// randInputs returns n×In activations starting one float into their
// allocation (so not 64-byte aligned).
func randInputs(rng *rand.Rand, n, in int) []float32 {
	x := make([]float32, n*in+1)[1:]
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// checkDefinition compares got (n×Out) with the float64 definition. The
// bound is the standard one for float32 summation of In terms in any order,
// In·2^-24·Σ|w·x|, plus one rounding of the result.
func checkDefinition(t *testing.T, tm testMat, x, got []float32, n int) {
	t.Helper()
	m := &tm.m
	for i := 0; i < n; i++ {
		for o := 0; o < m.Out; o++ {
			var s, abs float64
			for r := 0; r < m.In; r++ {
				p := tm.deq[o*m.In+r] * float64(x[i*m.In+r])
				s += p
				abs += math.Abs(p)
			}
			tol := float64(m.In+2)*0x1p-24*abs + 0x1p-24*math.Abs(s)
			if d := math.Abs(float64(got[i*m.Out+o]) - s); !(d <= tol) {
				t.Fatalf("%v %dx%d inOut=%v n=%d: y[%d][%d] = %g, want %g ± %g", m.Type, m.Out, m.In, m.Transposed, n, i, o, got[i*m.Out+o], s, tol)
			}
		}
	}
}

// checkSplits checks that MatMulRows over random disjoint ranges gives
// bit for bit the full product.
func checkSplits(t *testing.T, rng *rand.Rand, m *Mat, x, want []float32, n int) {
	t.Helper()
	got := make([]float32, len(want))
	for lo := 0; lo < m.Out; {
		hi := min(m.Out, lo+1+rng.IntN(m.Out))
		MatMulRows(got, x, n, m, lo, hi)
		lo = hi
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%v %dx%d inOut=%v n=%d: split product differs at %d: %g vs %g", m.Type, m.Out, m.In, m.Transposed, n, i, got[i], want[i])
		}
	}
}

type matCase struct {
	dt         tensor.DType
	inOut      bool
	n, out, in int
	shards     int
}

func (c matCase) String() string {
	return fmt.Sprintf("%v inOut=%v n=%d %dx%d shards=%d", c.dt, c.inOut, c.n, c.out, c.in, c.shards)
}

// randCases makes ragged shapes: sizes that are not multiples of 8, 16 or
// 32 (except where Q8_0 needs whole blocks), n = 1..9, and a few larger
// ones that cross the cache-chunk boundaries.
func randCases(rng *rand.Rand, count int) []matCase {
	var cs []matCase
	for i := 0; i < count; i++ {
		c := matCase{dt: testTypes[rng.IntN(len(testTypes))], n: 1 + rng.IntN(9), out: 1 + rng.IntN(40)}
		c.inOut = c.dt != tensor.Q8_0 && rng.IntN(2) == 0
		switch c.dt {
		case tensor.Q8_0:
			c.in = 32 * (1 + rng.IntN(7))
		case tensor.I8:
			c.shards = 1 + rng.IntN(4)
			c.in = c.shards * (1 + rng.IntN(80))
		default:
			c.in = 1 + rng.IntN(150)
		}
		cs = append(cs, c)
	}
	// Larger products: several input chunks, many token tiles.
	cs = append(cs,
		matCase{dt: tensor.F32, n: 40, out: 9, in: 3001},
		matCase{dt: tensor.F16, n: 37, out: 13, in: 2600},
		matCase{dt: tensor.Q8_0, n: 33, out: 7, in: 32 * 210},
		matCase{dt: tensor.I8, n: 35, out: 6, in: 2 * 3300, shards: 2},
		matCase{dt: tensor.I8, inOut: true, n: 21, out: 70, in: 300, shards: 3},
		matCase{dt: tensor.BF16, inOut: true, n: 50, out: 2000, in: 40},
		matCase{dt: tensor.F32, n: 1, out: 5, in: 1 << 16},
		// Decode-sized products over several dotSpan spans.
		matCase{dt: tensor.F16, n: 2, out: 11, in: 4400},
		matCase{dt: tensor.Q8_0, n: 1, out: 6, in: 32 * 150},
		matCase{dt: tensor.BF16, n: 4, out: 9, in: 6500},
		// [in, out] products over several row pieces and blocks, with rows
		// left over from whole groups of the kernels.
		matCase{dt: tensor.I8, inOut: true, n: 1, out: 100, in: 1030, shards: 1},
		matCase{dt: tensor.I8, inOut: true, n: 3, out: 37, in: 2 * 531, shards: 2},
		matCase{dt: tensor.F16, inOut: true, n: 7, out: 45, in: 701},
		matCase{dt: tensor.F32, inOut: true, n: 2, out: 129, in: 523},
	)
	return cs
}

// Every product at every level equals the float64 definition (ExactQuant:
// float32 activations) within float32 rounding, and any split of the output
// range gives the same bits.
func TestMatMulLevels(t *testing.T) {
	defer setExactQuant(true)()
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, c := range randCases(rng, 300) {
			tm := newTestMat(rng, c.dt, c.inOut, c.out, c.in, c.shards, 1+rng.IntN(3))
			x := randInputs(rng, c.n, c.in)
			got := make([]float32, c.n*c.out)
			MatMul(got, x, c.n, &tm.m)
			checkDefinition(t, tm, x, got, c.n)
			checkSplits(t, rng, &tm.m, x, got, c.n)
		}
	})
}

// quantBound returns, for each output, M = Σ |scale terms|·Σ|w_q·x_q| of
// the quantised computation: the SIMD kernels and matMulQuantRef differ
// only in where they round those terms, by at most (blocks+24)·2^-23·M.
func quantBound(m *Mat, x []float32, n int) ([]float64, int) {
	qa := quantizeActs(0, x, n, m)
	defer qbufPool.Put(qa)
	rb, _ := m.Type.RowBytes(m.In)
	bound := make([]float64, n*m.Out)
	for r := 0; r < m.Out; r++ {
		row := m.Data[r*rb:]
		for t := 0; t < n; t++ {
			xq, dx := qa.token(t)
			var M float64
			absDot := func(w, x []byte) float64 {
				var s float64
				for i := range w {
					s += math.Abs(float64(int8(w[i])) * float64(int8(x[i])))
				}
				return s
			}
			if m.Type == tensor.Q8_0 {
				for b := 0; b < m.In/32; b++ {
					dw := tensor.HalfToFloat(binary.LittleEndian.Uint16(row[b*34:]))
					M += math.Abs(float64(dw)*float64(dx[b*8])) * absDot(row[b*34+2:b*34+34], xq[b*32:])
				}
			} else {
				seg := m.In / m.Shards
				for s := 0; s < m.Shards; s++ {
					for b := 0; b < qa.nbs; b++ {
						k0 := s*seg + b*32
						w := row[k0 : k0+min(32, seg-b*32)]
						M += math.Abs(float64(m.Scales[s*m.Out+r])*float64(dx[(s*qa.nbs+b)*8])) * absDot(w, xq[(s*qa.nbs+b)*32:])
					}
				}
			}
			bound[t*m.Out+r] = M
		}
	}
	return bound, qa.nbt
}

// The int8-activation products (Q8_0, [out, in] I8) at every level equal
// matMulQuantRef, the same computation in Go, within float rounding of the
// scale terms, and stay within the activations' quantisation error of the
// float64 definition.
func TestQuantizedMatMul(t *testing.T) {
	defer setExactQuant(false)()
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, c := range randCases(rng, 400) {
			if c.dt != tensor.Q8_0 && c.dt != tensor.I8 {
				continue
			}
			c.inOut = false
			tm := newTestMat(rng, c.dt, false, c.out, c.in, c.shards, rng.IntN(3))
			m := &tm.m
			x := randInputs(rng, c.n, c.in)
			got := make([]float32, c.n*c.out)
			MatMul(got, x, c.n, m)
			want := make([]float32, c.n*c.out)
			matMulQuantRef(want, x, c.n, m, 0, c.out)
			bound, nb := quantBound(m, x, c.n)
			for i := range want {
				tol := float64(nb+24) * 0x1p-23 * bound[i]
				if d := math.Abs(float64(got[i] - want[i])); !(d <= tol) {
					t.Fatalf("%v: y[%d] = %g, reference %g ± %g", c, i, got[i], want[i], tol)
				}
			}
			checkSplits(t, rng, m, x, got, c.n)
			// Against the definition: each activation moves by at most
			// d/2 = amax/254 of its block.
			amax := make([]float64, c.in)
			for i := 0; i < c.n; i++ {
				xi := x[i*c.in : (i+1)*c.in]
				for r := range amax {
					if r == 0 || blockStart(r, m) == r {
						amax[r] = blockAmax(xi, r, m)
					} else {
						amax[r] = amax[r-1]
					}
				}
				for o := 0; o < c.out; o++ {
					var s, e float64
					for r := 0; r < c.in; r++ {
						s += tm.deq[o*c.in+r] * float64(x[i*c.in+r])
						e += math.Abs(tm.deq[o*c.in+r]) * amax[r] / 254
					}
					if d := math.Abs(float64(got[i*c.out+o]) - s); !(d <= 1.01*e+1e-5*math.Abs(s)) {
						t.Fatalf("%v: y[%d][%d] = %g, definition %g, quantisation bound %g", c, i, o, got[i*c.out+o], s, e)
					}
				}
			}
		}
	})
}

// blockStart is the first element of the activation block holding r.
func blockStart(r int, m *Mat) int {
	seg := m.In
	if m.Type == tensor.I8 {
		seg = m.In / m.Shards
	}
	s, b := r/seg, (r%seg)/32
	return s*seg + b*32
}

// blockAmax is max|x| over the activation block holding element r.
func blockAmax(x []float32, r int, m *Mat) float64 {
	seg := m.In
	if m.Type == tensor.I8 {
		seg = m.In / m.Shards
	}
	s, b := r/seg, (r%seg)/32
	lo := s*seg + b*32
	hi := min(lo+32, (s+1)*seg)
	var a float64
	for _, v := range x[lo:hi] {
		a = max(a, math.Abs(float64(v)))
	}
	return a
}

// The SIMD quantisers equal quantizeBlockRef bit for bit, including
// halfway cases, tiny, huge, infinite and NaN blocks.
func TestQuantizeBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var blocks [][]float32
	for i := 0; i < 2000; i++ {
		b := make([]float32, 32)
		fillQuantCase(rng, b, i%10, 127)
		blocks = append(blocks, b)
	}
	x := make([]float32, 0, 32*len(blocks)+1)
	x = append(x, 0) // unaligned start
	for _, b := range blocks {
		x = append(x, b...)
	}
	x = x[1:]
	nb := len(blocks)
	wq, wd, wc := make([]byte, 32*nb), make([]float32, 8*nb), make([]int32, 8*nb)
	for b := 0; b < nb; b++ {
		quantizeBlockRef(wq[b*32:], wd[b*8:], wc[b*8:], x[b*32:(b+1)*32])
	}
	for i := 1; i < len(levels); i++ {
		t.Run(levelName(i), func(t *testing.T) {
			gq, gd, gc := make([]byte, 32*nb), make([]float32, 8*nb), make([]int32, 8*nb)
			levels[i].quant.call(&x[0], nb, &gq[0], &gd[0], &gc[0])
			for b := 0; b < nb; b++ {
				for j := 0; j < 32; j++ {
					if gq[b*32+j] != wq[b*32+j] {
						t.Fatalf("block %d %v: quant %d = %d, want %d", b, x[b*32:(b+1)*32], j, int8(gq[b*32+j]), int8(wq[b*32+j]))
					}
				}
				for j := 0; j < 8; j++ {
					if gc[b*8+j] != wc[b*8+j] {
						t.Fatalf("block %d: correction %d = %d, want %d", b, j, gc[b*8+j], wc[b*8+j])
					}
					g, w := gd[b*8+j], wd[b*8+j]
					if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
						t.Fatalf("block %d: scale %g, want %g", b, g, w)
					}
				}
			}
		})
	}
	// Spot-check the reference against the definition on the halfway block.
	var q [32]byte
	var d [8]float32
	var cr [8]int32
	quantizeBlockRef(q[:], d[:], cr[:], []float32{127, 0.5, -0.5, 1.5, -2.5})
	if d[0] != 1 || int8(q[1]) != 1 || int8(q[2]) != -1 || int8(q[3]) != 2 || int8(q[4]) != -3 || cr[0] != -128*129 || cr[1] != 128*3 {
		t.Fatalf("halfway cases: d=%g q=%v", d[0], q[:5])
	}
}

func TestDotAxpyLevels(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 12))
		for _, n := range []int{0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 128, 1000} {
			a, b := randInputs(rng, 1, n), randInputs(rng, 1, n+1)[1:]
			got := Dot(a, b)
			var s, abs float64
			for i := range a {
				s += float64(a[i]) * float64(b[i])
				abs += math.Abs(float64(a[i]) * float64(b[i]))
			}
			if d := math.Abs(float64(got) - s); !(d <= float64(n+1)*0x1p-24*abs) {
				t.Fatalf("Dot(n=%d) = %g, want %g", n, got, s)
			}
			y := randInputs(rng, 1, n)
			want := append([]float32(nil), y...)
			alpha := float32(rng.NormFloat64())
			Axpy(y, alpha, a)
			for i := range want {
				w := float64(want[i]) + float64(alpha)*float64(a[i])
				// One fused or two rounded operations.
				if d := math.Abs(float64(y[i]) - w); !(d <= 0x1p-23*(math.Abs(w)+math.Abs(float64(alpha*a[i])))) {
					t.Fatalf("Axpy(n=%d)[%d] = %g, want %g", n, i, y[i], w)
				}
			}
		}
	})
}

// addScaled rounds the product and then the sum, as the scalar expression
// d += float32(sc·a) does, on every level: the same bits.
func TestAddScaledLevels(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 14))
		for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 33, 100, 1000} {
			d, sc, a := randInputs(rng, 1, n), randInputs(rng, 1, n), randInputs(rng, 1, n)
			want := slices.Clone(d)
			for i := range want {
				want[i] += float32(sc[i] * a[i]) // the conversion forbids fusing
			}
			addScaled(d, sc, a)
			for i := range want {
				if math.Float32bits(d[i]) != math.Float32bits(want[i]) {
					t.Fatalf("addScaled(n=%d)[%d] = %g, want %g", n, i, d[i], want[i])
				}
			}
		}
	})
}

// ulps is |got-want| in units of float32 spacing at want.
func ulps(got float32, want float64) float64 {
	w := float32(want)
	sp := math.Nextafter32(float32(math.Abs(float64(w))), float32(math.Inf(1))) - float32(math.Abs(float64(w)))
	return math.Abs(float64(got)-want) / float64(sp)
}

// The exp polynomial (through expSub with m = 0) is within 2 ulp of exp
// over [-87, 88.7] (AVX-512) or [-87, 88] (AVX2, which clamps beyond).
func TestExp(t *testing.T) {
	for i := 1; i < len(levels); i++ {
		t.Run(levelName(i), func(t *testing.T) {
			ks := levels[i]
			hi := 88.7
			if ks.vecWidth() == 8 {
				hi = 88
			}
			var x []float32
			for v := -87.0; v < hi; v += 0.001 {
				x = append(x, float32(v))
			}
			x = x[:len(x)/16*16]
			e := append([]float32(nil), x...)
			sum := ks.vec.expSub.call(&e[0], len(e)/ks.vecWidth(), 0)
			var worst, want float64
			for j, v := range x {
				w := math.Exp(float64(v))
				want += float64(e[j])
				if u := ulps(e[j], w); u > worst {
					worst = u
				}
				if u := ulps(e[j], w); u > 2 {
					t.Fatalf("exp(%g) = %g, want %g (%.2f ulp)", v, e[j], w, u)
				}
			}
			if math.Abs(sum-want) > 1e-12*want {
				t.Fatalf("sum %g, want %g", sum, want)
			}
			t.Logf("max error %.2f ulp", worst)
		})
	}
}

func TestGeluMulLevels(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var a []float32
	for v := -30.0; v <= 30; v += 0.0007 {
		a = append(a, float32(v))
	}
	for i := 0; i < 10000; i++ {
		a = append(a, float32(rng.NormFloat64()*3))
	}
	a = append(a, 0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 100, -100, 1e30, -1e30)
	b := randInputs(rng, 1, len(a))
	want := make([]float32, len(a))
	geluMulRef(want, a, b)
	forLevels(t, func(t *testing.T) {
		for _, n := range []int{len(a), 1, 7, 15, 17, 33} {
			got := append([]float32(nil), a[:n]...)
			GeluMul(got, got, b[:n]) // in place, as the model calls it
			var worst float64
			for i := range got {
				d := math.Abs(float64(got[i] - want[i]))
				tol := 0x1p-20*math.Abs(float64(a[i])*float64(b[i])) + 0x1p-21*math.Abs(float64(want[i]))
				if !(d <= tol) {
					t.Fatalf("gelu(%g)·%g = %g, want %g", a[i], b[i], got[i], want[i])
				}
				if d > 0 {
					worst = max(worst, d/math.Abs(float64(a[i])*float64(b[i])))
				}
			}
			if n == len(a) {
				t.Logf("max error %.3g·|a·b|", worst)
			}
		}
	})
}

func TestSoftcapLevels(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	var x []float32
	for v := -400.0; v <= 400; v += 0.013 {
		x = append(x, float32(v))
	}
	for i := 0; i < 10000; i++ {
		x = append(x, float32(rng.NormFloat64()*20))
	}
	x = append(x, 0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 1e-6, -1e-6, 1e30, -1e30, float32(math.Inf(1)), float32(math.Inf(-1)))
	for _, tc := range []struct{ mult, c float32 }{{0.08838835, 30}, {1, 30}, {0.25, 5}, {2, 0}} {
		want := slices.Clone(x)
		softcapRef(want, tc.mult, tc.c)
		if tc.c <= 0 {
			for i := range want {
				want[i] = x[i] * tc.mult
			}
		}
		forLevels(t, func(t *testing.T) {
			var worst float64
			for _, n := range []int{len(x), 1, 7, 15, 17, 33} {
				got := slices.Clone(x[:n])
				Softcap(got, tc.mult, tc.c)
				for i := range got {
					if got[i] == want[i] {
						continue
					}
					d := math.Abs(float64(got[i] - want[i]))
					tol := 0x1p-22*float64(tc.c) + 0x1p-21*math.Abs(float64(want[i]))
					if !(d <= tol) {
						t.Fatalf("mult %g, c %g: softcap(%g) = %g, want %g", tc.mult, tc.c, x[i], got[i], want[i])
					}
					worst = max(worst, d)
				}
			}
			t.Logf("mult %g, c %g: max |Δ| %.3g", tc.mult, tc.c, worst)
		})
	}
}

func TestSoftmaxLevels(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	forLevels(t, func(t *testing.T) {
		var worst float64
		for _, n := range []int{1, 2, 7, 8, 9, 16, 17, 31, 100, 1000, 4097} {
			for _, scale := range []float64{0.1, 3, 30} {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * scale)
				}
				want := append([]float32(nil), x...)
				softmaxRef(want)
				Softmax(x)
				for i := range x {
					u := ulps(x[i], float64(want[i]))
					if want[i] < 0x1p-120 { // far below any other weight
						u = math.Abs(float64(x[i]-want[i])) / 0x1p-120
					}
					if u > 4 {
						t.Fatalf("n=%d: softmax[%d] = %g, want %g (%.1f ulp)", n, i, x[i], want[i], u)
					}
					worst = max(worst, u)
				}
			}
		}
		t.Logf("max error %.2f ulp", worst)
	})
}

// MatMulRows on disjoint ranges from concurrent goroutines (the worker
// pool's use) gives the single-call product bit for bit; run with -race.
func TestMatMulRowsConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, quant := range []bool{false, true} {
		defer setExactQuant(!quant)()
		for _, c := range []matCase{
			{dt: tensor.F32, n: 3, out: 67, in: 100},
			{dt: tensor.F16, n: 9, out: 40, in: 64},
			{dt: tensor.Q8_0, n: 5, out: 50, in: 96},
			{dt: tensor.I8, n: 2, out: 45, in: 90, shards: 3},
			{dt: tensor.I8, inOut: true, n: 4, out: 70, in: 30, shards: 2},
			{dt: tensor.BF16, inOut: true, n: 7, out: 33, in: 20},
		} {
			tm := newTestMat(rng, c.dt, c.inOut, c.out, c.in, max(c.shards, 1), 0)
			x := randInputs(rng, c.n, c.in)
			want := make([]float32, c.n*c.out)
			MatMul(want, x, c.n, &tm.m)
			got := make([]float32, len(want))
			done := make(chan struct{})
			const workers = 4
			for w := 0; w < workers; w++ {
				go func() {
					MatMulRows(got, x, c.n, &tm.m, w*c.out/workers, (w+1)*c.out/workers)
					done <- struct{}{}
				}()
			}
			for w := 0; w < workers; w++ {
				<-done
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v: concurrent [%d] = %g, want %g", c, i, got[i], want[i])
				}
			}
		}
	}
}

// Every kernel family's step divides dotSpan, so that the kernels' spans
// end on step boundaries and every chunk of the drivers starts on one.
func TestSpanFitsEveryFamily(t *testing.T) {
	for i, ks := range levels {
		if ks == nil {
			continue
		}
		for k, f := range ks.dot {
			if f.E <= 0 || dotSpan%f.E != 0 {
				t.Errorf("%s: dot family %d steps %d elements, not a divisor of %d", levelName(i), k, f.E, dotSpan)
			}
		}
		for k, f := range ks.int8 {
			if f.B <= 0 || dotSpan%(32*f.B) != 0 {
				t.Errorf("%s: int8 family %d steps %d blocks, not a divisor of %d elements", levelName(i), k, f.B, dotSpan)
			}
		}
	}
}

// A token's outputs are the same bits whether it is multiplied alone (the
// one-token decode kernels) or among other tokens (the tiled kernels), with
// float32 and with int8-quantised activations: the model's "a batch equals
// each sequence alone" rests on it. Batches of more than a tile's tokens
// take the tiled path, batches of 3 the decode path; the long rows (more
// than dotSpan elements, ragged) with many tokens make the tiled path cut
// the input axis into chunks, which must fall on the dotSpan grid.
func TestTokenAloneEqualsInBatch(t *testing.T) {
	defer func(v bool) { q8TwoPass = v }(q8TwoPass)
	q8TwoPass = true // on every CPU: the Q8_0 cases of q8TwoPassTokens and more
	for _, exact := range []bool{true, false} {
		restore := setExactQuant(exact)
		forLevels(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(21, 22))
			for _, c := range []matCase{
				{dt: tensor.F32, n: 13, out: 67, in: 100},
				{dt: tensor.F16, n: 7, out: 40, in: 200},
				{dt: tensor.BF16, n: 5, out: 33, in: 70},
				{dt: tensor.Q8_0, n: 11, out: 50, in: 160},
				{dt: tensor.I8, n: 6, out: 45, in: 90, shards: 3},
				{dt: tensor.I8, inOut: true, n: 8, out: 70, in: 150, shards: 2},
				{dt: tensor.F16, inOut: true, n: 3, out: 33, in: 77},
				{dt: tensor.F32, inOut: true, n: 9, out: 130, in: 41},
				{dt: tensor.F32, n: 24, out: 9, in: 5000},
				{dt: tensor.F16, n: 30, out: 10, in: 4999},
				{dt: tensor.BF16, n: 21, out: 6, in: 6001},
				{dt: tensor.Q8_0, n: 25, out: 9, in: 4640},
				{dt: tensor.I8, n: 40, out: 7, in: 6150, shards: 2},
				// Q8_0 through float32 scratch (q8TwoPassTokens), in more
				// than one group of tokens; a K-quant's two-pass groups.
				{dt: tensor.Q8_0, n: q8TwoPassTokens, out: 9, in: 4608},
				{dt: tensor.Q8_0, n: 101, out: 6, in: 2112},
				{dt: tensor.Q8_0, n: 101, out: 6, in: 4640}, // a tail: in registers
				{dt: tensor.Q4_K, n: 101, out: 5, in: 2304},
			} {
				tm := newTestMat(rng, c.dt, c.inOut, c.out, c.in, max(c.shards, 1), 0)
				x := randInputs(rng, c.n, c.in)
				for _, n := range []int{c.n, 3} {
					batch := make([]float32, n*c.out)
					MatMul(batch, x, n, &tm.m)
					one := make([]float32, c.out)
					for tok := 0; tok < n; tok++ {
						MatMul(one, x[tok*c.in:(tok+1)*c.in], 1, &tm.m)
						for i, v := range one {
							if w := batch[tok*c.out+i]; math.Float32bits(v) != math.Float32bits(w) {
								t.Fatalf("exact=%v %v: token %d output %d alone = %g, in a batch of %d %g", exact, c, tok, i, v, n, w)
							}
						}
					}
				}
			}
		})
		restore()
	}
}

// MatMulBlock and CombineBlocks give MatMulRows' bits for int8 [in, out]
// matrices, with one or several scale shards of one or several row blocks,
// on every level, whatever the column range of the combine.
func TestBlocksEqualMatMulRows(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(23, 24))
		for _, c := range []matCase{
			{dt: tensor.I8, inOut: true, n: 1, out: 70, in: 96, shards: 4},
			{dt: tensor.I8, inOut: true, n: 3, out: 64, in: 90, shards: 3},
			{dt: tensor.I8, inOut: true, n: 17, out: 33, in: 160, shards: 8},
			{dt: tensor.I8, inOut: true, n: 2, out: 130, in: 6, shards: 2},
			{dt: tensor.I8, inOut: true, n: 1, out: 80, in: 600, shards: 1},  // blocks of 256, 256, 88
			{dt: tensor.I8, inOut: true, n: 5, out: 48, in: 1042, shards: 2}, // 3 blocks a shard, the last of 9 rows
			{dt: tensor.I8, inOut: true, n: 2, out: 35, in: 512, shards: 1},  // two whole blocks
		} {
			tm := newTestMat(rng, c.dt, c.inOut, c.out, c.in, c.shards, 0)
			blocks := c.shards * ((c.in/c.shards + BlockRows - 1) / BlockRows)
			if tm.m.Blocks() != blocks {
				t.Fatalf("%v: Blocks %d, want %d", c, tm.m.Blocks(), blocks)
			}
			x := randInputs(rng, c.n, c.in)
			want := make([]float32, c.n*c.out)
			MatMul(want, x, c.n, &tm.m)
			parts := make([][]float32, blocks)
			for b := range parts {
				parts[b] = make([]float32, c.n*c.out)
				MatMulBlock(parts[b], x, c.n, &tm.m, b)
			}
			got := make([]float32, len(want))
			for lo := 0; lo < c.out; lo += 16 {
				CombineBlocks(got, parts, c.n, &tm.m, lo, min(lo+16, c.out))
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v: output %d by blocks %g, MatMulRows %g", c, i, got[i], want[i])
				}
			}
		}
	})
}

func TestSetVariant(t *testing.T) {
	prev := Variant()
	defer SetVariant(prev)
	for _, v := range Variants() {
		if err := SetVariant(v); err != nil || Variant() != v {
			t.Fatalf("SetVariant(%q): %v, now %q", v, err, Variant())
		}
	}
	if err := SetVariant("AMX"); err == nil {
		t.Fatal("SetVariant(AMX) succeeded")
	}
	t.Logf("variants %v, default %s", Variants(), prev)
}

// AddInOut over consecutive row ranges of an [in, out] matrix, started from
// a cleared dst, gives exactly MatMul's bits, at every level; so attention
// may multiply its values page by page.
func TestAddInOutRowSplitsKeepBits(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for i := 0; i < 120; i++ {
			dt := []tensor.DType{tensor.F32, tensor.F16, tensor.BF16}[i%3]
			n, out, in := 1+rng.IntN(8), 1+rng.IntN(150), 1+rng.IntN(700)
			if i%17 == 0 {
				in = 2048 + rng.IntN(3000) // past the summation grid's span
			}
			tm := newTestMat(rng, dt, true, out, in, 0, 1+rng.IntN(3))
			x := randInputs(rng, n, in)
			want := make([]float32, n*out)
			MatMul(want, x, n, &tm.m)
			got := make([]float32, n*out)
			esz := tm.m.rowBytes() / out
			for r0 := 0; r0 < in; {
				rows := min(in-r0, 1+rng.IntN(40))
				part := Mat{Type: dt, Out: out, In: rows, Transposed: true, Data: tm.m.Data[r0*out*esz : (r0+rows)*out*esz]}
				xs := make([]float32, n*rows)
				for t := 0; t < n; t++ {
					copy(xs[t*rows:], x[t*in+r0:t*in+r0+rows])
				}
				AddInOut(got, xs, n, &part)
				r0 += rows
			}
			for j := range want {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("%v %d×%d n=%d: element %d = %g by row ranges, %g in one product", dt, in, out, n, j, got[j], want[j])
				}
			}
		}
	})
}

// Widen decodes exactly as tensor.DecodeRow at every level: every binary16
// and bfloat16 bit pattern, and random Q8_0 blocks with every scale sign,
// zeros and the extreme quants. A NaN stays a NaN (VCVTPH2PS quiets a
// signalling one, as the F16 matrix kernels do).
func TestWidenEqualsDecodeRow(t *testing.T) {
	all := make([]byte, 2<<16)
	for i := 0; i < 1<<16; i++ {
		binary.LittleEndian.PutUint16(all[2*i:], uint16(i))
	}
	rng := rand.New(rand.NewPCG(7, 8))
	q8 := make([]byte, 34*300)
	for i := range q8 {
		q8[i] = byte(rng.Uint32())
	}
	for b := 0; b < 300; b++ {
		switch b % 5 {
		case 0:
			q8[34*b], q8[34*b+1] = 0, 0x80 // -0 scale
		case 1:
			q8[34*b+2], q8[34*b+3] = 0x80, 0x7f // -128, 127
		case 2:
			clear(q8[34*b+2 : 34*b+34])
		}
	}
	forLevels(t, func(t *testing.T) {
		for _, c := range []struct {
			dt  tensor.DType
			src []byte
			ns  []int
		}{
			{tensor.F16, all, []int{1 << 16, 1, 7, 15, 16, 17, 33, 1000}},
			{tensor.BF16, all, []int{1 << 16, 1, 9, 31, 64, 999}},
			{tensor.Q8_0, q8, []int{32, 64, 32 * 300}},
			{tensor.F32, all, []int{1, 100, 1 << 15}},
		} {
			for _, n := range c.ns {
				want := make([]float32, n)
				if err := tensor.DecodeRow(want, c.dt, c.src); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, n)
				Widen(got, c.dt, c.src)
				for i := range want {
					if isNaN32(got[i]) && isNaN32(want[i]) {
						continue
					}
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v n=%d: value %d = %#x, DecodeRow %#x", c.dt, n, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
					}
				}
			}
		}
	})
}

func isNaN32(v float32) bool { return v != v }

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// dequantTypes are the weight types checked against their dequantised F32
// matrix: every block type without kernels of its own
// (TestEveryBlockTypeChecked), and some with, through the same path.
var dequantTypes = []tensor.DType{tensor.F16, tensor.BF16, tensor.Q8_0,
	tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K,
	tensor.IQ4_NL, tensor.IQ4_XS, tensor.IQ3_S, tensor.IQ3_XXS, tensor.IQ2_XXS, tensor.IQ2_XS, tensor.IQ2_S,
	tensor.IQ1_S, tensor.IQ1_M}

func TestEveryBlockTypeChecked(t *testing.T) {
	for dt := tensor.DType(0); dt.String() != fmt.Sprintf("DType(%d)", int(dt)); dt++ {
		if !hasDotKernels(dt) && !slices.Contains(dequantTypes, dt) {
			t.Errorf("%v has no kernels and is not in dequantTypes", dt)
		}
	}
}

// randBlockMat makes a random out×in matrix of block type dt: random bytes,
// each block drawn again until it decodes to finite values of moderate size
// (random fp16 scales are sometimes Inf or NaN).
func randBlockMat(t *testing.T, rng *rand.Rand, dt tensor.DType, out, in int) Mat {
	t.Helper()
	bs, bb := dt.BlockSize(), dt.BlockBytes()
	data := make([]byte, out*in/bs*bb)
	vals := make([]float32, bs)
	for b := 0; b < len(data)/bb; b++ {
		blk := data[b*bb : (b+1)*bb]
		for ok := false; !ok; {
			for i := range blk {
				blk[i] = byte(rng.Uint32())
			}
			if err := tensor.DecodeRow(vals, dt, blk); err != nil {
				t.Fatal(err)
			}
			ok = true
			for _, v := range vals {
				ok = ok && !math.IsNaN(float64(v)) && math.Abs(float64(v)) < 1e6
			}
		}
	}
	return Mat{Type: dt, Out: out, In: in, Data: data}
}

// The dequantising path gives exactly the bits of the F32 matrix of the
// dequantised weights, for every n (decode and prefill) and every split of
// the rows, at every kernel level: the quantised product equals its float
// reference.
func TestDequantPathEqualsF32OfDequantised(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, dt := range dequantTypes {
			bs := max(32, dt.BlockSize())
			for _, c := range []struct{ out, in int }{{9, 1}, {37, 8}, {6, 16}, {5, 17}, {3, 25}} {
				in := c.in * bs
				var m Mat
				if dt.BlockSize() > 1 && dt != tensor.Q8_0 {
					m = randBlockMat(t, rng, dt, c.out, in)
				} else {
					m = newTestMat(rng, dt, false, c.out, in, 1, 0).m
				}
				if err := m.Validate(); err != nil {
					t.Fatal(err)
				}
				ref := f32OfDecoded(t, &m)
				for _, n := range []int{1, 2, 5, 7, 13, 40} {
					x := randInputs(rng, n, in)
					got := make([]float32, n*c.out)
					want := make([]float32, n*c.out)
					MatMul(want, x, n, &ref)
					if ks := active; ks != nil {
						// A split of the rows must not change a bit either.
						mid := c.out / 3
						ks.dequantMatMul(got, x, n, &m, 0, mid)
						ks.dequantMatMul(got, x, n, &m, mid, c.out)
					} else {
						MatMul(got, x, n, &m)
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

// dqTypes are the block types with dequantisers, with the byte offsets of
// their fp16 scales in a block.
var dqTypes = []struct {
	dt     tensor.DType
	scales []int
}{
	{tensor.Q4_0, []int{0}}, {tensor.Q4_1, []int{0, 2}}, {tensor.Q5_0, []int{0}}, {tensor.Q5_1, []int{0, 2}},
	{tensor.Q2_K, []int{80, 82}}, {tensor.Q3_K, []int{108}}, {tensor.Q4_K, []int{0, 2}}, {tensor.Q5_K, []int{0, 2}},
	{tensor.Q6_K, []int{208}}, {tensor.IQ4_NL, []int{0}}, {tensor.IQ4_XS, []int{0}},
	{tensor.IQ3_S, []int{0}}, {tensor.IQ3_XXS, []int{0}}, {tensor.IQ2_XXS, []int{0}}, {tensor.IQ2_XS, []int{0}},
	{tensor.IQ2_S, []int{0}}, {tensor.IQ1_S, []int{0}}, {tensor.IQ1_M, nil},
}

// extremeHalves are fp16 scales at the edges: signed zeros, subnormals,
// the largest finite values, infinities and NaNs.
var extremeHalves = []uint16{0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00}

// randDQBlocks returns nb random blocks of dt whose scales are, half of the
// time each, one of extremeHalves.
func randDQBlocks(rng *rand.Rand, dt tensor.DType, scales []int, nb int) []byte {
	bb := dt.BlockBytes()
	src := make([]byte, nb*bb)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for b := 0; b < nb; b++ {
		for _, o := range scales {
			if rng.IntN(2) == 0 {
				h := extremeHalves[rng.IntN(len(extremeHalves))]
				src[b*bb+o], src[b*bb+o+1] = byte(h), byte(h>>8)
			}
		}
	}
	return src
}

// sameBits reports whether a and b have the same bits, any NaN equal to
// any other (a NaN scale's payload is not specified).
func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// checkDequant runs level ks's dequantiser of dt over src and compares it
// with tensor.DequantizeRow, and that it writes nothing past its blocks.
func checkDequant(t *testing.T, ks *kernelSet, dt tensor.DType, src []byte) {
	t.Helper()
	nb := len(src) / dt.BlockBytes()
	want := make([]float32, nb*dt.BlockSize())
	if err := tensor.DequantizeRow(dt, src, want); err != nil {
		t.Fatal(err)
	}
	const sentinel = 12345
	got := make([]float32, len(want)+16)
	for i := range got {
		got[i] = sentinel
	}
	ks.dequant[dqKind(dt)].call(&got[0], &src[0], nb)
	for i, w := range want {
		if !sameBits(got[i], w) {
			t.Fatalf("%v, %d blocks: element %d is %g (%#x), DequantizeRow gives %g (%#x)", dt, nb, i, got[i], math.Float32bits(got[i]), w, math.Float32bits(w))
		}
	}
	for i, v := range got[len(want):] {
		if v != sentinel {
			t.Fatalf("%v, %d blocks: wrote %g %d elements past the end", dt, nb, v, i+1)
		}
	}
}

// Every level's dequantisers decode random blocks, extreme scales
// included, to DequantizeRow's bits.
func TestDequantKernelsEqualDequantizeRow(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		ks := active
		if ks == nil {
			t.Skip("the Go level is DequantizeRow itself")
		}
		rng := rand.New(rand.NewPCG(8, 9))
		for _, c := range dqTypes {
			if ks.dequant == nil || ks.dequant[dqKind(c.dt)] == 0 {
				t.Errorf("%v has no dequantiser at this level", c.dt)
				continue
			}
			for trial := 0; trial < 300; trial++ {
				checkDequant(t, ks, c.dt, randDQBlocks(rng, c.dt, c.scales, 1+rng.IntN(9)))
			}
		}
	})
}

// fusedTypes must have fused decode kernels at every assembly level.
var fusedTypes = []tensor.DType{tensor.Q4_K, tensor.Q6_K, tensor.Q4_0, tensor.Q5_K, tensor.Q2_K, tensor.Q3_K,
	tensor.IQ3_S, tensor.IQ3_XXS, tensor.IQ2_XXS, tensor.IQ2_XS, tensor.IQ2_S, tensor.IQ1_S, tensor.IQ1_M}

// The fused decode kernels give the bits of the two-pass path (dequantised
// scratch, F32 kernels), which gives those of the F32 matrix of the
// dequantised weights: for every n they serve, rows of one, two and three
// spans and of lengths that are not a multiple of dotSpan (Grok-1's 6144
// and 32768 among them), a 4-row tile and the single rows after it, and any
// split of the rows.
func TestFusedEqualsTwoPass(t *testing.T) {
	defer func(v bool) { fusedPastN = v }(fusedPastN)
	fusedPastN = true // past N too, whatever this CPU's L1
	forLevels(t, func(t *testing.T) {
		ks := active
		if ks == nil {
			t.Skip("no fused kernels in pure Go")
		}
		for _, dt := range fusedTypes {
			if ks.fusedFamily(dt) == nil {
				t.Errorf("%v has no fused kernels at this level", dt)
			}
		}
		rng := rand.New(rand.NewPCG(11, 12))
		for _, c := range dqTypes {
			dt := c.dt
			fam := ks.fusedFamily(dt)
			if fam == nil {
				continue
			}
			ins := []int{256, 1536, 2048, 2304, 4096, 6144, 32768}
			if dt.BlockSize() == 32 {
				ins = append(ins, 32, 32*37)
			}
			for _, in := range ins {
				out := fam.R + 2 // a tile and two single rows
				if in >= 32768 {
					out = fam.R + 1
				}
				m := randBlockMat(t, rng, dt, out, in)
				ref := f32OfDecoded(t, &m)
				ns := []int{}
				for n := 1; n <= fam.N; n++ { // past T, in groups of tiles
					ns = append(ns, n)
				}
				// Past N in chunks of spans, past tokenGroup in groups.
				ns = append(ns, fam.N+1)
				if in < 32768 {
					ns = append(ns, 37, 2*tokenGroup(fam.T)+5)
				}
				for _, n := range ns {
					x := randInputs(rng, n, in)
					want := make([]float32, n*out)
					MatMul(want, x, n, &ref)
					noFused = true
					two := make([]float32, n*out)
					ks.dequantMatMul(two, x, n, &m, 0, out)
					noFused = false
					for _, mid := range []int{0, 1, 5} {
						got := make([]float32, n*out)
						ks.dequantMatMul(got, x, n, &m, 0, mid)
						ks.dequantMatMul(got, x, n, &m, mid, out)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(two[i]) || math.Float32bits(two[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%v %dx%d n=%d split %d: element %d is %g fused, %g two-pass, %g F32", dt, out, in, n, mid, i, got[i], two[i], want[i])
							}
						}
					}
				}
			}
		}
	})
}

// The levels the tables kernels, or the kernels that make the tables as
// they multiply (Q4_K's tabMake), leave for the fused kernels that read
// them (fusedTables) are the values the reference decoder gives each
// element of the (sub-)block with that nibble: random blocks, extreme
// scales included, and nothing written past each row's tables.
func TestTablesEqualDecodedLevels(t *testing.T) {
	// nibble is element j's 4 bits in a block of the type.
	types := []struct {
		dt     tensor.DType
		scales []int
		nibble func(blk []byte, j int) int
	}{
		{tensor.Q4_K, []int{0, 2}, func(blk []byte, j int) int { return int(blk[16+32*(j/64)+j%32]>>(4*(j/32%2))) & 15 }},
		{tensor.Q4_0, []int{0}, func(blk []byte, j int) int { return int(blk[2+j%16]>>(4*(j/16))) & 15 }},
		{tensor.IQ4_NL, []int{0}, func(blk []byte, j int) int { return int(blk[2+j%16]>>(4*(j/16))) & 15 }},
		{tensor.IQ4_XS, []int{0}, func(blk []byte, j int) int { return int(blk[8+16*(j/32)+j%32%16]>>(4*(j%32/16))) & 15 }},
	}
	forLevels(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(15, 16))
		const sentinel = 12345
		for _, c := range types {
			fam := active.fusedFamily(c.dt)
			if fam == nil || fam.tables == 0 && fam.tabMake == nil {
				if active != nil && active.lanes == 16 {
					t.Errorf("%v has no tables at this AVX-512 level", c.dt)
				}
				continue
			}
			E, bb := c.dt.BlockSize(), c.dt.BlockBytes()
			per := E / 32 * 16 // floats a block
			for trial := 0; trial < 100; trial++ {
				nb := 1 + rng.IntN(dotSpan/E)
				rows := 1
				if fam.tables == 0 {
					rows = fam.R
				}
				src := randDQBlocks(rng, c.dt, c.scales, rows*nb)
				vals := make([]float32, rows*nb*E)
				if err := tensor.DequantizeRow(c.dt, src, vals); err != nil {
					t.Fatal(err)
				}
				tab := make([]float32, rows*tabFloats+16)
				for i := range tab {
					tab[i] = sentinel
				}
				if fam.tables != 0 {
					fam.tables.call(&tab[0], &src[0], nb)
				} else {
					x := randInputs(rng, 1, nb*E)
					out := make([]float32, rows)
					fam.tabMake[0].call(&src[0], nb*bb, &x[0], 4*nb*E, nb, &out[0], 4, &tab[0])
				}
				for r := 0; r < rows; r++ {
					row := tab[r*tabFloats:]
					for b := 0; b < nb; b++ {
						blk := src[(r*nb+b)*bb : (r*nb+b+1)*bb]
						for j := 0; j < E; j++ {
							q := c.nibble(blk, j)
							if got, want := row[b*per+j/32*16+q], vals[(r*nb+b)*E+j]; !sameBits(got, want) {
								t.Fatalf("%v, %d blocks: row %d block %d element %d (level %d) is %g (%#x) in the tables, %g (%#x) decoded",
									c.dt, nb, r, b, j, q, got, math.Float32bits(got), want, math.Float32bits(want))
							}
						}
					}
					end := tabFloats // the next row's tables, or the slack past the last
					if r == rows-1 {
						end += 16
					}
					for i, v := range row[nb*per : end] {
						if v != sentinel {
							t.Fatalf("%v, %d blocks: row %d wrote %g %d floats past its tables", c.dt, nb, r, v, i+1)
						}
					}
				}
			}
		}
	})
}

// A fused kernel given a row stride of 0 (one row read again) ends, each
// of its rows with the bits of that row at its true stride: its prefetch
// lead counts tiles of rows, and a tile of 0 bytes spans no lead.
func TestFusedZeroStride(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		ks := active
		if ks == nil {
			t.Skip("no fused kernels in pure Go")
		}
		rng := rand.New(rand.NewPCG(13, 14))
		for _, c := range dqTypes {
			fam := ks.fusedFamily(c.dt)
			if fam == nil {
				continue
			}
			const in = 2048
			m := randBlockMat(t, rng, c.dt, 1, in)
			rb := m.stride()
			x := randInputs(rng, 1, in)
			var want [1]float32
			fam.one[0].call(&m.Data[0], rb, &x[0], 4*in, in/fam.E, &want[0], 4, nil)
			for _, k := range []struct {
				rows int
				call dotKernel
			}{{1, fam.one[0]}, {fam.R, fam.full[0]}} {
				got := make([]float32, k.rows)
				k.call.call(&m.Data[0], 0, &x[0], 4*in, in/fam.E, &got[0], 4*k.rows, nil)
				for r := range got {
					if math.Float32bits(got[r]) != math.Float32bits(want[0]) {
						t.Fatalf("%v: output %d at stride 0 is %g, the row at stride %d gives %g", c.dt, r, got[r], rb, want[0])
					}
				}
			}
		}
	})
}

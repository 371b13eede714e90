package tensor

import (
	"encoding/binary"
	"math"
	"testing"
)

// The codebooks derived from the decoder grids are ggml's quantiser grids:
// the first entries of kgrid_256 and kgrid_512 in ggml-quants.c
// (iq3xs_init_impl), each the lattice values packed three bits apiece.
func TestIQ3CodebookMatchesGGML(t *testing.T) {
	for _, c := range []struct {
		name  string
		book  *iq3Codebook
		size  int
		first []int
	}{
		{"IQ3_XXS", iq3XXSCodebook(), 256, []int{0, 2, 4, 9, 11, 15, 16, 18, 25, 34, 59, 61, 65, 67, 72, 74}},
		{"IQ3_S", iq3SCodebook(), 512, []int{0, 1, 2, 5, 7, 8, 9, 10, 12, 14, 16, 17, 21, 27, 32, 34}},
	} {
		if len(c.book.grid) != c.size {
			t.Fatalf("%s: %d points", c.name, len(c.book.grid))
		}
		for k, want := range c.first {
			var L [4]int8
			for i := range L {
				L[i] = (c.book.grid[k][i] - 1) / 2
			}
			if got := iq3Pack(L[:]); got != want {
				t.Errorf("%s point %d: lattice %d, ggml %d", c.name, k, got, want)
			}
		}
		// Every lattice point maps to its codebook index or to a non-empty
		// list of codebook points.
		on := 0
		for u, m := range c.book.kmap {
			if m >= 0 {
				on++
				var L [4]int8
				for i := range L {
					L[i] = (c.book.grid[m][i] - 1) / 2
				}
				if iq3Pack(L[:]) != u {
					t.Fatalf("%s: kmap[%d] = %d is point %d", c.name, u, m, iq3Pack(L[:]))
				}
				continue
			}
			o := int(-m - 1)
			n := int(c.book.neighbours[o])
			if n == 0 || o+1+n > len(c.book.neighbours) {
				t.Fatalf("%s: lattice point %d has %d neighbours at %d", c.name, u, n, o)
			}
		}
		if on != c.size {
			t.Errorf("%s: %d lattice points on the codebook", c.name, on)
		}
	}
}

// A round trip through DecodeRow stays within the resolution of three bits
// on near-Gaussian rows, and every decoded group of 32 is its scale times
// codebook magnitudes with the signs of the input (IQ3_XXS: but one per 8
// where the flips are odd).
func TestIQ3RoundTrip(t *testing.T) {
	x := goldenQuantInput()
	for _, typ := range []DType{IQ3_XXS, IQ3_S} {
		rb, _ := typ.RowBytes(goldenQuantRowLen)
		q := make([]byte, rb)
		back := make([]float32, goldenQuantRowLen)
		for row := 16; row < 128; row++ {
			if row%3 == 0 {
				continue // rows with outliers
			}
			xr := x[row*goldenQuantRowLen : (row+1)*goldenQuantRowLen]
			if err := QuantizeRow(typ, xr, q); err != nil {
				t.Fatal(err)
			}
			if err := DecodeRow(back, typ, q); err != nil {
				t.Fatal(err)
			}
			var num, den float64
			wrongSign := 0
			for i := range xr {
				d := float64(back[i] - xr[i])
				num += d * d
				den += float64(xr[i]) * float64(xr[i])
				if (back[i] < 0) != (xr[i] < 0) {
					wrongSign++
				}
			}
			if rel := math.Sqrt(num / den); rel > 0.3 {
				t.Errorf("%v row %d: relative RMS error %.3f", typ, row, rel)
			}
			if limit := map[DType]int{IQ3_XXS: goldenQuantRowLen / 8, IQ3_S: 0}[typ]; wrongSign > limit {
				t.Errorf("%v row %d: %d signs differ from the input's", typ, row, wrongSign)
			}
		}
	}
}

// ggml's IQ3_S moves through its index and sign bytes only for groups that
// are not all zero; QuantizeRow keeps that layout, so a zero group shifts
// the later groups' codes one group early and leaves the last slots zero.
func TestIQ3SZeroGroupLayout(t *testing.T) {
	x := make([]float32, QK_K)
	for i := 32; i < QK_K; i++ {
		x[i] = float32(i%7) - 3 // group 0 all zero
	}
	y := make([]byte, 110)
	if err := QuantizeRow(IQ3_S, x, y); err != nil {
		t.Fatal(err)
	}
	qs, signs := y[2:66], y[74:106]
	for i, b := range qs[56:] {
		if b != 0 {
			t.Fatalf("index byte %d of the last group is %#x, want 0", 56+i, b)
		}
	}
	for i, b := range signs[28:] {
		if b != 0 {
			t.Fatalf("sign byte %d of the last group is %#x, want 0", 28+i, b)
		}
	}
	// Group 1's signs (values -3…3 from index 32) come first.
	want := byte(0)
	for i := 0; i < 8; i++ {
		if x[32+i] < 0 {
			want |= 1 << i
		}
	}
	if signs[0] != want {
		t.Errorf("first sign byte %#x, want group 1's %#x", signs[0], want)
	}
}

// QuantizeRow never panics on IQ3 input, and fails rather than writing a
// block where ggml's search aborts.
func FuzzQuantizeIQ3(f *testing.F) {
	seed := make([]byte, 4*QK_K)
	f.Add(seed, false)
	for i := 0; i < QK_K; i++ {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(float32(i%17-8)*1e19))
	}
	f.Add(seed, true)
	f.Fuzz(func(t *testing.T, b []byte, s bool) {
		x := make([]float32, QK_K)
		for i := range x {
			if 4*i+4 <= len(b) {
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		}
		typ := IQ3_XXS
		if s {
			typ = IQ3_S
		}
		rb, _ := typ.RowBytes(QK_K)
		y := make([]byte, rb)
		if err := QuantizeRow(typ, x, y); err != nil {
			return
		}
		back := make([]float32, QK_K)
		if err := DecodeRow(back, typ, y); err != nil {
			t.Fatal(err)
		}
		if ValidateRow(typ, y) == nil {
			for i, v := range back {
				if math.IsNaN(float64(v)) {
					t.Fatalf("value %d decodes as NaN under a finite scale", i)
				}
			}
		}
	})
}

// Once the codebooks are built, QuantizeRow does not allocate for IQ3.
func TestIQ3QuantizeDoesNotAllocate(t *testing.T) {
	x := goldenQuantInput()[20*goldenQuantRowLen : 21*goldenQuantRowLen]
	for _, typ := range []DType{IQ3_XXS, IQ3_S} {
		rb, _ := typ.RowBytes(len(x))
		q := make([]byte, rb)
		if err := QuantizeRow(typ, x, q); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(5, func() { QuantizeRow(typ, x, q) }); n != 0 {
			t.Errorf("%v: %v allocations per row", typ, n)
		}
	}
}

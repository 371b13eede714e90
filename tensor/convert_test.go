package tensor

import (
	"math"
	"sort"
	"testing"
)

// halfValue is the value of a binary16 bit pattern, from the format's
// definition: (-1)^s · 2^(e-15) · (1 + m/1024), or 2^-14 · m/1024 when e = 0.
func halfValue(h uint16) float64 {
	s, e, m := h>>15, int(h>>10&0x1f), float64(h&0x3ff)
	v := math.Ldexp(1+m/1024, e-15)
	switch {
	case e == 0:
		v = math.Ldexp(m/1024, -14)
	case e == 0x1f && m == 0:
		v = math.Inf(1)
	case e == 0x1f:
		v = math.NaN()
	}
	if s == 1 {
		v = -v
	}
	return v
}

// Every binary16 pattern widens to its exact value.
func TestHalfToFloatExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got, want := float64(HalfToFloat(uint16(h))), halfValue(uint16(h))
		if math.IsNaN(want) {
			// The payload and sign are kept, as a hardware conversion keeps them.
			if b, want := math.Float32bits(HalfToFloat(uint16(h))), uint32(h>>15)<<31|0x7f800000|uint32(h&0x3ff)<<13; b != want {
				t.Fatalf("%#04x: %#08x, want the NaN %#08x", h, b, want)
			}
			continue
		}
		if got != want || math.Signbit(got) != math.Signbit(want) {
			t.Fatalf("%#04x: %g, want %g", h, got, want)
		}
	}
}

// Every bfloat16 pattern widens to the float32 with those upper bits.
func TestBF16ToFloatExhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		if got := math.Float32bits(BF16ToFloat(uint16(h))); got != uint32(h)<<16 {
			t.Fatalf("%#04x: %#08x", h, got)
		}
	}
}

// narrowingInputs are float32 patterns for every sign and exponent, with
// every value of the bits that survive and, below them, the bits on either
// side of each rounding boundary: the low bits a narrowing to 16 bits
// rounds on, at every shift a subnormal result can have.
func narrowingInputs(yield func(uint32)) {
	for sign := uint32(0); sign < 2; sign++ {
		for exp := uint32(0); exp < 256; exp++ {
			for shift := uint32(13); shift <= 24; shift++ {
				half := uint32(1) << (shift - 1)
				mask := uint32(1)<<shift - 1
				for _, low := range []uint32{0, 1, half - 1, half, half + 1, mask} {
					for top := uint32(0); top < 1<<(23-min(shift, 23)); top++ {
						yield(sign<<31 | exp<<23 | (top<<shift|low)&0x7fffff)
					}
				}
				if shift == 13 {
					continue // the other shifts matter only for subnormal halves
				}
				if exp > 113 {
					break
				}
			}
		}
	}
}

// nearestEven returns the candidate nearest to v among sorted finite
// magnitudes vals (with bit patterns pats, and the next pattern, infinity,
// at value next), ties to the even pattern.
func nearestEven(v float64, vals []float64, pats []uint16, inf uint16, next float64) uint16 {
	i := sort.SearchFloat64s(vals, v) // vals[i-1] < v ≤ vals[i]
	if i < len(vals) && vals[i] == v {
		return pats[i]
	}
	lo, lp := vals[i-1], pats[i-1]
	hi, hp := next, inf
	if i < len(vals) {
		hi, hp = vals[i], pats[i]
	}
	if v >= next {
		return inf
	}
	switch dl, dh := v-lo, hi-v; {
	case dl < dh:
		return lp
	case dh < dl:
		return hp
	case lp&1 == 0:
		return lp
	}
	return hp
}

// FloatToHalf rounds to nearest even, overflowing to infinity past 65520
// (halfway to 2^16), at every rounding boundary of every exponent.
func TestFloatToHalfBoundaries(t *testing.T) {
	var vals []float64
	var pats []uint16
	for h := uint16(0); h < 0x7c00; h++ {
		vals, pats = append(vals, halfValue(h)), append(pats, h)
	}
	n := 0
	narrowingInputs(func(b uint32) {
		n++
		f := math.Float32frombits(b)
		got := FloatToHalf(f)
		var want uint16
		switch a := math.Abs(float64(f)); {
		case math.IsNaN(a):
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 || got>>15 != uint16(b>>31) {
				t.Fatalf("%#08x (NaN): %#04x, want a NaN of the same sign", b, got)
			}
			return
		default:
			want = nearestEven(a, vals, pats, 0x7c00, 65536)
		}
		want |= uint16(b>>16) & 0x8000
		if got != want {
			t.Fatalf("%#08x (%g): %#04x, want %#04x", b, f, got, want)
		}
	})
	t.Logf("%d inputs", n)
}

// FloatToBF16 rounds to nearest even and keeps NaNs NaN.
func TestFloatToBF16Boundaries(t *testing.T) {
	narrowingInputs(func(b uint32) {
		f := math.Float32frombits(b)
		got := FloatToBF16(f)
		if math.IsNaN(float64(f)) {
			if got&0x7f80 != 0x7f80 || got&0x7f == 0 || got>>15 != uint16(b>>31) {
				t.Fatalf("%#08x (NaN): %#04x, want a NaN of the same sign", b, got)
			}
			return
		}
		// The neighbours below and above |f| in bfloat16, by bits.
		mag := b & 0x7fffffff
		lp := uint16(mag >> 16)
		lo := float64(BF16ToFloat(lp))
		want := lp
		if mag&0xffff != 0 {
			hp := lp + 1
			hi := float64(BF16ToFloat(hp))
			a := math.Abs(float64(f))
			if hp == 0x7f80 { // past the largest finite value: infinity at 2^128
				hi = math.Ldexp(1, 128)
			}
			switch dl, dh := a-lo, hi-a; {
			case dh < dl, dh == dl && lp&1 == 1:
				want = hp
			}
		}
		want |= uint16(b>>16) & 0x8000
		if got != want {
			t.Fatalf("%#08x (%g): %#04x, want %#04x", b, f, got, want)
		}
	})
}

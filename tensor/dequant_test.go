package tensor

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestBlockTypeSizes(t *testing.T) {
	for _, tc := range []struct {
		t         DType
		elems     int
		bytes     int
		blockSize int
	}{
		{Q8_0, 32, 34, 32},
		{Q4_0, 32, 18, 32},
		{Q4_1, 32, 20, 32},
		{Q5_0, 32, 22, 32},
		{Q5_1, 32, 24, 32},
		{Q2_K, 256, 84, 256},
		{Q3_K, 256, 110, 256},
		{Q4_K, 256, 144, 256},
		{Q5_K, 256, 176, 256},
		{Q6_K, 256, 210, 256},
		{IQ2_XXS, 256, 66, 256},
		{IQ2_XS, 256, 74, 256},
		{IQ2_S, 256, 82, 256},
		{IQ3_XXS, 256, 98, 256},
		{IQ3_S, 256, 110, 256},
		{IQ1_S, 256, 50, 256},
		{IQ1_M, 256, 56, 256},
		{IQ4_NL, 32, 18, 32},
		{IQ4_XS, 256, 136, 256},
	} {
		t.Run(tc.t.String(), func(t *testing.T) {
			if tc.t.BlockSize() != tc.blockSize || tc.t.BlockBytes() != tc.bytes || !tc.t.Quantized() {
				t.Fatalf("block %d elements in %d bytes (quantized %v), want %d in %d",
					tc.t.BlockSize(), tc.t.BlockBytes(), tc.t.Quantized(), tc.blockSize, tc.bytes)
			}
			if n, err := tc.t.RowBytes(3 * tc.elems); err != nil || n != 3*tc.bytes {
				t.Errorf("RowBytes(%d) = %d, %v; want %d", 3*tc.elems, n, err, 3*tc.bytes)
			}
			if _, err := tc.t.RowBytes(tc.elems + 16); err == nil {
				t.Errorf("RowBytes(%d) accepted a partial block", tc.elems+16)
			}
			if n, err := ByteSize(tc.t, []int{4, 2 * tc.elems}); err != nil || n != 8*tc.bytes {
				t.Errorf("ByteSize = %d, %v; want %d", n, err, 8*tc.bytes)
			}
			if _, err := ByteSize(tc.t, []int{2 * tc.elems, 16}); err == nil {
				t.Error("ByteSize accepted rows of 16 elements")
			}
			if got, err := ParseDType(strings.ToLower(tc.t.String())); err != nil || got != tc.t {
				t.Errorf("ParseDType(%q) = %v, %v", strings.ToLower(tc.t.String()), got, err)
			}
		})
	}
	for _, pt := range []DType{F32, F16, BF16, I8} {
		if pt.Quantized() || pt.BlockSize() != 1 {
			t.Errorf("%v: quantized %v, block size %d", pt, pt.Quantized(), pt.BlockSize())
		}
	}
	// Q8_0 and F32 take more bytes than elements, so a huge row overflows.
	if _, err := Q8_0.RowBytes(math.MaxInt / 32 * 32); err == nil {
		t.Error("Q8_0.RowBytes overflowed silently")
	}
	if _, err := F32.RowBytes(math.MaxInt / 2); err == nil {
		t.Error("F32.RowBytes overflowed silently")
	}
	if DType(99).BlockSize() != 0 || DType(-1).BlockBytes() != 0 {
		t.Error("an unknown DType has a block size")
	}
}

func TestDequantizeRowRejects(t *testing.T) {
	blk := make([]byte, 2*Q4_K.BlockBytes())
	for _, tc := range []struct {
		name string
		t    DType
		src  []byte
		n    int
	}{
		{"partial block", Q4_K, blk, 300},
		{"short source", Q4_K, blk[:Q4_K.BlockBytes()], 512},
		{"long source", Q4_K, blk, 256},
		{"plain type", F32, blk, 8},
		{"unknown type", DType(99), blk, 256},
		{"negative type", DType(-1), blk, 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := DequantizeRow(tc.t, tc.src, make([]float32, tc.n)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestDequantizeRowAllocs(t *testing.T) {
	for _, g := range goldenTypes {
		src := goldenBlocks(g)
		dst := make([]float32, goldenBlocksPerType*g.t.BlockSize())
		if a := testing.AllocsPerRun(5, func() { _ = DequantizeRow(g.t, src, dst) }); a != 0 {
			t.Errorf("%v: %v allocations per row", g.t, a)
		}
	}
}

// TestFloat32sQuantized decodes a whole Q6_K tensor through Tensor.Float32s
// and row by row through DecodeRow, which must agree with DequantizeRow.
func TestFloat32sQuantized(t *testing.T) {
	g := goldenTypes[9]
	if g.t != Q6_K {
		t.Fatal("goldenTypes reordered")
	}
	data := goldenBlocks(g)[4*Q6_K.BlockBytes() : 8*Q6_K.BlockBytes()]
	want := make([]float32, 4*QK_K)
	if err := DequantizeRow(Q6_K, data, want); err != nil {
		t.Fatal(err)
	}
	tn := &Tensor{Name: "w", Type: Q6_K, Shape: []int{2, 2 * QK_K}, Data: data}
	got, err := tn.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, 2*QK_K)
	if err := DecodeRow(row, Q6_K, data[2*Q6_K.BlockBytes():]); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !sameFloat(got[i], want[i]) || (i >= 2*QK_K && !sameFloat(row[i-2*QK_K], want[i])) {
			t.Fatalf("element %d: Float32s %v, DecodeRow %v, DequantizeRow %v", i, got[i], row[i%(2*QK_K)], want[i])
		}
	}
	tn.Data = data[:len(data)-1]
	if _, err := tn.Float32s(); err == nil {
		t.Error("Float32s accepted a short tensor")
	}
}

// TestIQuantTables checks properties of the generated codebooks that a
// mangled extraction would break: the sign table's implied parity bit, and
// the value sets of each grid.
func TestIQuantTables(t *testing.T) {
	for i, s := range ksignsIQ2XS {
		want := byte(i) | byte(bits.OnesCount8(uint8(i))&1)<<7
		if s != want {
			t.Errorf("ksignsIQ2XS[%d] = %d, want %d", i, s, want)
		}
	}
	checkBytes := func(name string, grid []uint64, width int, allowed ...byte) {
		ok := map[byte]bool{}
		for _, a := range allowed {
			ok[a] = true
		}
		seen := map[uint64]bool{}
		for i, e := range grid {
			if seen[e] {
				t.Errorf("%s[%d] = %#x repeats an earlier entry", name, i, e)
			}
			seen[e] = true
			for j := 0; j < width; j++ {
				if b := byte(e >> (8 * j)); !ok[b] {
					t.Errorf("%s[%d] byte %d = %#x", name, i, j, b)
				}
			}
		}
	}
	wide := func(g []uint32) []uint64 {
		out := make([]uint64, len(g))
		for i, v := range g {
			out[i] = uint64(v)
		}
		return out
	}
	checkBytes("iq2xxsGrid", iq2xxsGrid[:], 8, 0x08, 0x19, 0x2b)
	checkBytes("iq2xsGrid", iq2xsGrid[:], 8, 0x08, 0x19, 0x2b)
	checkBytes("iq2sGrid", iq2sGrid[:], 8, 0x08, 0x19, 0x2b)
	checkBytes("iq3xxsGrid", wide(iq3xxsGrid[:]), 4, 0x04, 0x0c, 0x14, 0x1c, 0x24, 0x2c, 0x34, 0x3e)
	checkBytes("iq3sGrid", wide(iq3sGrid[:]), 4, 0x01, 0x03, 0x05, 0x07, 0x09, 0x0b, 0x0d, 0x0f)
	checkBytes("iq1sGrid", iq1sGrid[:], 8, 0xff, 0x00, 0x01)
	for i := 1; i < len(kvaluesIQ4NL); i++ {
		if kvaluesIQ4NL[i] <= kvaluesIQ4NL[i-1] {
			t.Errorf("kvaluesIQ4NL not increasing at %d", i)
		}
	}
}

// decodeBlock (direct calls, so that callers' buffers stay on their stacks)
// covers every type of blockDecoders and decodes as its table entry does.
func TestDecodeBlockMatchesTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for typ, dec := range blockDecoders {
		if dec == nil {
			continue
		}
		dt := DType(typ)
		src := make([]byte, dt.BlockBytes())
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		want := make([]float32, dt.BlockSize())
		got := make([]float32, dt.BlockSize())
		for i := range got {
			got[i] = float32(math.NaN()) // a block left undecoded shows
		}
		dec(src, want)
		decodeBlock(dt, src, got)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%v: element %d = %v, the table's decoder gives %v", dt, i, got[i], want[i])
			}
		}
	}
}

// A row buffer on the caller's stack does not escape through DequantizeRow.
func TestDequantizeRowKeepsStackBuffers(t *testing.T) {
	src := make([]byte, Q4_K.BlockBytes())
	if a := testing.AllocsPerRun(100, func() {
		var dst [256]float32
		if err := DequantizeRow(Q4_K, src, dst[:]); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("%v allocations a row", a)
	}
}

package tensor

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// The golden data in testdata/ggml is ggml's own dequantize_row_* output
// (via ggml_get_type_traits(type)->to_float) on blocks this file generates;
// testdata/ggml/README.md says how it was made.

var goldenBlocksOut = flag.String("golden.blocks", "", "write the golden input blocks to this file (see testdata/ggml/make.sh)")

// goldenType names a block type with its ggml type code and where its fp16
// scales sit in a block. IQ1_M has no plain fp16 field: its scale is spread
// over the top nibbles of the four words at scaleIQ1M.
type goldenType struct {
	t      DType
	ggml   uint32
	halves []int // byte offsets of the fp16 fields (d, then dmin or m)
	iq1m   bool
}

const scaleIQ1M = 48

var goldenTypes = []goldenType{
	{Q4_0, 2, []int{0}, false},
	{Q4_1, 3, []int{0, 2}, false},
	{Q5_0, 6, []int{0}, false},
	{Q5_1, 7, []int{0, 2}, false},
	{Q8_0, 8, []int{0}, false},
	{Q2_K, 10, []int{80, 82}, false},
	{Q3_K, 11, []int{108}, false},
	{Q4_K, 12, []int{0, 2}, false},
	{Q5_K, 13, []int{0, 2}, false},
	{Q6_K, 14, []int{208}, false},
	{IQ2_XXS, 16, []int{0}, false},
	{IQ2_XS, 17, []int{0}, false},
	{IQ3_XXS, 18, []int{0}, false},
	{IQ1_S, 19, []int{0}, false},
	{IQ4_NL, 20, []int{0}, false},
	{IQ3_S, 21, []int{0}, false},
	{IQ2_S, 22, []int{0}, false},
	{IQ4_XS, 23, []int{0}, false},
	{IQ1_M, 29, nil, true},
}

// setHalf stores the fp16 bits h as scale k of blk.
func (g goldenType) setHalf(blk []byte, k int, h uint16) {
	if g.iq1m {
		for i := 0; i < 4; i++ {
			w := binary.LittleEndian.Uint16(blk[scaleIQ1M+2*i:])
			w = w&0x0fff | (h>>(4*i)&0xf)<<12
			binary.LittleEndian.PutUint16(blk[scaleIQ1M+2*i:], w)
		}
		return
	}
	binary.LittleEndian.PutUint16(blk[g.halves[k]:], h)
}

// scales returns the fp16 scales of blk as float32.
func (g goldenType) scales(blk []byte) []float32 {
	if g.iq1m {
		var h uint16
		for i := 0; i < 4; i++ {
			h |= binary.LittleEndian.Uint16(blk[scaleIQ1M+2*i:]) >> 12 << (4 * i)
		}
		return []float32{HalfToFloat(h)}
	}
	var s []float32
	for _, off := range g.halves {
		s = append(s, half(blk, off))
	}
	return s
}

func (g goldenType) nScales() int {
	if g.iq1m {
		return 1
	}
	return len(g.halves)
}

// specialHalves are the fp16 scales at the edges of the format: ±max, ±min
// normal, ±min and max subnormal, ±0, ±1, ±Inf and two ordinary values.
var specialHalves = []uint16{
	0x7bff, 0xfbff, 0x0400, 0x8400, 0x0001, 0x8001, 0x03ff,
	0x0000, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x3555,
}

const goldenBlocksPerType = 32

// goldenBlocks makes the test blocks of one type, deterministically: an
// all-zero block; an all-0xFF block (NaN scales); all-0xFF quants under the
// scales 1 and -65504; random quants under each special scale; random quants
// under random finite scales.
func goldenBlocks(g goldenType) []byte {
	bb := g.t.BlockBytes()
	r := rand.New(rand.NewPCG(0x67676d6c, uint64(g.ggml)))
	out := make([]byte, goldenBlocksPerType*bb)
	for i := 0; i < goldenBlocksPerType; i++ {
		blk := out[i*bb : (i+1)*bb]
		switch {
		case i == 0:
		case i <= 3:
			for j := range blk {
				blk[j] = 0xff
			}
			if i > 1 {
				h := map[int]uint16{2: 0x3c00, 3: 0xfbff}[i]
				for k := 0; k < g.nScales(); k++ {
					g.setHalf(blk, k, h)
				}
			}
		default:
			for j := range blk {
				blk[j] = byte(r.Uint32())
			}
			for k := 0; k < g.nScales(); k++ {
				if s := i - 4; s < len(specialHalves) {
					g.setHalf(blk, k, specialHalves[(s+5*k)%len(specialHalves)])
					continue
				}
				h := uint16(r.Uint32())
				for h&0x7c00 == 0x7c00 {
					h = uint16(r.Uint32())
				}
				g.setHalf(blk, k, h)
			}
		}
	}
	return out
}

// TestGoldenWriteBlocks writes the input file for testdata/ggml/make.sh when
// -golden.blocks is given: per type, its ggml code, block count and block
// bytes as little-endian uint32, then the blocks.
func TestGoldenWriteBlocks(t *testing.T) {
	if *goldenBlocksOut == "" {
		t.Skip("no -golden.blocks")
	}
	if err := os.WriteFile(*goldenBlocksOut, allGoldenBlocks(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func allGoldenBlocks() []byte {
	var b []byte
	for _, g := range goldenTypes {
		b = binary.LittleEndian.AppendUint32(b, g.ggml)
		b = binary.LittleEndian.AppendUint32(b, goldenBlocksPerType)
		b = binary.LittleEndian.AppendUint32(b, uint32(g.t.BlockBytes()))
		b = append(b, goldenBlocks(g)...)
	}
	return b
}

func readGzip(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenRecord is one type's blocks and ggml's decoding of them.
type goldenRecord struct {
	g      goldenType
	blocks []byte
	want   []float32
}

func loadGolden(t *testing.T) []goldenRecord {
	t.Helper()
	in := readGzip(t, "testdata/ggml/blocks.bin.gz")
	out := readGzip(t, "testdata/ggml/ggml_f32.bin.gz")
	byCode := map[uint32]goldenType{}
	for _, g := range goldenTypes {
		byCode[g.ggml] = g
	}
	var recs []goldenRecord
	for len(in) > 0 {
		if len(in) < 12 || len(out) < 8 {
			t.Fatalf("golden files truncated")
		}
		code, nb, bb := binary.LittleEndian.Uint32(in), int(binary.LittleEndian.Uint32(in[4:])), int(binary.LittleEndian.Uint32(in[8:]))
		g, ok := byCode[code]
		if !ok || bb != g.t.BlockBytes() {
			t.Fatalf("golden blocks: ggml type %d with %d-byte blocks is not one of ours", code, bb)
		}
		in = in[12:]
		if len(in) < nb*bb {
			t.Fatalf("golden blocks: %v truncated", g.t)
		}
		blocks := in[:nb*bb]
		in = in[nb*bb:]
		ocode, n := binary.LittleEndian.Uint32(out), int(binary.LittleEndian.Uint32(out[4:]))
		out = out[8:]
		if ocode != code || n != nb*g.t.BlockSize() || len(out) < 4*n {
			t.Fatalf("golden output for %v does not match its blocks (type %d, %d values)", g.t, ocode, n)
		}
		want := make([]float32, n)
		for i := range want {
			want[i] = math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
		}
		out = out[4*n:]
		recs = append(recs, goldenRecord{g, blocks, want})
	}
	if len(out) != 0 {
		t.Fatalf("golden output has %d bytes beyond the blocks", len(out))
	}
	return recs
}

// sameFloat is bit equality, except that any NaN matches any NaN: NaN
// payloads and signs differ between CPUs (x86 and arm64 make different
// default NaNs), and only Inf or NaN scales produce them.
func sameFloat(a, b float32) bool {
	if a != a && b != b {
		return true
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestDequantizeMatchesGGML compares DequantizeRow with ggml's own output on
// the vendored blocks, bit for bit, for every type and block.
func TestDequantizeMatchesGGML(t *testing.T) {
	recs := loadGolden(t)
	seen := map[DType]bool{}
	for _, rec := range recs {
		g := rec.g
		seen[g.t] = true
		t.Run(g.t.String(), func(t *testing.T) {
			got := make([]float32, len(rec.want))
			if err := DequantizeRow(g.t, rec.blocks, got); err != nil {
				t.Fatal(err)
			}
			bs := g.t.BlockSize()
			bad, nans := 0, 0
			for i := range got {
				if rec.want[i] != rec.want[i] {
					nans++
				}
				if !sameFloat(got[i], rec.want[i]) {
					if bad < 5 {
						t.Errorf("block %d element %d: got %v (%#08x), ggml %v (%#08x)", i/bs, i%bs,
							got[i], math.Float32bits(got[i]), rec.want[i], math.Float32bits(rec.want[i]))
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d values differ from ggml", bad, len(got))
			}
			t.Logf("%d blocks, %d values (%d of them NaN in ggml too) equal to ggml's", len(got)/bs, len(got), nans)
		})
	}
	for _, g := range goldenTypes {
		if !seen[g.t] {
			t.Errorf("no golden data for %v", g.t)
		}
	}
}

// TestGoldenBlocksReproducible keeps the vendored blocks and this file's
// generator in step, so that make.sh regenerates the same data.
func TestGoldenBlocksReproducible(t *testing.T) {
	vendored := readGzip(t, "testdata/ggml/blocks.bin.gz")
	if !bytes.Equal(vendored, allGoldenBlocks()) {
		t.Fatal("testdata/ggml/blocks.bin.gz differs from goldenBlocks: rerun testdata/ggml/make.sh")
	}
}

// FuzzDequantize feeds arbitrary bytes to every block decoder: it must never
// panic, must fill exactly the requested elements, and must produce only
// finite values when the block's fp16 scales are finite (as ggml does: no
// finite scale and quant can overflow float32).
func FuzzDequantize(f *testing.F) {
	for i, g := range goldenTypes {
		blocks := goldenBlocks(g)
		bb := g.t.BlockBytes()
		f.Add(uint8(i), blocks[:bb])
		f.Add(uint8(i), blocks[2*bb:4*bb])
		f.Add(uint8(i), blocks[10*bb:12*bb+3])
	}
	f.Fuzz(func(t *testing.T, ti uint8, data []byte) {
		g := goldenTypes[int(ti)%len(goldenTypes)]
		bs, bb := g.t.BlockSize(), g.t.BlockBytes()
		nb := min(len(data)/bb, 8)
		dst := make([]float32, nb*bs+1)
		for i := range dst {
			dst[i] = float32(math.NaN())
		}
		if err := DequantizeRow(g.t, data[:nb*bb], dst[:nb*bs+1]); err == nil {
			t.Fatalf("%v: a row of %d elements was accepted", g.t, nb*bs+1)
		}
		if err := DequantizeRow(g.t, data[:nb*bb], dst[:nb*bs]); err != nil {
			t.Fatalf("%v: %v", g.t, err)
		}
		if v := dst[nb*bs]; v == v {
			t.Fatalf("%v: wrote past the row", g.t)
		}
		for b := 0; b < nb; b++ {
			finite := true
			for _, s := range g.scales(data[b*bb : (b+1)*bb]) {
				finite = finite && !math.IsInf(float64(s), 0) && s == s
			}
			if !finite {
				continue
			}
			for j, v := range dst[b*bs : (b+1)*bs] {
				if math.IsInf(float64(v), 0) || v != v {
					t.Fatalf("%v block %d element %d: %v from finite scales", g.t, b, j, v)
				}
			}
		}
	})
}

func ExampleDequantizeRow() {
	// One Q4_0 block: d = 0.5, every nibble 0x9 (q-8 = 1).
	blk := make([]byte, Q4_0.BlockBytes())
	binary.LittleEndian.PutUint16(blk, FloatToHalf(0.5))
	for i := 2; i < len(blk); i++ {
		blk[i] = 0x99
	}
	out := make([]float32, Q4_0.BlockSize())
	if err := DequantizeRow(Q4_0, blk, out); err != nil {
		panic(err)
	}
	fmt.Println(out[0], out[31])
	// Output: 0.5 0.5
}

package tensor

import (
	"encoding/binary"
	"flag"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// The golden data in testdata/ggml/quant.bin.gz is ggml's own
// ggml_quantize_chunk output (no importance matrix) on the rows
// goldenQuantRows generates; testdata/ggml/README.md says how it was made.

var goldenQuantIn = flag.String("golden.qin", "", "write the golden quantiser input rows to this file (see testdata/ggml/make.sh)")

const (
	goldenQuantRows   = 136
	goldenQuantRowLen = 256
)

// goldenQuantTypes are the types quant.bin.gz holds, in its order, with their
// ggml type codes.
var goldenQuantTypes = []struct {
	t    DType
	ggml uint32
}{
	{Q4_0, 2}, {Q4_1, 3}, {Q5_0, 6}, {Q5_1, 7}, {Q8_0, 8},
	{Q2_K, 10}, {Q3_K, 11}, {Q4_K, 12}, {Q5_K, 13}, {Q6_K, 14},
	{IQ4_NL, 20}, {IQ4_XS, 23}, {IQ3_XXS, 18}, {IQ3_S, 21},
}

// goldenQuantInput makes the rows, deterministically and with integer
// arithmetic plus single float32 operations only, so every platform builds
// the same floats: special rows first (zeros, constants, tiny and huge
// values, all positive, all negative, sparse, ties, outliers, mixed block
// scales, fp16 overflow), then near-Gaussian rows at scales from 1e-4 to 1e2,
// then from row 128 rows for the IQ3 quantisers' edges: NaN and ±Inf,
// squares beyond float32's range, denormals, alternate all-zero groups of
// 32, and magnitudes around IQ3_XXS's group threshold of 1e-8.
func goldenQuantInput() []float32 {
	r := rand.New(rand.NewPCG(0x71756e74, 1))
	// gauss is an Irwin–Hall sum of four 24-bit uniforms, about N(0, 1.15²).
	gauss := func() float32 {
		s := int64(0)
		for k := 0; k < 4; k++ {
			s += int64(r.Uint32() >> 8)
		}
		return float32(s-1<<25) * (1.0 / (1 << 23))
	}
	unif := func() float32 { return float32(r.Uint32()>>8) * (1.0 / (1 << 24)) }
	scales := []float32{1, 0.02, 1e-3, 100, 0.3, 5e-4, 7, 1e-4}
	x := make([]float32, goldenQuantRows*goldenQuantRowLen)
	for row := 0; row < goldenQuantRows; row++ {
		y := x[row*goldenQuantRowLen : (row+1)*goldenQuantRowLen]
		for i := range y {
			g := gauss()
			switch row {
			case 0: // all zero
			case 1:
				y[i] = 0.5
			case 2:
				y[i] = -3
			case 3:
				y[i] = g * 1e-30
			case 4:
				y[i] = g * 1e30
			case 5: // below GROUP_MAX_EPS
				y[i] = g * 1e-20
			case 6:
				y[i] = unif()
			case 7:
				y[i] = -unif() * 4
			case 8: // sparse
				if r.Uint32()%10 == 0 {
					y[i] = g
				}
			case 9: // one non-zero element per 16
				if i%16 == int(r.Uint32()%16) {
					y[i] = g
				}
			case 10: // halves: exact ties for the rounding
				y[i] = float32(int(r.Uint32()%33)-16) * 0.5
			case 11: // 1% outliers
				y[i] = g
				if r.Uint32()%100 == 0 {
					y[i] *= 100
				}
			case 12:
				y[i] = g * 0.01
				if i == 77 {
					y[i] = 1e4
				}
			case 13: // each block of 32 at its own scale, some blocks zero
				blk := i / 32
				y[i] = g * scales[(blk*5+3)%len(scales)]
				if blk == 2 || blk == 5 {
					y[i] = 0
				}
			case 14: // scales beyond fp16's range
				y[i] = g * 1e5
			case 15:
				y[i] = 1
				if r.Uint32()&1 == 0 {
					y[i] = -1
				}
			case 128:
				y[i] = math.Float32frombits(0x7fc00000)
			case 129:
				y[i] = g
				if i == 100 {
					y[i] = math.Float32frombits(0x7fc00000)
				}
			case 130:
				y[i] = g
				if i == 3 {
					y[i] = float32(math.Inf(1))
				}
			case 131:
				y[i] = g
				if i == 200 {
					y[i] = float32(math.Inf(-1))
				}
			case 132: // x² overflows float32 above about 1.8e19
				y[i] = g * 3e19
			case 133:
				y[i] = g * 1e-40
			case 134: // groups 0, 2, 4, 6 all zero
				if i/32%2 == 1 {
					y[i] = g
				}
			case 135:
				y[i] = g * 6e-9
			default:
				y[i] = g * scales[row%len(scales)]
				if row%3 == 0 && i%64 == 5 {
					y[i] *= 12 // a mild outlier per group of 64
				}
			}
		}
	}
	return x
}

func goldenQuantInputBytes() []byte {
	x := goldenQuantInput()
	b := binary.LittleEndian.AppendUint32(nil, goldenQuantRows)
	b = binary.LittleEndian.AppendUint32(b, goldenQuantRowLen)
	for _, v := range x {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// TestGoldenWriteQuantInput writes the input file for testdata/ggml/make.sh
// when -golden.qin is given.
func TestGoldenWriteQuantInput(t *testing.T) {
	if *goldenQuantIn == "" {
		t.Skip("no -golden.qin")
	}
	if err := os.WriteFile(*goldenQuantIn, goldenQuantInputBytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestQuantizeMatchesGGML compares QuantizeRow with ggml's own output on the
// generated rows, byte for byte, for every type and row; the input's hash
// recorded by quantize.c proves that the rows are the ones ggml saw. Where
// ggml's quantiser aborted on a row, QuantizeRow must fail on it, and only
// there.
func TestQuantizeMatchesGGML(t *testing.T) {
	gold := readGzip(t, "testdata/ggml/quant.bin.gz")
	h := fnv.New64a()
	h.Write(goldenQuantInputBytes())
	if len(gold) < 8 || binary.LittleEndian.Uint64(gold) != h.Sum64() {
		t.Fatalf("quant.bin.gz was made from other input rows (hash %#x, ours %#x)", binary.LittleEndian.Uint64(gold), h.Sum64())
	}
	gold = gold[8:]
	x := goldenQuantInput()
	for _, gt := range goldenQuantTypes {
		if len(gold) < 8 {
			t.Fatalf("quant.bin.gz: %v missing", gt.t)
		}
		code, n := binary.LittleEndian.Uint32(gold), int(binary.LittleEndian.Uint32(gold[4:]))
		rb, _ := gt.t.RowBytes(goldenQuantRowLen)
		if code != gt.ggml || n != rb*goldenQuantRows || len(gold) < 12+n {
			t.Fatalf("quant.bin.gz: record (type %d, %d bytes) is not %v's", code, n, gt.t)
		}
		want := gold[8 : 8+n]
		na := int(binary.LittleEndian.Uint32(gold[8+n:]))
		if na > goldenQuantRows || len(gold) < 12+n+4*na {
			t.Fatalf("quant.bin.gz: %v: %d aborted rows", gt.t, na)
		}
		aborted := map[int]bool{}
		for i := 0; i < na; i++ {
			aborted[int(binary.LittleEndian.Uint32(gold[12+n+4*i:]))] = true
		}
		gold = gold[12+n+4*na:]
		t.Run(gt.t.String(), func(t *testing.T) {
			got := make([]byte, rb)
			bad := 0
			for row := 0; row < goldenQuantRows; row++ {
				err := QuantizeRow(gt.t, x[row*goldenQuantRowLen:(row+1)*goldenQuantRowLen], got)
				if aborted[row] {
					if err == nil {
						bad++
						t.Errorf("row %d: ggml aborted, QuantizeRow succeeded", row)
					}
					continue
				}
				if err != nil {
					bad++
					t.Errorf("row %d: %v", row, err)
					continue
				}
				w := want[row*rb : (row+1)*rb]
				for i := range got {
					if got[i] != w[i] {
						if bad++; bad <= 5 {
							t.Errorf("row %d byte %d (block %d): got %#02x, ggml %#02x", row, i, i/gt.t.BlockBytes(), got[i], w[i])
						}
						break
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d rows differ from ggml", bad, goldenQuantRows)
			}
		})
	}
	if len(gold) != 0 {
		t.Fatalf("quant.bin.gz has %d bytes beyond the types", len(gold))
	}
}

// TestQuantizeRowRefuses checks the argument errors: types without a
// quantiser, partial blocks and wrongly sized destinations.
func TestQuantizeRowRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		t    DType
		n    int
		dst  int
	}{
		{"plain type", F16, 32, 64},
		{"i-quant that needs an importance matrix", IQ2_XXS, 256, 66},
		{"partial legacy block", Q4_0, 48, 27},
		{"partial super-block", Q4_K, 128, 72},
		{"partial IQ3_S super-block", IQ3_S, 128, 55},
		{"short destination", Q6_K, 256, 209},
		{"long destination", Q5_1, 32, 25},
	} {
		if err := QuantizeRow(c.t, make([]float32, c.n), make([]byte, c.dst)); err == nil {
			t.Errorf("%s: QuantizeRow(%v, %d values, %d bytes) succeeded", c.name, c.t, c.n, c.dst)
		}
	}
}

// TestEncodeRowQuantizes checks that EncodeRow appends QuantizeRow's bytes
// for the block types and round-trips through DecodeRow within the type's
// resolution.
func TestEncodeRowQuantizes(t *testing.T) {
	x := goldenQuantInput()[20*goldenQuantRowLen : 21*goldenQuantRowLen]
	for _, gt := range goldenQuantTypes {
		rb, _ := gt.t.RowBytes(len(x))
		want := make([]byte, rb)
		if err := QuantizeRow(gt.t, x, want); err != nil {
			t.Fatal(err)
		}
		got, err := EncodeRow([]byte{0xaa}, gt.t, x)
		if err != nil || len(got) != 1+rb || got[0] != 0xaa || string(got[1:]) != string(want) {
			t.Fatalf("%v: EncodeRow differs from QuantizeRow (err %v)", gt.t, err)
		}
		back := make([]float32, len(x))
		if err := DecodeRow(back, gt.t, got[1:]); err != nil {
			t.Fatal(err)
		}
		var num, den float64
		for i := range x {
			d := float64(back[i] - x[i])
			num += d * d
			den += float64(x[i]) * float64(x[i])
		}
		if rel := math.Sqrt(num / den); rel > 0.5 {
			t.Errorf("%v: relative RMS error %.3f after a round trip", gt.t, rel)
		}
	}
}

// ValidateRow refuses what ggml_validate_row_data refuses: Inf or NaN
// values, and scales that overflow fp16.
func TestValidateRow(t *testing.T) {
	huge := make([]float32, 256)
	for i := range huge {
		huge[i] = float32(i) * 1e7 // scales past 65504
	}
	for _, gt := range goldenQuantTypes {
		rb, _ := gt.t.RowBytes(256)
		q := make([]byte, rb)
		if err := QuantizeRow(gt.t, goldenQuantInput()[20*256:21*256], q); err != nil {
			t.Fatal(err)
		}
		if err := ValidateRow(gt.t, q); err != nil {
			t.Errorf("%v: an ordinary row refused: %v", gt.t, err)
		}
		QuantizeRow(gt.t, huge, q)
		if err := ValidateRow(gt.t, q); err == nil || !strings.Contains(err.Error(), "inf") {
			t.Errorf("%v: scales past fp16's range: %v", gt.t, err)
		}
	}
	for _, c := range []struct {
		t    DType
		v    float32
		want string
	}{{F32, float32(math.Inf(1)), "inf"}, {F32, math.Float32frombits(0x7fc00000), "nan"}, {F16, 1e5, "inf"}, {BF16, float32(math.NaN()), "nan"}, {F16, 1, ""}} {
		b, _ := EncodeRow(nil, c.t, []float32{0, c.v})
		err := ValidateRow(c.t, b)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want+" at block 1")) {
			t.Errorf("%v %v: %v, want %q", c.t, c.v, err, c.want)
		}
	}
	if err := ValidateRow(Q4_0, make([]byte, 17)); err == nil {
		t.Error("a partial block accepted")
	}
}

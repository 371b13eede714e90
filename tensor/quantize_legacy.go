package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// blockQuantizers encodes one block of each type that QuantizeRow writes:
// x holds exactly BlockSize elements, y exactly BlockBytes zeroed bytes.
// Each mirrors ggml's quantize_row_*_ref (the path ggml_quantize_chunk and
// so llama-quantize take without an importance matrix) operation by
// operation, because the K-quants search over candidate scales and a single
// differently rounded float changes which one wins. Every product whose
// result C rounds before an add is wrapped in float32(), which stops Go
// from fusing the two into one FMA (ggml-base is built without FMA).
var blockQuantizers = [...]func(x []float32, y []byte){
	Q8_0: quantQ8_0,
	Q4_0: quantQ4_0,
	Q4_1: quantQ4_1,
	Q5_0: quantQ5_0,
	Q5_1: quantQ5_1,
	Q2_K: quantQ2_K,
	Q3_K: quantQ3_K,
	Q4_K: quantQ4_K,
	Q5_K: quantQ5_K,
	Q6_K: quantQ6_K,

	IQ4_NL: quantIQ4_NL,
	IQ4_XS: quantIQ4_XS,
}

// failingQuantizers are the block quantisers that can fail where ggml's
// aborts (see quantize_iq3.go); on failure the block's bytes are undefined.
var failingQuantizers = [...]func(x []float32, y []byte) bool{
	IQ3_XXS: quantIQ3_XXS,
	IQ3_S:   quantIQ3_S,
}

// CanQuantize reports whether QuantizeRow encodes type t.
func CanQuantize(t DType) bool {
	return t >= 0 && (int(t) < len(blockQuantizers) && blockQuantizers[t] != nil ||
		int(t) < len(failingQuantizers) && failingQuantizers[t] != nil)
}

// QuantizeRow encodes src as the block-quantised type t into dst, which must
// be exactly the bytes those elements occupy. The bytes equal what
// ggml_quantize_chunk writes for the same floats with no importance matrix
// (quantize_row_*_ref; quantize_iq4_nl, quantize_iq4_xs, quantize_iq3_xxs
// and quantize_iq3_s for the i-quants it handles). It does not allocate,
// except to build the IQ3 codebooks' neighbour tables once. For IQ3_XXS
// and IQ3_S it fails on the values where ggml's quantiser aborts: values
// that are not finite, and huge ones, whose weighted squared errors (of
// order x⁴) overflow float32 for every candidate of the codebook search
// (seen from magnitudes of about 1e13).
func QuantizeRow(t DType, src []float32, dst []byte) error {
	if !CanQuantize(t) {
		return fmt.Errorf("tensor: cannot quantise to %v", t)
	}
	need, err := t.RowBytes(len(src))
	if err != nil {
		return err
	}
	if len(dst) != need {
		return fmt.Errorf("tensor: %v row of %d elements needs %d bytes, have %d", t, len(src), need, len(dst))
	}
	clear(dst)
	bs, bb := t.BlockSize(), t.BlockBytes()
	if int(t) < len(failingQuantizers) && failingQuantizers[t] != nil {
		q := failingQuantizers[t]
		for i := 0; i < len(src)/bs; i++ {
			if !q(src[i*bs:(i+1)*bs], dst[i*bb:(i+1)*bb]) {
				return fmt.Errorf("tensor: %v cannot quantise block %d: its values are too large or not finite for ggml's codebook search, which aborts on them", t, i)
			}
		}
		return nil
	}
	q := blockQuantizers[t]
	for i := 0; i < len(src)/bs; i++ {
		q(src[i*bs:(i+1)*bs], dst[i*bb:(i+1)*bb])
	}
	return nil
}

// putHalf stores f at b[off:] as GGML_FP32_TO_FP16 does.
func putHalf(b []byte, off int, f float32) {
	binary.LittleEndian.PutUint16(b[off:], FloatToHalf(f))
}

// fabsf is C's fabsf: it clears the sign bit, NaN included.
func fabsf(f float32) float32 {
	return math.Float32frombits(math.Float32bits(f) &^ (1 << 31))
}

// cvtt converts f to int32 as C's (int) cast compiles on x86-64
// (cvttss2si): truncation toward zero, and INT_MIN for NaN or a value out
// of range, which C leaves undefined. ggml casts to int8_t and uint8_t the
// same way and keeps the low byte, which byte(cvtt(f)) reproduces.
func cvtt(f float32) int32 {
	if !(f > -2147483904 && f < 2147483648) {
		return math.MinInt32
	}
	return int32(f)
}

// quantQ8_0 is quantize_row_q8_0_ref: d = amax/127, q = roundf(x/d).
func quantQ8_0(x []float32, y []byte) {
	var amax float32
	for _, v := range x {
		if a := fabsf(v); !(amax > a) { // C's MAX(amax, a), NaN included
			amax = a
		}
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y, 0, d)
	for j, v := range x {
		y[2+j] = byte(cvtt(float32(math.Round(float64(float32(v * id))))))
	}
}

// absMax returns the element of largest magnitude, the first of equals, as
// the symmetric legacy quantisers pick it.
func absMax(x []float32) float32 {
	var amax, m float32
	for _, v := range x {
		if a := fabsf(v); amax < a {
			amax, m = a, v
		}
	}
	return m
}

// minMax returns the least and greatest elements, starting from ±FLT_MAX
// as quantize_row_q4_1_ref and q5_1 do.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

// quantQ4_0 is quantize_row_q4_0_ref: d = max/-8 for the element of
// largest magnitude, q = min(15, (int8)(x/d + 8.5)).
func quantQ4_0(x []float32, y []byte) {
	d := absMax(x) / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y, 0, d)
	for j := 0; j < 16; j++ {
		x0, x1 := float32(x[j]*id), float32(x[16+j]*id)
		xi0 := min(15, int(int8(cvtt(x0+8.5))))
		xi1 := min(15, int(int8(cvtt(x1+8.5))))
		y[2+j] = byte(xi0) | byte(xi1)<<4
	}
}

// quantQ4_1 is quantize_row_q4_1_ref: d = (max-min)/15, m = min,
// q = min(15, (int8)((x-min)/d + 0.5)).
func quantQ4_1(x []float32, y []byte) {
	lo, hi := minMax(x)
	d := (hi - lo) / 15
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y, 0, d)
	putHalf(y, 2, lo)
	for j := 0; j < 16; j++ {
		x0, x1 := float32((x[j]-lo)*id), float32((x[16+j]-lo)*id)
		xi0 := min(15, int(int8(cvtt(x0+0.5))))
		xi1 := min(15, int(int8(cvtt(x1+0.5))))
		y[4+j] = byte(xi0) | byte(xi1)<<4
	}
}

// quantQ5_0 is quantize_row_q5_0_ref: d = max/-16,
// q = min(31, (int8)(x/d + 16.5)), the fifth bits gathered into qh.
func quantQ5_0(x []float32, y []byte) {
	d := absMax(x) / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y, 0, d)
	var qh uint32
	for j := 0; j < 16; j++ {
		x0, x1 := float32(x[j]*id), float32(x[16+j]*id)
		xi0 := byte(min(31, int(int8(cvtt(x0+16.5)))))
		xi1 := byte(min(31, int(int8(cvtt(x1+16.5)))))
		y[6+j] = xi0&0x0f | (xi1&0x0f)<<4
		qh |= uint32(xi0&0x10) >> 4 << j
		qh |= uint32(xi1&0x10) >> 4 << (j + 16)
	}
	binary.LittleEndian.PutUint32(y[2:], qh)
}

// quantQ5_1 is quantize_row_q5_1_ref: d = (max-min)/31, m = min,
// q = (uint8)((x-min)/d + 0.5).
func quantQ5_1(x []float32, y []byte) {
	lo, hi := minMax(x)
	d := (hi - lo) / 31
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putHalf(y, 0, d)
	putHalf(y, 2, lo)
	var qh uint32
	for j := 0; j < 16; j++ {
		x0, x1 := float32((x[j]-lo)*id), float32((x[16+j]-lo)*id)
		xi0, xi1 := byte(cvtt(x0+0.5)), byte(cvtt(x1+0.5))
		y[8+j] = xi0&0x0f | (xi1&0x0f)<<4
		qh |= uint32(xi0&0x10) >> 4 << j
		qh |= uint32(xi1&0x10) >> 4 << (j + 16)
	}
	binary.LittleEndian.PutUint32(y[4:], qh)
}

// halfFields are the byte offsets in one block of the fp16 scales that
// ggml_validate_row_data checks (d, and m or dmin).
var halfFields = map[DType][]int{
	Q8_0: {0}, Q4_0: {0}, Q5_0: {0}, IQ4_NL: {0}, IQ4_XS: {0}, IQ3_XXS: {0}, IQ3_S: {0},
	Q4_1: {0, 2}, Q5_1: {0, 2}, Q4_K: {0, 2}, Q5_K: {0, 2},
	Q2_K: {80, 82}, Q3_K: {108}, Q6_K: {208},
}

// ValidateRow checks encoded data of type t as ggml_validate_row_data does,
// the check llama-quantize runs on everything it quantises: no Inf or NaN
// among the values of F32, F16 and BF16 data, nor among the fp16 scales of
// the block types QuantizeRow writes. data must be whole elements or blocks.
func ValidateRow(t DType, data []byte) error {
	bb := t.BlockBytes()
	if bb == 0 || len(data)%bb != 0 {
		return fmt.Errorf("tensor: %d bytes are not whole %v blocks", len(data), t)
	}
	bad := func(i int, what string) error {
		return fmt.Errorf("tensor: %v data has %s at block %d", t, what, i)
	}
	switch t {
	case F32:
		for i := 0; i < len(data); i += 4 {
			if b := binary.LittleEndian.Uint32(data[i:]) & 0x7fffffff; b >= 0x7f800000 {
				return bad(i/4, map[bool]string{true: "inf", false: "nan"}[b == 0x7f800000])
			}
		}
	case F16:
		for i := 0; i < len(data); i += 2 {
			if h := binary.LittleEndian.Uint16(data[i:]) & 0x7fff; h >= 0x7c00 {
				return bad(i/2, map[bool]string{true: "inf", false: "nan"}[h == 0x7c00])
			}
		}
	case BF16:
		for i := 0; i < len(data); i += 2 {
			if h := binary.LittleEndian.Uint16(data[i:]) & 0x7fff; h >= 0x7f80 {
				return bad(i/2, map[bool]string{true: "inf", false: "nan"}[h == 0x7f80])
			}
		}
	default:
		offs, ok := halfFields[t]
		if !ok {
			return fmt.Errorf("tensor: cannot validate %v", t)
		}
		for i := 0; i < len(data)/bb; i++ {
			for _, o := range offs {
				if h := binary.LittleEndian.Uint16(data[i*bb+o:]) & 0x7fff; h >= 0x7c00 {
					return bad(i, map[bool]string{true: "inf", false: "nan"}[h == 0x7c00])
				}
			}
		}
	}
	return nil
}

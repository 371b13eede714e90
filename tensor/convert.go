package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// HalfToFloat converts an IEEE binary16 bit pattern to float32 exactly.
func HalfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0 && man == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: renormalise
		e := uint32(127 - 15 + 1)
		for man&0x400 == 0 {
			man <<= 1
			e--
		}
		man &= 0x3ff
		return math.Float32frombits(sign | e<<23 | man<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | man<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// FloatToHalf converts float32 to binary16 with round-to-nearest-even, as
// numpy and ggml's GGML_FP32_TO_FP16 do.
func FloatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := man >> shift
		rem := man & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is still correct (up to Inf)
	}
	return sign | uint16(r)
}

// BF16ToFloat widens a bfloat16 bit pattern to float32 exactly.
func BF16ToFloat(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FloatToBF16 rounds float32 to bfloat16, nearest even (NaN stays NaN).
func FloatToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// DecodeRow converts len(dst) elements of type t from src into dst; src may
// be longer than they need.
func DecodeRow(dst []float32, t DType, src []byte) error {
	need, err := t.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(src) < need {
		return fmt.Errorf("tensor: %v row of %d elements needs %d bytes, have %d", t, len(dst), need, len(src))
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = HalfToFloat(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToFloat(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case I8:
		for i := range dst {
			dst[i] = float32(int8(src[i]))
		}
	default:
		if t.Quantized() {
			return DequantizeRow(t, src[:need], dst)
		}
		return fmt.Errorf("tensor: cannot decode %v", t)
	}
	return nil
}

// EncodeRow converts src to type t, appending to dst. Q8_0 follows ggml's
// quantize_row_q8_0_ref exactly: d = amax/127 stored as fp16, q = round(x/d)
// with halfway cases away from zero, computed with the unrounded fp32 1/d.
// The other types CanQuantize accepts are encoded by QuantizeRow.
func EncodeRow(dst []byte, t DType, src []float32) ([]byte, error) {
	switch t {
	case F32:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	case F16:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint16(dst, FloatToHalf(v))
		}
	case BF16:
		for _, v := range src {
			dst = binary.LittleEndian.AppendUint16(dst, FloatToBF16(v))
		}
	case Q8_0:
		if len(src)%Q8BlockSize != 0 {
			return dst, fmt.Errorf("tensor: Q8_0 needs a multiple of %d values, got %d", Q8BlockSize, len(src))
		}
		for b := 0; b < len(src); b += Q8BlockSize {
			blk := src[b : b+Q8BlockSize]
			var amax float32
			for _, v := range blk {
				if a := float32(math.Abs(float64(v))); a > amax {
					amax = a
				}
			}
			d := amax / 127
			var id float32
			if d != 0 {
				id = 1 / d
			}
			dst = binary.LittleEndian.AppendUint16(dst, FloatToHalf(d))
			for _, v := range blk {
				dst = append(dst, byte(int8(math.Round(float64(v*id)))))
			}
		}
	default:
		if CanQuantize(t) {
			n, err := t.RowBytes(len(src))
			if err != nil {
				return dst, err
			}
			dst = append(dst, make([]byte, n)...)
			return dst, QuantizeRow(t, src, dst[len(dst)-n:])
		}
		return dst, fmt.Errorf("tensor: cannot encode to %v", t)
	}
	return dst, nil
}

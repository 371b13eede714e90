package tensor

import (
	"encoding/binary"
	"fmt"
)

//go:generate go run ./internal/gentables -header $GGML_COMMON_H -o iquant_tables.go

// blockDecoders decodes one block of each block-quantised type: src holds
// exactly BlockBytes bytes, dst exactly BlockSize elements. Each decoder
// mirrors ggml's dequantize_row_* for its type operation by operation, so
// that the float32 results are identical bit for bit. For these formats
// every product is exact in float32 (an fp16 scale has 11 significant bits,
// the integer factors at most 13 together), so only the final add of the
// types with a min rounds; the explicit float32(x*y) before those adds, which
// forbids Go from fusing them, keeps that true by construction.
var blockDecoders = [...]func(src []byte, dst []float32){
	Q8_0:    dequantQ8_0,
	Q4_0:    dequantQ4_0,
	Q4_1:    dequantQ4_1,
	Q5_0:    dequantQ5_0,
	Q5_1:    dequantQ5_1,
	Q2_K:    dequantQ2_K,
	Q3_K:    dequantQ3_K,
	Q4_K:    dequantQ4_K,
	Q5_K:    dequantQ5_K,
	Q6_K:    dequantQ6_K,
	IQ2_XXS: dequantIQ2_XXS,
	IQ2_XS:  dequantIQ2_XS,
	IQ2_S:   dequantIQ2_S,
	IQ3_XXS: dequantIQ3_XXS,
	IQ3_S:   dequantIQ3_S,
	IQ1_S:   dequantIQ1_S,
	IQ1_M:   dequantIQ1_M,
	IQ4_NL:  dequantIQ4_NL,
	IQ4_XS:  dequantIQ4_XS,
}

// DequantizeRow decodes len(dst) elements of the block-quantised type t from
// src, which must hold exactly the whole blocks those elements occupy. The
// output equals ggml's dequantize_row_* for t bit for bit (NaN payloads
// aside). It does not allocate.
func DequantizeRow(t DType, src []byte, dst []float32) error {
	if !t.Quantized() || int(t) >= len(blockDecoders) || blockDecoders[t] == nil {
		return fmt.Errorf("tensor: %v is not a block-quantised type", t)
	}
	need, err := t.RowBytes(len(dst))
	if err != nil {
		return err
	}
	if len(src) != need {
		return fmt.Errorf("tensor: %v row of %d elements needs %d bytes, have %d", t, len(dst), need, len(src))
	}
	bs, bb := t.BlockSize(), t.BlockBytes()
	for i := 0; i < len(dst)/bs; i++ {
		decodeBlock(t, src[i*bb:(i+1)*bb], dst[i*bs:(i+1)*bs])
	}
	return nil
}

// decodeBlock is blockDecoders[t](s, d) as a switch of direct calls: a
// call through the table's function values would make every caller's dst
// escape to the heap, so a row buffer on a kernel's stack would cost an
// allocation per call.
func decodeBlock(t DType, s []byte, d []float32) {
	switch t {
	case Q8_0:
		dequantQ8_0(s, d)
	case Q4_0:
		dequantQ4_0(s, d)
	case Q4_1:
		dequantQ4_1(s, d)
	case Q5_0:
		dequantQ5_0(s, d)
	case Q5_1:
		dequantQ5_1(s, d)
	case Q2_K:
		dequantQ2_K(s, d)
	case Q3_K:
		dequantQ3_K(s, d)
	case Q4_K:
		dequantQ4_K(s, d)
	case Q5_K:
		dequantQ5_K(s, d)
	case Q6_K:
		dequantQ6_K(s, d)
	case IQ2_XXS:
		dequantIQ2_XXS(s, d)
	case IQ2_XS:
		dequantIQ2_XS(s, d)
	case IQ2_S:
		dequantIQ2_S(s, d)
	case IQ3_XXS:
		dequantIQ3_XXS(s, d)
	case IQ3_S:
		dequantIQ3_S(s, d)
	case IQ1_S:
		dequantIQ1_S(s, d)
	case IQ1_M:
		dequantIQ1_M(s, d)
	case IQ4_NL:
		dequantIQ4_NL(s, d)
	case IQ4_XS:
		dequantIQ4_XS(s, d)
	}
}

// half reads the little-endian fp16 at b[off:] as float32, exactly as
// GGML_FP16_TO_FP32 does for every non-NaN value.
func half(b []byte, off int) float32 {
	return HalfToFloat(binary.LittleEndian.Uint16(b[off:]))
}

// signs holds the factors ggml's source multiplies by for a clear (0) or set
// (1) sign bit. Multiplying and negating differ only in the sign of a NaN
// (from a NaN scale), and there compiled ggml itself varies: GCC turns its
// multiplication into a sign flip.
var signs = [2]float32{1, -1}

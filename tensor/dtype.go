// Package tensor describes weight tensors as typed views over raw little-endian
// bytes (usually memory-mapped from a model file). It knows element types and
// shapes; it computes nothing beyond element conversion. Format readers produce
// Tensors, the model consumes them.
package tensor

import (
	"fmt"
	"math"
)

// DType is the element type of a tensor's bytes.
type DType int

// The element types the engine understands. Values are our own; GGUF type
// codes are mapped in formats/gguf.
const (
	F32  DType = iota // IEEE binary32
	F16               // IEEE binary16
	BF16              // bfloat16: the upper 16 bits of a binary32
	Q8_0              // GGUF Q8_0: blocks of 32 int8 with one fp16 scale (34 bytes)
	I8                // plain int8 (the weight half of xAI's QuantizedWeight8bit)

	// ggml's block-quantised types, spelled as ggml spells them. Each packs a
	// fixed number of elements (32, or QK_K = 256 for the K- and i-quants)
	// into a fixed number of bytes; DequantizeRow decodes them as ggml does.
	Q4_0    // 32 elements in 18 bytes
	Q4_1    // 32 elements in 20 bytes
	Q5_0    // 32 elements in 22 bytes
	Q5_1    // 32 elements in 24 bytes
	Q2_K    // 256 elements in 84 bytes
	Q3_K    // 256 elements in 110 bytes
	Q4_K    // 256 elements in 144 bytes
	Q5_K    // 256 elements in 176 bytes
	Q6_K    // 256 elements in 210 bytes
	IQ2_XXS // 256 elements in 66 bytes
	IQ2_XS  // 256 elements in 74 bytes
	IQ2_S   // 256 elements in 82 bytes
	IQ3_XXS // 256 elements in 98 bytes
	IQ3_S   // 256 elements in 110 bytes
	IQ1_S   // 256 elements in 50 bytes
	IQ1_M   // 256 elements in 56 bytes
	IQ4_NL  // 32 elements in 18 bytes
	IQ4_XS  // 256 elements in 136 bytes
)

// Q8_0 block layout (ggml's block_q8_0): fp16 d, then 32 int8 quants.
const (
	Q8BlockSize  = 32
	Q8BlockBytes = 2 + Q8BlockSize
)

// QK_K is the super-block size of ggml's K- and i-quants.
const QK_K = 256

// dtypeInfo is what sizing and decoding need to know about a type: its name,
// and the elements and bytes of one block (1 element for plain types).
type dtypeInfo struct {
	name       string
	blockSize  int
	blockBytes int
}

var dtypes = [...]dtypeInfo{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	BF16:    {"BF16", 1, 2},
	Q8_0:    {"Q8_0", Q8BlockSize, Q8BlockBytes},
	I8:      {"I8", 1, 1},
	Q4_0:    {"Q4_0", 32, 2 + 16},
	Q4_1:    {"Q4_1", 32, 2 + 2 + 16},
	Q5_0:    {"Q5_0", 32, 2 + 4 + 16},
	Q5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q2_K:    {"Q2_K", QK_K, 16 + 64 + 2 + 2},
	Q3_K:    {"Q3_K", QK_K, 32 + 64 + 12 + 2},
	Q4_K:    {"Q4_K", QK_K, 2 + 2 + 12 + 128},
	Q5_K:    {"Q5_K", QK_K, 2 + 2 + 12 + 32 + 128},
	Q6_K:    {"Q6_K", QK_K, 128 + 64 + 16 + 2},
	IQ2_XXS: {"IQ2_XXS", QK_K, 2 + 64},
	IQ2_XS:  {"IQ2_XS", QK_K, 2 + 64 + 8},
	IQ2_S:   {"IQ2_S", QK_K, 2 + 64 + 8 + 8},
	IQ3_XXS: {"IQ3_XXS", QK_K, 2 + 96},
	IQ3_S:   {"IQ3_S", QK_K, 2 + 64 + 8 + 32 + 4},
	IQ1_S:   {"IQ1_S", QK_K, 2 + 32 + 16},
	IQ1_M:   {"IQ1_M", QK_K, 32 + 16 + 8},
	IQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	IQ4_XS:  {"IQ4_XS", QK_K, 2 + 2 + 4 + 128},
}

func (t DType) info() (dtypeInfo, bool) {
	if t >= 0 && int(t) < len(dtypes) {
		return dtypes[t], true
	}
	return dtypeInfo{}, false
}

// String returns the conventional upper-case name of the type (F32, Q8_0, ...).
func (t DType) String() string {
	if in, ok := t.info(); ok {
		return in.name
	}
	return fmt.Sprintf("DType(%d)", int(t))
}

// ParseDType maps a name such as "f16" or "Q8_0" (any case) to a DType.
func ParseDType(s string) (DType, error) {
	for i, in := range dtypes {
		if equalFold(in.name, s) {
			return DType(i), nil
		}
	}
	return 0, fmt.Errorf("tensor: unknown dtype %q", s)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// BlockSize returns the number of elements in one block of t: 1 for plain
// types, 32 or QK_K for the block-quantised ones, 0 for an unknown type.
func (t DType) BlockSize() int {
	in, _ := t.info()
	return in.blockSize
}

// BlockBytes returns the bytes one block of t occupies (the element size for
// plain types), or 0 for an unknown type.
func (t DType) BlockBytes() int {
	in, _ := t.info()
	return in.blockBytes
}

// Quantized reports whether t is one of ggml's block-quantised types, the
// ones DequantizeRow decodes.
func (t DType) Quantized() bool {
	return t.BlockSize() > 1
}

// RowBytes returns the number of bytes that n consecutive elements of type t
// occupy, or an error if n is not representable (block types need whole
// blocks).
func (t DType) RowBytes(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("tensor: negative element count %d", n)
	}
	in, ok := t.info()
	if !ok {
		return 0, fmt.Errorf("tensor: unknown dtype %v", t)
	}
	if n%in.blockSize != 0 {
		return 0, fmt.Errorf("tensor: %v row of %d elements is not a multiple of %d", t, n, in.blockSize)
	}
	nb := n / in.blockSize
	if nb > math.MaxInt/in.blockBytes {
		return 0, fmt.Errorf("tensor: %v row of %d elements is too large", t, n)
	}
	return nb * in.blockBytes, nil
}

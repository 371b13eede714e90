// Package tensor describes weight tensors as typed views over raw little-endian
// bytes (usually memory-mapped from a model file). It knows element types and
// shapes; it computes nothing beyond element conversion. Format readers produce
// Tensors, the model consumes them.
package tensor

import "fmt"

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
)

// Q8_0 block layout (ggml's block_q8_0): fp16 d, then 32 int8 quants.
const (
	Q8BlockSize  = 32
	Q8BlockBytes = 2 + Q8BlockSize
)

var dtypeNames = [...]string{F32: "F32", F16: "F16", BF16: "BF16", Q8_0: "Q8_0", I8: "I8"}

// String returns the conventional upper-case name of the type (F32, Q8_0, ...).
func (t DType) String() string {
	if t >= 0 && int(t) < len(dtypeNames) {
		return dtypeNames[t]
	}
	return fmt.Sprintf("DType(%d)", int(t))
}

// ParseDType maps a name such as "f16" or "Q8_0" (any case) to a DType.
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if equalFold(n, s) {
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

// RowBytes returns the number of bytes that n consecutive elements of type t
// occupy, or an error if n is not representable (Q8_0 needs whole blocks).
func (t DType) RowBytes(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("tensor: negative element count %d", n)
	}
	switch t {
	case F32:
		return 4 * n, nil
	case F16, BF16:
		return 2 * n, nil
	case I8:
		return n, nil
	case Q8_0:
		if n%Q8BlockSize != 0 {
			return 0, fmt.Errorf("tensor: Q8_0 row of %d elements is not a multiple of %d", n, Q8BlockSize)
		}
		return n / Q8BlockSize * Q8BlockBytes, nil
	}
	return 0, fmt.Errorf("tensor: unknown dtype %v", t)
}

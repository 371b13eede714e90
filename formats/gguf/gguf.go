// Package gguf reads and writes GGUF files, the model container of ggml and
// llama.cpp.
//
// A GGUF file (versions 2 and 3, little-endian) is a header, an ordered list
// of typed metadata key/value pairs, a table of tensor descriptions, and an
// aligned data section that holds the tensor bytes:
//
//	magic "GGUF" | version u32 | tensor count u64 | metadata count u64
//	metadata: key string | value type u32 | value
//	tensor infos: name string | n_dims u32 | ne[n_dims] u64 | ggml type u32 | offset u64
//	padding to the alignment (general.alignment, default 32)
//	data section: each tensor at its offset, relative to the section start
//
// Strings are a u64 byte length followed by the bytes (no terminator).
// Tensor dimensions are stored in ggml order, innermost first (ne[0] is the
// length of a row); the tensor.Tensor values this package returns use numpy
// order, outermost first, so the shape is ne reversed.
//
// Open memory-maps a file and Parse reads a buffer; both treat the input as
// hostile: every count and length is checked against the bytes that remain
// before anything sized by it is allocated, so a corrupt or malicious file
// yields an error, never a panic or an outsized allocation. Tensor data is
// never copied: Lookup returns views into the mapping. OpenModel also opens
// a model stored as llama.cpp's gguf-split shards or as a file cut into byte
// parts (name.gguf.part1of4, …), as one File; Writer.WriteSplit writes
// shards.
//
// Writer builds GGUF v3 files, streaming tensor data one tensor at a time so
// that a conversion never needs more than one tensor in memory.
package gguf

import (
	"fmt"
	"math"
	"strings"

	"github.com/grok-go/grok/tensor"
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// Version is the GGUF version that Writer produces.
const Version = 3

// DefaultAlignment is the data alignment used when general.alignment is
// absent.
const DefaultAlignment = 32

// AlignmentKey is the metadata key that overrides DefaultAlignment. Its value
// must be a uint32 power of two, as ggml requires.
const AlignmentKey = "general.alignment"

// MaxDims is the largest number of dimensions a tensor may have
// (GGML_MAX_DIMS).
const MaxDims = 4

// maxNameLen is the longest tensor name ggml accepts: GGML_MAX_NAME is 64
// bytes including the terminating NUL. The writer enforces it so that its
// files load in llama.cpp; the reader does not, because longer names harm
// nothing here.
const maxNameLen = 63

// ValueType is the type code of a metadata value.
type ValueType uint32

// The GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	TypeUint8: "uint8", TypeInt8: "int8", TypeUint16: "uint16", TypeInt16: "int16",
	TypeUint32: "uint32", TypeInt32: "int32", TypeFloat32: "float32", TypeBool: "bool",
	TypeString: "string", TypeArray: "array", TypeUint64: "uint64", TypeInt64: "int64",
	TypeFloat64: "float64",
}

// String returns the GGUF name of the type (uint32, string, array, ...).
func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// valid reports whether t is a GGUF value type.
func (t ValueType) valid() bool { return t <= TypeFloat64 }

// fixedSize returns the encoded size of a scalar of type t, or 0 for the
// variable-length types (string, array).
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize returns the fewest bytes one value of type t can occupy. The parser
// multiplies it by an array length to reject lengths the file cannot hold
// before allocating.
func (t ValueType) minSize() int {
	switch t {
	case TypeString:
		return 8 // the length, for an empty string
	case TypeArray:
		return 4 + 8 // element type and length, for an empty array
	}
	return t.fixedSize()
}

// Value is a typed metadata value.
//
// Data holds the value as the Go type matching Type: uint8, int8, uint16,
// int16, uint32, int32, uint64, int64, float32, float64, bool or string for
// scalars. For arrays (Type == TypeArray) ElemType is the element type and
// Data is the matching slice: []uint8, []int8, []uint16, []int16, []uint32,
// []int32, []uint64, []int64, []float32, []float64, []bool, []string, or
// []Value for an array of arrays (each element carries its own type).
type Value struct {
	Type     ValueType
	ElemType ValueType // only for TypeArray
	Data     any
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// Len returns the number of elements of an array value, or 0 for a scalar.
func (v Value) Len() int {
	switch a := v.Data.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float32:
		return len(a)
	case []float64:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Uint returns an integer value of any integer type as uint64; it fails for
// negative values and non-integers.
func (v Value) Uint() (uint64, bool) {
	switch x := v.Data.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8, int16, int32, int64:
		i, _ := v.Int()
		if i < 0 {
			return 0, false
		}
		return uint64(i), true
	}
	return 0, false
}

// Int returns an integer value of any integer type as int64; it fails for
// uint64 values above math.MaxInt64 and non-integers.
func (v Value) Int() (int64, bool) {
	switch x := v.Data.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8, uint16, uint32, uint64:
		u, _ := v.Uint()
		if u > math.MaxInt64 {
			return 0, false
		}
		return int64(u), true
	}
	return 0, false
}

// Float returns a float32, float64 or integer value as float64 (integers
// beyond 2^53 are rounded).
func (v Value) Float() (float64, bool) {
	switch x := v.Data.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	if u, ok := v.Uint(); ok {
		return float64(u), true
	}
	return 0, false
}

// String formats the value for humans; long arrays are abbreviated.
func (v Value) String() string {
	if v.Type != TypeArray {
		if s, ok := v.Data.(string); ok {
			return fmt.Sprintf("%q", s)
		}
		return fmt.Sprint(v.Data)
	}
	n := v.Len()
	if n > 8 {
		return fmt.Sprintf("[%d × %v]", n, v.ElemType)
	}
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v.index(i).String())
	}
	b.WriteByte(']')
	return b.String()
}

// index returns element i of an array value as a scalar Value.
func (v Value) index(i int) Value {
	switch a := v.Data.(type) {
	case []uint8:
		return Value{Type: TypeUint8, Data: a[i]}
	case []int8:
		return Value{Type: TypeInt8, Data: a[i]}
	case []uint16:
		return Value{Type: TypeUint16, Data: a[i]}
	case []int16:
		return Value{Type: TypeInt16, Data: a[i]}
	case []uint32:
		return Value{Type: TypeUint32, Data: a[i]}
	case []int32:
		return Value{Type: TypeInt32, Data: a[i]}
	case []uint64:
		return Value{Type: TypeUint64, Data: a[i]}
	case []int64:
		return Value{Type: TypeInt64, Data: a[i]}
	case []float32:
		return Value{Type: TypeFloat32, Data: a[i]}
	case []float64:
		return Value{Type: TypeFloat64, Data: a[i]}
	case []bool:
		return Value{Type: TypeBool, Data: a[i]}
	case []string:
		return Value{Type: TypeString, Data: a[i]}
	case []Value:
		return a[i]
	}
	return Value{}
}

// GGMLType is a ggml tensor type code as stored in a tensor info.
type GGMLType uint32

// The ggml tensor types (ggml.h enum ggml_type). Codes 4, 5, 31-33 and 36-38
// belonged to types that ggml has removed; files using them are rejected, as
// ggml rejects them.
const (
	GGMLTypeF32     GGMLType = 0
	GGMLTypeF16     GGMLType = 1
	GGMLTypeQ4_0    GGMLType = 2
	GGMLTypeQ4_1    GGMLType = 3
	GGMLTypeQ5_0    GGMLType = 6
	GGMLTypeQ5_1    GGMLType = 7
	GGMLTypeQ8_0    GGMLType = 8
	GGMLTypeQ8_1    GGMLType = 9
	GGMLTypeQ2_K    GGMLType = 10
	GGMLTypeQ3_K    GGMLType = 11
	GGMLTypeQ4_K    GGMLType = 12
	GGMLTypeQ5_K    GGMLType = 13
	GGMLTypeQ6_K    GGMLType = 14
	GGMLTypeQ8_K    GGMLType = 15
	GGMLTypeIQ2_XXS GGMLType = 16
	GGMLTypeIQ2_XS  GGMLType = 17
	GGMLTypeIQ3_XXS GGMLType = 18
	GGMLTypeIQ1_S   GGMLType = 19
	GGMLTypeIQ4_NL  GGMLType = 20
	GGMLTypeIQ3_S   GGMLType = 21
	GGMLTypeIQ2_S   GGMLType = 22
	GGMLTypeIQ4_XS  GGMLType = 23
	GGMLTypeI8      GGMLType = 24
	GGMLTypeI16     GGMLType = 25
	GGMLTypeI32     GGMLType = 26
	GGMLTypeI64     GGMLType = 27
	GGMLTypeF64     GGMLType = 28
	GGMLTypeIQ1_M   GGMLType = 29
	GGMLTypeBF16    GGMLType = 30
	GGMLTypeTQ1_0   GGMLType = 34
	GGMLTypeTQ2_0   GGMLType = 35
	GGMLTypeMXFP4   GGMLType = 39
	GGMLTypeNVFP4   GGMLType = 40
	GGMLTypeQ1_0    GGMLType = 41
	GGMLTypeQ2_0    GGMLType = 42
)

// typeTraits is ggml's type_traits table reduced to what a file reader needs:
// the name, the number of elements per block and the bytes per block. The
// sizes follow the block structs of ggml-common.h; they let the parser
// validate offsets and sizes of tensors it cannot decode.
type typeTraits struct {
	name      string
	blockSize int64
	typeSize  int64
}

var ggmlTypes = map[GGMLType]typeTraits{
	GGMLTypeF32:     {"F32", 1, 4},
	GGMLTypeF16:     {"F16", 1, 2},
	GGMLTypeQ4_0:    {"Q4_0", 32, 2 + 16},
	GGMLTypeQ4_1:    {"Q4_1", 32, 2 + 2 + 16},
	GGMLTypeQ5_0:    {"Q5_0", 32, 2 + 4 + 16},
	GGMLTypeQ5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	GGMLTypeQ8_0:    {"Q8_0", 32, 2 + 32},
	GGMLTypeQ8_1:    {"Q8_1", 32, 2 + 2 + 32},
	GGMLTypeQ2_K:    {"Q2_K", 256, 16 + 64 + 2 + 2},
	GGMLTypeQ3_K:    {"Q3_K", 256, 32 + 64 + 12 + 2},
	GGMLTypeQ4_K:    {"Q4_K", 256, 2 + 2 + 12 + 128},
	GGMLTypeQ5_K:    {"Q5_K", 256, 2 + 2 + 12 + 32 + 128},
	GGMLTypeQ6_K:    {"Q6_K", 256, 128 + 64 + 16 + 2},
	GGMLTypeQ8_K:    {"Q8_K", 256, 4 + 256 + 32},
	GGMLTypeIQ2_XXS: {"IQ2_XXS", 256, 2 + 64},
	GGMLTypeIQ2_XS:  {"IQ2_XS", 256, 2 + 64 + 8},
	GGMLTypeIQ3_XXS: {"IQ3_XXS", 256, 2 + 96},
	GGMLTypeIQ1_S:   {"IQ1_S", 256, 2 + 32 + 16},
	GGMLTypeIQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	GGMLTypeIQ3_S:   {"IQ3_S", 256, 2 + 64 + 8 + 32 + 4},
	GGMLTypeIQ2_S:   {"IQ2_S", 256, 2 + 64 + 8 + 8},
	GGMLTypeIQ4_XS:  {"IQ4_XS", 256, 2 + 2 + 4 + 128},
	GGMLTypeI8:      {"I8", 1, 1},
	GGMLTypeI16:     {"I16", 1, 2},
	GGMLTypeI32:     {"I32", 1, 4},
	GGMLTypeI64:     {"I64", 1, 8},
	GGMLTypeF64:     {"F64", 1, 8},
	GGMLTypeIQ1_M:   {"IQ1_M", 256, 32 + 16 + 8},
	GGMLTypeBF16:    {"BF16", 1, 2},
	GGMLTypeTQ1_0:   {"TQ1_0", 256, 48 + 4 + 2},
	GGMLTypeTQ2_0:   {"TQ2_0", 256, 64 + 2},
	GGMLTypeMXFP4:   {"MXFP4", 32, 1 + 16},
	GGMLTypeNVFP4:   {"NVFP4", 64, 4 + 32},
	GGMLTypeQ1_0:    {"Q1_0", 128, 2 + 16},
	GGMLTypeQ2_0:    {"Q2_0", 64, 2 + 16},
}

// removedTypes names the codes ggml once used and has since withdrawn from
// GGUF, so that the error for them says more than "unknown".
var removedTypes = map[GGMLType]string{
	4: "Q4_2", 5: "Q4_3",
	31: "Q4_0_4_4", 32: "Q4_0_4_8", 33: "Q4_0_8_8",
	36: "IQ4_NL_4_4", 37: "IQ4_NL_4_8", 38: "IQ4_NL_8_8",
}

// String returns the conventional name of the type (F32, Q4_K, ...), as
// gguf-py spells it.
func (t GGMLType) String() string {
	if tr, ok := ggmlTypes[t]; ok {
		return tr.name
	}
	if n, ok := removedTypes[t]; ok {
		return n
	}
	return fmt.Sprintf("GGMLType(%d)", uint32(t))
}

// Known reports whether t is a ggml type this package can size, whether or
// not it can decode it.
func (t GGMLType) Known() bool {
	_, ok := ggmlTypes[t]
	return ok
}

// BlockSize returns the number of elements per block of t (1 for plain
// types), or 0 if t is unknown.
func (t GGMLType) BlockSize() int64 { return ggmlTypes[t].blockSize }

// TypeSize returns the bytes per block of t, or 0 if t is unknown.
func (t GGMLType) TypeSize() int64 { return ggmlTypes[t].typeSize }

// DType returns the tensor.DType for t, or false if the engine cannot use
// tensors of this type.
func (t GGMLType) DType() (tensor.DType, bool) {
	switch t {
	case GGMLTypeF32:
		return tensor.F32, true
	case GGMLTypeF16:
		return tensor.F16, true
	case GGMLTypeBF16:
		return tensor.BF16, true
	case GGMLTypeQ8_0:
		return tensor.Q8_0, true
	case GGMLTypeI8:
		return tensor.I8, true
	}
	if dt, ok := blockTypes[t]; ok {
		return dt, true
	}
	return 0, false
}

// blockTypes maps ggml's legacy, K- and i-quant types to the tensor types
// that decode them (tensor.DequantizeRow, ggml's bits).
var blockTypes = map[GGMLType]tensor.DType{
	GGMLTypeQ4_0: tensor.Q4_0, GGMLTypeQ4_1: tensor.Q4_1, GGMLTypeQ5_0: tensor.Q5_0, GGMLTypeQ5_1: tensor.Q5_1,
	GGMLTypeQ2_K: tensor.Q2_K, GGMLTypeQ3_K: tensor.Q3_K, GGMLTypeQ4_K: tensor.Q4_K, GGMLTypeQ5_K: tensor.Q5_K,
	GGMLTypeQ6_K: tensor.Q6_K, GGMLTypeIQ2_XXS: tensor.IQ2_XXS, GGMLTypeIQ2_XS: tensor.IQ2_XS,
	GGMLTypeIQ2_S: tensor.IQ2_S, GGMLTypeIQ3_XXS: tensor.IQ3_XXS, GGMLTypeIQ3_S: tensor.IQ3_S,
	GGMLTypeIQ1_S: tensor.IQ1_S, GGMLTypeIQ1_M: tensor.IQ1_M, GGMLTypeIQ4_NL: tensor.IQ4_NL,
	GGMLTypeIQ4_XS: tensor.IQ4_XS,
}

// supportedTypes is the list quoted in UnsupportedTypeError messages.
const supportedTypes = "F32, F16, BF16, Q8_0, I8, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K…Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS"

// TypeOf returns the GGML type code for a tensor.DType.
func TypeOf(dt tensor.DType) (GGMLType, error) {
	switch dt {
	case tensor.F32:
		return GGMLTypeF32, nil
	case tensor.F16:
		return GGMLTypeF16, nil
	case tensor.BF16:
		return GGMLTypeBF16, nil
	case tensor.Q8_0:
		return GGMLTypeQ8_0, nil
	case tensor.I8:
		return GGMLTypeI8, nil
	}
	for g, t := range blockTypes {
		if t == dt {
			return g, nil
		}
	}
	return 0, fmt.Errorf("gguf: no GGML type for %v", dt)
}

// maxElements bounds the element count of a tensor. It is the limit of
// tensor.Elements, which keeps a byte size at 4 bytes per element
// representable; no real tensor comes near it.
const maxElements = math.MaxInt64 / 4

// TensorSize returns the number of bytes a tensor of type t with dimensions
// ne (ggml order, innermost first) occupies. It fails for unknown types, for
// negative dimensions, when ne[0] is not a whole number of blocks, when the
// product of the non-zero dimensions exceeds 2^61 - 1, and when the size
// overflows int64.
func TensorSize(t GGMLType, ne []int64) (int64, error) {
	tr, ok := ggmlTypes[t]
	if !ok {
		return 0, fmt.Errorf("unknown ggml type %v", t)
	}
	// The product of the non-zero dimensions is bounded too, although a zero
	// dimension makes the tensor empty: the tensor package multiplies the
	// shape in the other order, and must not overflow before it meets the
	// zero.
	n, nz := int64(1), int64(1)
	for _, d := range ne {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in %v", ne)
		}
		if d == 0 {
			n = 0
			continue
		}
		if nz > maxElements/d {
			return 0, fmt.Errorf("element count of %v overflows", ne)
		}
		nz *= d
	}
	if n != 0 {
		n = nz
	}
	row := int64(1)
	if len(ne) > 0 {
		row = ne[0]
	}
	if row%tr.blockSize != 0 {
		return 0, fmt.Errorf("row of %d elements is not a whole number of %v blocks of %d", row, t, tr.blockSize)
	}
	blocks := n / tr.blockSize
	if blocks > math.MaxInt64/tr.typeSize {
		return 0, fmt.Errorf("byte size of %v %v overflows", t, ne)
	}
	return blocks * tr.typeSize, nil
}

// TensorInfo describes one tensor of a file.
type TensorInfo struct {
	Name string
	Type GGMLType
	// Dims are the dimensions in ggml order as stored in the file: Dims[0]
	// is the innermost (row) length. The numpy-order shape is Dims reversed.
	Dims []int64
	// Offset is the position of the tensor's bytes relative to the start of
	// the data section; it is a multiple of the file's alignment.
	Offset int64
	// Size is the number of bytes of the tensor, computed from Type and Dims.
	Size int64
}

// Shape returns the tensor's shape in numpy order (outermost first).
func (ti *TensorInfo) Shape() []int {
	s := make([]int, len(ti.Dims))
	for i, d := range ti.Dims {
		s[len(s)-1-i] = int(d) // the parser checked d ≤ math.MaxInt
	}
	return s
}

// UnsupportedTypeError reports a tensor whose ggml type is valid but that the
// engine cannot compute with.
type UnsupportedTypeError struct {
	Tensor string
	Type   GGMLType
}

// Error returns the message, which names the tensor, its type and the
// supported types.
func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("gguf: tensor %q: type %v is not supported (supported: %s)", e.Tensor, e.Type, supportedTypes)
}

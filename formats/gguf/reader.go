package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/grok-go/grok/tensor"
)

// File is a parsed GGUF file. Its tensor data aliases the buffer it was
// parsed from (the memory mapping, for Open): nothing is copied, and the
// tensors that Lookup returns are valid until Close.
type File struct {
	// Version is the GGUF version of the file (2 or 3).
	Version uint32
	// Alignment is the data alignment: general.alignment, or 32.
	Alignment uint32
	// Metadata lists the key/value pairs in file order.
	Metadata []KV
	// Tensors lists the tensor infos in file order.
	Tensors []TensorInfo
	// DataOffset is the absolute file position of the data section (which
	// may lie at the end of the file, or past it when no tensor has bytes).
	DataOffset int64

	data    []byte         // the tensor data section
	keys    map[string]int // metadata key → index in Metadata
	names   map[string]int // tensor name → index in Tensors
	release func() error   // unmaps the file; nil for Parse
	closed  bool           // data is gone
	split   *splitInfo     // tensors of several files (split.go); nil for one
}

// maxNesting bounds arrays of arrays. GGUF writers never nest (ggml cannot
// even read nested arrays); the bound keeps recursion on hostile input
// shallow.
const maxNesting = 8

// minTensorInfoSize is the smallest encoded tensor info: an empty name (8),
// n_dims (4), no dimensions, the type (4) and the offset (8).
const minTensorInfoSize = 8 + 4 + 4 + 8

// minKVSize is the smallest encoded metadata pair: an empty key (8), the
// value type (4) and a one-byte value.
const minKVSize = 8 + 4 + 1

// Parse parses a GGUF file held in data. The File refers to data for tensor
// bytes, so data must stay unmodified while the File is in use. Metadata
// strings are copied.
func Parse(data []byte) (*File, error) {
	f, err := parseHeader(data)
	if err != nil {
		return nil, err
	}
	// Data section: it starts at the next multiple of the alignment and runs
	// to the end of the file. A file without tensor bytes may end before
	// the padding does; its data section is then empty.
	start := min(uint64(f.DataOffset), uint64(len(data)))
	f.data = data[start:len(data):len(data)]
	if err := f.checkLayout(int64(len(f.data))); err != nil {
		return nil, err
	}
	return f, nil
}

// parseHeader parses everything before the data section and sets
// DataOffset; it serves Parse and files split into byte parts.
func parseHeader(data []byte) (*File, error) {
	d := &decoder{buf: data}
	f := &File{}

	// Header.
	if len(data) < 4 {
		return nil, fmt.Errorf("gguf: header: file is %d bytes, too short for the magic", len(data))
	}
	if string(data[:4]) != Magic {
		return nil, fmt.Errorf("gguf: header: bad magic %q, want %q (not a GGUF file)", data[:4], Magic)
	}
	d.off = 4
	version, err := d.u32()
	if err != nil {
		return nil, fmt.Errorf("gguf: header: version: %w", err)
	}
	switch {
	case version == 1:
		return nil, fmt.Errorf("gguf: header: version 1 is not supported (it predates 64-bit counts; re-convert the model)")
	case version != 0 && version&0xffff == 0:
		// The magic is always written as the bytes "GGUF", so a big-endian
		// file shows itself by a byte-swapped version such as 0x03000000.
		return nil, fmt.Errorf("gguf: header: version %#x looks byte-swapped: big-endian GGUF is not supported", version)
	case version != 2 && version != 3:
		return nil, fmt.Errorf("gguf: header: version %d is not supported (supported: 2, 3)", version)
	}
	f.Version = version
	nTensors, err := d.u64()
	if err != nil {
		return nil, fmt.Errorf("gguf: header: tensor count: %w", err)
	}
	nKV, err := d.u64()
	if err != nil {
		return nil, fmt.Errorf("gguf: header: metadata count: %w", err)
	}
	// Each KV and each tensor info takes some bytes, so the counts are
	// bounded by what is left; checking both together before reading
	// anything rejects absurd counts with a clear message.
	rem := uint64(d.remaining())
	if nKV > rem/minKVSize {
		return nil, fmt.Errorf("gguf: header: metadata count %d cannot fit in the %d bytes left", nKV, rem)
	}
	if nTensors > rem/minTensorInfoSize {
		return nil, fmt.Errorf("gguf: header: tensor count %d cannot fit in the %d bytes left", nTensors, rem)
	}
	if nKV*minKVSize+nTensors*minTensorInfoSize > rem {
		return nil, fmt.Errorf("gguf: header: %d metadata pairs and %d tensors cannot fit in the %d bytes left", nKV, nTensors, rem)
	}

	// Metadata.
	f.Metadata = make([]KV, 0, nKV)
	f.keys = make(map[string]int, nKV)
	for i := uint64(0); i < nKV; i++ {
		key, err := d.str()
		if err != nil {
			return nil, fmt.Errorf("gguf: metadata pair %d: key: %w", i, err)
		}
		if _, dup := f.keys[key]; dup {
			return nil, fmt.Errorf("gguf: key %q: duplicate key", key)
		}
		t, err := d.u32()
		if err != nil {
			return nil, fmt.Errorf("gguf: key %q: value type: %w", key, err)
		}
		v, err := d.value(ValueType(t), 0)
		if err != nil {
			return nil, fmt.Errorf("gguf: key %q: %w", key, err)
		}
		f.keys[key] = len(f.Metadata)
		f.Metadata = append(f.Metadata, KV{Key: key, Value: v})
	}

	f.Alignment = DefaultAlignment
	if v, ok := f.Get(AlignmentKey); ok {
		a, ok := v.Data.(uint32)
		if !ok {
			return nil, fmt.Errorf("gguf: key %q: type %v, want uint32", AlignmentKey, v.Type)
		}
		if a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("gguf: key %q: alignment %d is not a power of two", AlignmentKey, a)
		}
		f.Alignment = a
	}

	// Tensor infos.
	f.Tensors = make([]TensorInfo, 0, nTensors)
	f.names = make(map[string]int, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		ti, err := d.tensorInfo()
		if err != nil {
			if ti.Name != "" {
				return nil, fmt.Errorf("gguf: tensor %q: %w", ti.Name, err)
			}
			return nil, fmt.Errorf("gguf: tensor info %d: %w", i, err)
		}
		if _, dup := f.names[ti.Name]; dup {
			return nil, fmt.Errorf("gguf: tensor %q: duplicate tensor name", ti.Name)
		}
		if ti.Offset%int64(f.Alignment) != 0 {
			return nil, fmt.Errorf("gguf: tensor %q: offset %d is not a multiple of the alignment %d", ti.Name, ti.Offset, f.Alignment)
		}
		f.names[ti.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}

	start := uint64(d.off)
	if r := start % uint64(f.Alignment); r != 0 {
		start += uint64(f.Alignment) - r
	}
	f.DataOffset = int64(start) // ≤ len(data) + alignment: no overflow
	return f, nil
}

// checkLayout verifies that every tensor lies inside a data section of n
// bytes and that no two tensors share bytes.
func (f *File) checkLayout(n int64) error {
	order := make([]int, 0, len(f.Tensors))
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		if ti.Offset > n || ti.Size > n-ti.Offset {
			return fmt.Errorf("gguf: tensor %q: bytes [%d, %d) of the data section lie past the end of the file (the section has %d bytes)",
				ti.Name, ti.Offset, uint64(ti.Offset)+uint64(ti.Size), n)
		}
		if ti.Size > 0 {
			order = append(order, i)
		}
	}
	sort.Slice(order, func(a, b int) bool { return f.Tensors[order[a]].Offset < f.Tensors[order[b]].Offset })
	for k := 1; k < len(order); k++ {
		prev, cur := &f.Tensors[order[k-1]], &f.Tensors[order[k]]
		if cur.Offset < prev.Offset+prev.Size {
			return fmt.Errorf("gguf: tensor %q: bytes [%d, %d) overlap tensor %q at [%d, %d)",
				cur.Name, cur.Offset, cur.Offset+cur.Size, prev.Name, prev.Offset, prev.Offset+prev.Size)
		}
	}
	return nil
}

// Close releases the memory mapping of a File from Open; tensors obtained
// from it must not be used afterwards. It is a no-op for a File from Parse
// and safe to call more than once.
func (f *File) Close() error {
	if f.release == nil {
		return nil
	}
	r := f.release
	f.release = nil
	f.data, f.closed = nil, true
	return r()
}

// Get returns the value of a metadata key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.keys[key]
	if !ok {
		return Value{}, false
	}
	return f.Metadata[i].Value, true
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Get(key)
	s, ok := v.Data.(string)
	return s, ok
}

// Uint returns a non-negative integer value of any integer type.
func (f *File) Uint(key string) (uint64, bool) {
	v, _ := f.Get(key)
	return v.Uint()
}

// Int returns an integer value of any integer type that fits in int64.
func (f *File) Int(key string) (int64, bool) {
	v, _ := f.Get(key)
	return v.Int()
}

// Float returns a float32, float64 or integer value as float64.
func (f *File) Float(key string) (float64, bool) {
	v, _ := f.Get(key)
	return v.Float()
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	v, _ := f.Get(key)
	b, ok := v.Data.(bool)
	return b, ok
}

// Strings returns an array of strings (e.g. tokenizer.ggml.tokens). The
// slice is shared with the File; do not modify it.
func (f *File) Strings(key string) ([]string, bool) {
	v, _ := f.Get(key)
	s, ok := v.Data.([]string)
	return s, ok
}

// Float32s returns an array of float32 (e.g. tokenizer.ggml.scores). The
// slice is shared with the File; do not modify it.
func (f *File) Float32s(key string) ([]float32, bool) {
	v, _ := f.Get(key)
	s, ok := v.Data.([]float32)
	return s, ok
}

// Int32s returns an integer array as int32 (e.g. tokenizer.ggml.token_type).
// An int32 array is returned as stored (shared with the File; do not modify
// it); arrays of other integer types are converted when every element fits.
func (f *File) Int32s(key string) ([]int32, bool) {
	v, ok := f.Get(key)
	if !ok || v.Type != TypeArray {
		return nil, false
	}
	if s, ok := v.Data.([]int32); ok {
		return s, true
	}
	switch v.ElemType {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeUint64, TypeInt64:
	default:
		return nil, false
	}
	out := make([]int32, v.Len())
	for i := range out {
		x, ok := v.index(i).Int()
		if !ok || x < math.MinInt32 || x > math.MaxInt32 {
			return nil, false
		}
		out[i] = int32(x)
	}
	return out, true
}

// Info returns the tensor info of a tensor.
func (f *File) Info(name string) (*TensorInfo, bool) {
	i, ok := f.names[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// TensorBytes returns the raw bytes of a tensor of any type, aliasing the
// file (a tensor that straddles two byte parts is the copy OpenModel made).
func (f *File) TensorBytes(name string) ([]byte, bool) {
	ti, ok := f.Info(name)
	if !ok || f.closed {
		return nil, false
	}
	if f.split != nil {
		return f.split.views[f.names[name]], true
	}
	return f.data[ti.Offset : ti.Offset+ti.Size : ti.Offset+ti.Size], true
}

// Tensor returns a tensor as a view into the file: Shape is the file's
// dimensions reversed (numpy order), Data aliases the file's bytes. It fails
// if the tensor is absent, if its type is one the engine does not support
// (an *UnsupportedTypeError), or if the File is closed.
func (f *File) Tensor(name string) (*tensor.Tensor, error) {
	ti, ok := f.Info(name)
	if !ok {
		return nil, fmt.Errorf("gguf: tensor %q: not found", name)
	}
	dt, ok := ti.Type.DType()
	if !ok {
		return nil, &UnsupportedTypeError{Tensor: name, Type: ti.Type}
	}
	data, ok := f.TensorBytes(name)
	if !ok {
		return nil, fmt.Errorf("gguf: tensor %q: file is closed", name)
	}
	t := &tensor.Tensor{Name: name, Type: dt, Shape: ti.Shape(), Data: data}
	// The parser's size rules are ggml's; tensor's are the engine's. Should
	// they ever disagree, fail here rather than index out of range later.
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	return t, nil
}

// Lookup returns a tensor as Tensor does, or false if it is absent or cannot
// be used (use Tensor for the reason). It is the model's weight-source
// interface.
func (f *File) Lookup(name string) (*tensor.Tensor, bool) {
	t, err := f.Tensor(name)
	return t, err == nil
}

// decoder reads little-endian GGUF primitives from a buffer, checking every
// length against the bytes that remain.
type decoder struct {
	buf []byte
	off int
}

func (d *decoder) remaining() int { return len(d.buf) - d.off }

// take returns the next n bytes.
func (d *decoder) take(n int) ([]byte, error) {
	if n > d.remaining() {
		return nil, fmt.Errorf("unexpected end of file at byte %d: need %d bytes, %d left", d.off, n, d.remaining())
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b, nil
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.take(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.take(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// str reads a GGUF string. The length is checked before the copy, so a
// hostile length cannot cause a large allocation.
func (d *decoder) str() (string, error) {
	n, err := d.u64()
	if err != nil {
		return "", fmt.Errorf("string length: %w", err)
	}
	if n > uint64(d.remaining()) {
		return "", fmt.Errorf("string length %d exceeds the %d bytes left", n, d.remaining())
	}
	b, _ := d.take(int(n))
	return string(b), nil
}

// value reads one value of type t; depth counts enclosing arrays.
func (d *decoder) value(t ValueType, depth int) (Value, error) {
	if !t.valid() {
		return Value{}, fmt.Errorf("unknown value type %d", uint32(t))
	}
	switch t {
	case TypeString:
		s, err := d.str()
		return Value{Type: t, Data: s}, err
	case TypeArray:
		return d.array(depth + 1)
	}
	b, err := d.take(t.fixedSize())
	if err != nil {
		return Value{}, fmt.Errorf("%v value: %w", t, err)
	}
	var x any
	switch t {
	case TypeUint8:
		x = b[0]
	case TypeInt8:
		x = int8(b[0])
	case TypeUint16:
		x = binary.LittleEndian.Uint16(b)
	case TypeInt16:
		x = int16(binary.LittleEndian.Uint16(b))
	case TypeUint32:
		x = binary.LittleEndian.Uint32(b)
	case TypeInt32:
		x = int32(binary.LittleEndian.Uint32(b))
	case TypeUint64:
		x = binary.LittleEndian.Uint64(b)
	case TypeInt64:
		x = int64(binary.LittleEndian.Uint64(b))
	case TypeFloat32:
		x = math.Float32frombits(binary.LittleEndian.Uint32(b))
	case TypeFloat64:
		x = math.Float64frombits(binary.LittleEndian.Uint64(b))
	case TypeBool:
		if b[0] > 1 {
			return Value{}, fmt.Errorf("bool value %d is neither 0 nor 1", b[0])
		}
		x = b[0] == 1
	}
	return Value{Type: t, Data: x}, nil
}

// array reads an array value: element type, length, elements.
func (d *decoder) array(depth int) (Value, error) {
	if depth > maxNesting {
		return Value{}, fmt.Errorf("arrays nested more than %d deep", maxNesting)
	}
	et, err := d.u32()
	if err != nil {
		return Value{}, fmt.Errorf("array element type: %w", err)
	}
	t := ValueType(et)
	if !t.valid() {
		return Value{}, fmt.Errorf("array of unknown value type %d", et)
	}
	n64, err := d.u64()
	if err != nil {
		return Value{}, fmt.Errorf("array length: %w", err)
	}
	// Every element takes at least minSize bytes; reject the length before
	// allocating a slice sized by it.
	if n64 > uint64(d.remaining()/t.minSize()) {
		return Value{}, fmt.Errorf("array of %d %v cannot fit in the %d bytes left", n64, t, d.remaining())
	}
	n := int(n64)
	v := Value{Type: TypeArray, ElemType: t}
	if sz := t.fixedSize(); sz > 0 {
		b, _ := d.take(n * sz) // fits: checked above
		v.Data = decodeFixed(t, b, n)
		if t == TypeBool {
			for i, c := range b {
				if c > 1 {
					return Value{}, fmt.Errorf("array element %d: bool value %d is neither 0 nor 1", i, c)
				}
			}
		}
		return v, nil
	}
	switch t {
	case TypeString:
		a := make([]string, n)
		for i := range a {
			if a[i], err = d.str(); err != nil {
				return Value{}, fmt.Errorf("array element %d: %w", i, err)
			}
		}
		v.Data = a
	case TypeArray:
		a := make([]Value, n)
		for i := range a {
			if a[i], err = d.array(depth + 1); err != nil {
				return Value{}, fmt.Errorf("array element %d: %w", i, err)
			}
		}
		v.Data = a
	}
	return v, nil
}

// decodeFixed converts n little-endian elements of the fixed-size type t.
func decodeFixed(t ValueType, b []byte, n int) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return append([]uint8(nil), b...)
	case TypeInt8:
		return decodeEach(b, n, 1, func(e []byte) int8 { return int8(e[0]) })
	case TypeBool:
		return decodeEach(b, n, 1, func(e []byte) bool { return e[0] == 1 })
	case TypeUint16:
		return decodeEach(b, n, 2, le.Uint16)
	case TypeInt16:
		return decodeEach(b, n, 2, func(e []byte) int16 { return int16(le.Uint16(e)) })
	case TypeUint32:
		return decodeEach(b, n, 4, le.Uint32)
	case TypeInt32:
		return decodeEach(b, n, 4, func(e []byte) int32 { return int32(le.Uint32(e)) })
	case TypeFloat32:
		return decodeEach(b, n, 4, func(e []byte) float32 { return math.Float32frombits(le.Uint32(e)) })
	case TypeUint64:
		return decodeEach(b, n, 8, le.Uint64)
	case TypeInt64:
		return decodeEach(b, n, 8, func(e []byte) int64 { return int64(le.Uint64(e)) })
	case TypeFloat64:
		return decodeEach(b, n, 8, func(e []byte) float64 { return math.Float64frombits(le.Uint64(e)) })
	}
	return nil
}

// decodeEach decodes n elements of size bytes each from b with f.
func decodeEach[T any](b []byte, n, size int, f func([]byte) T) []T {
	a := make([]T, n)
	for i := range a {
		a[i] = f(b[size*i : size*i+size])
	}
	return a
}

func (d *decoder) tensorInfo() (TensorInfo, error) {
	var ti TensorInfo
	name, err := d.str()
	if err != nil {
		return ti, fmt.Errorf("name: %w", err)
	}
	ti.Name = name
	nd, err := d.u32()
	if err != nil {
		return ti, fmt.Errorf("n_dims: %w", err)
	}
	if nd > MaxDims {
		return ti, fmt.Errorf("%d dimensions, more than the %d ggml allows", nd, MaxDims)
	}
	ti.Dims = make([]int64, nd)
	for j := range ti.Dims {
		x, err := d.u64()
		if err != nil {
			return ti, fmt.Errorf("dimension %d: %w", j, err)
		}
		// ggml's ne are int64; the numpy shape needs int. A dimension can
		// exceed the file size only alongside a zero one, but it must still
		// convert.
		if x > math.MaxInt {
			return ti, fmt.Errorf("dimension %d is %d, too large", j, x)
		}
		ti.Dims[j] = int64(x)
	}
	typ, err := d.u32()
	if err != nil {
		return ti, fmt.Errorf("type: %w", err)
	}
	ti.Type = GGMLType(typ)
	if !ti.Type.Known() {
		if n, ok := removedTypes[ti.Type]; ok {
			return ti, fmt.Errorf("type %d (%s) was removed from GGUF by ggml", typ, n)
		}
		return ti, fmt.Errorf("unknown ggml type %d", typ)
	}
	off, err := d.u64()
	if err != nil {
		return ti, fmt.Errorf("offset: %w", err)
	}
	if off > math.MaxInt64 {
		return ti, fmt.Errorf("offset %d is too large", off)
	}
	ti.Offset = int64(off)
	if ti.Size, err = TensorSize(ti.Type, ti.Dims); err != nil {
		return ti, err
	}
	return ti, nil
}

package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/grok-go/grok/internal/safefile"
	"github.com/grok-go/grok/tensor"
)

// Writer builds a GGUF v3 file. Metadata and tensors are written in the
// order they were added; tensor data is produced by callbacks during WriteTo,
// one tensor at a time, so a converter holds at most one tensor in memory.
//
// The Add methods report invalid input at once; the first such error is also
// remembered and returned by WriteTo, so a caller that checks only WriteTo
// cannot write a file that silently lacks an entry.
type Writer struct {
	kvs     []KV
	keys    map[string]bool
	tensors []wtensor
	names   map[string]bool
	err     error
}

// wtensor is a tensor waiting to be written.
type wtensor struct {
	name  string
	typ   GGMLType
	ne    []int64
	size  int64
	write func(io.Writer) error
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer {
	return &Writer{keys: map[string]bool{}, names: map[string]bool{}}
}

// fail records the first error of an Add call and returns err.
func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

// AddKV appends a metadata pair. value is a Value (as found in
// File.Metadata, which lets a parsed file be copied with its exact types) or
// one of the Go types uint8, int8, uint16, int16, uint32, int32, uint64,
// int64, float32, float64, bool, string, a slice of one of them ([]byte is
// an array of uint8), or []Value for an array of arrays. Plain int and uint
// are refused: GGUF readers such as llama.cpp check the stored width, so the
// caller must choose it. Slices are read during WriteTo, not copied.
//
// general.alignment, if given, must be a uint32 power of two; it sets the
// alignment of the data section.
func (w *Writer) AddKV(key string, value any) error {
	if w.keys[key] {
		return w.fail(fmt.Errorf("gguf: key %q: duplicate key", key))
	}
	v, err := toValue(value)
	if err != nil {
		return w.fail(fmt.Errorf("gguf: key %q: %w", key, err))
	}
	if key == AlignmentKey {
		a, ok := v.Data.(uint32)
		if !ok {
			return w.fail(fmt.Errorf("gguf: key %q: type %v, want uint32", key, v.Type))
		}
		if a == 0 || a&(a-1) != 0 {
			return w.fail(fmt.Errorf("gguf: key %q: alignment %d is not a power of two", key, a))
		}
	}
	w.keys[key] = true
	w.kvs = append(w.kvs, KV{Key: key, Value: v})
	return nil
}

// AddTensor appends a tensor whose bytes are in memory. shape is in numpy
// order (outermost first) and data must hold exactly the bytes that dt and
// shape imply. data is read during WriteTo, not copied.
func (w *Writer) AddTensor(name string, dt tensor.DType, shape []int, data []byte) error {
	return w.AddTensorFunc(name, dt, shape, int64(len(data)), func(out io.Writer) error {
		_, err := out.Write(data)
		return err
	})
}

// AddTensorFunc appends a tensor whose bytes write produces during WriteTo.
// shape is in numpy order; size is the declared byte size, which must be
// what dt and shape imply and exactly what write writes.
func (w *Writer) AddTensorFunc(name string, dt tensor.DType, shape []int, size int64, write func(io.Writer) error) error {
	typ, err := TypeOf(dt)
	if err != nil {
		return w.fail(fmt.Errorf("gguf: tensor %q: %w", name, err))
	}
	ne := make([]int64, len(shape))
	for i, d := range shape {
		ne[len(ne)-1-i] = int64(d)
	}
	return w.AddGGMLTensor(name, typ, ne, size, write)
}

// AddGGMLTensor appends a tensor of any known ggml type, with dimensions ne
// in ggml order (innermost first), as TensorInfo holds them. It serves to
// copy tensors the engine cannot decode; size and write are as for
// AddTensorFunc.
func (w *Writer) AddGGMLTensor(name string, typ GGMLType, ne []int64, size int64, write func(io.Writer) error) error {
	switch {
	case name == "":
		return w.fail(errors.New("gguf: tensor with an empty name"))
	case len(name) > maxNameLen:
		return w.fail(fmt.Errorf("gguf: tensor %q: name is longer than the %d bytes ggml allows", name, maxNameLen))
	case w.names[name]:
		return w.fail(fmt.Errorf("gguf: tensor %q: duplicate tensor name", name))
	case len(ne) > MaxDims:
		return w.fail(fmt.Errorf("gguf: tensor %q: %d dimensions, more than the %d ggml allows", name, len(ne), MaxDims))
	case write == nil:
		return w.fail(fmt.Errorf("gguf: tensor %q: nil write function", name))
	}
	want, err := TensorSize(typ, ne)
	if err != nil {
		return w.fail(fmt.Errorf("gguf: tensor %q: %w", name, err))
	}
	if size != want {
		return w.fail(fmt.Errorf("gguf: tensor %q: declared size %d, but %v with dimensions %v takes %d bytes", name, size, typ, ne, want))
	}
	w.names[name] = true
	w.tensors = append(w.tensors, wtensor{name: name, typ: typ, ne: append([]int64(nil), ne...), size: size, write: write})
	return nil
}

// AddTensorOf appends f's tensor ti as it is stored (type, dimensions and
// bytes, written from f's mapped data), so that a file can be copied with
// other metadata. f must stay open until the writer has written.
func (w *Writer) AddTensorOf(f *File, ti TensorInfo) error {
	data, ok := f.TensorBytes(ti.Name)
	if !ok {
		return w.fail(fmt.Errorf("gguf: tensor %q is not in the file (or the file is closed)", ti.Name))
	}
	return w.AddGGMLTensor(ti.Name, ti.Type, ti.Dims, ti.Size, func(out io.Writer) error {
		_, err := out.Write(data)
		return err
	})
}

// alignment returns the data alignment the file will use.
func (w *Writer) alignment() int64 {
	for _, kv := range w.kvs {
		if kv.Key == AlignmentKey {
			return int64(kv.Value.Data.(uint32)) // checked by AddKV
		}
	}
	return DefaultAlignment
}

// WriteTo writes the file to out and returns the number of bytes written.
// Every tensor starts at a multiple of the alignment and is followed by zero
// padding up to the next multiple, as ggml and gguf-py lay files out.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if w.err != nil {
		return 0, w.err
	}
	align := w.alignment()

	// Header, metadata and tensor infos are small next to the data (the
	// largest part is the vocabulary), so they are built in memory.
	le := binary.LittleEndian
	b := []byte(Magic)
	b = le.AppendUint32(b, Version)
	b = le.AppendUint64(b, uint64(len(w.tensors)))
	b = le.AppendUint64(b, uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		b = appendString(b, kv.Key)
		b = le.AppendUint32(b, uint32(kv.Value.Type))
		b = appendValue(b, kv.Value)
	}
	var off int64
	for _, t := range w.tensors {
		b = appendString(b, t.name)
		b = le.AppendUint32(b, uint32(len(t.ne)))
		for _, d := range t.ne {
			b = le.AppendUint64(b, uint64(d))
		}
		b = le.AppendUint32(b, uint32(t.typ))
		b = le.AppendUint64(b, uint64(off))
		if t.size > math.MaxInt64-off-align {
			return 0, fmt.Errorf("gguf: tensor %q: data section exceeds 2^63 bytes", t.name)
		}
		off += pad(t.size, align)
	}

	cw := &countWriter{w: out}
	if _, err := cw.Write(b); err != nil {
		return cw.n, fmt.Errorf("gguf: writing header: %w", err)
	}
	if err := writeZeros(cw, pad(int64(len(b)), align)-int64(len(b))); err != nil {
		return cw.n, fmt.Errorf("gguf: writing header: %w", err)
	}
	for _, t := range w.tensors {
		lw := &limitWriter{w: cw, left: t.size}
		if err := t.write(lw); err != nil {
			return cw.n, fmt.Errorf("gguf: tensor %q: %w", t.name, err)
		}
		if lw.left != 0 {
			return cw.n, fmt.Errorf("gguf: tensor %q: wrote %d bytes, declared %d", t.name, t.size-lw.left, t.size)
		}
		if err := writeZeros(cw, pad(t.size, align)-t.size); err != nil {
			return cw.n, fmt.Errorf("gguf: tensor %q: padding: %w", t.name, err)
		}
	}
	return cw.n, nil
}

// WriteFile writes the file to path. It writes a temporary file in the same
// directory, syncs it and renames it into place, so path never holds a
// partial file, even after a crash; a killed run's temporary file is removed
// by the next write of the same path.
func (w *Writer) WriteFile(path string) (err error) {
	if w.err != nil {
		return w.err
	}
	tmp, err := safefile.Create(path)
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	defer tmp.Abort()
	bw := &chunkWriter{w: tmp, buf: make([]byte, pageChunk)}
	if _, err = w.WriteTo(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	if err = tmp.Commit(); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// pageChunk is the size of WriteFile's writes: whole 2 MiB pieces at 2 MiB
// offsets, so that Linux keeps the new file in the page cache as 2 MiB
// folios, which a model's mapping then maps with 2 MiB pages; written a
// MiB at a time it stayed in small folios, read back a fifth slower, until
// it left the page cache (bench/README.md).
const pageChunk = 2 << 20

// chunkWriter passes what is written to w in whole chunks of len(buf),
// from the first byte on, and the rest at Flush.
type chunkWriter struct {
	w   io.Writer
	buf []byte
	n   int
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		k := copy(c.buf[c.n:], p)
		c.n += k
		p = p[k:]
		written += k
		if c.n == len(c.buf) {
			if err := c.Flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// Flush writes the buffered bytes.
func (c *chunkWriter) Flush() error {
	if c.n == 0 {
		return nil
	}
	_, err := c.w.Write(c.buf[:c.n])
	c.n = 0
	return err
}

// pad rounds n up to a multiple of align (a power of two).
func pad(n, align int64) int64 { return (n + align - 1) &^ (align - 1) }

// zeros is a source of padding bytes. Padding is written in pieces of this
// size, so that a large general.alignment costs no large allocation.
var zeros [4096]byte

// writeZeros writes n zero bytes.
func writeZeros(w io.Writer, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// limitWriter passes at most left bytes through and fails on more, so that a
// tensor callback that writes too much cannot shift every later tensor.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, fmt.Errorf("write of %d bytes exceeds the declared size by %d", len(p), int64(len(p))-l.left)
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}

func appendString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// appendValue encodes the payload of v (not its type code). v has been
// checked by toValue.
func appendValue(b []byte, v Value) []byte {
	le := binary.LittleEndian
	switch x := v.Data.(type) {
	case uint8:
		return append(b, x)
	case int8:
		return append(b, byte(x))
	case bool:
		if x {
			return append(b, 1)
		}
		return append(b, 0)
	case uint16:
		return le.AppendUint16(b, x)
	case int16:
		return le.AppendUint16(b, uint16(x))
	case uint32:
		return le.AppendUint32(b, x)
	case int32:
		return le.AppendUint32(b, uint32(x))
	case float32:
		return le.AppendUint32(b, math.Float32bits(x))
	case uint64:
		return le.AppendUint64(b, x)
	case int64:
		return le.AppendUint64(b, uint64(x))
	case float64:
		return le.AppendUint64(b, math.Float64bits(x))
	case string:
		return appendString(b, x)
	}
	// An array: element type, length, elements.
	n := v.Len()
	b = le.AppendUint32(b, uint32(v.ElemType))
	b = le.AppendUint64(b, uint64(n))
	if a, ok := v.Data.([]Value); ok {
		// Each element is an array payload of its own: no further type
		// code, since the outer element type already says "array".
		for _, e := range a {
			b = appendValue(b, e)
		}
		return b
	}
	for i := 0; i < n; i++ {
		b = appendValue(b, v.index(i))
	}
	return b
}

// toValue converts a Go value or a Value to a checked Value.
func toValue(x any) (Value, error) {
	if v, ok := x.(Value); ok {
		return v, checkValue(v, 0)
	}
	var v Value
	switch x.(type) {
	case uint8:
		v.Type = TypeUint8
	case int8:
		v.Type = TypeInt8
	case uint16:
		v.Type = TypeUint16
	case int16:
		v.Type = TypeInt16
	case uint32:
		v.Type = TypeUint32
	case int32:
		v.Type = TypeInt32
	case uint64:
		v.Type = TypeUint64
	case int64:
		v.Type = TypeInt64
	case float32:
		v.Type = TypeFloat32
	case float64:
		v.Type = TypeFloat64
	case bool:
		v.Type = TypeBool
	case string:
		v.Type = TypeString
	case int, uint:
		return v, fmt.Errorf("value %v has type %T; use a sized integer type", x, x)
	default:
		et, ok := sliceElemType(x)
		if !ok {
			return v, fmt.Errorf("unsupported value type %T", x)
		}
		v.Type, v.ElemType = TypeArray, et
	}
	v.Data = x
	return v, checkValue(v, 0)
}

// sliceElemType returns the GGUF element type of a supported slice.
func sliceElemType(x any) (ValueType, bool) {
	switch x.(type) {
	case []uint8:
		return TypeUint8, true
	case []int8:
		return TypeInt8, true
	case []uint16:
		return TypeUint16, true
	case []int16:
		return TypeInt16, true
	case []uint32:
		return TypeUint32, true
	case []int32:
		return TypeInt32, true
	case []uint64:
		return TypeUint64, true
	case []int64:
		return TypeInt64, true
	case []float32:
		return TypeFloat32, true
	case []float64:
		return TypeFloat64, true
	case []bool:
		return TypeBool, true
	case []string:
		return TypeString, true
	case []Value:
		return TypeArray, true
	}
	return 0, false
}

// scalarType returns the GGUF type of a supported scalar.
func scalarType(x any) (ValueType, bool) {
	switch x.(type) {
	case uint8:
		return TypeUint8, true
	case int8:
		return TypeInt8, true
	case uint16:
		return TypeUint16, true
	case int16:
		return TypeInt16, true
	case uint32:
		return TypeUint32, true
	case int32:
		return TypeInt32, true
	case uint64:
		return TypeUint64, true
	case int64:
		return TypeInt64, true
	case float32:
		return TypeFloat32, true
	case float64:
		return TypeFloat64, true
	case bool:
		return TypeBool, true
	case string:
		return TypeString, true
	}
	return 0, false
}

// checkValue verifies that a Value's types agree with its Go data, so that
// encoding cannot go wrong, and that arrays nest no deeper than the reader
// accepts.
func checkValue(v Value, depth int) error {
	if v.Type != TypeArray {
		t, ok := scalarType(v.Data)
		if !ok || t != v.Type {
			return fmt.Errorf("value of type %v holds Go %T", v.Type, v.Data)
		}
		return nil
	}
	if depth >= maxNesting {
		return fmt.Errorf("arrays nested more than %d deep", maxNesting)
	}
	et, ok := sliceElemType(v.Data)
	if !ok || et != v.ElemType {
		return fmt.Errorf("array of %v holds Go %T", v.ElemType, v.Data)
	}
	if a, ok := v.Data.([]Value); ok {
		for i, e := range a {
			if e.Type != TypeArray {
				return fmt.Errorf("array element %d: %v in an array of arrays", i, e.Type)
			}
			if err := checkValue(e, depth+1); err != nil {
				return fmt.Errorf("array element %d: %w", i, err)
			}
		}
	}
	return nil
}

package gguf

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// write serialises w, failing the test on error.
func write(t testing.TB, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// smallFile builds a small valid file with metadata of several types and
// three tensors. The last tensor's size is a multiple of the alignment, so
// the file has no trailing padding and every proper prefix is invalid.
func smallFile(t testing.TB) []byte {
	t.Helper()
	w := NewWriter()
	must(t, w.AddKV("general.architecture", "grok"))
	must(t, w.AddKV("grok.block_count", uint32(2)))
	must(t, w.AddKV("grok.rope.freq_base", float32(10000)))
	must(t, w.AddKV("tokenizer.ggml.add_bos_token", false))
	must(t, w.AddKV("tokenizer.ggml.tokens", []string{"<pad>", "a", "bc"}))
	must(t, w.AddKV("tokenizer.ggml.scores", []float32{0, -1, -2.5}))
	must(t, w.AddKV("tokenizer.ggml.token_type", []int32{3, 1, 1}))
	must(t, w.AddKV("nested", []Value{{Type: TypeArray, ElemType: TypeUint16, Data: []uint16{7}}}))
	must(t, w.AddTensor("norm", tensor.F32, []int{3}, f32bytes(1, 2, 3)))
	must(t, w.AddTensor("w", tensor.F16, []int{2, 4}, make([]byte, 16)))
	must(t, w.AddTensor("q", tensor.Q8_0, []int{2, 32}, make([]byte, 2*34)))
	// 68 bytes of Q8_0 are padded to 96; end with a tensor of 32 bytes.
	must(t, w.AddTensor("last", tensor.I8, []int{32}, bytes.Repeat([]byte{0x81}, 32)))
	return write(t, w)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func f32bytes(v ...float32) []byte {
	b, err := tensor.EncodeRow(nil, tensor.F32, v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestRoundTripValues(t *testing.T) {
	tests := []struct {
		name  string
		value any
		want  Value
	}{
		{"uint8", uint8(200), Value{Type: TypeUint8, Data: uint8(200)}},
		{"int8", int8(-100), Value{Type: TypeInt8, Data: int8(-100)}},
		{"uint16", uint16(60000), Value{Type: TypeUint16, Data: uint16(60000)}},
		{"int16", int16(-30000), Value{Type: TypeInt16, Data: int16(-30000)}},
		{"uint32", uint32(4e9), Value{Type: TypeUint32, Data: uint32(4e9)}},
		{"int32", int32(-2e9), Value{Type: TypeInt32, Data: int32(-2e9)}},
		{"uint64", uint64(math.MaxUint64), Value{Type: TypeUint64, Data: uint64(math.MaxUint64)}},
		{"int64", int64(math.MinInt64), Value{Type: TypeInt64, Data: int64(math.MinInt64)}},
		{"float32", float32(0.2), Value{Type: TypeFloat32, Data: float32(0.2)}},
		{"float64", 1e-300, Value{Type: TypeFloat64, Data: 1e-300}},
		{"true", true, Value{Type: TypeBool, Data: true}},
		{"false", false, Value{Type: TypeBool, Data: false}},
		{"string", "héllo\x00world", Value{Type: TypeString, Data: "héllo\x00world"}},
		{"empty string", "", Value{Type: TypeString, Data: ""}},
		{"[]uint8", []byte{1, 2, 255}, Value{Type: TypeArray, ElemType: TypeUint8, Data: []uint8{1, 2, 255}}},
		{"[]int8", []int8{-1, 2}, Value{Type: TypeArray, ElemType: TypeInt8, Data: []int8{-1, 2}}},
		{"[]uint16", []uint16{1, 65535}, Value{Type: TypeArray, ElemType: TypeUint16, Data: []uint16{1, 65535}}},
		{"[]int16", []int16{-1, 2}, Value{Type: TypeArray, ElemType: TypeInt16, Data: []int16{-1, 2}}},
		{"[]uint32", []uint32{1, 2, 3}, Value{Type: TypeArray, ElemType: TypeUint32, Data: []uint32{1, 2, 3}}},
		{"[]int32", []int32{-5, 6}, Value{Type: TypeArray, ElemType: TypeInt32, Data: []int32{-5, 6}}},
		{"[]uint64", []uint64{1 << 63}, Value{Type: TypeArray, ElemType: TypeUint64, Data: []uint64{1 << 63}}},
		{"[]int64", []int64{-1 << 62}, Value{Type: TypeArray, ElemType: TypeInt64, Data: []int64{-1 << 62}}},
		{"[]float32", []float32{1.5, -2}, Value{Type: TypeArray, ElemType: TypeFloat32, Data: []float32{1.5, -2}}},
		{"[]float64", []float64{math.Pi}, Value{Type: TypeArray, ElemType: TypeFloat64, Data: []float64{math.Pi}}},
		{"[]bool", []bool{true, false, true}, Value{Type: TypeArray, ElemType: TypeBool, Data: []bool{true, false, true}}},
		{"[]string", []string{"a", "", "ccc"}, Value{Type: TypeArray, ElemType: TypeString, Data: []string{"a", "", "ccc"}}},
		{"empty []string", []string{}, Value{Type: TypeArray, ElemType: TypeString, Data: []string{}}},
		{"empty []int32", []int32{}, Value{Type: TypeArray, ElemType: TypeInt32, Data: []int32{}}},
		{"nested", []Value{
			{Type: TypeArray, ElemType: TypeInt32, Data: []int32{1, 2}},
			{Type: TypeArray, ElemType: TypeString, Data: []string{"x"}},
			{Type: TypeArray, ElemType: TypeArray, Data: []Value{{Type: TypeArray, ElemType: TypeBool, Data: []bool{true}}}},
		}, Value{Type: TypeArray, ElemType: TypeArray, Data: []Value{
			{Type: TypeArray, ElemType: TypeInt32, Data: []int32{1, 2}},
			{Type: TypeArray, ElemType: TypeString, Data: []string{"x"}},
			{Type: TypeArray, ElemType: TypeArray, Data: []Value{{Type: TypeArray, ElemType: TypeBool, Data: []bool{true}}}},
		}}},
		{"Value", Value{Type: TypeUint32, Data: uint32(7)}, Value{Type: TypeUint32, Data: uint32(7)}},
	}
	// All values in one file, so that each is also parsed after the others.
	w := NewWriter()
	for _, tt := range tests {
		if err := w.AddKV(tt.name, tt.value); err != nil {
			t.Fatalf("AddKV(%s): %v", tt.name, err)
		}
	}
	f, err := Parse(write(t, w))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || len(f.Metadata) != len(tests) || len(f.Tensors) != 0 {
		t.Fatalf("version %d, %d KVs, %d tensors", f.Version, len(f.Metadata), len(f.Tensors))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kv := f.Metadata[i]
			if kv.Key != tt.name {
				t.Fatalf("key %d is %q, want %q (order not kept)", i, kv.Key, tt.name)
			}
			if !reflect.DeepEqual(kv.Value, tt.want) {
				t.Errorf("got %#v, want %#v", kv.Value, tt.want)
			}
			if v, ok := f.Get(tt.name); !ok || !reflect.DeepEqual(v, tt.want) {
				t.Errorf("Get = %#v, %v", v, ok)
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	w := NewWriter()
	for _, kv := range []struct {
		k string
		v any
	}{
		{"s", "text"}, {"u8", uint8(5)}, {"i8neg", int8(-3)}, {"u64big", uint64(math.MaxUint64)},
		{"i32", int32(42)}, {"f32", float32(0.5)}, {"f64", 0.25}, {"b", true},
		{"tokens", []string{"a", "b"}}, {"scores", []float32{1, 2}}, {"types", []int32{1, 6}},
		{"types8", []uint8{1, 255}}, {"types64", []int64{1, 1 << 40}},
	} {
		must(t, w.AddKV(kv.k, kv.v))
	}
	f, err := Parse(write(t, w))
	must(t, err)

	check := func(name string, got, want any, ok, wantOK bool) {
		t.Helper()
		if ok != wantOK || (ok && !reflect.DeepEqual(got, want)) {
			t.Errorf("%s = %v, %v; want %v, %v", name, got, ok, want, wantOK)
		}
	}
	s, ok := f.String("s")
	check(`String("s")`, s, "text", ok, true)
	_, ok = f.String("u8")
	check(`String("u8")`, nil, nil, ok, false)
	u, ok := f.Uint("u8")
	check(`Uint("u8")`, u, uint64(5), ok, true)
	u, ok = f.Uint("i32")
	check(`Uint("i32")`, u, uint64(42), ok, true)
	_, ok = f.Uint("i8neg")
	check(`Uint("i8neg")`, nil, nil, ok, false)
	u, ok = f.Uint("u64big")
	check(`Uint("u64big")`, u, uint64(math.MaxUint64), ok, true)
	i, ok := f.Int("i8neg")
	check(`Int("i8neg")`, i, int64(-3), ok, true)
	_, ok = f.Int("u64big")
	check(`Int("u64big")`, nil, nil, ok, false)
	_, ok = f.Int("f32")
	check(`Int("f32")`, nil, nil, ok, false)
	x, ok := f.Float("f32")
	check(`Float("f32")`, x, 0.5, ok, true)
	x, ok = f.Float("f64")
	check(`Float("f64")`, x, 0.25, ok, true)
	x, ok = f.Float("i32")
	check(`Float("i32")`, x, 42.0, ok, true)
	_, ok = f.Float("s")
	check(`Float("s")`, nil, nil, ok, false)
	b, ok := f.Bool("b")
	check(`Bool("b")`, b, true, ok, true)
	_, ok = f.Bool("u8")
	check(`Bool("u8")`, nil, nil, ok, false)
	ss, ok := f.Strings("tokens")
	check(`Strings("tokens")`, ss, []string{"a", "b"}, ok, true)
	fs, ok := f.Float32s("scores")
	check(`Float32s("scores")`, fs, []float32{1, 2}, ok, true)
	is, ok := f.Int32s("types")
	check(`Int32s("types")`, is, []int32{1, 6}, ok, true)
	is, ok = f.Int32s("types8")
	check(`Int32s("types8")`, is, []int32{1, 255}, ok, true)
	_, ok = f.Int32s("types64")
	check(`Int32s("types64")`, nil, nil, ok, false)
	_, ok = f.Int32s("scores")
	check(`Int32s("scores")`, nil, nil, ok, false)
	_, ok = f.Strings("missing")
	check(`Strings("missing")`, nil, nil, ok, false)
	_, ok = f.Uint("missing")
	check(`Uint("missing")`, nil, nil, ok, false)
}

func TestRoundTripTensors(t *testing.T) {
	vals := make([]float32, 2*3*64)
	for i := range vals {
		vals[i] = float32(i%97)/7 - 6
	}
	enc := func(dt tensor.DType) []byte {
		b, err := tensor.EncodeRow(nil, dt, vals)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	i8 := make([]byte, len(vals))
	for i := range i8 {
		i8[i] = byte(i * 7)
	}
	tests := []struct {
		name  string
		dt    tensor.DType
		shape []int
		data  []byte
		ggml  GGMLType
		ne    []int64
	}{
		{"f32", tensor.F32, []int{2, 3, 64}, enc(tensor.F32), GGMLTypeF32, []int64{64, 3, 2}},
		{"f16", tensor.F16, []int{6, 64}, enc(tensor.F16), GGMLTypeF16, []int64{64, 6}},
		{"bf16", tensor.BF16, []int{384}, enc(tensor.BF16), GGMLTypeBF16, []int64{384}},
		{"q8_0", tensor.Q8_0, []int{1, 2, 3, 64}, enc(tensor.Q8_0), GGMLTypeQ8_0, []int64{64, 3, 2, 1}},
		{"i8", tensor.I8, []int{3, 128}, i8, GGMLTypeI8, []int64{128, 3}},
		{"scalar", tensor.F32, []int{}, f32bytes(7), GGMLTypeF32, []int64{}},
		{"empty", tensor.F16, []int{0, 5}, nil, GGMLTypeF16, []int64{5, 0}},
	}
	w := NewWriter()
	for i, tt := range tests {
		if i%2 == 0 {
			must(t, w.AddTensor(tt.name, tt.dt, tt.shape, tt.data))
			continue
		}
		// The streaming form, writing in two pieces.
		data := tt.data
		must(t, w.AddTensorFunc(tt.name, tt.dt, tt.shape, int64(len(data)), func(out io.Writer) error {
			if _, err := out.Write(data[:len(data)/2]); err != nil {
				return err
			}
			_, err := out.Write(data[len(data)/2:])
			return err
		}))
	}
	f, err := Parse(write(t, w))
	must(t, err)
	if f.DataOffset%DefaultAlignment != 0 {
		t.Errorf("data section at %d, not aligned", f.DataOffset)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ti := f.Tensors[i]
			if ti.Name != tt.name || ti.Type != tt.ggml || !reflect.DeepEqual(ti.Dims, tt.ne) || ti.Size != int64(len(tt.data)) {
				t.Errorf("info %+v, want %s %v %v size %d", ti, tt.name, tt.ggml, tt.ne, len(tt.data))
			}
			if ti.Offset%DefaultAlignment != 0 {
				t.Errorf("offset %d not aligned", ti.Offset)
			}
			x, ok := f.Lookup(tt.name)
			if !ok {
				_, err := f.Tensor(tt.name)
				t.Fatalf("Lookup failed: %v", err)
			}
			if x.Name != tt.name || x.Type != tt.dt || !reflect.DeepEqual(x.Shape, tt.shape) || x.Transposed || x.Scales != nil {
				t.Errorf("tensor %s %v %v transposed=%v, want %v %v", x.Name, x.Type, x.Shape, x.Transposed, tt.dt, tt.shape)
			}
			if !bytes.Equal(x.Data, tt.data) {
				t.Errorf("data differs")
			}
			if cap(x.Data) != len(x.Data) {
				t.Errorf("data has spare capacity %d: an append would overwrite the next tensor", cap(x.Data)-len(x.Data))
			}
		})
	}
	// Data is a view, not a copy: decoding the F32 tensor gives the values.
	x, _ := f.Lookup("f32")
	got, err := x.Float32s()
	must(t, err)
	if !reflect.DeepEqual(got, vals) {
		t.Error("f32 values differ")
	}
	if _, ok := f.Lookup("missing"); ok {
		t.Error("Lookup of a missing tensor succeeded")
	}
	if _, err := f.Tensor("missing"); err == nil || !strings.Contains(err.Error(), `gguf: tensor "missing": not found`) {
		t.Errorf("Tensor(missing) error = %v", err)
	}
}

// TestAlignment checks that general.alignment sets the layout and that the
// data section and every tensor start on it.
func TestAlignment(t *testing.T) {
	for _, align := range []uint32{1, 8, 64, 4096} {
		w := NewWriter()
		must(t, w.AddKV("general.alignment", align))
		must(t, w.AddTensor("a", tensor.F32, []int{3}, make([]byte, 12)))
		must(t, w.AddTensor("b", tensor.I8, []int{5}, make([]byte, 5)))
		must(t, w.AddTensor("c", tensor.F16, []int{1}, make([]byte, 2)))
		b := write(t, w)
		f, err := Parse(b)
		must(t, err)
		if f.Alignment != align || f.DataOffset%int64(align) != 0 {
			t.Errorf("align %d: file alignment %d, data at %d", align, f.Alignment, f.DataOffset)
		}
		var off int64
		for _, ti := range f.Tensors {
			if ti.Offset != off {
				t.Errorf("align %d: tensor %s at %d, want %d", align, ti.Name, ti.Offset, off)
			}
			off = pad(off+ti.Size, int64(align))
		}
		if int64(len(b)) != f.DataOffset+off {
			t.Errorf("align %d: file is %d bytes, want %d (padded after the last tensor)", align, len(b), f.DataOffset+off)
		}
	}
}

func TestWriterErrors(t *testing.T) {
	tests := []struct {
		name string
		add  func(w *Writer) error
		want string
	}{
		{"duplicate key", func(w *Writer) error {
			w.AddKV("k", uint8(1))
			return w.AddKV("k", uint8(2))
		}, `gguf: key "k": duplicate key`},
		{"int", func(w *Writer) error { return w.AddKV("k", 3) }, "use a sized integer type"},
		{"uint", func(w *Writer) error { return w.AddKV("k", uint(3)) }, "use a sized integer type"},
		{"map", func(w *Writer) error { return w.AddKV("k", map[string]int{}) }, "unsupported value type"},
		{"inconsistent Value", func(w *Writer) error {
			return w.AddKV("k", Value{Type: TypeUint32, Data: int32(1)})
		}, "value of type uint32 holds Go int32"},
		{"inconsistent array", func(w *Writer) error {
			return w.AddKV("k", Value{Type: TypeArray, ElemType: TypeInt32, Data: []float32{1}})
		}, "array of int32 holds Go []float32"},
		{"scalar in nested", func(w *Writer) error {
			return w.AddKV("k", []Value{{Type: TypeUint8, Data: uint8(1)}})
		}, "uint8 in an array of arrays"},
		{"too deep", func(w *Writer) error {
			v := Value{Type: TypeArray, ElemType: TypeUint8, Data: []uint8{}}
			for i := 0; i < maxNesting; i++ {
				v = Value{Type: TypeArray, ElemType: TypeArray, Data: []Value{v}}
			}
			return w.AddKV("k", v)
		}, "nested more than"},
		{"alignment type", func(w *Writer) error { return w.AddKV(AlignmentKey, uint64(32)) }, "want uint32"},
		{"alignment value", func(w *Writer) error { return w.AddKV(AlignmentKey, uint32(48)) }, "not a power of two"},
		{"alignment zero", func(w *Writer) error { return w.AddKV(AlignmentKey, uint32(0)) }, "not a power of two"},
		{"size mismatch", func(w *Writer) error {
			return w.AddTensor("t", tensor.F32, []int{2, 3}, make([]byte, 20))
		}, `gguf: tensor "t": declared size 20, but F32 with dimensions [3 2] takes 24 bytes`},
		{"q8_0 partial block", func(w *Writer) error {
			return w.AddTensor("t", tensor.Q8_0, []int{2, 40}, make([]byte, 100))
		}, "not a whole number of Q8_0 blocks"},
		{"negative dim", func(w *Writer) error {
			return w.AddTensor("t", tensor.F32, []int{-1}, nil)
		}, "negative dimension"},
		{"five dims", func(w *Writer) error {
			return w.AddTensor("t", tensor.F32, []int{1, 1, 1, 1, 1}, make([]byte, 4))
		}, "5 dimensions"},
		{"duplicate tensor", func(w *Writer) error {
			w.AddTensor("t", tensor.F32, []int{1}, make([]byte, 4))
			return w.AddTensor("t", tensor.F32, []int{1}, make([]byte, 4))
		}, `gguf: tensor "t": duplicate tensor name`},
		{"empty name", func(w *Writer) error {
			return w.AddTensor("", tensor.F32, []int{1}, make([]byte, 4))
		}, "empty name"},
		{"long name", func(w *Writer) error {
			return w.AddTensor(strings.Repeat("x", 64), tensor.F32, []int{1}, make([]byte, 4))
		}, "longer than the 63 bytes"},
		{"unknown ggml type", func(w *Writer) error {
			return w.AddGGMLTensor("t", 31, []int64{32}, 18, func(io.Writer) error { return nil })
		}, "unknown ggml type Q4_0_4_4"},
		{"nil func", func(w *Writer) error {
			return w.AddTensorFunc("t", tensor.F32, []int{1}, 4, nil)
		}, "nil write function"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWriter()
			err := tt.add(w)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Fatalf("error = %v, want it to contain %q", err, tt.want)
			}
			// The first error sticks and is reported by WriteTo and WriteFile.
			if _, err2 := w.WriteTo(io.Discard); err2 == nil {
				t.Error("WriteTo succeeded after a failed Add")
			}
			if err2 := w.WriteFile(filepath.Join(t.TempDir(), "x.gguf")); err2 == nil {
				t.Error("WriteFile succeeded after a failed Add")
			}
		})
	}
}

func TestWriterCallbackErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name  string
		write func(io.Writer) error
		want  string
	}{
		{"short", func(w io.Writer) error { _, err := w.Write(make([]byte, 10)); return err }, "wrote 10 bytes, declared 16"},
		{"long", func(w io.Writer) error { _, err := w.Write(make([]byte, 17)); return err }, "exceeds the declared size by 1"},
		{"long in pieces", func(w io.Writer) error {
			w.Write(make([]byte, 16))
			_, err := w.Write(make([]byte, 1))
			return err
		}, "exceeds the declared size by 1"},
		{"error", func(io.Writer) error { return boom }, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWriter()
			must(t, w.AddTensorFunc("t", tensor.F32, []int{4}, 16, tt.write))
			var buf bytes.Buffer
			_, err := w.WriteTo(&buf)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `gguf: tensor "t"`) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
			// WriteFile leaves nothing behind on failure.
			dir := t.TempDir()
			if err := w.WriteFile(filepath.Join(dir, "m.gguf")); err == nil {
				t.Fatal("WriteFile succeeded")
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("WriteFile left %v", ents)
			}
		})
	}
}

func TestWriteFileOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "small.gguf")
	w := NewWriter()
	must(t, w.AddKV("general.architecture", "grok"))
	must(t, w.AddTensor("x", tensor.F32, []int{2, 2}, f32bytes(1, 2, 3, 4)))
	must(t, w.WriteFile(path))
	f, err := Open(path)
	must(t, err)
	x, ok := f.Lookup("x")
	if !ok {
		t.Fatal("Lookup failed")
	}
	v, err := x.Float32s()
	must(t, err)
	if !reflect.DeepEqual(v, []float32{1, 2, 3, 4}) || !reflect.DeepEqual(x.Shape, []int{2, 2}) {
		t.Errorf("got %v %v", x.Shape, v)
	}
	if a, _ := f.String("general.architecture"); a != "grok" {
		t.Errorf("architecture %q", a)
	}
	must(t, f.Close())
	must(t, f.Close()) // idempotent
	if _, err := f.Tensor("x"); err == nil {
		t.Error("Tensor after Close succeeded")
	}
	// Metadata was copied out of the mapping and survives Close.
	if a, _ := f.String("general.architecture"); a != "grok" {
		t.Errorf("architecture after Close %q", a)
	}
}

// sizesWriter records the size of every write.
type sizesWriter struct {
	bytes.Buffer
	sizes []int
}

func (s *sizesWriter) Write(p []byte) (int, error) {
	s.sizes = append(s.sizes, len(p))
	return s.Buffer.Write(p)
}

// TestChunkWriter checks that WriteFile's writer passes every byte on, in
// order, in whole chunks from the start whatever the sizes written to it
// (larger and smaller than a chunk), the rest at Flush.
func TestChunkWriter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	sw := &sizesWriter{}
	c := &chunkWriter{w: sw, buf: make([]byte, 1000)}
	for _, n := range []int{1, 999, 3, 2500, 0, 1000, 17, 4096, 5} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		if k, err := c.Write(p); k != n || err != nil {
			t.Fatalf("Write(%d bytes) = %d, %v", n, k, err)
		}
		want = append(want, p...)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sw.Bytes(), want) {
		t.Fatalf("the writes pass on other bytes than were written")
	}
	for i, n := range sw.sizes {
		if last := i == len(sw.sizes)-1; !last && n != 1000 || last && (n == 0 || n > 1000) {
			t.Errorf("write %d of %d is %d bytes; want whole chunks of 1000, then the rest", i, len(sw.sizes), n)
		}
	}
	if got, wantN := len(sw.sizes), (len(want)+999)/1000; got != wantN {
		t.Errorf("%d writes for %d bytes; want %d", got, len(want), wantN)
	}
}

package gguf

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// seedFiles returns small valid files that between them use every value type
// and a variety of tensor types, as starting points for the fuzzer.
func seedFiles(t testing.TB) [][]byte {
	all := NewWriter()
	for i, v := range []any{
		uint8(1), int8(-1), uint16(2), int16(-2), uint32(3), int32(-3), uint64(4), int64(-4),
		float32(0.5), 0.25, true, "s", []string{"a", "bc"}, []float32{1}, []int32{-1, 2},
		[]bool{true, false}, []uint64{9},
		[]Value{{Type: TypeArray, ElemType: TypeUint8, Data: []uint8{1, 2}}},
	} {
		must(t, all.AddKV(string(rune('a'+i)), v))
	}
	must(t, all.AddGGMLTensor("q4k", GGMLTypeQ4_K, []int64{256}, 144, func(w io.Writer) error {
		_, err := w.Write(make([]byte, 144))
		return err
	}))
	aligned := NewWriter()
	must(t, aligned.AddKV(AlignmentKey, uint32(8)))
	must(t, aligned.AddTensor("x", tensor.F32, []int{3}, make([]byte, 12)))
	must(t, aligned.AddTensor("y", tensor.F32, []int{1}, make([]byte, 4)))
	return [][]byte{smallFile(t), write(t, all), write(t, aligned), header(0, 0)}
}

// FuzzParse checks that Parse never panics and that whatever it accepts is
// consistent: every tensor lies inside the buffer, supported tensors decode
// into views of the right size, and the Writer reproduces the file's content
// (rewriting a rewritten file is byte-identical).
func FuzzParse(f *testing.F) {
	for _, s := range seedFiles(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		file, err := Parse(in)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
		}
		for _, kv := range file.Metadata {
			_ = kv.Value.String()
			file.Uint(kv.Key)
			file.Int(kv.Key)
			file.Float(kv.Key)
			file.Int32s(kv.Key)
		}
		for _, ti := range file.Tensors {
			data, ok := file.TensorBytes(ti.Name)
			if !ok || int64(len(data)) != ti.Size {
				t.Fatalf("tensor %q: %d bytes, %v; info says %d", ti.Name, len(data), ok, ti.Size)
			}
			if _, ok := ti.Type.DType(); ok {
				x, err := file.Tensor(ti.Name)
				if err != nil {
					t.Fatalf("tensor %q of type %v: %v", ti.Name, ti.Type, err)
				}
				if len(x.Data) != len(data) {
					t.Fatalf("tensor %q: view of %d bytes, want %d", ti.Name, len(x.Data), len(data))
				}
			} else if _, ok := file.Lookup(ti.Name); ok {
				t.Fatalf("tensor %q of type %v: Lookup succeeded", ti.Name, ti.Type)
			}
		}
		if file.Alignment > 1<<12 {
			return // a rewrite would be mostly padding
		}
		out, err := rewrite(t, file)
		if err != nil {
			return // the writer is stricter than the reader (tensor names)
		}
		g, err := Parse(out)
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if len(g.Metadata) != len(file.Metadata) || len(g.Tensors) != len(file.Tensors) {
			t.Fatalf("rewritten file has %d keys and %d tensors, want %d and %d",
				len(g.Metadata), len(g.Tensors), len(file.Metadata), len(file.Tensors))
		}
		for _, ti := range file.Tensors {
			a, _ := file.TensorBytes(ti.Name)
			b, ok := g.TensorBytes(ti.Name)
			if !ok || !bytes.Equal(a, b) {
				t.Fatalf("tensor %q differs after rewriting", ti.Name)
			}
		}
		out2, err := rewrite(t, g)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("rewriting is not idempotent: %v", err)
		}
	})
}

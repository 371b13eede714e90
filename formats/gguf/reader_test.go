package gguf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/grok-go/grok/tensor"
)

const (
	tinyF32 = "../../testdata/grok-tiny/grok-tiny.gguf"
	tinyQ8  = "../../testdata/grok-tiny/grok-tiny-q8_0.gguf"
)

// tinyMeta is ../../testdata/grok-tiny/meta.json: the generator's record of the
// metadata and tensor table of grok-tiny.gguf.
type tinyMeta struct {
	Metadata map[string]any `json:"gguf_metadata"`
	Tensors  [][3]any       `json:"tensors"` // name, ne (ggml order), type
}

func loadMeta(t *testing.T) tinyMeta {
	t.Helper()
	b, err := os.ReadFile("../../testdata/grok-tiny/meta.json")
	must(t, err)
	var m tinyMeta
	must(t, json.Unmarshal(b, &m))
	return m
}

func TestFixtureChecksums(t *testing.T) {
	for path, want := range map[string]string{
		tinyF32: "c237a86942deb86de5e10148d5e74ba9b4fe96c28335e2d4ee5af2a85bacb4f5",
		tinyQ8:  "9e219dfc8fc39748689f6def4ed212dd21dc728c9ec6a27f04889c0f117d5c41",
	} {
		b, err := os.ReadFile(path)
		must(t, err)
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s: sha256 %s, want %s", path, got, want)
		}
	}
}

// checkMetadata compares a file's metadata with meta.json. skip lists keys
// the file may differ in.
func checkMetadata(t *testing.T, f *File, m tinyMeta, skip map[string]any) {
	t.Helper()
	for key, want := range m.Metadata {
		if override, ok := skip[key]; ok {
			want = override
		}
		v, ok := f.Get(key)
		if !ok {
			t.Errorf("key %s missing", key)
			continue
		}
		switch w := want.(type) {
		case string:
			if strings.HasPrefix(w, "<") { // an array meta.json summarises
				if v.Type != TypeArray || v.Len() != 512 {
					t.Errorf("%s: %v of %d, want an array of 512", key, v.Type, v.Len())
				}
				continue
			}
			if s, ok := f.String(key); !ok || s != w {
				t.Errorf("%s = %v, want %q", key, v, w)
			}
		case float64:
			// meta.json holds the float32 values widened to float64, so the
			// comparison is exact.
			if x, ok := f.Float(key); !ok || x != w {
				t.Errorf("%s = %v, want %v", key, v, w)
			}
		case bool:
			if b, ok := f.Bool(key); !ok || b != w {
				t.Errorf("%s = %v, want %v", key, v, w)
			}
		default:
			t.Errorf("%s: unexpected meta.json value %v", key, want)
		}
	}
	for key, want := range skip {
		if _, ok := m.Metadata[key]; !ok {
			if x, ok := f.Float(key); !ok || x != want {
				t.Errorf("%s = %v, want %v", key, x, want)
			}
		}
	}
	if n := len(m.Metadata) + len(skip) - countIn(skip, m.Metadata); len(f.Metadata) != n {
		t.Errorf("%d metadata keys, want %d", len(f.Metadata), n)
	}
	// The typed accessors the tokenizer uses.
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) != 512 || toks[0] != "[PAD]" || toks[4] != "<0x00>" || toks[259] != "<0xFF>" {
		t.Errorf("tokens: %v %d %q", ok, len(toks), toks[:5])
	}
	if scores, ok := f.Float32s("tokenizer.ggml.scores"); !ok || len(scores) != 512 {
		t.Errorf("scores: %v %d", ok, len(scores))
	}
	if tt, ok := f.Int32s("tokenizer.ggml.token_type"); !ok || len(tt) != 512 {
		t.Errorf("token_type: %v %d", ok, len(tt))
	}
	if n, ok := f.Uint("grok.block_count"); !ok || n != 2 {
		t.Errorf("block_count %d %v", n, ok)
	}
}

func countIn(a, b map[string]any) int {
	n := 0
	for k := range a {
		if _, ok := b[k]; ok {
			n++
		}
	}
	return n
}

func TestFixtureF32(t *testing.T) {
	m := loadMeta(t)
	f, err := Open(tinyF32)
	must(t, err)
	defer f.Close()
	if f.Version != 3 || f.Alignment != 32 {
		t.Errorf("version %d alignment %d", f.Version, f.Alignment)
	}
	checkMetadata(t, f, m, nil)

	if len(f.Tensors) != 26 || len(m.Tensors) != 26 {
		t.Fatalf("%d tensors, meta.json %d, want 26", len(f.Tensors), len(m.Tensors))
	}
	for i, mt := range m.Tensors {
		ti := f.Tensors[i]
		name, typ := mt[0].(string), mt[2].(string)
		var ne []int64
		for _, d := range mt[1].([]any) {
			ne = append(ne, int64(d.(float64)))
		}
		if ti.Name != name || ti.Type.String() != typ || !reflect.DeepEqual(ti.Dims, ne) {
			t.Errorf("tensor %d: %s %v %v, want %s %v %s", i, ti.Name, ti.Dims, ti.Type, name, ne, typ)
		}
		x, err := f.Tensor(name)
		if err != nil {
			t.Errorf("Tensor(%s): %v", name, err)
			continue
		}
		want := make([]int, len(ne))
		for j, d := range ne {
			want[len(ne)-1-j] = int(d)
		}
		if x.Type != tensor.F32 || !reflect.DeepEqual(x.Shape, want) || len(x.Data) != int(ti.Size) {
			t.Errorf("%s: %v %v %d bytes", name, x.Type, x.Shape, len(x.Data))
		}
	}
	emb, ok := f.Lookup("token_embd.weight")
	if !ok || !reflect.DeepEqual(emb.Shape, []int{512, 128}) {
		t.Fatalf("token_embd.weight: %v", emb)
	}
	// Norm scales are drawn from [0.8, 1.2] (README): a sanity check that
	// the offsets point at the right bytes.
	norm, _ := f.Lookup("blk.0.attn_norm.weight")
	v, err := norm.Float32s()
	must(t, err)
	for _, x := range v {
		if x < 0.8 || x > 1.2 {
			t.Fatalf("attn_norm value %v outside [0.8, 1.2]", x)
		}
	}
	if _, ok := f.Lookup("output.weight"); ok {
		t.Error("output.weight present; the model ties it to token_embd")
	}
}

func TestFixtureQ8_0(t *testing.T) {
	m := loadMeta(t)
	f, err := Open(tinyQ8)
	must(t, err)
	defer f.Close()
	checkMetadata(t, f, m, map[string]any{"general.file_type": 7.0, "general.quantization_version": 2.0})
	if len(f.Tensors) != 26 {
		t.Fatalf("%d tensors", len(f.Tensors))
	}
	ref, err := Open(tinyF32)
	must(t, err)
	defer ref.Close()
	nQ8 := 0
	for _, ti := range f.Tensors {
		ri, ok := ref.Info(ti.Name)
		if !ok {
			t.Errorf("%s not in the F32 file", ti.Name)
			continue
		}
		if !reflect.DeepEqual(ti.Dims, ri.Dims) {
			t.Errorf("%s: dims %v, F32 file %v", ti.Name, ti.Dims, ri.Dims)
		}
		want := GGMLTypeQ8_0
		if len(ti.Dims) == 1 || strings.HasSuffix(ti.Name, "ffn_gate_inp.weight") {
			want = GGMLTypeF32 // norms and the router stay F32
		}
		if ti.Type != want {
			t.Errorf("%s: type %v, want %v", ti.Name, ti.Type, want)
		}
		x, err := f.Tensor(ti.Name)
		if err != nil {
			t.Errorf("%s: %v", ti.Name, err)
			continue
		}
		if want == GGMLTypeQ8_0 {
			nQ8++
			if x.Type != tensor.Q8_0 {
				t.Errorf("%s: dtype %v", ti.Name, x.Type)
			}
			// Quantising the F32 tensor with ggml's rounding reproduces
			// llama-quantize's bytes (fixture README).
			r, _ := ref.Lookup(ti.Name)
			vals, err := r.Float32s()
			must(t, err)
			q, err := tensor.EncodeRow(nil, tensor.Q8_0, vals)
			must(t, err)
			if !bytes.Equal(q, x.Data) {
				t.Errorf("%s: Q8_0 bytes differ from quantising the F32 tensor", ti.Name)
			}
		} else {
			r, _ := ref.TensorBytes(ti.Name)
			if !bytes.Equal(r, x.Data) {
				t.Errorf("%s: F32 bytes differ from the F32 file", ti.Name)
			}
		}
	}
	if nQ8 != 1+2*7 { // token_embd + per layer q, k, v, output, 3 experts
		t.Errorf("%d Q8_0 tensors, want 15", nQ8)
	}
}

// rewrite copies a parsed file through the Writer: same metadata (with the
// stored types), same tensors in the same order.
func rewrite(t testing.TB, f *File) ([]byte, error) {
	w := NewWriter()
	for _, kv := range f.Metadata {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			return nil, err
		}
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensorOf(f, ti); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	return buf.Bytes(), err
}

func TestRewriteFixtures(t *testing.T) {
	for _, path := range []string{tinyF32, tinyQ8} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			orig, err := os.ReadFile(path)
			must(t, err)
			f, err := Parse(orig)
			must(t, err)
			b, err := rewrite(t, f)
			must(t, err)
			if err := NewWriter().AddTensorOf(f, TensorInfo{Name: "no.such.weight"}); err == nil || !strings.Contains(err.Error(), "not in the file") {
				t.Errorf("AddTensorOf a tensor the file lacks: %v", err)
			}
			g, err := Parse(b)
			must(t, err)
			if !reflect.DeepEqual(f.Metadata, g.Metadata) {
				t.Error("metadata differs after rewriting")
			}
			if !reflect.DeepEqual(f.Tensors, g.Tensors) {
				t.Error("tensor table differs after rewriting")
			}
			for _, ti := range f.Tensors {
				x, _ := f.TensorBytes(ti.Name)
				y, _ := g.TensorBytes(ti.Name)
				if !bytes.Equal(x, y) {
					t.Errorf("%s: bytes differ", ti.Name)
				}
			}
			// Same layout rules as gguf-py and llama.cpp: the whole file is
			// reproduced.
			if !bytes.Equal(orig, b) {
				t.Errorf("rewritten file differs (%d vs %d bytes)", len(b), len(orig))
			}
		})
	}
}

func TestUnsupportedTypes(t *testing.T) {
	tests := []struct {
		typ GGMLType
		ne  []int64
		sz  int64
	}{
		{GGMLTypeQ4_0, []int64{64, 2}, 4 * 18},
		{GGMLTypeQ4_1, []int64{32}, 20},
		{GGMLTypeQ5_0, []int64{32}, 22},
		{GGMLTypeQ5_1, []int64{32}, 24},
		{GGMLTypeQ8_1, []int64{32}, 36},
		{GGMLTypeQ2_K, []int64{256}, 84},
		{GGMLTypeQ3_K, []int64{256}, 110},
		{GGMLTypeQ4_K, []int64{512, 3}, 6 * 144},
		{GGMLTypeQ5_K, []int64{256}, 176},
		{GGMLTypeQ6_K, []int64{256}, 210},
		{GGMLTypeQ8_K, []int64{256}, 292},
		{GGMLTypeIQ2_XXS, []int64{256}, 66},
		{GGMLTypeIQ2_XS, []int64{256}, 74},
		{GGMLTypeIQ3_XXS, []int64{256}, 98},
		{GGMLTypeIQ1_S, []int64{256}, 50},
		{GGMLTypeIQ4_NL, []int64{32}, 18},
		{GGMLTypeIQ3_S, []int64{256}, 110},
		{GGMLTypeIQ2_S, []int64{256}, 82},
		{GGMLTypeIQ4_XS, []int64{256}, 136},
		{GGMLTypeI16, []int64{3}, 6},
		{GGMLTypeI32, []int64{3}, 12},
		{GGMLTypeI64, []int64{3}, 24},
		{GGMLTypeF64, []int64{3}, 24},
		{GGMLTypeIQ1_M, []int64{256}, 56},
		{GGMLTypeTQ1_0, []int64{256}, 54},
		{GGMLTypeTQ2_0, []int64{256}, 66},
		{GGMLTypeMXFP4, []int64{32}, 17},
		{GGMLTypeNVFP4, []int64{64}, 36},
		{GGMLTypeQ1_0, []int64{128}, 18},
		{GGMLTypeQ2_0, []int64{64}, 18},
	}
	w := NewWriter()
	for _, tt := range tests {
		if got, err := TensorSize(tt.typ, tt.ne); err != nil || got != tt.sz {
			t.Errorf("TensorSize(%v, %v) = %d, %v; want %d", tt.typ, tt.ne, got, err, tt.sz)
		}
		must(t, w.AddGGMLTensor(tt.typ.String(), tt.typ, tt.ne, tt.sz, func(w io.Writer) error {
			_, err := w.Write(make([]byte, tt.sz))
			return err
		}))
	}
	// A supported tensor after them: their sizes place it correctly.
	must(t, w.AddTensor("ok", tensor.F32, []int{2}, f32bytes(1.5, -2)))
	f, err := Parse(write(t, w))
	must(t, err)
	for _, tt := range tests {
		name := tt.typ.String()
		ti, ok := f.Info(name)
		if !ok || ti.Type != tt.typ || ti.Size != tt.sz {
			t.Errorf("%s: info %+v", name, ti)
		}
		if dt, dec := tt.typ.DType(); dec {
			// A block type the engine decodes: a view like any other.
			x, err := f.Tensor(name)
			if err != nil || x.Type != dt || x.Type.String() != name || int64(len(x.Data)) != tt.sz {
				t.Errorf("%s: Tensor = %+v, %v", name, x, err)
			}
			if g, err := TypeOf(dt); err != nil || g != tt.typ {
				t.Errorf("TypeOf(%v) = %v, %v", dt, g, err)
			}
			continue
		}
		if _, ok := f.Lookup(name); ok {
			t.Errorf("%s: Lookup succeeded", name)
		}
		_, err := f.Tensor(name)
		var ute *UnsupportedTypeError
		if !errors.As(err, &ute) || ute.Type != tt.typ {
			t.Errorf("%s: error %v, want an UnsupportedTypeError", name, err)
		}
		if b, ok := f.TensorBytes(name); !ok || int64(len(b)) != tt.sz {
			t.Errorf("%s: TensorBytes %d bytes, %v", name, len(b), ok)
		}
	}
	_, err = f.Tensor("Q8_K")
	want := `gguf: tensor "Q8_K": type Q8_K is not supported (supported: ` + supportedTypes + `)`
	if err == nil || err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	x, ok := f.Lookup("ok")
	if !ok {
		t.Fatal("Lookup(ok) failed")
	}
	if v, _ := x.Float32s(); !reflect.DeepEqual(v, []float32{1.5, -2}) {
		t.Errorf("ok = %v", v)
	}
}

// raw assembles GGUF bytes by hand, for inputs the Writer refuses to make.
type raw []byte

func (r raw) u32(x uint32) raw { return binary32(r, x) }
func (r raw) u64(x uint64) raw { return binary64(r, x) }
func (r raw) str(s string) raw { return append(r.u64(uint64(len(s))), s...) }

func binary32(b []byte, x uint32) []byte {
	return append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
}

func binary64(b []byte, x uint64) []byte {
	return binary32(binary32(b, uint32(x)), uint32(x>>32))
}

// header starts a v3 file.
func header(nTensors, nKV uint64) raw {
	return raw(Magic).u32(3).u64(nTensors).u64(nKV)
}

// tinfo appends a tensor info.
func (r raw) tinfo(name string, ne []uint64, typ uint32, off uint64) raw {
	r = r.str(name).u32(uint32(len(ne)))
	for _, d := range ne {
		r = r.u64(d)
	}
	return r.u32(typ).u64(off)
}

// data pads to 32 and appends n bytes of tensor data.
func (r raw) data(n int) raw {
	r = append(r, make([]byte, int(pad(int64(len(r)), 32))-len(r))...)
	return append(r, make([]byte, n)...)
}

func TestHostile(t *testing.T) {
	big := uint64(1) << 62
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"wrong magic", raw("GGML").u32(3).u64(0).u64(0), "bad magic"},
		{"version 1", raw(Magic).u32(1).u32(0).u32(0), "version 1 is not supported"},
		{"version 4", raw(Magic).u32(4).u64(0).u64(0), "version 4 is not supported"},
		{"version 0", raw(Magic).u32(0).u64(0).u64(0), "version 0 is not supported"},
		{"big-endian", raw(Magic).u32(0x03000000).u64(0).u64(0), "big-endian GGUF is not supported"},
		{"metadata count 2^62", header(0, big), "metadata count 4611686018427387904 cannot fit"},
		{"tensor count 2^62", header(big, 0), "tensor count 4611686018427387904 cannot fit"},
		{"counts together", header(1, 2).str("k").u32(uint32(TypeUint8)).u64(0).u64(0).u64(0).u64(0), "2 metadata pairs and 1 tensors cannot fit"},
		{"key length 2^40", header(0, 1).u64(1 << 40).u32(0).u32(0), "string length 1099511627776 exceeds"},
		{"string value length 2^40", header(0, 1).str("k").u32(uint32(TypeString)).u64(1 << 40), `gguf: key "k": string length 1099511627776 exceeds`},
		{"array length 2^60", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(1 << 60).u32(0), `gguf: key "k": array of 1152921504606846976 uint32 cannot fit`},
		{"uint32 array one short", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(3).u64(0), "array of 3 uint32 cannot fit in the 8 bytes left"},
		{"string array 2^60", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(1 << 60).u64(0), "array of 1152921504606846976 string cannot fit"},
		{"nested array 2^60", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1 << 60).u64(0).u32(0), "cannot fit"},
		{"deep nesting", func() raw {
			r := header(0, 1).str("k").u32(uint32(TypeArray))
			for i := 0; i < 20; i++ {
				r = r.u32(uint32(TypeArray)).u64(1)
			}
			return r.u32(uint32(TypeUint8)).u64(0)
		}(), "nested more than 8 deep"},
		{"unknown value type", header(0, 1).str("k").u32(13).u64(0), `gguf: key "k": unknown value type 13`},
		{"unknown array type", header(0, 1).str("k").u32(uint32(TypeArray)).u32(99).u64(0), "array of unknown value type 99"},
		{"bool 2", append(header(0, 1).str("k").u32(uint32(TypeBool)), 2), "bool value 2 is neither 0 nor 1"},
		{"bool array 3", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeBool)).u64(2).u32(0x0301), "array element 1: bool value 3"},
		{"duplicate key", header(0, 2).str("k").u32(uint32(TypeUint32)).u32(1).str("k").u32(uint32(TypeUint32)).u32(2), `gguf: key "k": duplicate key`},
		{"alignment type", header(0, 1).str(AlignmentKey).u32(uint32(TypeUint64)).u64(32), "want uint32"},
		{"alignment 0", header(0, 1).str(AlignmentKey).u32(uint32(TypeUint32)).u32(0).u64(0), "not a power of two"},
		{"alignment 48", header(0, 1).str(AlignmentKey).u32(uint32(TypeUint32)).u32(48).u64(0), "not a power of two"},
		{"n_dims 100", header(1, 0).str("t").u32(100).u64(0).u64(0).u64(0), `gguf: tensor "t": 100 dimensions, more than the 4`},
		{"dimension 2^63", header(1, 0).tinfo("t", []uint64{1 << 63}, 0, 0).data(0), "dimension 0 is 9223372036854775808, too large"},
		{"element count overflow", header(1, 0).tinfo("t", []uint64{1 << 32, 1 << 32}, 0, 0).data(0), `gguf: tensor "t": element count of [4294967296 4294967296] overflows`},
		{"element count with a zero", header(1, 0).tinfo("t", []uint64{0, 1 << 40, 1 << 40}, 0, 0).data(0), "element count of [0 1099511627776 1099511627776] overflows"},
		{"element count 2^62", header(1, 0).tinfo("t", []uint64{1 << 31, 1 << 31}, 0, 0).data(0), "element count of [2147483648 2147483648] overflows"},
		{"element count 2^63", header(1, 0).tinfo("t", []uint64{1 << 60, 8}, uint32(GGMLTypeBF16), 0).data(0), "element count of [1152921504606846976 8] overflows"},
		{"byte size overflow", header(1, 0).tinfo("t", []uint64{1 << 60}, uint32(GGMLTypeF64), 0).data(0), "byte size of F64 [1152921504606846976] overflows"},
		{"q8_0 partial block", header(1, 0).tinfo("t", []uint64{33}, 8, 0).data(64), "row of 33 elements is not a whole number of Q8_0 blocks of 32"},
		{"unknown type", header(1, 0).tinfo("t", []uint64{1}, 99, 0).data(32), `gguf: tensor "t": unknown ggml type 99`},
		{"removed type", header(1, 0).tinfo("t", []uint64{32}, 31, 0).data(32), "type 31 (Q4_0_4_4) was removed"},
		{"offset 2^63", header(1, 0).tinfo("t", []uint64{1}, 0, 1<<63).data(32), "offset 9223372036854775808 is too large"},
		{"misaligned", header(1, 0).tinfo("t", []uint64{1}, 0, 4).data(64), `gguf: tensor "t": offset 4 is not a multiple of the alignment 32`},
		{"past EOF", header(1, 0).tinfo("t", []uint64{16}, 0, 0).data(63), `gguf: tensor "t": bytes [0, 64) of the data section lie past the end`},
		{"offset past EOF", header(1, 0).tinfo("t", []uint64{1}, 0, 1<<40).data(64), "lie past the end"},
		{"huge tensor", header(1, 0).tinfo("t", []uint64{1 << 40, 1 << 20}, 0, 0).data(64), "lie past the end"},
		{"duplicate tensor", header(2, 0).tinfo("t", []uint64{1}, 0, 0).tinfo("t", []uint64{1}, 0, 32).data(64), `gguf: tensor "t": duplicate tensor name`},
		{"overlap", header(2, 0).tinfo("a", []uint64{16}, 0, 0).tinfo("b", []uint64{1}, 0, 32).data(96), `gguf: tensor "b": bytes [32, 36) overlap tensor "a" at [0, 64)`},
		{"same offset", header(2, 0).tinfo("a", []uint64{8}, 0, 32).tinfo("b", []uint64{1}, 0, 32).data(96), "overlap"},
		{"truncated info", header(1, 0).str("t").u32(3).u64(1).u64(2), `gguf: tensor "t": dimension 2: unexpected end of file`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", f)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Errorf("error %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestLenient covers inputs that are odd but valid.
func TestLenient(t *testing.T) {
	tests := []struct {
		name  string
		in    []byte
		check func(t *testing.T, f *File)
	}{
		{"no tensors, no padding", append(header(0, 1).str("k").u32(uint32(TypeUint8)), 1), func(t *testing.T, f *File) {
			if v, ok := f.Uint("k"); !ok || v != 1 {
				t.Errorf("k = %d", v)
			}
		}},
		{"empty tensor past the data", header(1, 0).tinfo("t", []uint64{0, 5}, 0, 0), func(t *testing.T, f *File) {
			x, ok := f.Lookup("t")
			if !ok || len(x.Data) != 0 || !reflect.DeepEqual(x.Shape, []int{5, 0}) {
				t.Errorf("t = %+v", x)
			}
		}},
		{"zero-size tensors share an offset", header(2, 0).tinfo("a", []uint64{0}, 0, 32).tinfo("b", []uint64{16}, 0, 0).data(64), nil},
		{"out of order, with a gap", header(2, 0).tinfo("a", []uint64{1}, 0, 64).tinfo("b", []uint64{1}, 0, 0).data(96), func(t *testing.T, f *File) {
			if f.Tensors[0].Name != "a" || f.Tensors[0].Offset != 64 {
				t.Errorf("tensors %+v", f.Tensors)
			}
		}},
		{"scalar tensor", header(1, 0).tinfo("s", nil, 0, 0).data(4), func(t *testing.T, f *File) {
			x, ok := f.Lookup("s")
			if !ok || len(x.Shape) != 0 || len(x.Data) != 4 {
				t.Errorf("s = %+v", x)
			}
		}},
		{"version 2", raw(Magic).u32(2).u64(0).u64(0), func(t *testing.T, f *File) {
			if f.Version != 2 {
				t.Errorf("version %d", f.Version)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				tt.check(t, f)
			}
		})
	}
}

// TestTruncated parses every proper prefix of a small valid file: each must
// fail cleanly.
func TestTruncated(t *testing.T) {
	full := smallFile(t)
	if _, err := Parse(full); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(full); n++ {
		f, err := Parse(full[:n:n])
		if err == nil {
			t.Fatalf("prefix of %d/%d bytes parsed: %d tensors", n, len(full), len(f.Tensors))
		}
		if !strings.HasPrefix(err.Error(), "gguf: ") {
			t.Fatalf("prefix %d: error %q lacks the package prefix", n, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.gguf")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	empty := filepath.Join(dir, "empty.gguf")
	must(t, os.WriteFile(empty, nil, 0o644))
	if _, err := Open(empty); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("empty file: %v", err)
	}
	bad := filepath.Join(dir, "bad.gguf")
	must(t, os.WriteFile(bad, raw(Magic).u32(1).u64(0), 0o644))
	if _, err := Open(bad); err == nil || !strings.Contains(err.Error(), "version 1") || !strings.Contains(err.Error(), bad) {
		t.Errorf("version 1 file: %v", err)
	}
}

func TestTypeNames(t *testing.T) {
	for typ, want := range map[GGMLType]string{
		GGMLTypeF32: "F32", GGMLTypeQ4_K: "Q4_K", GGMLTypeIQ2_XXS: "IQ2_XXS", GGMLTypeBF16: "BF16",
		4: "Q4_2", 99: "GGMLType(99)",
	} {
		if got := typ.String(); got != want {
			t.Errorf("%d: %q, want %q", uint32(typ), got, want)
		}
	}
	if got := TypeString.String(); got != "string" {
		t.Errorf("TypeString = %q", got)
	}
	if got := ValueType(42).String(); got != "ValueType(42)" {
		t.Errorf("ValueType(42) = %q", got)
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.I8} {
		g, err := TypeOf(dt)
		must(t, err)
		if back, ok := g.DType(); !ok || back != dt || g.String() != dt.String() {
			t.Errorf("%v → %v → %v", dt, g, back)
		}
	}
	if _, err := TypeOf(tensor.DType(99)); err == nil {
		t.Error("TypeOf(99) succeeded")
	}
	v := Value{Type: TypeArray, ElemType: TypeFloat32, Data: []float32{1, 2}}
	if got := v.String(); got != "[1, 2]" {
		t.Errorf("Value.String = %q", got)
	}
	if _, ok := (Value{Type: TypeFloat64, Data: math.NaN()}).Int(); ok {
		t.Error("Int of a float succeeded")
	}
}

// TestSharedKJV reads the trained demo model from the shared data folder, if
// this checkout has it: F16 matrices, F32 norms and router, written by
// llama.cpp's tools. The rewrite must reproduce it byte for byte.
func TestSharedKJV(t *testing.T) {
	path := "../../../shared/models/grok-tiny-kjv/model-f16.gguf"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared model not available: %v", err)
	}
	f, err := Open(path)
	must(t, err)
	defer f.Close()
	if a, _ := f.String("general.architecture"); a != "grok" {
		t.Errorf("architecture %q", a)
	}
	if n, _ := f.Uint("grok.block_count"); n != 4 {
		t.Errorf("block_count %d", n)
	}
	if toks, _ := f.Strings("tokenizer.ggml.tokens"); len(toks) != 4096 {
		t.Errorf("%d tokens", len(toks))
	}
	emb, err := f.Tensor("token_embd.weight")
	must(t, err)
	if emb.Type != tensor.F16 || !reflect.DeepEqual(emb.Shape, []int{4096, 256}) {
		t.Errorf("token_embd.weight %v %v", emb.Type, emb.Shape)
	}
	down, err := f.Tensor("blk.0.ffn_down_exps.weight")
	must(t, err)
	if down.Type != tensor.F16 || !reflect.DeepEqual(down.Shape, []int{8, 256, 192}) {
		t.Errorf("ffn_down_exps %v %v", down.Type, down.Shape)
	}
	router, err := f.Tensor("blk.0.ffn_gate_inp.weight")
	must(t, err)
	if router.Type != tensor.F32 || !reflect.DeepEqual(router.Shape, []int{8, 256}) {
		t.Errorf("ffn_gate_inp %v %v", router.Type, router.Shape)
	}
	orig, err := os.ReadFile(path)
	must(t, err)
	b, err := rewrite(t, f)
	must(t, err)
	if !bytes.Equal(b, orig) {
		t.Errorf("rewritten file differs (%d vs %d bytes)", len(b), len(orig))
	}
}

// Refusing a file costs a few times its size however its counts are packed:
// every count is checked against the bytes left, and each element that is
// allocated for takes file bytes of its own.
func TestHostileAllocation(t *testing.T) {
	const n = 100_000
	kvs := header(0, n)
	for i := 0; i < n; i++ {
		kvs = append(kvs.str(fmt.Sprintf("k%d", i)).u32(uint32(TypeUint8)), 1)
	}
	kvs = kvs[:len(kvs)-1]
	infos := header(n, 0)
	for i := 0; i < n; i++ {
		infos = infos.tinfo(fmt.Sprintf("t%d", i), []uint64{1}, 0, 0)
	}
	infos = infos.data(0)
	arrays := header(0, 2).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(n)
	for i := 0; i < n; i++ {
		arrays = append(arrays.u32(uint32(TypeUint8)).u64(1), 7)
	}
	strs := header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(n)
	for i := 0; i < n-1; i++ {
		strs = strs.str("")
	}
	strs = strs.u64(1 << 40)
	dims := header(n+1, 0)
	for i := 0; i < n; i++ {
		dims = dims.tinfo(fmt.Sprintf("t%d", i), []uint64{1, 1, 1, 1}, 0, 0)
	}
	dims = append(dims.str("x"), 5, 0, 0, 0)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"100k one-byte pairs, truncated", kvs, `key "k99999": uint8 value: unexpected end of file`},
		{"100k tensor infos at one offset", infos, "lie past the end"},
		{"array of 100k one-element arrays", arrays, "metadata pair 1: key"},
		{"array of 100k empty strings", strs, "array element 99999: string length 1099511627776 exceeds"},
		{"100k 4-D tensor infos, then n_dims 5", dims, "5 dimensions, more than the 4 ggml allows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&a)
			_, err := Parse(tc.in)
			runtime.ReadMemStats(&b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
			alloc := b.TotalAlloc - a.TotalAlloc
			t.Logf("%d-byte file: %d bytes allocated (%.1f×)", len(tc.in), alloc, float64(alloc)/float64(len(tc.in)))
			if limit := 8 * uint64(len(tc.in)); alloc > limit {
				t.Errorf("refusing a %d-byte file allocated %d bytes, more than %d", len(tc.in), alloc, limit)
			}
		})
	}
}

package convert

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/tensor"
)

// testdata/grok-tiny/grok-tiny-q8_0.gguf is llama-quantize's output for
// grok-tiny.gguf. Quantize reproduces it: every Q8_0 tensor byte for byte
// (and, since the metadata and tensor order follow llama-quantize too, the
// whole file), norms and router F32, file type 7, quantization version 2.
func TestQuantizeMatchesLlamaCpp(t *testing.T) {
	src := filepath.Join(testdata, "grok-tiny/grok-tiny.gguf")
	ref := filepath.Join(testdata, "grok-tiny/grok-tiny-q8_0.gguf")
	dst := filepath.Join(t.TempDir(), "q8_0.gguf")
	res, err := Quantize(context.Background(), src, dst, FtypeQ8_0, QuantizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.FileType != 7 || len(res.Warnings) != 0 {
		t.Errorf("file type %d, warnings %q", res.FileType, res.Warnings)
	}
	g, w := openGGUF(t, dst), openGGUF(t, ref)
	q8 := 0
	for _, wi := range w.Tensors {
		gi, ok := g.Info(wi.Name)
		if !ok {
			t.Errorf("%s missing", wi.Name)
			continue
		}
		if gi.Type != wi.Type {
			t.Errorf("%s: %v, llama-quantize %v", wi.Name, gi.Type, wi.Type)
			continue
		}
		gb, _ := g.TensorBytes(wi.Name)
		wb, _ := w.TensorBytes(wi.Name)
		if !bytes.Equal(gb, wb) {
			t.Errorf("%s (%v): bytes differ from llama-quantize's", wi.Name, wi.Type)
		}
		if wi.Type == gguf.GGMLTypeQ8_0 {
			q8++
		} else if wi.Type != gguf.GGMLTypeF32 || !loader.KeepsF32(wi.Name) {
			t.Errorf("%s: %v", wi.Name, wi.Type)
		}
	}
	if q8 != 15 { // token_embd and 7 matrices per layer
		t.Errorf("%d Q8_0 tensors compared, want 15", q8)
	}
	for k, v := range map[string]any{"general.file_type": uint32(7), "general.quantization_version": uint32(2)} {
		if got, _ := g.Get(k); got.Data != v {
			t.Errorf("%s = %v", k, got.Data)
		}
	}
	a, _ := os.ReadFile(dst)
	b, _ := os.ReadFile(ref)
	if !bytes.Equal(a, b) {
		t.Errorf("the file differs from llama-quantize's (%d vs %d bytes)", len(a), len(b))
	}
}

// F16 and BF16 targets round every matrix with ggml's rounding and keep
// norms and router; quantising an already quantised file changes nothing.
func TestQuantizeTypes(t *testing.T) {
	src := filepath.Join(testdata, "grok-tiny/grok-tiny.gguf")
	in := openGGUF(t, src)
	for _, tc := range []struct {
		ft    Ftype
		typ   tensor.DType
		ggml  gguf.GGMLType
		ftype uint32
	}{{FtypeF16, tensor.F16, gguf.GGMLTypeF16, 1}, {FtypeBF16, tensor.BF16, gguf.GGMLTypeBF16, 32}} {
		dst := filepath.Join(t.TempDir(), "out.gguf")
		res, err := Quantize(context.Background(), src, dst, tc.ft, QuantizeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.FileType != tc.ftype {
			t.Errorf("%v: file type %d", tc.typ, res.FileType)
		}
		g := openGGUF(t, dst)
		for _, ti := range g.Tensors {
			want := tc.ggml
			if loader.KeepsF32(ti.Name) {
				want = gguf.GGMLTypeF32
			}
			if ti.Type != want {
				t.Errorf("%v: %s is %v, want %v", tc.typ, ti.Name, ti.Type, want)
				continue
			}
			x, _ := in.Tensor(ti.Name)
			v, _ := x.Float32s()
			enc, _ := tensor.EncodeRow(nil, map[bool]tensor.DType{true: tensor.F32, false: tc.typ}[loader.KeepsF32(ti.Name)], v)
			got, _ := g.TensorBytes(ti.Name)
			if !bytes.Equal(got, enc) {
				t.Errorf("%v: %s: bytes differ from the rounded source", tc.typ, ti.Name)
			}
		}
		// Again: already of the type, so copied.
		again := filepath.Join(t.TempDir(), "again.gguf")
		if _, err := Quantize(context.Background(), dst, again, tc.ft, QuantizeOptions{}); err != nil {
			t.Fatal(err)
		}
		sameTensors(t, again, dst)
	}
}

func TestQuantizeErrors(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(testdata, "grok-tiny/grok-tiny.gguf")
	for _, tc := range []struct {
		src, dst string
		typ      Ftype
		want     string
	}{
		{src, filepath.Join(dir, "x.gguf"), Ftype(33), "not supported"},
		{src, filepath.Join(dir, "x.gguf"), FtypeIQ2_XXS, "IQ2_XXS needs an importance matrix"},
		{src, filepath.Join(dir, "x.gguf"), Ftype(4), "not supported"},
		{"quantize.go", filepath.Join(dir, "x.gguf"), FtypeQ8_0, "not a GGUF file"},
		{"/nonexistent.gguf", filepath.Join(dir, "x.gguf"), FtypeQ8_0, "no such file"},
		{src, filepath.Join(dir, "no", "x.gguf"), FtypeQ8_0, "output folder"},
		{src, src, FtypeQ8_0, "is the input file"},
	} {
		if _, err := Quantize(context.Background(), tc.src, tc.dst, tc.typ, QuantizeOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Quantize(context.Background(), %s, %s, %v) = %v, want it to mention %q", tc.src, tc.dst, tc.typ, err, tc.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed runs left %v", ents)
	}
	for s, want := range map[string]Ftype{"q8_0": FtypeQ8_0, "Q8_0": FtypeQ8_0, "7": FtypeQ8_0, "f16": FtypeF16, "1": FtypeF16,
		"BF16": FtypeBF16, "32": FtypeBF16, "q4_k_m": FtypeQ4_K_M, "Q4_K": FtypeQ4_K_M, "15": FtypeQ4_K_M, "q3_k": FtypeQ3_K_M,
		"Q5_K": FtypeQ5_K_M, "q2_k": FtypeQ2_K, "10": FtypeQ2_K, "Q4_0": FtypeQ4_0, "2": FtypeQ4_0, "q5_1": FtypeQ5_1, "9": FtypeQ5_1,
		"q3_k_s": FtypeQ3_K_S, "q3_k_l": FtypeQ3_K_L, "q4_k_s": FtypeQ4_K_S, "q5_k_s": FtypeQ5_K_S, "q6_k": FtypeQ6_K, "18": FtypeQ6_K,
		"f32": FtypeF32, "0": FtypeF32, "iq4_nl": FtypeIQ4_NL, "IQ4_XS": FtypeIQ4_XS, "30": FtypeIQ4_XS,
		"iq3_s": FtypeIQ3_S, "26": FtypeIQ3_S, "IQ3_M": FtypeIQ3_M, "iq3_xxs": FtypeIQ3_XXS, "iq3_xs": FtypeIQ3_XS, "22": FtypeIQ3_XS,
		"iq2_xxs": FtypeIQ2_XXS, "19": FtypeIQ2_XXS, "Q2_K_S": FtypeQ2_K_S, "iq1_m": FtypeIQ1_M, "iq2_m": FtypeIQ2_M} {
		if got, err := ParseQuantizeType(s); err != nil || got != want {
			t.Errorf("ParseQuantizeType(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"tq1_0", "q4_2", "4", "33", "q6_k_m", "mxfp4_moe", ""} {
		if _, err := ParseQuantizeType(s); err == nil {
			t.Errorf("ParseQuantizeType(%q) accepted", s)
		}
	}
}

package loader

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
)

// testdata/grok-k256: a model whose rows are whole 256-element super-blocks,
// quantised by llama.cpp's llama-quantize into the files listed here (see
// its README for how they were made and each file's type mix).
const k256Dir = "../testdata/grok-k256"

// k256F32SHA256 is the sha256 of the F32 GGUF that testmodel.WriteK256
// writes and llama-quantize read; it is not vendored (2.8 MB).
const k256F32SHA256 = "7105804c2a295a5b791ea51c27c2cc1bd09413f924042366e74dcb681a83ba3d"

// k256DequantSHA256 is, per vendored file, the sha256 of ggml's own
// dequantisation of its tensors: the tensor data of
// `llama-quantize --allow-requantize FILE out.gguf F32`, concatenated in
// FILE's tensor order (F32 tensors pass through as they are).
var k256DequantSHA256 = map[string]string{
	"grok-k256-Q2_K.gguf":       "95bc70486b98acff5a9cd52ede7800cec1ae072ec061dc1982e2b03fb132ade7",
	"grok-k256-Q3_K_M.gguf":     "cbf11d4e1a7dd960d5574c8542b67afeb071736d2e9cfb5081f49d440ac35f9c",
	"grok-k256-Q4_K_M.gguf":     "5a4cd204aedbf8282146e528a2bd6329f2b8245fb8f65b6d6779f5c19a0b22fb",
	"grok-k256-Q4_0.gguf":       "6a1a46d127bfbfce450fb2c769d16ae07289e5a2d620bd9e2dd12150da38caab",
	"grok-k256-iq-mix.gguf":     "6ba8e8c319cd65707cbdd0422f8a2b654ef3b18ff888a5e711f4e787b11ec9c3",
	"grok-k256-legacy-mix.gguf": "3121cc57ab573a334e54dda323a2de3c6d9d94c32f50f16290463ac6344ec1d7",
}

// k256Seqs are the two token sequences of the quantisation golden test: the
// golden model's (all ids < 512, no pad).
func k256Seqs(t *testing.T) map[string][]int {
	return testmodel.ReadTokens(t, goldenDir)
}

// TestK256Source: WriteK256 reproduces, byte for byte, the F32 file the
// vendored quantisations were made from, and the engine's F32 forward of it
// agrees with the float64 reference.
func TestK256Source(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grok-k256-f32.gguf")
	if err := testmodel.WriteK256(path, filepath.Join(goldenDir, "grok-tiny.gguf")); err != nil {
		t.Fatal(err)
	}
	if got := fileSHA256(t, path); got != k256F32SHA256 {
		t.Errorf("WriteK256 wrote sha256 %s, want %s (the source of the vendored quantisations)", got, k256F32SHA256)
	}
	m, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for name, toks := range k256Seqs(t) {
		ref, err := testmodel.Ref64(m.Config, m.Source, toks)
		if err != nil {
			t.Fatal(err)
		}
		got, err := testmodel.FullLogits(m.LanguageModel, toks)
		if err != nil {
			t.Fatal(err)
		}
		d, agree := testmodel.Compare64(got, ref, m.Config.VocabSize)
		if d > 1e-3 || agree != 1 {
			t.Errorf("%s: F32 engine vs ref64 max |Δ| = %.3g, argmax agreement %.3f", name, d, agree)
		}
		t.Logf("%s: F32 engine vs ref64 max |Δ| = %.3g", name, d)
	}
}

// TestK256QuantGolden: for each llama.cpp quantisation, the engine's logits
// agree with the float64 reference pass over the same file's dequantised
// weights (max |Δ| ≤ 1e-4, every argmax), and they are bit-identical to the
// engine's logits for an F32 model holding those dequantised weights: the
// quantised matmuls are the F32 kernels on decoded tiles, nothing else.
func TestK256QuantGolden(t *testing.T) {
	f32, err := model.New(testmodel.K256Config(), testmodel.K256Weights())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testmodel.K256Recipes {
		t.Run(r.File, func(t *testing.T) {
			checkQuantGolden(t, filepath.Join(k256Dir, r.File), k256DequantSHA256[r.File], f32)
		})
	}
}

// checkQuantGolden runs TestK256QuantGolden's checks on one file; the
// digest of ggml's dequantisation is checked unless deqSHA is "".
func checkQuantGolden(t *testing.T, path, deqSHA string, f32 *model.LanguageModel) {
	m, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var names []string
	for _, ti := range m.GGUF.Tensors {
		names = append(names, ti.Name)
	}
	deq, err := testmodel.DequantizedF32(m.Source, names)
	if err != nil {
		t.Fatal(err)
	}
	// Our decoding of every block type in the file is ggml's, bit for bit:
	// the reference below and the F32 model both rest on it.
	h := sha256.New()
	for _, name := range names {
		h.Write(deq[name].Data)
	}
	if got := hex.EncodeToString(h.Sum(nil)); deqSHA != "" && got != deqSHA {
		t.Errorf("dequantised tensors hash to %s, ggml's to %s", got, deqSHA)
	}
	lm32, err := model.New(m.Config, deq)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"len7", "len64"} {
		toks := k256Seqs(t)[name]
		ref, err := testmodel.Ref64(m.Config, m.Source, toks)
		if err != nil {
			t.Fatal(err)
		}
		got, err := testmodel.FullLogits(m.LanguageModel, toks)
		if err != nil {
			t.Fatal(err)
		}
		d, agree := testmodel.Compare64(got, ref, m.Config.VocabSize)
		// fp32 rounding measures ≤ 6.5e-6 here; 1e-4 still catches the
		// smallest real mistake on this model (erf for tanh gelu: 6.5e-4).
		if d > 1e-4 || agree != 1 {
			t.Errorf("%s: engine vs ref64 max |Δ| = %.3g (want ≤ 1e-4), argmax agreement %.3f", name, d, agree)
		}
		t.Logf("%s: engine vs ref64 max |Δ| = %.3g, argmax %.0f %%", name, d, 100*agree)
		want, err := testmodel.FullLogits(lm32, toks)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Errorf("%s: logit %d = %v, the F32 model of the dequantised weights gives %v", name, i, got[i], want[i])
				break
			}
		}
		// The quantisation error itself, against the F32 source, is only
		// reported: it is llama.cpp's, not the engine's.
		src, err := testmodel.FullLogits(f32, toks)
		if err != nil {
			t.Fatal(err)
		}
		src64 := make([]float64, len(src))
		for i, v := range src {
			src64[i] = float64(v)
		}
		qd, qagree := testmodel.Compare64(got, src64, m.Config.VocabSize)
		t.Logf("%s: vs the F32 source (quantisation error) max |Δ| = %.3g, argmax %.0f %%", name, qd, 100*qagree)
	}
}

// TestPerExpertNames: a GGUF whose experts are one tensor each
// (blk.N.ffn_gate.E.weight, ffn_up.E, ffn_down.E, as llama.cpp's
// conversions of March 2024 wrote them before the merged _exps tensors)
// gives logits bit-identical to the merged file's, for F32 and Q8_0.
func TestPerExpertNames(t *testing.T) {
	for _, file := range []string{"grok-tiny.gguf", "grok-tiny-q8_0.gguf"} {
		t.Run(file, func(t *testing.T) {
			merged := openGolden(t, file)
			f := merged.GGUF
			E := merged.Config.NumExperts
			w := gguf.NewWriter()
			for _, kv := range f.Metadata {
				if err := w.AddKV(kv.Key, kv.Value); err != nil {
					t.Fatal(err)
				}
			}
			split := 0
			for _, ti := range f.Tensors {
				data, _ := f.TensorBytes(ti.Name)
				base, ok := strings.CutSuffix(ti.Name, "_exps.weight")
				if !ok {
					add(t, w, ti.Name, ti.Type, ti.Dims, data)
					continue
				}
				split++
				per := len(data) / E
				for e := 0; e < E; e++ {
					add(t, w, fmt.Sprintf("%s.%d.weight", base, e), ti.Type, ti.Dims[:len(ti.Dims)-1], data[e*per:(e+1)*per])
				}
			}
			if split != 3*merged.Config.NumLayers {
				t.Fatalf("split %d merged expert tensors, want %d", split, 3*merged.Config.NumLayers)
			}
			path := filepath.Join(t.TempDir(), "per-expert.gguf")
			if err := w.WriteFile(path); err != nil {
				t.Fatal(err)
			}
			m, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if _, ok := m.GGUF.Info("blk.1.ffn_down.3.weight"); !ok {
				t.Fatal("the rewritten file has no blk.1.ffn_down.3.weight")
			}
			for name, toks := range k256Seqs(t) {
				want, err := testmodel.FullLogits(merged.LanguageModel, toks)
				if err != nil {
					t.Fatal(err)
				}
				got, err := testmodel.FullLogits(m.LanguageModel, toks)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: logit %d = %v per expert, %v merged", name, i, got[i], want[i])
					}
				}
			}
		})
	}
}

func add(t *testing.T, w *gguf.Writer, name string, typ gguf.GGMLType, dims []int64, data []byte) {
	t.Helper()
	err := w.AddGGMLTensor(name, typ, dims, int64(len(data)), func(out io.Writer) error {
		_, err := out.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

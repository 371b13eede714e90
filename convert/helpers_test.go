package convert

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// fixtureSet is one random model written in every format, shared by the
// tests (written once per test binary).
type fixtureSet struct {
	dir   string
	model *fixtures.Model

	gguf        string // F32 GGUF of model
	ggufBF16    string // BF16 GGUF of model (norms, router F32)
	stF32       string // hpcai safetensors, F32, 3 shards
	stBF16      string // hpcai safetensors, BF16, 2 shards
	xaiFloat    string // xAI layout with float32 projections
	xaiInt8     string // xAI int8, model_shards 2 (blocks never straddle shards)
	xaiInt8Res  *fixtures.XAIResult
	xaiDeqGGUF  string // F32 GGUF of the xAI int8 checkpoint's dequantised values
	xaiStraddle string // xAI int8, model_shards 8: shards of 8 and 16 rows cut Q8_0 blocks
}

var (
	fixOnce sync.Once
	fix     fixtureSet
	fixErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fix.dir != "" {
		os.RemoveAll(fix.dir)
	}
	os.Exit(code)
}

// getFixtures writes the shared fixtures on first use.
func getFixtures(t *testing.T) *fixtureSet {
	t.Helper()
	fixOnce.Do(func() { fixErr = writeFixtures() })
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	return &fix
}

func writeFixtures() error {
	dir, err := os.MkdirTemp("", "convert-fixtures")
	if err != nil {
		return err
	}
	f := &fix
	f.dir = dir
	f.model = fixtures.Random(fixtures.SmallConfig(), 1, fixtures.ModerateGains)
	sub := func(name string) (string, error) {
		p := filepath.Join(dir, name)
		return p, os.Mkdir(p, 0o755)
	}
	f.gguf = filepath.Join(dir, "model-f32.gguf")
	if err := fixtures.WriteGGUF(f.gguf, f.model, fixtures.GGUFOptions{Name: "fixture"}); err != nil {
		return err
	}
	f.ggufBF16 = filepath.Join(dir, "model-bf16.gguf")
	if err := fixtures.WriteGGUF(f.ggufBF16, f.model, fixtures.GGUFOptions{Type: tensor.BF16}); err != nil {
		return err
	}
	if f.stF32, err = sub("st-f32"); err != nil {
		return err
	}
	if err := fixtures.WriteSafetensors(f.stF32, f.model, fixtures.SafetensorsOptions{Shards: 3}); err != nil {
		return err
	}
	if f.stBF16, err = sub("st-bf16"); err != nil {
		return err
	}
	if err := fixtures.WriteSafetensors(f.stBF16, f.model, fixtures.SafetensorsOptions{DType: "BF16"}); err != nil {
		return err
	}
	if f.xaiFloat, err = sub("xai-float"); err != nil {
		return err
	}
	if _, err := fixtures.WriteXAI(f.xaiFloat, f.model, fixtures.XAIOptions{Float: true, ModelShards: 2}); err != nil {
		return err
	}
	if f.xaiInt8, err = sub("xai-int8"); err != nil {
		return err
	}
	if f.xaiInt8Res, err = fixtures.WriteXAI(f.xaiInt8, f.model, fixtures.XAIOptions{ModelShards: 2}); err != nil {
		return err
	}
	f.xaiDeqGGUF = filepath.Join(dir, "xai-dequantised.gguf")
	if err := fixtures.WriteGGUF(f.xaiDeqGGUF, f.xaiInt8Res.Dequantised, fixtures.GGUFOptions{}); err != nil {
		return err
	}
	if f.xaiStraddle, err = sub("xai-int8-s8"); err != nil {
		return err
	}
	_, err = fixtures.WriteXAI(f.xaiStraddle, f.model, fixtures.XAIOptions{ModelShards: 8})
	return err
}

// testTokens is the sequence the logit comparisons run (no pad token).
var testTokens = []int{1, 17, 260, 5, 99, 123, 299, 42, 7, 8, 9, 200, 150, 33, 2, 64, 3, 250, 11, 12}

// open loads a model and closes it when the test ends.
func open(t *testing.T, path string) *loader.Model {
	t.Helper()
	m, err := loader.Open(path, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// forward returns the all-position logits of tokens.
func forward(t *testing.T, lm *model.LanguageModel, tokens []int) []float32 {
	t.Helper()
	mem, err := model.NewKVMemory(&lm.Config, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := lm.Forward(mem, []model.Input{{Tokens: tokens, AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), out...)
}

var (
	logitsMu    sync.Mutex
	logitsCache = map[string][]float32{}
)

// logitsOf loads path and returns the logits of testTokens (computed once
// per path: the shared fixtures serve as references in many tests).
func logitsOf(t *testing.T, path string) []float32 {
	t.Helper()
	logitsMu.Lock()
	defer logitsMu.Unlock()
	if l, ok := logitsCache[path]; ok {
		return l
	}
	l := forward(t, open(t, path).LanguageModel, testTokens)
	logitsCache[path] = l
	return l
}

// dequantLogits returns the logits of testTokens computed from the values
// a GGUF file stores, decoded to float32 and multiplied in float32: what
// the file's weights compute, independent of how the engine's kernels
// multiply quantised weights (kernels.ExactQuant: int8 activations for
// Q8_0 by default, as llama.cpp).
func dequantLogits(t *testing.T, path string) []float32 {
	t.Helper()
	g := open(t, path)
	src := &fixtures.Model{Config: g.Config, Tensors: map[string]*tensor.Tensor{}}
	for _, ti := range g.GGUF.Tensors {
		tt, err := g.GGUF.Tensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		src.Tensors[ti.Name] = fixtures.F32Tensor(ti.Name, tt.Shape, v)
	}
	lm, err := model.New(g.Config, src)
	if err != nil {
		t.Fatal(err)
	}
	return forward(t, lm, testTokens)
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		m = max(m, d)
	}
	return m
}

func maxAbs(a []float32) float64 {
	var m float64
	for _, v := range a {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// convertTo converts src to a new file in a temporary folder.
func convertTo(t *testing.T, src string, opt Options) (string, *Result) {
	t.Helper()
	m, err := loader.Open(src, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	dst := filepath.Join(t.TempDir(), "out.gguf")
	res, err := Convert(context.Background(), m, dst, opt)
	if err != nil {
		t.Fatal(err)
	}
	return dst, res
}

// openGGUF parses a GGUF file for the test.
func openGGUF(t *testing.T, path string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// sameTensors checks that two GGUF files hold the same tensors, in the
// same order, with identical types, dimensions and bytes.
func sameTensors(t *testing.T, got, want string) {
	t.Helper()
	g, w := openGGUF(t, got), openGGUF(t, want)
	if len(g.Tensors) != len(w.Tensors) {
		t.Fatalf("%d tensors, want %d", len(g.Tensors), len(w.Tensors))
	}
	for i := range w.Tensors {
		gi, wi := &g.Tensors[i], &w.Tensors[i]
		if gi.Name != wi.Name || gi.Type != wi.Type || !equalDims(gi.Dims, wi.Dims) {
			t.Errorf("tensor %d: %s %v %v, want %s %v %v", i, gi.Name, gi.Type, gi.Dims, wi.Name, wi.Type, wi.Dims)
			continue
		}
		gb, _ := g.TensorBytes(gi.Name)
		wb, _ := w.TensorBytes(wi.Name)
		if string(gb) != string(wb) {
			t.Errorf("%s: bytes differ", gi.Name)
		}
	}
}

func equalDims(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Vendored fixtures (shared/testdata) and their expected logits.
const testdata = "../testdata"

package loader_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// withYarnKeys copies the GGUF at path adding the YaRN keys llama.cpp's
// converter writes for xai-org/grok-2's config.json.
func withYarnKeys(t *testing.T, path string) string {
	t.Helper()
	src, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w := gguf.NewWriter()
	for _, p := range src.Metadata {
		w.AddKV(p.Key, p.Value)
	}
	for _, kv := range []struct {
		k string
		v any
	}{
		{"grok.rope.scaling.type", "yarn"}, {"grok.rope.scaling.factor", float32(16)},
		{"grok.rope.scaling.original_context_length", uint32(8192)}, {"grok.rope.scaling.yarn_ext_factor", float32(1)},
		{"grok.rope.scaling.yarn_attn_factor", float32(1)}, {"grok.rope.scaling.yarn_beta_fast", float32(8)},
		{"grok.rope.scaling.yarn_beta_slow", float32(1)},
	} {
		w.AddKV(kv.k, kv.v)
	}
	for _, ti := range src.Tensors {
		if err := w.AddTensorOf(src, ti); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "yarn.gguf")
	if err := w.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// --rope-scaling yarn on the Hugging Face release reads config.json's YaRN
// keys as llama.cpp reads the GGUF its converter writes from them: the
// same parameters, and the same logits bit for bit as that GGUF's; a
// config without them is refused naming the missing keys.
func TestGrok2RopeScalingYarnHF(t *testing.T) {
	m := fixtures.Random(fixtures.Grok2SmallConfig(), 9, fixtures.ModerateGains)
	dir := t.TempDir()
	g := filepath.Join(dir, "m.gguf")
	if err := fixtures.WriteGGUF(g, m, fixtures.GGUFOptions{Type: tensor.F32}); err != nil {
		t.Fatal(err)
	}
	hf := filepath.Join(dir, "hf")
	if err := os.Mkdir(hf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fixtures.WriteGrok2Safetensors(hf, m, fixtures.Grok2Options{DType: "F32", TP: 2}); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(hf, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	toks := []int{1, 5, 9, 17, 33, 65, 100, 200, 250, 7, 3}
	open := func(path string) ([]float32, model.YarnScaling, error) {
		lm, err := loader.Open(path, loader.Options{RopeScaling: "yarn"})
		if err != nil {
			return nil, model.YarnScaling{}, err
		}
		defer lm.Close()
		l, err := testmodel.FullLogits(lm.LanguageModel, toks)
		if err != nil {
			t.Fatal(err)
		}
		return l, lm.Config.Yarn, nil
	}
	// Without the keys (the fixture writes none).
	if _, _, err := open(hf); err == nil || !strings.Contains(err.Error(), "lacks scaling_factor, extrapolation_factor, attn_factor, beta_fast, beta_slow, original_max_position_embeddings") {
		t.Errorf("config without YaRN keys: %v", err)
	}
	// xai-org/grok-2's values, and what llama.cpp's converter writes for them.
	for k, v := range map[string]any{"scaling_factor": 16, "original_max_position_embeddings": 8192, "extrapolation_factor": 1,
		"attn_factor": 1, "beta_fast": 8, "beta_slow": 1} {
		cfg[k] = v
	}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	got, y, err := open(hf)
	if err != nil {
		t.Fatal(err)
	}
	want, wy, err := open(withYarnKeys(t, g))
	if err != nil {
		t.Fatal(err)
	}
	if y != wy || !y.On() {
		t.Errorf("config.json's YaRN %+v, the GGUF's %+v", y, wy)
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("logit %d: %v from config.json, %v from the GGUF", i, got[i], want[i])
		}
	}
}

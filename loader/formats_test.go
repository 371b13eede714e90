package loader

import (
	"github.com/grok-go/grok/internal/testmodel"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/model"
)

// Each fixture of shared/testdata (vendored in testdata/) ships the logits an
// independent float64 implementation computes on exactly its stored values:
// the xAI int8 checkpoint (dequantised per shard) and the bf16 safetensors.
func TestFormatFixturesLogits(t *testing.T) {
	for _, tc := range []struct{ dir, format string }{
		{"../testdata/xai-ckpt-tiny", "xai"},
		{"../testdata/xai-ckpt-tiny/ckpt-0", "xai"},
		{"../testdata/hf-safetensors-tiny", "safetensors"},
		{"../testdata/hf-safetensors-tiny/model.safetensors.index.json", "safetensors"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			m, err := Open(tc.dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Format != tc.format {
				t.Errorf("format %q, want %q", m.Format, tc.format)
			}
			fixture := tc.dir
			if strings.HasSuffix(fixture, ".json") || strings.HasSuffix(fixture, "ckpt-0") {
				fixture = filepath.Dir(fixture)
			}
			toks := testmodel.ReadTokens(t, fixture)
			for _, name := range []string{"len7", "len64"} {
				want := testmodel.ReadLogits(t, filepath.Join(fixture, "logits_"+name+".f32"))
				mem, _ := model.NewKVMemory(&m.Config, 1, 0)
				got, err := m.Forward(mem, []model.Input{{Tokens: toks[name], AllLogits: true}})
				if err != nil {
					t.Fatal(err)
				}
				compareLogits(t, got, want, m.Config.VocabSize, goldenMaxAbs)
				// Incremental through the KV memory as well.
				mem, _ = model.NewKVMemory(&m.Config, 1, 0)
				var inc []float32
				for _, tok := range toks[name] {
					out, err := m.Forward(mem, []model.Input{{Tokens: []int{tok}}})
					if err != nil {
						t.Fatal(err)
					}
					inc = append(inc, out...)
				}
				compareLogits(t, inc, want, m.Config.VocabSize, goldenMaxAbs)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"../testdata", "no model format recognised"},
		{"/nonexistent/model.gguf", "no such file"},
		{"loader.go", "unknown model format"},
		{"../testdata/grok-tiny/tokens.json", "unknown model format"},
	} {
		_, err := Open(tc.path, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want it to mention %q", tc.path, err, tc.want)
		}
	}
}

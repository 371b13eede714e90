package loader

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
)

// The golden data of testdata/grok2-tiny (vendored from shared/testdata; its
// README explains the model): logits of an independent float64
// implementation of SGLang's Grok-2, rounded to float32. The smallest of
// the Grok-2 features moves len64's logits by 4.0 (renormalised gates), so
// 1e-3 (goldenMaxAbs) catches any of them.
const grok2Dir = "../testdata/grok2-tiny"

// grok2Manifest is the part of manifest.json the tests read.
type grok2Manifest struct {
	Config struct {
		DenseFFNSize       int     `json:"dense_ffn_size"`
		RouterLogitCap     float32 `json:"router_logit_cap"`
		FinalLogitCap      float32 `json:"final_logit_cap"`
		AttnTemperatureLen int     `json:"attn_temperature_len"`
		RopeBase           float32 `json:"rope_base"`
		FFNSize            int     `json:"ffn_size"`
		EmbeddingScale     float32 `json:"embedding_multiplier_scale"`
		OutputScale        float32 `json:"output_multiplier_scale"`
	}
	Greedy map[string]struct {
		Prompt    string
		XAI       []int  `json:"xai"`
		StepsFile string `json:"xai_steps_file"`
	}
}

func readGrok2Manifest(t *testing.T) grok2Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(grok2Dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m grok2Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func openGrok2(t *testing.T) *Model {
	t.Helper()
	m, err := Open(filepath.Join(grok2Dir, "grok2-tiny.gguf"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// A Grok-2 GGUF reads as Grok-2: its dense MLP, both soft-caps, the
// temperature and the untied output; a Grok-1 file keeps ignoring the
// router soft-cap key llama.cpp writes into it.
func TestGrok2Config(t *testing.T) {
	m := openGrok2(t)
	want := readGrok2Manifest(t).Config
	c := m.Config
	got := []any{c.DenseFFNSize, c.RouterLogitCap, c.FinalLogitCap, c.AttnTemperatureLen, c.RopeBase, c.FFNSize, c.EmbeddingMultiplierScale, c.OutputMultiplierScale, c.UntiedOutput}
	exp := []any{want.DenseFFNSize, want.RouterLogitCap, want.FinalLogitCap, want.AttnTemperatureLen, want.RopeBase, want.FFNSize, want.EmbeddingScale, want.OutputScale, true}
	if !slices.Equal(got, exp) {
		t.Errorf("grok2-tiny config %v, want %v", got, exp)
	}
	if !IsGrok2(m.GGUF) || len(m.Warnings) != 0 {
		t.Errorf("IsGrok2 = %v, warnings %q", IsGrok2(m.GGUF), m.Warnings)
	}

	g1 := openGolden(t, "grok-tiny.gguf")
	if v, ok := g1.GGUF.Float("grok.router_logit_softcapping"); !ok || v != 30 {
		t.Fatalf("grok-tiny.gguf: router_logit_softcapping = %v, %v; the test needs the key llama.cpp writes", v, ok)
	}
	if IsGrok2(g1.GGUF) || g1.Config.RouterLogitCap != 0 || g1.Config.DenseFFNSize != 0 || g1.Config.UntiedOutput {
		t.Errorf("grok-tiny reads as Grok-2: %+v", g1.Config)
	}
}

func TestGrok2GoldenLogits(t *testing.T) {
	m := openGrok2(t)
	V := m.Config.VocabSize
	toks := testmodel.ReadTokens(t, grok2Dir)
	names := []string{"len7", "len64", "len100"}
	full := map[string][]float32{}
	for _, name := range names {
		want := testmodel.ReadLogits(t, filepath.Join(grok2Dir, "xai", "logits_"+name+".f32"))
		t.Run(name+"/full", func(t *testing.T) {
			got, err := testmodel.FullLogits(m.LanguageModel, toks[name])
			if err != nil {
				t.Fatal(err)
			}
			compareLogits(t, got, want, V, goldenMaxAbs)
			full[name] = got
		})
		t.Run(name+"/incremental", func(t *testing.T) {
			mem, err := model.NewKVMemory(&m.Config, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []float32
			for _, tok := range toks[name] {
				out, err := m.Forward(mem, []model.Input{{Tokens: []int{tok}}})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, out...)
			}
			if d := testmodel.MaxAbsDiff(got, full[name]); d != 0 {
				t.Errorf("incremental vs full pass: max |Δ| = %g, want bit-identical", d)
			}
		})
	}
	// The three sequences as one ragged batch give each the bits of its
	// full pass alone.
	t.Run("batch", func(t *testing.T) {
		mem, _ := model.NewKVMemory(&m.Config, 3, 0)
		var in []model.Input
		for i, name := range names {
			in = append(in, model.Input{Slot: i, Tokens: toks[name], AllLogits: true})
		}
		got, err := m.Forward(mem, in)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for _, name := range names {
			n := len(full[name])
			if d := testmodel.MaxAbsDiff(got[off:off+n], full[name]); d != 0 {
				t.Errorf("%s: batch vs alone max |Δ| = %g, want bit-identical", name, d)
			}
			off += n
		}
	})
}

// Greedy decoding through the KV memory reproduces the golden
// continuations token for token, and each step's logits within the
// tolerance.
func TestGrok2GoldenGreedy(t *testing.T) {
	m := openGrok2(t)
	man := readGrok2Manifest(t)
	toks := testmodel.ReadTokens(t, grok2Dir)
	V := m.Config.VocabSize
	for name, g := range man.Greedy {
		t.Run(name, func(t *testing.T) {
			wantSteps := testmodel.ReadLogits(t, filepath.Join(grok2Dir, g.StepsFile))
			if len(wantSteps) != len(g.XAI)*V {
				t.Fatalf("%s has %d logits, want %d steps of %d", g.StepsFile, len(wantSteps), len(g.XAI), V)
			}
			mem, _ := model.NewKVMemory(&m.Config, 1, 0)
			logits, err := m.Forward(mem, []model.Input{{Tokens: toks[g.Prompt]}})
			if err != nil {
				t.Fatal(err)
			}
			var steps []float32
			for i, want := range g.XAI {
				steps = append(steps, logits...)
				got := argmax(logits)
				if got != want {
					t.Fatalf("step %d: token %d, want %d", i, got, want)
				}
				if logits, err = m.Forward(mem, []model.Input{{Tokens: []int{got}}}); err != nil {
					t.Fatal(err)
				}
			}
			compareLogits(t, steps, wantSteps, V, goldenMaxAbs)
		})
	}
}

// grok2YarnKeys are the YaRN keys llama.cpp's converter writes for
// Grok-2's "original" RoPE (conversion/grok.py, from config.json).
var grok2YarnKeys = map[string]any{
	"grok.rope.scaling.type":                    "yarn",
	"grok.rope.scaling.factor":                  float32(16),
	"grok.rope.scaling.original_context_length": uint32(8192),
	"grok.rope.scaling.yarn_ext_factor":         float32(1),
	"grok.rope.scaling.yarn_attn_factor":        float32(1),
	"grok.rope.scaling.yarn_beta_fast":          float32(8),
	"grok.rope.scaling.yarn_beta_slow":          float32(1),
}

// By default the engine ignores a Grok-2 file's YaRN keys (plain RoPE, as
// SGLang) and says so in Warnings: the logits are the golden ones, bit for
// bit those of the file without the keys.
func TestGrok2RopeScalingIgnored(t *testing.T) {
	toks := testmodel.ReadTokens(t, grok2Dir)["len64"]
	logits := func(path string, opt Options) ([]float32, *Model) {
		m, err := Open(path, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		got, err := testmodel.FullLogits(m.LanguageModel, toks)
		if err != nil {
			t.Fatal(err)
		}
		return got, m
	}
	plain, _ := logits(filepath.Join(grok2Dir, "grok2-tiny.gguf"), Options{})
	path := rewriteFrom(t, filepath.Join(grok2Dir, "grok2-tiny.gguf"), grok2YarnKeys, "", "")
	for _, rs := range []string{"", "none"} {
		got, m := logits(path, Options{RopeScaling: rs})
		if len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "grok.rope.scaling.type") || !strings.Contains(m.Warnings[0], "plain RoPE") {
			t.Errorf("%q: warnings %q, want one about the ignored RoPE scaling", rs, m.Warnings)
		}
		if m.Config.Yarn.On() {
			t.Errorf("%q: YaRN on: %+v", rs, m.Config.Yarn)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(plain[i]) {
				t.Fatalf("%q: logit %d is %v, %v without the YaRN keys", rs, i, got[i], plain[i])
			}
		}
	}
	compareLogits(t, plain, testmodel.ReadLogits(t, filepath.Join(grok2Dir, "xai", "logits_len64.f32")), 512, goldenMaxAbs)
	// With --rope-scaling yarn the keys act, and move the logits.
	got, m := logits(path, Options{RopeScaling: "yarn"})
	if len(m.Warnings) != 0 || !m.Config.Yarn.On() {
		t.Fatalf("yarn: warnings %q, config %+v", m.Warnings, m.Config.Yarn)
	}
	if d := maxAbsDiff(got, plain); d < 0.1 {
		t.Errorf("YaRN moved the logits by only %g", d)
	}
}

// --rope-scaling yarn reads the keys as llama.cpp does for arch grok:
// its defaults for absent keys (beta_fast 8, beta_slow 1, ext_factor 1,
// the original context = context_length), and an attn_factor that cancels
// ggml's own 1 + 0.1·ln(factor) when ext_factor ≠ 0, times
// rope.scaling.attn_factor.
func TestGrok2RopeScalingYarn(t *testing.T) {
	cancel := func(s float64) float32 {
		m := 0.1*float32(math.Log(s)) + 1
		return m * (1 / (1 + 0.1*float32(math.Log(s))))
	}
	with := func(kv map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range grok2YarnKeys {
			out[k] = v
		}
		for k, v := range kv {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name string
		kv   map[string]any
		want model.YarnScaling
	}{
		{"llama.cpp's conversion", grok2YarnKeys, model.YarnScaling{Factor: 16, OrigContext: 8192, ExtFactor: 1, AttnFactor: cancel(16), BetaFast: 8, BetaSlow: 1}},
		{"only type and factor", map[string]any{"grok.rope.scaling.type": "yarn", "grok.rope.scaling.factor": float32(4)},
			model.YarnScaling{Factor: 4, OrigContext: 256, ExtFactor: 1, AttnFactor: cancel(4), BetaFast: 8, BetaSlow: 1}},
		{"ext_factor 0", with(map[string]any{"grok.rope.scaling.yarn_ext_factor": float32(0), "grok.rope.scaling.yarn_attn_factor": float32(0.9)}),
			model.YarnScaling{Factor: 16, OrigContext: 8192, ExtFactor: 0, AttnFactor: 0.9, BetaFast: 8, BetaSlow: 1}},
		{"rope attn_factor", with(map[string]any{"grok.rope.scaling.attn_factor": float32(0.5), "grok.rope.scaling.yarn_beta_fast": float32(32)}),
			model.YarnScaling{Factor: 16, OrigContext: 8192, ExtFactor: 1, AttnFactor: cancel(16) * 0.5, BetaFast: 32, BetaSlow: 1}},
		{"no factor", map[string]any{"grok.rope.scaling.type": "yarn"},
			model.YarnScaling{Factor: 1, OrigContext: 256, ExtFactor: 1, AttnFactor: 1 / (1 + 0.1*float32(math.Log(1))), BetaFast: 8, BetaSlow: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Open(rewriteFrom(t, filepath.Join(grok2Dir, "grok2-tiny.gguf"), tc.kv, "", ""), Options{RopeScaling: "yarn"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Config.Yarn != tc.want {
				t.Errorf("Yarn = %+v, want %+v", m.Config.Yarn, tc.want)
			}
			if m.Transformer.Layers[0].Attention.Rotary.Yarn != tc.want {
				t.Errorf("the layers' RoPE has %+v", m.Transformer.Layers[0].Attention.Rotary.Yarn)
			}
		})
	}
	for _, tc := range []struct {
		name, path, rs, want string
	}{
		{"file without YaRN", filepath.Join(grok2Dir, "grok2-tiny.gguf"), "yarn", "grok.rope.scaling.type is absent"},
		{"unknown scaling", filepath.Join(grok2Dir, "grok2-tiny.gguf"), "linear", `unknown RoPE scaling "linear"`},
		{"Grok-1 safetensors", "../testdata/hf-safetensors-tiny", "yarn", "rope_type is absent"},
		{"xAI checkpoint", "../testdata/xai-ckpt-tiny", "yarn", "an xAI checkpoint has none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Open(tc.path, Options{RopeScaling: tc.rs})
			if err == nil {
				m.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// The final soft-cap acts wherever a file sets it, Grok-1 files included:
// grok-tiny with final_logit_softcapping = 20 gives 20·tanh(golden/20).
func TestFinalSoftcapGrok1File(t *testing.T) {
	m, err := Open(rewrite(t, map[string]any{"grok.final_logit_softcapping": float32(20)}, "", ""), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config.FinalLogitCap != 20 {
		t.Fatalf("FinalLogitCap = %v, want 20", m.Config.FinalLogitCap)
	}
	want := testmodel.ReadLogits(t, filepath.Join(goldenDir, "logits_len64.f32"))
	for i, v := range want {
		want[i] = float32(20 * math.Tanh(float64(v)/20))
	}
	got, err := testmodel.FullLogits(m.LanguageModel, testmodel.ReadTokens(t, goldenDir)["len64"])
	if err != nil {
		t.Fatal(err)
	}
	compareLogits(t, got, want, m.Config.VocabSize, goldenMaxAbs)
}

// Grok-2 files that cannot make a model fail naming the problem.
func TestGrok2ModelErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   map[string]any
		drop string
		want string
	}{
		{"dense width disagrees", map[string]any{"grok.feed_forward_length": uint32(128)}, "", "grok.feed_forward_length = 128, but blk.0.ffn_gate.weight has shape"},
		{"no lm_head", nil, "output.weight", `missing tensor "output.weight"`},
		{"a layer without its dense MLP", nil, "blk.1.ffn_up.weight", `missing tensor "blk.1.ffn_up.weight"`},
		{"negative router softcap", map[string]any{"grok.router_logit_softcapping": float32(-30)}, "", "router logit cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(rewriteFrom(t, filepath.Join(grok2Dir, "grok2-tiny.gguf"), tc.kv, "", tc.drop), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// maxAbsDiff is the largest |a[i] - b[i]|.
func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

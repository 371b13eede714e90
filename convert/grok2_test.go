package convert

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/tensor"
)

// grok2TokJSON writes a small Grok-2-style tokenizer.tok.json: <|pad|>,
// <|separator|>, <|eos|> at ids 0-2 (eos is 2, as SGLang has it), the 256
// bytes, then merged tokens, 300 ids in all.
func grok2TokJSON(t *testing.T, dir string) string {
	type tok struct {
		Bytes []int `json:"bytes"`
		Token int   `json:"token"`
	}
	bl := func(s string) []int {
		out := []int{}
		for i := range len(s) {
			out = append(out, int(s[i]))
		}
		return out
	}
	var reg []tok
	for c := range 256 {
		reg = append(reg, tok{[]int{c}, 3 + c})
	}
	words := []string{"th", "he", "the", " t", " the", "in", " a", "an", "and", " and", "er", "re", "on", " o", " of",
		"es", "en", "ed", "at", "is", " i", " w", "ou", "or", "ing", " s", " c", " b", "ll", "as", "it", " h", "ar",
		"nd", " he", "ha", "hi", " m", " f", " th", " to"}
	for i, w := range words {
		reg = append(reg, tok{bl(w), 259 + i})
	}
	sp := []tok{{bl("<|pad|>"), 0}, {bl("<|separator|>"), 1}, {bl("<|eos|>"), 2}}
	n := 259 + len(words)
	b, err := json.Marshal(map[string]any{"word_split": "V1", "regular_tokens": reg, "special_tokens": sp, "vocab_size": n})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "tokenizer.tok.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A Grok-2 model converts to GGUF as llama.cpp lays Grok-2 out (dense
// ffn_gate/up/down, post_ffw_norm, output; the soft-cap and temperature
// keys, no YaRN) from a GGUF and from the Hugging Face release's layout,
// and the result computes the source's logits bit for bit (F32; BF16 kept
// from BF16 sources). Its BPE tokenizer is embedded as a gpt2 vocabulary
// that reads back into the same encoder.
func TestConvertGrok2(t *testing.T) {
	m := fixtures.Random(fixtures.Grok2SmallConfig(), 11, fixtures.ModerateGains)
	dir := t.TempDir()
	src := map[string]string{"gguf": filepath.Join(dir, "g.gguf"), "hf": filepath.Join(dir, "hf")}
	if err := fixtures.WriteGGUF(src["gguf"], m, fixtures.GGUFOptions{Type: tensor.BF16}); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(src["hf"], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fixtures.WriteGrok2Safetensors(src["hf"], m, fixtures.Grok2Options{DType: "BF16", TP: 8}); err != nil {
		t.Fatal(err)
	}
	vocab := loadVocab(t, grok2TokJSON(t, dir))
	texts := []string{"the and of", "Hello, world! 12345", "<|separator|>\n\nAssistant:", "ünïcödé 漢字 🙂", ""}
	want := logitsOf(t, src["gguf"])
	for _, name := range []string{"gguf", "hf"} {
		for _, typ := range []Type{Keep, F32, BF16} {
			t.Run(name+"/"+typ.String(), func(t *testing.T) {
				dst, res := convertTo(t, src[name], Options{Type: typ, Tokenizer: vocab})
				if len(res.Warnings) != 0 {
					t.Errorf("warnings %q", res.Warnings)
				}
				g := openGGUF(t, dst)
				for _, n := range []string{"blk.0.ffn_gate.weight", "blk.1.ffn_down.weight", "blk.0.post_ffw_norm.weight", "output.weight"} {
					if _, ok := g.Info(n); !ok {
						t.Errorf("no tensor %s", n)
					}
				}
				if _, ok := g.Info("blk.0.layer_output_norm.weight"); ok {
					t.Error("Grok-1's layer_output_norm written for Grok-2")
				}
				if v, _ := g.Float("grok.final_logit_softcapping"); v != 50 {
					t.Errorf("grok.final_logit_softcapping = %v", v)
				}
				if v, _ := g.Int("grok.attention.temperature_length"); v != 8 {
					t.Errorf("grok.attention.temperature_length = %v", v)
				}
				if _, ok := g.Get("grok.rope.scaling.type"); ok {
					t.Error("a RoPE scaling key written")
				}
				if s, _ := g.String("tokenizer.ggml.model"); s != "gpt2" {
					t.Errorf("tokenizer.ggml.model = %q", s)
				}
				out := open(t, dst)
				d := maxAbsDiff(forward(t, out.LanguageModel, testTokens), want)
				if d != 0 {
					t.Errorf("logits max |Δ| = %g, want bit-identical", d)
				}
				back, ok := out.Tokenizer.(loader.BPE)
				if !ok {
					t.Fatalf("tokenizer %T, want loader.BPE", out.Tokenizer)
				}
				if back.VocabSize() != m.Config.VocabSize || back.EOS() != 2 {
					t.Errorf("read-back vocabulary %d, eos %d", back.VocabSize(), back.EOS())
				}
				for _, s := range texts {
					if a, b := vocab.Encode(s), back.Encode(s); !slices.Equal(a, b) {
						t.Errorf("%q: tok.json gives %v, the GGUF vocabulary %v", s, a, b)
					}
				}
			})
		}
	}
	// Quantised: Q8_0 and a K-quant mixture convert and compute finite
	// logits close to the source's.
	for _, typ := range []Type{Q8_0, Q4_K_M} {
		t.Run("hf/"+typ.String(), func(t *testing.T) {
			dst, _ := convertTo(t, src["hf"], Options{Type: typ})
			got := forward(t, open(t, dst).LanguageModel, testTokens)
			d := maxAbsDiff(got, want)
			if math.IsNaN(d) || d > 0.5*maxAbs(want) {
				t.Errorf("max |Δ| = %g against max |logit| %g", d, maxAbs(want))
			}
			t.Logf("max |Δ| = %.3g (max |logit| %.3g)", d, maxAbs(want))
		})
	}
}

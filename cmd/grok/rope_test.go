package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
)

const grok2Tiny = "../../testdata/grok2-tiny/grok2-tiny.gguf"

// withYarnKeys copies grok2-tiny adding the YaRN keys llama.cpp's
// converter writes for Grok-2.
func withYarnKeys(t *testing.T) string {
	t.Helper()
	src, err := gguf.Open(grok2Tiny)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w := gguf.NewWriter()
	for _, p := range src.Metadata {
		w.AddKV(p.Key, p.Value)
	}
	for k, v := range map[string]any{
		"grok.rope.scaling.type": "yarn", "grok.rope.scaling.factor": float32(16),
		"grok.rope.scaling.original_context_length": uint32(8192),
		"grok.rope.scaling.yarn_beta_fast":          float32(8), "grok.rope.scaling.yarn_beta_slow": float32(1),
	} {
		w.AddKV(k, v)
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

// --rope-scaling yarn applies a Grok-2 GGUF's YaRN keys (other logits than
// the default, which ignores them with a warning); bad uses are refused.
func TestRopeScalingFlag(t *testing.T) {
	path := withYarnKeys(t)
	dir := t.TempDir()
	logits := func(extra ...string) []byte {
		out := filepath.Join(dir, "l.f32")
		args := append([]string{"logits", "-m", path, "--tokens", "1,5,9,17,33,65,100,200,300,400", "-o", out}, extra...)
		_, e, code := grok(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	plain, none, yarn := logits(), logits("--rope-scaling", "none"), logits("--rope-scaling", "yarn")
	if !bytes.Equal(plain, none) {
		t.Error("--rope-scaling none changed the logits")
	}
	if bytes.Equal(plain, yarn) {
		t.Error("--rope-scaling yarn left the logits as they were")
	}
	if o, e, code := grok(t, "inspect", "-m", path, "--rope-scaling", "yarn"); code != 0 || !strings.Contains(o, "yarn (factor 16, original context 8192, ext_factor 1, attn_factor 1, beta_fast 8, beta_slow 1)") {
		t.Errorf("inspect --rope-scaling yarn: exit %d: %s %s", code, o, e)
	}
	if o, _, _ := grok(t, "inspect", "-m", path); strings.Contains(o, "rope_scaling") {
		t.Errorf("inspect without the option shows a RoPE scaling")
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"logits", "-m", grok2Tiny, "--tokens", "1,2", "--rope-scaling", "yarn"}, 1, "no YaRN to apply"},
		{[]string{"logits", "-m", path, "--tokens", "1,2", "--rope-scaling", "linear"}, 1, `unknown RoPE scaling "linear"`},
		{[]string{"logits", "--tokens", "1,2", "--rope-scaling", "yarn"}, 2, "needs -m MODEL"},
	} {
		_, e, code := grok(t, tc.args...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, e, tc.code, tc.want)
		}
	}
}

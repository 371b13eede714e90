package loader

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
)

// rewrite copies the golden GGUF with edits: metadata values replaced or
// dropped (nil), and tensors replaced by a Q4_K stand-in or dropped.
func rewrite(t *testing.T, kv map[string]any, q4k, drop string) string {
	t.Helper()
	return rewriteFrom(t, filepath.Join(goldenDir, "grok-tiny.gguf"), kv, q4k, drop)
}

// rewriteFrom is rewrite of the GGUF file at path.
func rewriteFrom(t *testing.T, path string, kv map[string]any, q4k, drop string) string {
	t.Helper()
	src, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w := gguf.NewWriter()
	seen := map[string]bool{}
	for _, p := range src.Metadata {
		seen[p.Key] = true
		if v, ok := kv[p.Key]; ok {
			if v != nil {
				w.AddKV(p.Key, v)
			}
			continue
		}
		w.AddKV(p.Key, p.Value)
	}
	for k, v := range kv {
		if !seen[k] && v != nil {
			w.AddKV(k, v)
		}
	}
	for _, ti := range src.Tensors {
		switch ti.Name {
		case drop:
			continue
		case q4k:
			n := int64(1)
			for _, d := range ti.Dims {
				n *= d
			}
			blocks := n / 256
			// Q8_K: ggml's intermediate type, which no model file stores.
			w.AddGGMLTensor(ti.Name, gguf.GGMLTypeQ8_K, []int64{256, blocks}, blocks*292, func(w io.Writer) error {
				_, err := w.Write(make([]byte, blocks*292))
				return err
			})
			continue
		}
		if err := w.AddTensorOf(src, ti); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	if err := w.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Files that parse as GGUF but cannot make a model fail with an error that
// names the problem.
func TestGGUFModelErrors(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kv        map[string]any
		q4k, drop string
		want      string
	}{
		{"unsupported dtype", nil, "blk.0.attn_q.weight", "", "Q8_K is not supported"},
		{"missing tensor", nil, "", "blk.1.ffn_up_exps.weight", `missing tensor "blk.1.ffn_up.0.weight"`},
		{"wrong architecture", map[string]any{"general.architecture": "llama"}, "", "", `"llama"; this engine runs arch "grok"`},
		{"missing block count", map[string]any{"grok.block_count": nil}, "", "", "grok.block_count"},
		{"heads not divisible", map[string]any{"grok.attention.head_count_kv": uint32(3)}, "", "", "not divisible"},
		{"top-k over experts", map[string]any{"grok.expert_used_count": uint32(5)}, "", "", "num_selected_experts"},
		{"shape disagrees with config", map[string]any{"grok.embedding_length": uint32(64)}, "", "", "has shape"},
		{"rope scaling in a Grok-1 file", map[string]any{"grok.rope.scaling.type": "yarn"}, "", "", "RoPE scaling is not supported"},
		{"temperature length 1", map[string]any{"grok.attention.temperature_length": uint32(1)}, "", "", "attn_temperature_len"},
		{"negative final softcap", map[string]any{"grok.final_logit_softcapping": float32(-1)}, "", "", "final logit cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(rewrite(t, tc.kv, tc.q4k, tc.drop), Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	// The untouched copy loads.
	m, err := Open(rewrite(t, nil, "", ""), Options{})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

// GGUFMetadata and ConfigFromGGUF are inverses.
func TestGGUFMetadataRoundTrip(t *testing.T) {
	m := openGolden(t, "grok-tiny.gguf")
	want := m.Config
	w := gguf.NewWriter()
	for _, kv := range GGUFMetadata("x", &want) {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	w.AddKV("tokenizer.ggml.padding_token_id", uint32(want.PadToken))
	w.AddKV("tokenizer.ggml.eos_token_id", uint32(want.EOSToken))
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got, err := ConfigFromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/fixtures"
)

const (
	xaiTiny    = "../../testdata/xai-ckpt-tiny"
	tinyQ8Ref  = "../../testdata/grok-tiny/grok-tiny-q8_0.gguf"
	hfTinyPath = "../../testdata/hf-safetensors-tiny"
)

// Bad command lines exit 2 with the usage, failures exit 1 with a message;
// neither panics nor leaves a file behind.
func TestConvertCommandErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.gguf")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"convert"}, 2, "-i SRC is required"},
		{[]string{"convert", "-i", tiny}, 2, "-o DST.gguf is required"},
		{[]string{"convert", "-o", out}, 2, "-i SRC is required"},
		{[]string{"convert", "-i", tiny, "-o", out, "--type", "iq2_xxs"}, 2, `unknown type "iq2_xxs"`},
		{[]string{"convert", "-i", tiny, "-o", out, "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"convert", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"convert", "-i", "/nonexistent/model", "-o", out}, 1, "no such file"},
		{[]string{"convert", "-i", "main.go", "-o", out}, 1, "unknown model format"},
		{[]string{"convert", "-i", tiny, "-o", filepath.Join(dir, "missing", "out.gguf")}, 1, "output folder"},
		{[]string{"convert", "-i", tiny, "-o", dir}, 1, "is a folder"},
		{[]string{"convert", "-i", tiny, "-o", tiny}, 1, "is the input file"},
		{[]string{"convert", "-i", tiny, "-o", out, "--tokenizer", "/nonexistent/tokenizer.model"}, 1, "no such file"},
		// xai-ckpt-tiny's attention output has 8 scale shards of 16 rows:
		// Q8_0 blocks of 32 would mix two scales, so keep must refuse.
		{[]string{"convert", "-i", xaiTiny, "-o", out, "--type", "keep"}, 1, "cannot be kept in Q8_0"},
		{[]string{"quantize"}, 2, "IN.gguf and OUT.gguf are required"},
		{[]string{"quantize", tiny}, 2, "IN.gguf and OUT.gguf are required"},
		{[]string{"quantize", tiny, out, "tq1_0"}, 2, "unknown quantisation type"},
		{[]string{"quantize", tiny, out, "iq2_xxs"}, 1, "IQ2_XXS needs an importance matrix, which grok quantize does not take"},
		{[]string{"quantize", tiny, out, "q8_0", "x"}, 2, `unexpected argument "x"`},
		{[]string{"quantize", "main.go", out}, 1, "not a GGUF file"},
		{[]string{"quantize", tiny, filepath.Join(dir, "missing", "out.gguf")}, 1, "output folder"},
		{[]string{"quantize", "--split-max-size", "1K", tiny, out}, 2, "supported units are M"},
		{[]string{"quantize", "--split-max-size", "0M", tiny, out}, 2, "positive whole number"},
	} {
		_, e, code := grok(t, tc.args...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, e, tc.code, tc.want)
		}
		if code == 2 && !strings.Contains(e, "usage: grok "+tc.args[0]) {
			t.Errorf("%v: no usage line in %q", tc.args, e)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed commands left %v", ents)
	}
	if _, _, code := grok(t, "convert", "-h"); code != 0 {
		t.Errorf("convert -h: exit %d", code)
	}
}

func TestConvertCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "xai.gguf")
	_, e, code := grok(t, "convert", "-i", xaiTiny, "-o", out, "--type", "f32", "--tokenizer", tiny, "-v", "--name", "xai-tiny")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, want := range []string{"[ 1/26] token_embd.weight", "I8 [in,out]", "wrote " + out, "26 tensors"} {
		if !strings.Contains(e, want) {
			t.Errorf("stderr lacks %q:\n%s", want, e)
		}
	}
	// The converted file is a model like any other.
	o, e, code := grok(t, "inspect", "-m", out)
	if code != 0 || !strings.Contains(o, "blk.1.ffn_down_exps.weight") {
		t.Errorf("inspect: exit %d: %s %s", code, o, e)
	}
	// Quiet without -v (stderr is not a terminal here): one summary line.
	out2 := filepath.Join(dir, "hf.gguf")
	_, e, code = grok(t, "convert", "-i", hfTinyPath, "-o", out2)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	if strings.Count(e, "\n") != 2 || !strings.Contains(e, "no tokenizer") {
		t.Errorf("stderr without -v:\n%s", e)
	}
}

// grok quantize writes exactly the file llama-quantize wrote for the same
// input.
func TestQuantizeCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "q8.gguf")
	if _, e, code := grok(t, "quantize", tiny, out); code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	got, _ := os.ReadFile(out)
	want, _ := os.ReadFile(tinyQ8Ref)
	if !bytes.Equal(got, want) {
		t.Error("grok quantize output differs from llama-quantize's")
	}

	// K-quant mixtures and gguf-split shards, with progress on stderr.
	dir := t.TempDir()
	_, e, code := grok(t, "quantize", "-v", "--split-max-size", "1M", tiny, filepath.Join(dir, "t.gguf"), "Q4_K_M")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, w := range []string{"type Q4_K_M", "blk.1.ffn_down_exps.weight", "→ Q8_0", "falling back", "general.file_type 15"} {
		if !strings.Contains(e, w) {
			t.Errorf("stderr lacks %q:\n%s", w, e)
		}
	}
	_, e, code = grok(t, "quantize", "--split-max-size", "1M", tiny, filepath.Join(dir, "b.gguf"), "bf16")
	if code != 0 || !strings.Contains(e, "b-00003-of-00003.gguf (3 shards)") {
		t.Errorf("exit %d: %s", code, e)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, en := range ents {
		names = append(names, en.Name())
	}
	if strings.Join(names, " ") != "b-00001-of-00003.gguf b-00002-of-00003.gguf b-00003-of-00003.gguf t-00001-of-00001.gguf" {
		t.Errorf("files %q", names)
	}
	if o, e, code := grok(t, "inspect", "-m", filepath.Join(dir, "b-00001-of-00003.gguf")); code != 0 || !strings.Contains(o, "BF16") {
		t.Errorf("inspect shards: exit %d: %s %s", code, o, e)
	}
}

// grok convert --type takes llama-quantize's mixture names.
func TestConvertCommandMixture(t *testing.T) {
	out := filepath.Join(t.TempDir(), "k.gguf")
	_, e, code := grok(t, "convert", "-i", xaiTiny, "-o", out, "--type", "q4_k_m", "--tokenizer", tiny)
	if code != 0 || !strings.Contains(e, "general.file_type 15") {
		t.Fatalf("exit %d: %s", code, e)
	}
	if o, e, code := grok(t, "inspect", "-m", out); code != 0 || !strings.Contains(o, "Q5_0") {
		t.Errorf("inspect: exit %d: %s %s", code, o, e)
	}
	// The IQ3 mixtures too (xai-ckpt-tiny's rows of 128 fall back to IQ4_NL).
	_, e, code = grok(t, "convert", "-i", xaiTiny, "-o", out, "--type", "iq3_m", "--tokenizer", tiny)
	if code != 0 || !strings.Contains(e, "general.file_type 27") {
		t.Fatalf("iq3_m: exit %d: %s", code, e)
	}
	if o, e, code := grok(t, "inspect", "-m", out); code != 0 || !strings.Contains(o, "IQ4_NL") {
		t.Errorf("inspect iq3_m: exit %d: %s %s", code, o, e)
	}
}

// grok convert of xai-org/grok-2's layout streams the experts'
// tensor-parallel slices: nothing is joined in memory (the loader's warning
// about it stays silent) and the file holds the merged experts.
func TestConvertCommandTPRelease(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := fixtures.Random(fixtures.Grok2SmallConfig(), 3, fixtures.ModerateGains)
	if err := fixtures.WriteGrok2Safetensors(dir, m, fixtures.Grok2Options{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "g2.gguf")
	_, e, code := grok(t, "convert", "-i", dir, "-o", out, "--type", "q8_0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	if strings.Contains(e, "joined in memory") {
		t.Errorf("convert joined the experts in memory:\n%s", e)
	}
	o, e, code := grok(t, "inspect", "-m", out)
	if code != 0 || !strings.Contains(o, "blk.1.ffn_down_exps.weight") {
		t.Errorf("inspect: exit %d: %s %s", code, o, e)
	}
}

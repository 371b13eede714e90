package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

func grok(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = runMain(args, &o, &e)
	return o.String(), e.String(), code
}

const tiny = "../../testdata/grok-tiny/grok-tiny.gguf"

func TestLogitsCommandMatchesGolden(t *testing.T) {
	var toks map[string][]int
	b, _ := os.ReadFile("../../testdata/grok-tiny/tokens.json")
	if err := json.Unmarshal(b, &toks); err != nil {
		t.Fatal(err)
	}
	join := func(ids []int) string {
		s := make([]string, len(ids))
		for i, v := range ids {
			s[i] = strconv.Itoa(v)
		}
		return strings.Join(s, ",")
	}
	want7, _ := os.ReadFile("../../testdata/grok-tiny/logits_len7.f32")
	want64, _ := os.ReadFile("../../testdata/grok-tiny/logits_len64.f32")
	for _, mode := range [][]string{nil, {"--incremental"}} {
		out := filepath.Join(t.TempDir(), "out.f32")
		args := append([]string{"logits", "-m", tiny, "--tokens", join(toks["len7"]), "--tokens", join(toks["len64"]), "-o", out}, mode...)
		if _, e, code := grok(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", mode, code, e)
		}
		got, _ := os.ReadFile(out)
		want := append(append([]byte(nil), want7...), want64...)
		if len(got) != len(want) {
			t.Fatalf("%v: %d bytes, want %d", mode, len(got), len(want))
		}
		var worst float64
		for i := 0; i < len(want); i += 4 {
			g := math.Float32frombits(binary.LittleEndian.Uint32(got[i:]))
			w := math.Float32frombits(binary.LittleEndian.Uint32(want[i:]))
			worst = max(worst, math.Abs(float64(g-w)))
		}
		if worst > 1e-3 {
			t.Errorf("%v: max |Δ| = %g", mode, worst)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"logits"}, 2, "at least one --tokens"},
		{[]string{"logits", "-m", tiny}, 2, "at least one --tokens"},
		{[]string{"logits", "-m", tiny, "--tokens", "1,x"}, 2, "bad token id"},
		{[]string{"logits", "-m", tiny, "--tokens", "1,512"}, 1, "outside the vocabulary"},
		{[]string{"logits", "-m", "/nonexistent.gguf", "--tokens", "1"}, 1, "no such file"},
		{[]string{"logits", "-m", "main.go", "--tokens", "1"}, 1, "unknown model format"},
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"tokenize", "-t", "x", "-m", "y"}, 2, "not both"},
		{[]string{"serve", "--addr", ":1", "--port", "2"}, 2, "not both"},
		{[]string{"serve", "--port", "70000"}, 2, "not a port"},
		{[]string{"run", "-p", "a", "b"}, 2, "not both"},
		{[]string{"inspect", tiny}, 2, `unexpected argument "` + tiny + `" (give the model with -m)`},
		{[]string{"logits", "--tokens", "1", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"tokenize", "-m", tiny, "hello"}, 2, `unexpected argument "hello"`},
		{[]string{"detokenize", "--", "x"}, 2, `unexpected argument "x"`},
	} {
		_, e, code := grok(t, tc.args...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, e, tc.code, tc.want)
		}
	}
	long := strings.TrimSuffix(strings.Repeat("5,", 257), ",")
	if _, e, code := grok(t, "logits", "-m", tiny, "--tokens", long); code != 1 || !strings.Contains(e, "context") {
		t.Errorf("over-long sequence: exit %d, %q", code, e)
	}
}

func TestInspect(t *testing.T) {
	o, e, code := grok(t, "inspect", "-m", tiny)
	if code != 0 {
		t.Fatal(e)
	}
	for _, want := range []string{"num_kv_heads", "blk.1.ffn_down_exps.weight", "F32", "[4 128 256]", "26 tensors"} {
		if !strings.Contains(o, want) {
			t.Errorf("inspect output lacks %q", want)
		}
	}
}

// The embedded demo model's greedy continuations equal the reference
// implementation's (samples.md), token for token.
func TestRunMatchesSamples(t *testing.T) {
	md, err := os.ReadFile("../../testdata/grok-tiny-kjv/samples.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)## Prompt \\d: \"([^\"]*)\".*?prompt ids: `(\\[[^`]*\\])`.*?PyTorch output ids: `(\\[[^`]*\\])`.*?PyTorch output text:\\s*\n\\s*\n\\s*> ([^\n]*)")
	cases := re.FindAllStringSubmatch(string(md), -1)
	if len(cases) != 3 {
		t.Fatalf("found %d sample prompts in samples.md, want 3", len(cases))
	}
	m, err := loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		var promptIDs, wantIDs []int
		json.Unmarshal([]byte(c[2]), &promptIDs)
		json.Unmarshal([]byte(c[3]), &wantIDs)
		if got := m.Tokenizer.Encode(c[1]); !equal(got, promptIDs) {
			t.Errorf("%q encodes to %v, want %v", c[1], got, promptIDs)
		}
		// Token ids through the model directly.
		mem, _ := model.NewKVMemory(&m.Config, 1, 0)
		logits, _ := m.Forward(mem, []model.Input{{Tokens: promptIDs}})
		var got []int
		for len(got) < len(wantIDs) {
			best := 0
			for i, v := range logits {
				if v > logits[best] {
					best = i
				}
			}
			got = append(got, best)
			logits, _ = m.Forward(mem, []model.Input{{Tokens: []int{best}}})
		}
		if !equal(got, wantIDs) {
			t.Errorf("%q: greedy ids %v, want %v", c[1], got, wantIDs)
		}
		// And the CLI prints the prompt and the same continuation.
		o, e, code := grok(t, "run", "--temp", "0", "-n", "64", "-q", c[1])
		if code != 0 {
			t.Fatal(e)
		}
		if strings.TrimSpace(o) != strings.TrimSpace(c[4]) {
			t.Errorf("grok run %q:\n got %q\nwant %q", c[1], o, c[4])
		}
	}
}

func equal(a, b []int) bool {
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

func TestTokenizeRoundTrip(t *testing.T) {
	in := "\"In the beginning God created\"\n\"<a & b>\"\n\"\"\n"
	var o, e bytes.Buffer
	if err := runTokenize([]string{"-t", kjvTokenizer}, strings.NewReader(in), &o, &e, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(o.String()), "\n")
	if len(lines) != 3 || lines[2] != "[]" {
		t.Fatalf("tokenize output %q", o.String())
	}
	var back bytes.Buffer
	if err := runTokenize([]string{"-t", kjvTokenizer}, strings.NewReader(o.String()), &back, &e, true); err != nil {
		t.Fatal(err)
	}
	if back.String() != in {
		t.Errorf("detokenize(tokenize(x)) = %q, want %q", back.String(), in)
	}
	if err := runTokenize([]string{"-m", tiny}, strings.NewReader("[1, 99999]\n"), &back, &e, true); err == nil {
		t.Error("out-of-range id decoded without error")
	}
	if err := runTokenize([]string{"-m", tiny}, strings.NewReader("not json\n"), &back, &e, false); err == nil {
		t.Error("bad JSON accepted")
	}
}

const kjvTokenizer = "../../tokenizer/testdata/grok-tiny-kjv/tokenizer.model"

// inspect --check names each tensor holding NaN or infinity and exits 1; a
// bad norm is refused already when the model opens.
func TestInspectCheck(t *testing.T) {
	m := fixtures.Random(fixtures.SmallConfig(), 9, fixtures.ModerateGains)
	dir := t.TempDir()
	write := func(name string, poison map[string]int) string {
		mm := *m
		mm.Tensors = map[string]*tensor.Tensor{}
		for k, v := range m.Tensors {
			mm.Tensors[k] = v
		}
		for k, i := range poison {
			tt := *m.Tensors[k]
			tt.Data = append([]byte(nil), tt.Data...)
			binary.LittleEndian.PutUint32(tt.Data[4*i:], math.Float32bits(float32(math.NaN())))
			mm.Tensors[k] = &tt
		}
		p := filepath.Join(dir, name)
		if err := fixtures.WriteGGUF(p, &mm, fixtures.GGUFOptions{Type: tensor.F32}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name   string
		path   string
		code   int
		stdout []string
		stderr string
	}{
		{"clean", write("clean.gguf", nil), 0, []string{"every value of the 26 tensors is finite"}, ""},
		{"golden", tiny, 0, []string{"every value of the 26 tensors is finite"}, ""},
		{"two bad matrices", write("bad.gguf", map[string]int{"blk.0.attn_k.weight": 40, "blk.1.ffn_gate_exps.weight": 5}), 1,
			[]string{`NaN/Inf: tensor "blk.0.attn_k.weight": element 40 is NaN`, `NaN/Inf: tensor "blk.1.ffn_gate_exps.weight": element 5 is NaN`},
			"2 of 26 tensors hold NaN or infinite values"},
		{"bad norm", write("norm.gguf", map[string]int{"blk.1.layer_output_norm.weight": 2}), 1, nil,
			`tensor "blk.1.layer_output_norm.weight": element 2 is NaN`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, e, code := grok(t, "inspect", "-m", tc.path, "--check")
			if code != tc.code || !strings.Contains(e, tc.stderr) {
				t.Fatalf("exit %d, stderr %q; want exit %d mentioning %q", code, e, tc.code, tc.stderr)
			}
			for _, w := range tc.stdout {
				if !strings.Contains(o, w) {
					t.Errorf("stdout lacks %q:\n%s", w, o)
				}
			}
		})
	}
	// Without --check the matrices are not read.
	if _, e, code := grok(t, "inspect", "-m", filepath.Join(dir, "bad.gguf")); code != 0 {
		t.Errorf("inspect without --check: exit %d: %s", code, e)
	}
}

package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --tp N runs the model split into N shards: logits within 1e-4 of the
// unsharded run's (model/shard.go: the row-parallel sums' order), the
// same greedy text, and bad counts refused with the flag named.
func TestTPFlag(t *testing.T) {
	dir := t.TempDir()
	read := func(p string) []float32 {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v
	}
	var logits [2][]float32
	for i, tp := range []string{"1", "2"} {
		out := filepath.Join(dir, tp+".f32")
		if _, e, code := grok(t, "logits", "-m", tiny, "--tp", tp, "--tokens", "5,17,42,9", "--tokens", "7,8", "-o", out); code != 0 {
			t.Fatalf("--tp %s: exit %d: %s", tp, code, e)
		}
		logits[i] = read(out)
	}
	var worst float64
	for i := range logits[0] {
		worst = max(worst, math.Abs(float64(logits[0][i]-logits[1][i])))
	}
	if len(logits[0]) != 6*512 || worst > 1e-4 {
		t.Errorf("logits --tp 2: %d values, max |Δ| = %g from --tp 1", len(logits[1]), worst)
	}

	var text [2]string
	for i, tp := range []string{"1", "2"} {
		o, e, code := grok(t, "run", "--tp", tp, "--temp", "0", "-n", "24", "-q", "In the beginning")
		if code != 0 {
			t.Fatalf("run --tp %s: exit %d: %s", tp, code, e)
		}
		text[i] = o
	}
	if text[0] != text[1] {
		t.Errorf("run --tp 2 wrote %q, --tp 1 %q", text[1], text[0])
	}

	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"run", "--tp", "0", "-n", "1", "x"}, 2, []string{"--tp must be at least 1, got 0"}},
		{[]string{"serve", "--tp", "-1"}, 2, []string{"--tp must be at least 1, got -1"}},
		{[]string{"serve", "--dp", "0"}, 2, []string{"--dp must be at least 1, got 0"}},
		{[]string{"logits", "-m", tiny, "--tp", "3", "--tokens", "1"}, 1, []string{"--tp 3:", "3 shards are more than the model's 2 kv heads"}},
		{[]string{"bench", "-m", tiny, "--tp", "4"}, 1, []string{"--tp 4:", "more than the model's 2 kv heads"}},
		{[]string{"logits", "-m", "../../testdata/grok-k256/grok-k256-Q4_K_M.gguf", "--tp", "2", "--tokens", "1"}, 1,
			[]string{"--tp 2:", `tensor "blk.0.attn_output.weight"`, "Q4_K blocks of 256"}},
	} {
		_, e, code := grok(t, tc.args...)
		for _, w := range tc.want {
			if code != tc.code || !strings.Contains(e, w) {
				t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, e, tc.code, w)
			}
		}
	}
}

// bench --tp reports the collectives of a decode step: two a layer, the
// embedding's reduce and the logits' gather.
func TestBenchTP(t *testing.T) {
	r := benchJSON(t, "-m", tiny, "--tp", "2", "-p", "4", "-n", "3")
	if r.TP != 2 || r.CollectivesPerStep != 2+2*2 || r.CommBytesPerStep <= 0 || r.CommMsPerStep <= 0 || r.CommShare <= 0 || r.CommShare > 1 {
		t.Errorf("bench --tp 2: tp %d, %g collectives/step, %g bytes, %g ms, share %g", r.TP, r.CollectivesPerStep, r.CommBytesPerStep, r.CommMsPerStep, r.CommShare)
	}
	// grok-tiny: D 128, 2 layers, vocabulary 512 split in two.
	if want := float64(4 * (128*(1+2*2) + 512)); r.CommBytesPerStep != want {
		t.Errorf("payload %g bytes a step, want %g", r.CommBytesPerStep, want)
	}
}

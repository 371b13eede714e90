package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// grok tokenize -t takes Grok-2's tokenizer.tok.json: "<|separator|>" is the
// separator token (the servers' default specials), and detokenize gives
// the text back.
func TestTokenizeTokJSON(t *testing.T) {
	type tok struct {
		Bytes []int `json:"bytes"`
		Token int   `json:"token"`
	}
	var reg []tok
	for c := range 256 {
		reg = append(reg, tok{[]int{c}, 3 + c})
	}
	reg = append(reg, tok{[]int{'t', 'h'}, 259}, tok{[]int{'t', 'h', 'e'}, 260})
	bl := func(s string) []int {
		var out []int
		for i := range len(s) {
			out = append(out, int(s[i]))
		}
		return out
	}
	sp := []tok{{bl("<|pad|>"), 0}, {bl("<|separator|>"), 1}, {bl("<|eos|>"), 2}}
	data, err := json.Marshal(map[string]any{"word_split": "V1", "regular_tokens": reg, "special_tokens": sp})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.tok.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	in := "\"the<|separator|>\"\n"
	var o, e bytes.Buffer
	if err := runTokenize([]string{"-t", path}, strings.NewReader(in), &o, &e, false); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(o.String()); got != "[260,1]" {
		t.Errorf("tokenize = %s, want [260,1]", got)
	}
	var back bytes.Buffer
	if err := runTokenize([]string{"-t", path}, strings.NewReader(o.String()), &back, &e, true); err != nil {
		t.Fatal(err)
	}
	if back.String() != in {
		t.Errorf("detokenize = %q, want %q", back.String(), in)
	}
}

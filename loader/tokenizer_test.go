package loader

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// writeTokJSON writes a minimal Grok-2-style tokenizer.tok.json (the 256
// bytes after <|pad|>, <|separator|>, <|eos|>) into dir.
func writeTokJSON(t *testing.T, dir string) {
	t.Helper()
	type tok struct {
		Bytes []int `json:"bytes"`
		Token int   `json:"token"`
	}
	var reg []tok
	for c := range 256 {
		reg = append(reg, tok{[]int{c}, 3 + c})
	}
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
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.tok.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A tokenizer.tok.json next to a safetensors model is found and loaded as
// the BPE (tokenizer.model is still preferred, as before); --tokenizer takes
// one for a GGUF.
func TestFindBPETokenizer(t *testing.T) {
	dir := t.TempDir()
	src := "../testdata/hf-safetensors-tiny"
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeTokJSON(t, dir)
	m, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b, ok := m.Tokenizer.(BPE)
	if !ok {
		t.Fatalf("tokenizer %T, want BPE", m.Tokenizer)
	}
	if b.EOS() != 2 || b.VocabSize() != 259 || b.BOS() != 2 || b.Piece(3+0xe2) != "<0xE2>" || b.Piece(3+'a') != "a" {
		t.Errorf("BPE: eos %d, vocab %d, bos %d, pieces %q %q", b.EOS(), b.VocabSize(), b.BOS(), b.Piece(3+0xe2), b.Piece(3+'a'))
	}
	g, err := Open(filepath.Join(grok2Dir, "grok2-tiny.gguf"), Options{Tokenizer: filepath.Join(dir, "tokenizer.tok.json")})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, ok := g.Tokenizer.(BPE); !ok {
		t.Errorf("--tokenizer tokenizer.tok.json: %T", g.Tokenizer)
	}
	// Without a tokenizer file the model has none: a nil interface.
	none, err := Open("../testdata/hf-safetensors-tiny", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	if none.Tokenizer != nil {
		t.Errorf("tokenizer %T, want nil", none.Tokenizer)
	}
}

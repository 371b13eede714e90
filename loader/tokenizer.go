package loader

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/tokenizer"
)

// tokenizerFromGGUF builds the tokenizer a GGUF embeds
// (tokenizer.ggml.model = "llama": SentencePiece pieces, scores, types).
// It returns nil, nil when the file has no usable vocabulary.
func tokenizerFromGGUF(f *gguf.File) (*tokenizer.Tokenizer, error) {
	kind, _ := f.String("tokenizer.ggml.model")
	if kind == "" || kind == "none" {
		return nil, nil
	}
	if kind != "llama" {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.model %q is not supported (only SentencePiece \"llama\")", kind)
	}
	tokens, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.tokens is missing")
	}
	scores, _ := f.Float32s("tokenizer.ggml.scores")
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	id := func(key string, def int) int {
		if v, ok := f.Int("tokenizer.ggml." + key); ok && v >= 0 && v < int64(len(tokens)) {
			return int(v)
		}
		return def
	}
	prefix := true
	if v, ok := f.Bool("tokenizer.ggml.add_space_prefix"); ok {
		prefix = v
	}
	return tokenizer.FromGGUFVocab(tokens, scores, types, id("bos_token_id", -1), id("eos_token_id", -1),
		id("unknown_token_id", -1), id("padding_token_id", -1), prefix)
}

// findTokenizer loads an explicit tokenizer.model, or looks for one next to
// the model (in dir, then its parent, as xai-org/grok-1's layout has it).
func findTokenizer(explicit string, dirs ...string) (*tokenizer.Tokenizer, error) {
	if explicit != "" {
		return tokenizer.Load(explicit)
	}
	for _, d := range dirs {
		p := filepath.Join(d, "tokenizer.model")
		if _, err := os.Stat(p); err == nil {
			return tokenizer.Load(p)
		}
	}
	return nil, nil
}

package loader

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/tokenizer"
)

// Tokenizer is tokenizer.Interface: Grok-1's SentencePiece (SentencePiece)
// or Grok-2's byte-level BPE (BPE), as the runner, server and CLI use it.
type Tokenizer = tokenizer.Interface

// SentencePiece is Grok-1's tokenizer as a Tokenizer.
type SentencePiece struct{ *tokenizer.Tokenizer }

// NewTextDecoder returns the SentencePiece stream decoder.
func (s SentencePiece) NewTextDecoder() tokenizer.TextDecoder { return s.NewDecoder() }

// BPE is Grok-2's byte-level BPE as a Tokenizer. Encode allows the special
// tokens of the BPE's default set (DefaultAllowed), as SGLang and vLLM
// encode prompts: "<|separator|>" in a prompt is the separator token.
type BPE struct{ *tokenizer.BPE }

// Encode encodes text with the default special tokens allowed.
func (b BPE) Encode(text string) []int { return b.BPE.Encode(text, b.DefaultAllowed()) }

// NewTextDecoder returns the BPE stream decoder.
func (b BPE) NewTextDecoder() tokenizer.TextDecoder { return b.NewDecoder() }

// BOS returns <|eos|>: Grok-2 has no beginning-of-text token, and a text
// with no prompt at all starts, as with GPT-2's <|endoftext|>, after a
// document boundary.
func (b BPE) BOS() int { return b.EOS() }

// Piece returns the token's text; a single byte that is not valid UTF-8
// alone is "<0xNN>", so that the server shows it as a byte.
func (b BPE) Piece(id int) string {
	t := b.TokenBytes(id)
	if len(t) == 1 && t[0] >= 0x80 {
		return fmt.Sprintf("<0x%02X>", t[0])
	}
	if !utf8.Valid(t) {
		return strings.ToValidUTF8(string(t), "\uFFFD")
	}
	return string(t)
}

// wrapSP makes a nil *tokenizer.Tokenizer a nil Tokenizer, not a
// non-nil interface holding nil.
func wrapSP(t *tokenizer.Tokenizer) Tokenizer {
	if t == nil {
		return nil
	}
	return SentencePiece{t}
}

// tokenizerFiles are the names findTokenizer looks for, in order: Grok-1's
// SentencePiece model, Grok-2's tiktoken export, a Hugging Face export.
var tokenizerFiles = []string{"tokenizer.model", "tokenizer.tok.json", "tokenizer.json"}

// LoadTokenizer reads a tokenizer file: a .json file is a byte-level BPE
// (tokenizer.tok.json or a Hugging Face tokenizer.json), anything else a
// SentencePiece model.
func LoadTokenizer(path string) (Tokenizer, error) {
	if strings.HasSuffix(strings.ToLower(path), ".json") {
		b, err := tokenizer.LoadBPE(path)
		if err != nil {
			return nil, err
		}
		return BPE{b}, nil
	}
	t, err := tokenizer.Load(path)
	if err != nil {
		return nil, err
	}
	return SentencePiece{t}, nil
}

// TokenizerFromGGUF builds the tokenizer a GGUF embeds:
// tokenizer.ggml.model "llama" (SentencePiece pieces, scores, types) or
// "gpt2" (byte-level BPE tokens and merges, see gpt2FromGGUF).
// It returns nil, nil when the file has no usable vocabulary.
func TokenizerFromGGUF(f *gguf.File) (Tokenizer, error) {
	kind, _ := f.String("tokenizer.ggml.model")
	if kind == "" || kind == "none" {
		return nil, nil
	}
	if kind == "gpt2" {
		b, err := gpt2FromGGUF(f)
		if err != nil {
			return nil, err
		}
		return BPE{b}, nil
	}
	if kind != "llama" {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.model %q is not supported (SentencePiece \"llama\" or byte-level BPE \"gpt2\")", kind)
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
	t, err := tokenizer.FromGGUFVocab(tokens, scores, types, id("bos_token_id", -1), id("eos_token_id", -1),
		id("unknown_token_id", -1), id("padding_token_id", -1), prefix)
	if err != nil {
		return nil, err
	}
	return SentencePiece{t}, nil
}

// findTokenizer loads an explicit tokenizer file, or looks for one next to
// the model (in each of dirs in turn, as xai-org/grok-1's layout has it
// one folder up), trying tokenizerFiles in order in each.
func findTokenizer(explicit string, dirs ...string) (Tokenizer, error) {
	if explicit != "" {
		return LoadTokenizer(explicit)
	}
	for _, d := range dirs {
		for _, name := range tokenizerFiles {
			p := filepath.Join(d, name)
			if _, err := os.Stat(p); err == nil {
				return LoadTokenizer(p)
			}
		}
	}
	return nil, nil
}

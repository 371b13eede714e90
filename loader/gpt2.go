package loader

import (
	"encoding/json"
	"fmt"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/tokenizer"
)

// GGUF token types (llama.cpp's llama_token_type) that gpt2FromGGUF reads.
const (
	ggufTokenControl     = 3
	ggufTokenUserDefined = 4
)

// gpt2FromGGUF reads the byte-level BPE that llama.cpp's converter embeds
// for Grok-2 (tokenizer.ggml.model "gpt2", pre "grok-2"): tokens in GPT-2's
// byte-level alphabet, merges as "left right" strings, control and
// user-defined tokens as plain text. It rebuilds the Hugging Face
// tokenizer.json those come from (the export transformers'
// TikTokenConverter writes, ignore_merges set) and reads that with
// tokenizer.FromHFTokenizerJSON, so that the two paths cannot differ.
func gpt2FromGGUF(f *gguf.File) (*tokenizer.BPE, error) {
	if pre, _ := f.String("tokenizer.ggml.pre"); pre != "grok-2" {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.model \"gpt2\" with tokenizer.ggml.pre %q: only Grok-2's pre-tokenizer (\"grok-2\") is implemented", pre)
	}
	tokens, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.tokens is missing")
	}
	merges, ok := f.Strings("tokenizer.ggml.merges")
	if !ok {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.merges is missing (a \"gpt2\" vocabulary needs its merges)")
	}
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	if types != nil && len(types) != len(tokens) {
		return nil, fmt.Errorf("gguf: tokenizer.ggml.token_type has %d entries for %d tokens", len(types), len(tokens))
	}
	type added struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	}
	vocab := make(map[string]int, len(tokens))
	var specials []added
	for id, t := range tokens {
		if types != nil && (types[id] == ggufTokenControl || types[id] == ggufTokenUserDefined) {
			specials = append(specials, added{ID: id, Content: t, Special: true})
			continue
		}
		if _, dup := vocab[t]; dup {
			return nil, fmt.Errorf("gguf: tokenizer.ggml.tokens has %q twice", t)
		}
		vocab[t] = id
	}
	type pre struct {
		Type           string            `json:"type"`
		Pattern        map[string]string `json:"pattern,omitempty"`
		Behavior       string            `json:"behavior,omitempty"`
		AddPrefixSpace *bool             `json:"add_prefix_space,omitempty"`
		UseRegex       *bool             `json:"use_regex,omitempty"`
		Pretokenizers  []pre             `json:"pretokenizers,omitempty"`
	}
	no := false
	doc := map[string]any{
		"added_tokens": specials,
		"normalizer":   nil,
		"pre_tokenizer": pre{Type: "Sequence", Pretokenizers: []pre{
			{Type: "Split", Pattern: map[string]string{"Regex": tokenizer.GrokPattern}, Behavior: "Isolated"},
			{Type: "ByteLevel", AddPrefixSpace: &no, UseRegex: &no},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{
			"type": "BPE", "ignore_merges": true, "vocab": vocab, "merges": merges,
		},
	}
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	b, err := tokenizer.FromHFTokenizerJSON(data)
	if err != nil {
		return nil, fmt.Errorf("gguf: the embedded gpt2 vocabulary: %w", err)
	}
	return b, nil
}

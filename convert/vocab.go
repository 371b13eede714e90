package convert

import (
	"fmt"
	"io"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/safefile"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tokenizer"
)

// LoadVocab reads a vocabulary to embed: a SentencePiece tokenizer.model,
// a byte-level BPE (Grok-2's tokenizer.tok.json or a Hugging Face
// tokenizer.json), or any GGUF file with a "llama" or "gpt2" vocabulary
// (tokenizer.ggml.*), which is taken over.
func LoadVocab(path string) (loader.Tokenizer, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	magic := make([]byte, 4)
	_, err = io.ReadFull(f, magic)
	f.Close()
	if err != nil || string(magic) != gguf.Magic {
		return loader.LoadTokenizer(path)
	}
	g, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer g.Close() // metadata is copied out of the mapping by the parser
	t, err := loader.TokenizerFromGGUF(g)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, err)
	case t == nil:
		return nil, fmt.Errorf("%s: the file has no vocabulary (tokenizer.ggml.model absent or \"none\")", path)
	}
	return t, nil
}

// vocabKVs are the tokenizer.ggml.* keys of semantics §9 for tok, padded to
// the model's vocabulary size as llama.cpp's converter pads a SentencePiece
// vocabulary (llama.cpp requires as many tokens as embedding rows). The
// padding and EOS ids are the model's (model.py's pad_token masks keys, and
// the loader reads both back into the config). Without a tokenizer the file
// gets llama.cpp's minimal vocabulary, tokenizer.ggml.model "none".
func (j *job) vocabKVs(t loader.Tokenizer, c *model.Config) ([]kv, error) {
	u := func(v int) uint32 { return uint32(v) }
	if t == nil {
		j.warnf("no tokenizer: the file gets tokenizer.ggml.model \"none\" (ids only); give --tokenizer tokenizer.model to embed one")
		return []kv{
			{Key: "tokenizer.ggml.model", Value: "none"},
			{Key: "tokenizer.ggml.eos_token_id", Value: u(c.EOSToken)},
			{Key: "tokenizer.ggml.padding_token_id", Value: u(c.PadToken)},
		}, nil
	}
	var tok *tokenizer.Tokenizer
	switch t := t.(type) {
	case loader.SentencePiece:
		tok = t.Tokenizer
	case loader.BPE:
		return j.gpt2KVs(t.BPE, c)
	default:
		return nil, fmt.Errorf("a tokenizer of type %T cannot be embedded", t)
	}
	n := tok.VocabSize()
	if n > c.VocabSize {
		return nil, fmt.Errorf("the tokenizer has %d pieces, more than the model's vocabulary of %d", n, c.VocabSize)
	}
	tokens := make([]string, c.VocabSize)
	scores := make([]float32, c.VocabSize)
	types := make([]int32, c.VocabSize)
	for i := 0; i < n; i++ {
		tokens[i], scores[i], types[i] = tok.Piece(i), tok.Score(i), tok.TokenType(i)
	}
	if n < c.VocabSize {
		j.warnf("the tokenizer has %d pieces, the model %d: padded with [PAD1]…[PAD%d] (unused)", n, c.VocabSize, c.VocabSize-n)
		for i := n; i < c.VocabSize; i++ {
			tokens[i], scores[i], types[i] = fmt.Sprintf("[PAD%d]", i-n+1), -1000, 5
		}
	}
	if !tok.PlainNormalizer() {
		j.warnf("the tokenizer's normalizer (character map or whitespace folding) cannot be stored in GGUF: some text will encode differently")
	}
	if e := tok.EOS(); e >= 0 && e != c.EOSToken {
		j.warnf("the tokenizer's EOS is %d, the model's eos_token %d: writing the model's", e, c.EOSToken)
	}
	if p := tok.PAD(); p >= 0 && p != c.PadToken {
		j.warnf("the tokenizer's padding id is %d, the model's pad_token %d: writing the model's", p, c.PadToken)
	}
	kvs := []kv{
		{Key: "tokenizer.ggml.model", Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.scores", Value: scores},
		{Key: "tokenizer.ggml.token_type", Value: types},
	}
	if b := tok.BOS(); b >= 0 {
		kvs = append(kvs, kv{Key: "tokenizer.ggml.bos_token_id", Value: u(b)})
	}
	kvs = append(kvs, kv{Key: "tokenizer.ggml.eos_token_id", Value: u(c.EOSToken)})
	if k := tok.UNK(); k >= 0 {
		kvs = append(kvs, kv{Key: "tokenizer.ggml.unknown_token_id", Value: u(k)})
	}
	return append(kvs,
		kv{Key: "tokenizer.ggml.padding_token_id", Value: u(c.PadToken)},
		// runners.py never adds BOS or EOS (semantics §7.10).
		kv{Key: "tokenizer.ggml.add_bos_token", Value: false},
		kv{Key: "tokenizer.ggml.add_eos_token", Value: false},
		kv{Key: "tokenizer.ggml.add_space_prefix", Value: tok.AddSpacePrefix()},
	), nil
}

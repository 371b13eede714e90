package convert

import (
	"fmt"
	"slices"
	"strings"

	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tokenizer"
)

// GGUF token types (llama.cpp's llama_token_type) of a gpt2 vocabulary.
const (
	tokenNormal  = 1
	tokenControl = 3
	tokenUnused  = 5
)

// byteLevel is GPT-2's byte-to-character map (bytes_to_unicode), in which
// a "gpt2" GGUF vocabulary spells its tokens and merges.
var byteLevel = func() (m [256]rune) {
	n := 0
	for c := range 256 {
		if c >= '!' && c <= '~' || c >= 0xa1 && c <= 0xac || c >= 0xae && c <= 0xff {
			m[c] = rune(c)
		} else {
			m[c] = rune(256 + n)
			n++
		}
	}
	return m
}()

func byteLevelString(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteRune(byteLevel[c])
	}
	return sb.String()
}

// gpt2KVs are the tokenizer.ggml.* keys llama.cpp's converter writes for
// Grok-2 (convert_hf_to_gguf.py, GrokModel.set_vocab → _set_vocab_gpt2 on
// the Hugging Face export): model "gpt2", pre "grok-2", the tokens in
// GPT-2's byte-level alphabet (special tokens as their text, type
// CONTROL; ids without a token "[PADn]", type UNUSED, up to the model's
// vocabulary), and the merges as "left right". The merges are those
// transformers' TikTokenConverter derives from ranks, which is how the
// export was made: for each token in rank (id) order, every split into two
// tokens, ordered by the ids of the halves.
func (j *job) gpt2KVs(b *tokenizer.BPE, c *model.Config) ([]kv, error) {
	u := func(v int) uint32 { return uint32(v) }
	n := b.VocabSize()
	if n > c.VocabSize {
		return nil, fmt.Errorf("the tokenizer has %d tokens, more than the model's vocabulary of %d", n, c.VocabSize)
	}
	tokens := make([]string, c.VocabSize)
	types := make([]int32, c.VocabSize)
	ids := make(map[string]int, n) // regular tokens by their bytes
	unused := 0
	for id := range c.VocabSize {
		t := b.TokenBytes(id)
		switch {
		case t == nil:
			tokens[id], types[id] = fmt.Sprintf("[PAD%d]", id), tokenUnused
			unused++
		case b.IsSpecial(id):
			tokens[id], types[id] = string(t), tokenControl
		default:
			tokens[id], types[id] = byteLevelString(t), tokenNormal
			ids[string(t)] = id
		}
	}
	if unused > 0 {
		j.warnf("%d ids of the model's vocabulary of %d have no token: written as [PADn] (unused)", unused, c.VocabSize)
	}
	var merges []string
	type split struct{ l, r int }
	var local []split
	for id := range n {
		t := b.TokenBytes(id)
		if len(t) < 2 || b.IsSpecial(id) {
			continue
		}
		local = local[:0]
		for i := 1; i < len(t); i++ {
			l, okL := ids[string(t[:i])]
			r, okR := ids[string(t[i:])]
			if okL && okR {
				local = append(local, split{l, r})
			}
		}
		slices.SortFunc(local, func(a, b split) int {
			if a.l != b.l {
				return a.l - b.l
			}
			return a.r - b.r
		})
		for _, s := range local {
			merges = append(merges, tokens[s.l]+" "+tokens[s.r])
		}
	}
	if e := b.EOS(); e >= 0 && e != c.EOSToken {
		j.warnf("the tokenizer's <|eos|> is %d, the model's eos_token %d: writing the model's", e, c.EOSToken)
	}
	return []kv{
		{Key: "tokenizer.ggml.model", Value: "gpt2"},
		{Key: "tokenizer.ggml.pre", Value: "grok-2"},
		{Key: "tokenizer.ggml.tokens", Value: tokens},
		{Key: "tokenizer.ggml.token_type", Value: types},
		{Key: "tokenizer.ggml.merges", Value: merges},
		{Key: "tokenizer.ggml.eos_token_id", Value: u(c.EOSToken)},
		{Key: "tokenizer.ggml.padding_token_id", Value: u(c.PadToken)},
		{Key: "tokenizer.ggml.add_bos_token", Value: false},
		{Key: "tokenizer.ggml.add_eos_token", Value: false},
	}, nil
}

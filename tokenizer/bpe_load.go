package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/grok-go/grok/internal/safefile"
)

// GrokPattern is Grok-2's pre-tokenizer expression: tiktoken's cl100k
// pattern with each digit a piece of its own. It is what SGLang and vLLM
// use for word_split "V1", and the Split pattern of the Hugging Face
// export.
const GrokPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// knownPatterns are the pre-tokenizer expressions splitter implements.
var knownPatterns = map[string]splitter{
	GrokPattern: {maxDigits: 1},
	// transformers' TikTokenConverter default (cl100k's, (?i) spelled so).
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: {maxDigits: 3},
}

func patternSplitter(pat string) (splitter, error) {
	sp, ok := knownPatterns[pat]
	if !ok {
		return splitter{}, fmt.Errorf("tokenizer: the pre-tokenizer pattern %q is not supported: only Grok-2's (%q) and its \\p{N}{1,3} variant are implemented", pat, GrokPattern)
	}
	return sp, nil
}

// maxBPEFileBytes bounds a tokenizer.tok.json or tokenizer.json: Grok-2's
// Hugging Face export is 18 MB.
const maxBPEFileBytes = 256 << 20

// LoadBPE reads a byte-level BPE vocabulary: xAI's tokenizer.tok.json
// (a JSON object with "regular_tokens") or a Hugging Face tokenizer.json
// (one with "model").
func LoadBPE(path string) (*BPE, error) {
	data, err := safefile.ReadFile(path, maxBPEFileBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var probe struct {
		Regular json.RawMessage `json:"regular_tokens"`
		Model   json.RawMessage `json:"model"`
	}
	// Only the two keys' presence is wanted; decoding them as raw
	// messages copies them, which stays within a small multiple of the
	// file.
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%s: %w", path, jsonError(data, err))
	}
	var b *BPE
	switch {
	case probe.Regular != nil:
		b, err = FromTokJSON(data)
	case probe.Model != nil:
		b, err = FromHFTokenizerJSON(data)
	default:
		err = errors.New(`tokenizer: neither a tokenizer.tok.json (no "regular_tokens") nor a tokenizer.json (no "model")`)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// jsonError adds the line and column to a JSON syntax error.
func jsonError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		off := int(min(se.Offset, int64(len(data))))
		line := 1 + bytes.Count(data[:off], []byte{'\n'})
		col := off - bytes.LastIndexByte(data[:off], '\n')
		return fmt.Errorf("tokenizer: bad JSON at line %d, column %d: %w", line, col, err)
	}
	return fmt.Errorf("tokenizer: %w", err)
}

// byteList is a JSON array of byte values, decoded straight to bytes.
type byteList []byte

func (b *byteList) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) < 2 || data[0] != '[' || data[len(data)-1] != ']' {
		return fmt.Errorf("bytes must be an array of numbers 0 to 255, not %.40s", data)
	}
	body := bytes.TrimSpace(data[1 : len(data)-1])
	out := make([]byte, 0, len(body)/3+1)
	if len(body) > 0 {
		for f := range bytes.SplitSeq(body, []byte{','}) {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(f)), 10, 8)
			if err != nil {
				return fmt.Errorf("bytes must be numbers 0 to 255, not %.20q", bytes.TrimSpace(f))
			}
			out = append(out, byte(v))
		}
	}
	*b = out
	return nil
}

// tokJSON is xAI's tokenizer.tok.json, as SGLang's TiktokenTokenizer and
// vLLM's Grok2Tokenizer read it.
type tokJSON struct {
	Regular        []tokJSONToken `json:"regular_tokens"`
	Special        []tokJSONToken `json:"special_tokens"`
	WordSplit      *string        `json:"word_split"`
	PatStr         *string        `json:"pat_str"`
	VocabSize      *int           `json:"vocab_size"`
	DefaultAllowed []byteList     `json:"default_allowed_special"`
}

type tokJSONToken struct {
	Bytes *byteList `json:"bytes"`
	Token *int      `json:"token"`
}

// FromTokJSON builds a BPE from the contents of a tokenizer.tok.json: its
// regular_tokens (bytes and rank, the rank being the id) and
// special_tokens, with the pre-tokenizer its word_split names ("V1", the
// only one known) or its pat_str. Every single byte must be a token.
// vocab_size, when given, must be the number of tokens and one more than
// the largest id, as tiktoken's explicit_n_vocab requires.
func FromTokJSON(data []byte) (*BPE, error) {
	var f tokJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, jsonError(data, err)
	}
	if f.Regular == nil {
		return nil, errors.New(`tokenizer: tok.json has no "regular_tokens"`)
	}
	if f.WordSplit == nil {
		return nil, errors.New(`tokenizer: tok.json has no "word_split"`)
	}
	if *f.WordSplit != "V1" {
		return nil, fmt.Errorf(`tokenizer: tok.json has word_split %q; only "V1" is known`, *f.WordSplit)
	}
	pat := GrokPattern
	if f.PatStr != nil {
		pat = *f.PatStr
	}
	split, err := patternSplitter(pat)
	if err != nil {
		return nil, err
	}
	conv := func(what string, list []tokJSONToken) ([]bpeToken, error) {
		out := make([]bpeToken, len(list))
		for i, t := range list {
			if t.Bytes == nil || t.Token == nil {
				return nil, fmt.Errorf(`tokenizer: %s[%d] needs "bytes" and "token"`, what, i)
			}
			out[i] = bpeToken{b: *t.Bytes, id: *t.Token}
		}
		return out, nil
	}
	regular, err := conv("regular_tokens", f.Regular)
	if err != nil {
		return nil, err
	}
	special, err := conv("special_tokens", f.Special)
	if err != nil {
		return nil, err
	}
	b, err := newBPE(regular, special, nil, split, true)
	if err != nil {
		return nil, err
	}
	if f.VocabSize != nil {
		if n := len(regular) + len(special); *f.VocabSize != n || *f.VocabSize != b.VocabSize() {
			return nil, fmt.Errorf("tokenizer: vocab_size is %d, but there are %d tokens and the largest id is %d", *f.VocabSize, n, b.VocabSize()-1)
		}
	}
	var extra []string
	for i, d := range f.DefaultAllowed {
		if _, ok := b.specialIDs[string(d)]; !ok {
			return nil, fmt.Errorf("tokenizer: default_allowed_special[%d] (%q) is not a special token", i, d)
		}
		extra = append(extra, string(d))
	}
	b.defaultAllowed = b.grokDefaultAllowed(extra)
	return b, nil
}

// hfTokenizer is the part of a Hugging Face tokenizer.json that a
// byte-level BPE uses.
type hfTokenizer struct {
	AddedTokens []struct {
		ID         *int    `json:"id"`
		Content    *string `json:"content"`
		SingleWord bool    `json:"single_word"`
		LStrip     bool    `json:"lstrip"`
		RStrip     bool    `json:"rstrip"`
		Special    bool    `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *struct {
		Type                    string          `json:"type"`
		Dropout                 *float64        `json:"dropout"`
		UnkToken                *string         `json:"unk_token"`
		ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		Vocab                   json.RawMessage `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
	} `json:"model"`
}

type hfPre struct {
	Type    string `json:"type"`
	Pattern *struct {
		Regex *string `json:"Regex"`
	} `json:"pattern"`
	Behavior       string  `json:"behavior"`
	Invert         bool    `json:"invert"`
	AddPrefixSpace bool    `json:"add_prefix_space"`
	UseRegex       *bool   `json:"use_regex"`
	Pretokenizers  []hfPre `json:"pretokenizers"`
}

// FromHFTokenizerJSON builds a BPE from a Hugging Face tokenizer.json of
// the kind transformers' TikTokenConverter writes, as the Grok-2 export
// (alvarobartt/grok-2-tokenizer) is: a BPE model over byte-level
// (GPT-2 alphabet) strings, no normalizer, and the pre-tokenizer
// Sequence[Split(Grok-2's pattern, Isolated), ByteLevel(use_regex=false,
// add_prefix_space=false)]. Anything else (other pre-tokenizers, dropout,
// subword prefixes, byte fallback, added tokens with strip options) is
// refused with an error naming it. Added tokens become the special tokens,
// all of which DefaultAllowed allows, since Hugging Face always matches
// them.
func FromHFTokenizerJSON(data []byte) (*BPE, error) {
	var f hfTokenizer
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, jsonError(data, err)
	}
	m := f.Model
	if m == nil {
		return nil, errors.New(`tokenizer: tokenizer.json has no "model"`)
	}
	switch {
	case m.Type != "BPE":
		return nil, fmt.Errorf("tokenizer: tokenizer.json model type %q, want BPE", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, errors.New("tokenizer: BPE dropout is not supported")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "",
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, errors.New("tokenizer: subword prefixes and suffixes are not supported by a byte-level BPE")
	case m.ByteFallback:
		return nil, errors.New("tokenizer: byte_fallback is not supported by a byte-level BPE")
	}
	if !isJSONNull(f.Normalizer) {
		return nil, fmt.Errorf("tokenizer: the normalizer %.80s is not supported; a byte-level BPE has none", f.Normalizer)
	}
	split, err := hfSplitter(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if !isJSONNull(f.Decoder) {
		var d struct{ Type string }
		if err := json.Unmarshal(f.Decoder, &d); err != nil || d.Type != "ByteLevel" {
			return nil, fmt.Errorf("tokenizer: the decoder %.80s is not supported; want ByteLevel", f.Decoder)
		}
	}
	regular, err := hfVocab(m.Vocab)
	if err != nil {
		return nil, err
	}
	var special []bpeToken
	for i, t := range f.AddedTokens {
		switch {
		case t.ID == nil || t.Content == nil || *t.Content == "":
			return nil, fmt.Errorf(`tokenizer: added_tokens[%d] needs "id" and "content"`, i)
		case t.SingleWord || t.LStrip || t.RStrip:
			return nil, fmt.Errorf("tokenizer: added token %q has single_word, lstrip or rstrip set, which are not supported", *t.Content)
		}
		special = append(special, bpeToken{b: []byte(*t.Content), id: *t.ID})
	}
	// An added token may also be in the vocabulary under the same id;
	// then it is only a special token.
	addedID := map[int]bool{}
	for _, t := range special {
		addedID[t.id] = true
	}
	kept := regular[:0]
	for _, t := range regular {
		if !addedID[t.id] {
			kept = append(kept, t)
		}
	}
	regular = kept
	// Merges refer to tokens by text: index the vocabulary first.
	b, err := newBPE(regular, special, []bpeMerge{}, split, m.IgnoreMerges)
	if err != nil {
		return nil, err
	}
	merges, err := hfMerges(m.Merges, b.whole)
	if err != nil {
		return nil, err
	}
	if b.pairs, err = b.mergePairs(merges); err != nil {
		return nil, err
	}
	b.defaultAllowed = AllSpecial
	return b, nil
}

func isJSONNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

// hfSplitter checks the pre-tokenizer and returns its splitter.
func hfSplitter(raw json.RawMessage) (splitter, error) {
	bad := func() (splitter, error) {
		return splitter{}, fmt.Errorf("tokenizer: the pre-tokenizer %.300s is not supported; want Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)]", raw)
	}
	if isJSONNull(raw) {
		return bad()
	}
	var p hfPre
	if err := json.Unmarshal(raw, &p); err != nil {
		return splitter{}, fmt.Errorf("tokenizer: pre_tokenizer: %w", err)
	}
	if p.Type != "Sequence" || len(p.Pretokenizers) != 2 {
		return bad()
	}
	s, bl := p.Pretokenizers[0], p.Pretokenizers[1]
	if s.Type != "Split" || s.Pattern == nil || s.Pattern.Regex == nil || s.Behavior != "Isolated" || s.Invert ||
		bl.Type != "ByteLevel" || bl.AddPrefixSpace || bl.UseRegex == nil || *bl.UseRegex {
		return bad()
	}
	return patternSplitter(*s.Pattern.Regex)
}

// byteLevelDecode maps GPT-2's byte-level alphabet back to bytes.
var byteLevelDecode = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	n := 0
	for c := range 256 {
		if c >= '!' && c <= '~' || c >= 0xa1 && c <= 0xac || c >= 0xae && c <= 0xff {
			m[rune(c)] = byte(c)
		} else {
			m[rune(256+n)] = byte(c)
			n++
		}
	}
	return m
}()

func fromByteLevel(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		c, ok := byteLevelDecode[r]
		if !ok {
			return nil, fmt.Errorf("tokenizer: %q is not in the byte-level alphabet (character %U)", s, r)
		}
		out = append(out, c)
	}
	return out, nil
}

// hfVocab reads the model's vocab object, streaming, so that memory stays
// near the size of its text.
func hfVocab(raw json.RawMessage) ([]bpeToken, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("tokenizer: the BPE vocab must be an object of token: id")
	}
	var out []bpeToken
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("tokenizer: vocab: %w", err)
		}
		vt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("tokenizer: vocab: %w", err)
		}
		k := kt.(string)
		num, ok := vt.(json.Number)
		if !ok {
			return nil, fmt.Errorf("tokenizer: vocab entry %q has id %v, not a number", k, vt)
		}
		id, err := strconv.Atoi(string(num))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: vocab entry %q has id %s, not an integer", k, num)
		}
		b, err := fromByteLevel(k)
		if err != nil {
			return nil, err
		}
		if len(out) >= maxVocabSize {
			return nil, fmt.Errorf("tokenizer: more than the %d tokens allowed", maxVocabSize)
		}
		out = append(out, bpeToken{b: b, id: id})
	}
	return out, nil
}

// hfMerges reads the merges list, in either form tokenizers writes:
// "left right" strings or [left, right] pairs.
func hfMerges(raw json.RawMessage, whole map[string]uint32) ([]bpeMerge, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return nil, errors.New("tokenizer: the BPE merges must be a list")
	}
	id := func(i int, s string) (uint32, error) {
		b, err := fromByteLevel(s)
		if err != nil {
			return 0, err
		}
		v, ok := whole[string(b)]
		if !ok {
			return 0, fmt.Errorf("tokenizer: merge %d names %q, which is not in the vocabulary", i, s)
		}
		return v, nil
	}
	var out []bpeMerge
	for i := 0; dec.More(); i++ {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("tokenizer: merges: %w", err)
		}
		var l, r string
		switch t := t.(type) {
		case string:
			var ok bool
			if l, r, ok = strings.Cut(t, " "); !ok || strings.Contains(r, " ") {
				return nil, fmt.Errorf("tokenizer: merge %d (%q) is not two tokens", i, t)
			}
		case json.Delim:
			if t != '[' {
				return nil, fmt.Errorf("tokenizer: merge %d is not a string or a pair", i)
			}
			var parts []string
			for dec.More() {
				pt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("tokenizer: merges: %w", err)
				}
				ps, ok := pt.(string)
				if !ok || len(parts) == 2 {
					return nil, fmt.Errorf("tokenizer: merge %d is not a pair of strings", i)
				}
				parts = append(parts, ps)
			}
			if _, err := dec.Token(); err != nil {
				return nil, fmt.Errorf("tokenizer: merges: %w", err)
			}
			if len(parts) != 2 {
				return nil, fmt.Errorf("tokenizer: merge %d is not a pair of strings", i)
			}
			l, r = parts[0], parts[1]
		default:
			return nil, fmt.Errorf("tokenizer: merge %d is not a string or a pair", i)
		}
		li, err := id(i, l)
		if err != nil {
			return nil, err
		}
		ri, err := id(i, r)
		if err != nil {
			return nil, err
		}
		if len(out) >= maxVocabSize {
			return nil, fmt.Errorf("tokenizer: more than the %d merges allowed", maxVocabSize)
		}
		out = append(out, bpeMerge{l: li, r: ri})
	}
	return out, nil
}

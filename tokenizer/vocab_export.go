package tokenizer

// Read-only accessors for exporting a vocabulary, e.g. into a GGUF file's
// tokenizer.ggml.* arrays (grok convert).

// Score returns the score of piece id (SentencePiece's merge priority for
// BPE), or 0 if id is out of range.
func (t *Tokenizer) Score(id int) float32 {
	if id < 0 || id >= len(t.scores) {
		return 0
	}
	return t.scores[id]
}

// TokenType returns the type of piece id as llama.cpp's token type code,
// which equals SentencePiece's piece type: 1 normal, 2 unknown, 3 control,
// 4 user-defined, 5 unused, 6 byte. It returns 0 (llama.cpp's "undefined")
// if id is out of range.
func (t *Tokenizer) TokenType(id int) int32 {
	if id < 0 || id >= len(t.types) {
		return 0
	}
	return int32(t.types[id])
}

// AddSpacePrefix reports whether encoding prefixes the input with a space
// (SentencePiece's add_dummy_prefix; GGUF's tokenizer.ggml.add_space_prefix).
func (t *Tokenizer) AddSpacePrefix() bool { return t.addDummyPrefix }

// PlainNormalizer reports whether the tokenizer's normalizer is the one a
// GGUF vocabulary implies (FromGGUFVocab): no character map, whitespace
// escaped to U+2581 and not collapsed. A tokenizer for which it is false
// encodes some text differently once exported to GGUF.
func (t *Tokenizer) PlainNormalizer() bool {
	return t.charsmap == nil && !t.removeExtraWS && t.escapeWS
}

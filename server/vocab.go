package server

import (
	"fmt"
	"strings"

	"github.com/grok-go/grok/runner"
)

// vocabTable returns how each token is shown among top_logprobs (a token
// that was not sampled has no place in the output text, so it is shown by
// itself): its text with SentencePiece's ▁ as a space, a byte-fallback piece
// as its character when it is ASCII and as OpenAI's "bytes:\xNN" otherwise,
// and a piece that decodes to nothing (a control token such as EOS) as its
// piece name. It also returns which ids are byte pieces and their bytes,
// for the chat logprobs' "bytes" arrays.
func vocabTable(tok runner.Tokenizer) (text []string, isByte []bool, byteOf []byte) {
	V := tok.VocabSize()
	text, isByte, byteOf = make([]string, V), make([]bool, V), make([]byte, V)
	for id := range V {
		p := tok.Piece(id)
		if b, ok := bytePiece(p); ok {
			isByte[id], byteOf[id] = true, b
			if b < 0x80 {
				text[id] = string(rune(b))
			} else {
				text[id] = fmt.Sprintf(`bytes:\x%02x`, b)
			}
			continue
		}
		d, err := tok.Decode([]int{id})
		switch {
		case err != nil || d == "":
			d = p
		case strings.HasPrefix(p, "▁") && !strings.HasPrefix(d, " "):
			// Decode drops the leading space of a text's first piece
			// (SentencePiece's dummy prefix); mid-text it is there.
			d = " " + d
		}
		text[id] = d
	}
	return text, isByte, byteOf
}

// bytePiece parses SentencePiece's byte-fallback piece "<0xNN>".
func bytePiece(p string) (byte, bool) {
	if len(p) != 6 || !strings.HasPrefix(p, "<0x") || p[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range p[3:5] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = byte(c - '0')
		case c >= 'A' && c <= 'F':
			v = byte(c-'A') + 10
		case c >= 'a' && c <= 'f':
			v = byte(c-'a') + 10
		default:
			return 0, false
		}
		b = b<<4 | v
	}
	return b, true
}

// tokenText is how a token is shown among alternatives.
func (b *backend) tokenText(id int) string {
	if id >= 0 && id < len(b.vocab) {
		return b.vocab[id]
	}
	return ""
}

// tokenBytes are a token's bytes for chat logprobs: the byte of a
// byte-fallback piece, else the UTF-8 of text.
func (b *backend) tokenBytes(id int, text string) []int {
	if id >= 0 && id < len(b.isByte) && b.isByte[id] {
		return []int{int(b.byteOf[id])}
	}
	out := make([]int, len(text))
	for i := range len(text) {
		out[i] = int(text[i])
	}
	return out
}

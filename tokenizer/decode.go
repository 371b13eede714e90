package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Decoding follows SentencePieceProcessor::Decode:
//
//   - A CONTROL piece gives nothing, an UNKNOWN piece gives the model's
//     unk_surface (" ⁇ " by default, "[UNK]" for Grok-1).
//   - A run of consecutive BYTE pieces is joined and decoded as UTF-8; each
//     byte that does not start a valid sequence gives one U+FFFD. Any
//     non-byte piece, a control piece included, ends the run.
//   - Every other piece gives its text with U+2581 turned into a space. When
//     add_dummy_prefix (or remove_extra_whitespaces) is set, one leading
//     U+2581 is dropped from the first such piece if the text is still
//     empty and no earlier piece already had its leading U+2581 dropped.
//     With remove_extra_whitespaces this goes on until the text is not
//     empty.
//
// Each id is first mapped to PieceToId(IdToPiece(id)), as SentencePiece
// goes through the piece strings.

// Decode returns the text of ids. It fails only for an id outside
// [0, VocabSize()).
func (t *Tokenizer) Decode(ids []int) (string, error) {
	d := decoderState{bosWS: true}
	buf := make([]byte, 0, len(ids)*4)
	var err error
	for _, id := range ids {
		if buf, err = d.add(t, buf, id); err != nil {
			return "", err
		}
	}
	buf = d.flush(buf)
	return string(buf), nil
}

// StreamDecoder decodes ids one at a time, for streaming generated text.
// The chunks it returns are valid UTF-8 whenever the pieces are, and
// concatenated (Add outputs followed by Flush) they equal Decode of all the
// ids. Bytes of an incomplete UTF-8 sequence from byte-fallback pieces are
// held back until the sequence is complete or cannot be completed.
// A StreamDecoder is not safe for concurrent use.
type StreamDecoder struct {
	t   *Tokenizer
	st  decoderState
	buf []byte
}

// NewDecoder returns a StreamDecoder positioned at the start of a text.
func (t *Tokenizer) NewDecoder() *StreamDecoder {
	return &StreamDecoder{t: t, st: decoderState{bosWS: true}}
}

// Add decodes one more id and returns the text that it completes, which
// may be empty. An id out of range is an error and leaves the decoder
// unchanged.
func (d *StreamDecoder) Add(id int) (string, error) {
	var err error
	d.buf, err = d.st.add(d.t, d.buf[:0], id)
	if err != nil {
		return "", err
	}
	return string(d.buf), nil
}

// Flush returns the text held back: U+FFFD for each byte of an
// unfinished byte-fallback sequence. Ids added after Flush continue the
// same text, as if a control id had come between them; use Reset to start
// a new one.
func (d *StreamDecoder) Flush() string {
	d.buf = d.st.flush(d.buf[:0])
	return string(d.buf)
}

// Reset makes d ready to decode a new text.
func (d *StreamDecoder) Reset() {
	d.st = decoderState{bosWS: true, pending: d.st.pending[:0]}
}

// decoderState is the state of SentencePieceProcessor::Decode's loop.
type decoderState struct {
	pending  []byte // bytes of the current byte run not yet decoded
	bosWS    bool   // is_bos_ws: a leading ▁ may still be dropped
	bosSeen  bool   // bos_ws_seen: the previous piece had its ▁ dropped
	nonEmpty bool   // text written so far is not empty
}

func (d *decoderState) add(t *Tokenizer, dst []byte, id int) ([]byte, error) {
	if id < 0 || id >= len(t.types) {
		return dst, fmt.Errorf("tokenizer: id %d out of range [0, %d)", id, len(t.types))
	}
	cid := t.canon[id]
	if t.types[cid] == typeByte {
		d.pending = append(d.pending, byte(t.byteValue[cid]))
		return d.decodeBytes(dst, false), nil
	}
	dst = d.flush(dst)
	if d.bosSeen || d.nonEmpty {
		d.bosWS = false
	}
	d.bosSeen = false
	switch t.types[cid] {
	case typeControl:
		return dst, nil
	case typeUnknown:
		d.nonEmpty = d.nonEmpty || t.unkSurface != ""
		return append(dst, t.unkSurface...), nil
	}
	p := t.piece(int(cid))
	if d.bosWS && (t.addDummyPrefix || t.removeExtraWS) && strings.HasPrefix(p, spaceSymbol) {
		p = p[len(spaceSymbol):]
		d.bosSeen = !t.removeExtraWS
	}
	if p != "" {
		d.nonEmpty = true
	}
	// ▁ becomes a space.
	for {
		i := strings.Index(p, spaceSymbol)
		if i < 0 {
			return append(dst, p...), nil
		}
		dst = append(dst, p[:i]...)
		dst = append(dst, ' ')
		p = p[i+len(spaceSymbol):]
	}
}

// flush ends the current byte run.
func (d *decoderState) flush(dst []byte) []byte {
	return d.decodeBytes(dst, true)
}

// decodeBytes decodes the complete characters at the start of d.pending,
// one U+FFFD per byte that cannot start a valid sequence, as
// ProcessBytePieces does with IsValidDecodeUTF8. Unless final, a prefix
// that may still become a valid character is kept for later.
func (d *decoderState) decodeBytes(dst []byte, final bool) []byte {
	p := d.pending
	i := 0
	for i < len(p) {
		if !final && !utf8.FullRune(p[i:]) {
			break
		}
		r, n := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, replacementChar...)
		} else {
			dst = append(dst, p[i:i+n]...)
		}
		i += n
	}
	if i > 0 {
		d.nonEmpty = true
		d.pending = append(p[:0], p[i:]...)
	}
	return dst
}

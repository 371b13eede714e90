package runner

import "github.com/grok-go/grok/tokenizer"

// Tokenizer is what the engine, and the server above it, need of a
// tokenizer: SentencePiece for Grok-1 and byte-level BPE for Grok-2 both
// provide it through loader.SentencePiece and loader.BPE (loader.Tokenizer
// has these methods, so a loaded model's tokenizer is one).
type Tokenizer interface {
	// Encode turns text into ids.
	Encode(text string) []int
	// Decode turns ids into text.
	Decode(ids []int) (string, error)
	// NewTextDecoder returns a streaming decoder at the start of a text.
	NewTextDecoder() tokenizer.TextDecoder
	// VocabSize is one more than the largest id.
	VocabSize() int
	// BOS is the id a document starts with (-1 if none).
	BOS() int
	// EOS is the id that ends a document (-1 if none); it ends requests.
	EOS() int
	// Piece is the token's vocabulary entry, for display.
	Piece(id int) string
}

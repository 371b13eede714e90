package runner

import "github.com/grok-go/grok/tokenizer"

// Tokenizer is what the engine, and the server above it, need of a
// tokenizer: tokenizer.Interface (loader.SentencePiece and loader.BPE
// provide it).
type Tokenizer = tokenizer.Interface

// Package defaultmodel embeds the demonstration model that `grok run` and
// `grok serve` use when no -m is given: grok-tiny-kjv, a 6.4M-parameter model
// of the exact Grok-1 architecture trained on the King James Bible (public
// domain), as an F16 GGUF with its SentencePiece vocabulary (13 MB). See
// README.md beside this file for its provenance.
package defaultmodel

import _ "embed"

// GGUF is the model file's bytes. It is read-only.
//
//go:embed model-f16.gguf
var GGUF []byte

// Name is how the embedded model is reported (e.g. by /v1/models).
const Name = "grok-tiny-kjv"

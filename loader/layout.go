package loader

import (
	"strings"

	"github.com/grok-go/grok/tensor"
)

// The grok GGUF layout that every writer of this repository follows
// (convert, the test fixtures, make-model): the metadata keys are
// GGUFMetadata's (semantics §9), the tensor names model.TensorSource's, and
// the rules below say which tensors keep F32 and what general.file_type a
// file declares.

// KeepsF32 reports whether a tensor stays F32 whatever type the file's
// matrices have: the norms and the router, which llama.cpp's converter and
// llama-quantize never quantise.
func KeepsF32(name string) bool {
	return strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, ".ffn_gate_inp.weight")
}

// FileType returns llama.cpp's general.file_type code (enum llama_ftype)
// for a file whose matrices are all of type dt: ALL_F32 0, MOSTLY_F16 1,
// MOSTLY_Q8_0 7, MOSTLY_BF16 32 (the mixtures of llama-quantize have codes
// of their own, convert.Ftype).
func FileType(dt tensor.DType) uint32 {
	switch dt {
	case tensor.F16:
		return 1
	case tensor.Q8_0:
		return 7
	case tensor.BF16:
		return 32
	}
	return 0
}

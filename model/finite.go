package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/grok-go/grok/tensor"
)

// NonFiniteError reports the first NaN or infinity found in a tensor.
type NonFiniteError struct {
	Tensor string
	// Index is the flat index (numpy order) of the first bad value: an
	// element of the tensor, of its Scales for an xAI int8 tensor, or the
	// first element of the Q8_0 block whose scale is bad.
	Index int
	// Part says where the value is: "" (an element), "Q8_0 block scale"
	// or "scales".
	Part  string
	Value float32
}

func (e *NonFiniteError) Error() string {
	what := "element"
	switch e.Part {
	case "scales":
		what = "scales element"
	case "Q8_0 block scale":
		what = "the scale of the Q8_0 block starting at element"
	}
	return fmt.Sprintf("model: tensor %q: %s %d is %v", e.Tensor, what, e.Index, e.Value)
}

// CheckFinite scans every value of t for NaN and infinities and returns a
// *NonFiniteError for the first one. It reads F32, F16 and BF16 elements,
// Q8_0 block scales (the int8 quants cannot be anything but finite) and, for
// an I8 tensor, its scales.
func CheckFinite(t *tensor.Tensor) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	le := binary.LittleEndian
	bad := func(i int, part string, v float32) error {
		return &NonFiniteError{Tensor: t.Name, Index: i, Part: part, Value: v}
	}
	d := t.Data
	switch t.Type {
	case tensor.F32:
		for i := 0; i+4 <= len(d); i += 4 {
			if b := le.Uint32(d[i:]); b&0x7f800000 == 0x7f800000 {
				return bad(i/4, "", math.Float32frombits(b))
			}
		}
	case tensor.F16, tensor.BF16:
		// Both put the sign in the top bit; an all-ones exponent is
		// NaN or infinity.
		mask := uint16(0x7c00)
		conv := tensor.HalfToFloat
		if t.Type == tensor.BF16 {
			mask, conv = 0x7f80, tensor.BF16ToFloat
		}
		// Four values at a time: lane k of z is zero iff value k has the
		// all-ones exponent, and the classic zero-lane test finds one.
		m4 := uint64(mask) * 0x0001_0001_0001_0001
		i := 0
		for ; i+8 <= len(d); i += 8 {
			z := le.Uint64(d[i:])&m4 ^ m4
			if (z-0x0001_0001_0001_0001)&^z&0x8000_8000_8000_8000 != 0 {
				break
			}
		}
		for ; i+2 <= len(d); i += 2 {
			if b := le.Uint16(d[i:]); b&mask == mask {
				return bad(i/2, "", conv(b))
			}
		}
	case tensor.Q8_0:
		for i := 0; i+tensor.Q8BlockBytes <= len(d); i += tensor.Q8BlockBytes {
			if b := le.Uint16(d[i:]); b&0x7c00 == 0x7c00 {
				return bad(i/tensor.Q8BlockBytes*tensor.Q8BlockSize, "Q8_0 block scale", tensor.HalfToFloat(b))
			}
		}
	default:
		if !t.Type.Quantized() {
			break
		}
		// ggml's other block types keep their scales in different places;
		// decoding each block finds a bad scale in any of them.
		bs, bb := t.Type.BlockSize(), t.Type.BlockBytes()
		var buf [tensor.QK_K]float32
		for b := 0; (b+1)*bb <= len(d); b++ {
			if err := tensor.DequantizeRow(t.Type, d[b*bb:(b+1)*bb], buf[:bs]); err != nil {
				return fmt.Errorf("model: %w", err)
			}
			for j, v := range buf[:bs] {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					return bad(b*bs+j, t.Type.String()+" block", v)
				}
			}
		}
	case tensor.I8:
		if t.Scales != nil {
			if err := CheckFinite(t.Scales); err != nil {
				if e, ok := err.(*NonFiniteError); ok {
					e.Tensor, e.Part = t.Name, "scales"
				}
				return err
			}
		}
	}
	return nil
}

// checkedAtLoad reports whether New scans a tensor's values when it loads:
// the norms and the router, which are small, and the embedding and
// unembedding; the expert and attention matrices are left to
// `grok inspect --check`.
func checkedAtLoad(name string) bool {
	// Embedding: each forward pass reads all V×D of the unembedding, so one scan at load is cheap.
	return strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, ".ffn_gate_inp.weight") ||
		name == "token_embd.weight" || name == "output.weight"
}

// finiteSource wraps the TensorSource New reads, scanning each tensor it
// hands out once: the tensors of checkedAtLoad whole, and the scales of
// every int8 tensor (a few values per output column). What it finds is
// reported after the structure has loaded, all bad tensors at once.
type finiteSource struct {
	src  TensorSource
	seen map[string]bool
	bad  []error
}

func (s *finiteSource) Lookup(name string) (*tensor.Tensor, bool) {
	t, ok := s.src.Lookup(name)
	if !ok || s.seen[name] {
		return t, ok
	}
	s.seen[name] = true
	if !checkedAtLoad(name) {
		if t.Type != tensor.I8 || t.Scales == nil {
			return t, ok
		}
		// Only the scales: CheckFinite reads nothing else of an I8 tensor.
	}
	if err := CheckFinite(t); err != nil {
		if _, nf := err.(*NonFiniteError); nf {
			s.bad = append(s.bad, err)
		}
	}
	return t, ok
}

// Split serves the tensors the wrapped source stores in pieces (see
// SplitSource) as they are: only expert matrices are split so, and load
// scans none of those.
func (s *finiteSource) Split(name string) ([]*tensor.Tensor, int, bool, error) {
	return splitOf(s.src, name)
}

// splitOf is src's Split, or "stored whole" for a source without one.
func splitOf(src TensorSource, name string) ([]*tensor.Tensor, int, bool, error) {
	if ss, ok := src.(SplitSource); ok {
		return ss.Split(name)
	}
	return nil, 0, false, nil
}

package kernels

import (
	"fmt"

	"github.com/grok-go/grok/tensor"
)

// A matrix in parts is one whose bytes are not one run: xai-org/grok-2's
// experts are stored as 8 tensor-parallel slices in 8 files, each mapped
// where it lies. Output-axis parts (w1, w3) each hold a run of whole
// output rows; input-axis parts (w2) each hold every output row for a run
// of the input axis. A product over parts has the bits of the product over
// the joined matrix: an output row's dot product is the same whichever
// part holds the row, and over input-axis parts whose boundaries lie on
// the dotSpan grid the kernels add the same span sums to the output in the
// same order, part after part, with no clearing between.

// Parted returns the matrix made of parts, in order, without copying
// them: with in false each part holds the next outputs (all In inputs),
// with in set the next inputs (all Out outputs). The parts must be [out,
// in] F32, F16 or BF16 matrices of one type, without parts of their own;
// input-axis parts must start on the dotSpan grid (a *SplitError
// otherwise: such a matrix must be joined to keep the bits of its
// product). One part is returned as it is.
func Parted(parts []Mat, in bool) (Mat, error) {
	if len(parts) == 0 {
		return Mat{}, fmt.Errorf("kernels: a matrix of no parts")
	}
	if len(parts) == 1 {
		return parts[0], parts[0].Validate()
	}
	m := Mat{Type: parts[0].Type, Out: parts[0].Out, In: parts[0].In, Parts: append([]Mat(nil), parts...), PartsIn: in}
	for _, p := range parts[1:] {
		if in {
			m.In += p.In
		} else {
			m.Out += p.Out
		}
	}
	return m, m.Validate()
}

// validateParts is Validate of a matrix in parts.
func (m *Mat) validateParts() error {
	if m.Data != nil || m.Transposed || m.Scales != nil || m.Stride != 0 {
		return fmt.Errorf("kernels: a matrix in parts has no data, scales or stride of its own")
	}
	switch m.Type {
	case tensor.F32, tensor.F16, tensor.BF16:
	default:
		return fmt.Errorf("kernels: %v matrices cannot be multiplied in parts (F32, F16 and BF16 can)", m.Type)
	}
	k, o := 0, 0
	for i := range m.Parts {
		p := &m.Parts[i]
		if p.Parts != nil || p.Transposed || p.Type != m.Type {
			return fmt.Errorf("kernels: part %d of a %v matrix in parts is %v (transposed %v, parts %d)", i, m.Type, p.Type, p.Transposed, len(p.Parts))
		}
		if m.PartsIn && p.Out != m.Out || !m.PartsIn && p.In != m.In {
			return fmt.Errorf("kernels: part %d (%d×%d) does not fit a %d×%d matrix in parts", i, p.Out, p.In, m.Out, m.In)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("kernels: part %d: %w", i, err)
		}
		if m.PartsIn && k%dotSpan != 0 {
			return &SplitError{Unit: dotSpan, What: "summation span", Lo: k, Hi: k + p.In}
		}
		k += p.In
		o += p.Out
	}
	if m.PartsIn && (k != m.In || m.Out <= 0) || !m.PartsIn && (o != m.Out || m.In <= 0) {
		return fmt.Errorf("kernels: parts of %d outputs and %d inputs in all do not make a %d×%d matrix", o, k, m.Out, m.In)
	}
	return nil
}

// sliceParts is SliceOut (byIn false) or SliceIn of a matrix in parts:
// along the axis the parts cut, the parts that overlap [lo, hi), each cut
// to it; across it, every part cut. The result is again in parts, or one
// part alone.
func (m *Mat) sliceParts(lo, hi int, byIn bool) (Mat, error) {
	cut := func(p *Mat, a, b int) (Mat, error) {
		if byIn {
			return p.SliceIn(a, b)
		}
		return p.SliceOut(a, b)
	}
	var out []Mat
	o := 0
	for i := range m.Parts {
		p := &m.Parts[i]
		if byIn != m.PartsIn {
			s, err := cut(p, lo, hi)
			if err != nil {
				return Mat{}, err
			}
			out = append(out, s)
			continue
		}
		w := p.Out
		if byIn {
			w = p.In
		}
		if a, b := max(lo, o), min(hi, o+w); a < b {
			s, err := cut(p, a-o, b-o)
			if err != nil {
				return Mat{}, err
			}
			out = append(out, s)
		}
		o += w
	}
	return Parted(out, m.PartsIn)
}

// matMulParts is MatMulRows over a matrix in parts: dst is cleared, then
// each part adds its products, in order.
func matMulParts(dst, x []float32, n int, m *Mat, lo, hi int) {
	In, Out := m.In, m.Out
	ks := active
	if ks == nil {
		partsRef(dst, x, n, m, lo, hi)
		return
	}
	for t := 0; t < n; t++ {
		clear(dst[t*Out+lo : t*Out+hi])
	}
	k, o := 0, 0
	for i := range m.Parts {
		p := &m.Parts[i]
		if m.PartsIn {
			ks.dotAdd(dst, Out, x[k:], In, n, p, lo, hi)
			k += p.In
			continue
		}
		if a, b := max(lo, o), min(hi, o+p.Out); a < b {
			ks.dotAdd(dst[o:], Out, x, In, n, p, a-o, b-o)
		}
		o += p.Out
	}
}

// partsRef is matMulRef over a matrix in parts: each row is decoded from
// its parts into one float32 row and dotted with every input, so the bits
// are matMulRef's over the joined matrix.
func partsRef(dst, x []float32, n int, m *Mat, lo, hi int) {
	In, Out := m.In, m.Out
	sp := getScratch(In)
	defer scratchPool.Put(sp)
	row := *sp
	decode := func(p *Mat, r int, into []float32) {
		st := p.stride()
		if err := tensor.DecodeRow(into, p.Type, p.Data[r*st:r*st+p.rowBytes()]); err != nil {
			panic(err) // unreachable: Validate checked the sizes
		}
	}
	for r := lo; r < hi; r++ {
		k := 0 // the part's first input, or (outputs) its first row
		for i := range m.Parts {
			p := &m.Parts[i]
			if m.PartsIn {
				decode(p, r, row[k:k+p.In])
				k += p.In
				continue
			}
			if r < k+p.Out {
				decode(p, r-k, row)
				break
			}
			k += p.Out
		}
		for t := 0; t < n; t++ {
			dst[t*Out+r] = Dot(row, x[t*In:(t+1)*In])
		}
	}
}

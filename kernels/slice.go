package kernels

import (
	"fmt"

	"github.com/grok-go/grok/tensor"
)

// SliceOut returns outputs [lo, hi) of m as a matrix of hi-lo outputs that
// views m's bytes (a column-parallel shard: y[lo:hi] = W[lo:hi]·x). In the
// [out, in] layout these are whole stored rows; in [in, out] a run of every
// row, so the result is strided. I8 scales are copied (they are already a
// float32 copy of the file's).
func (m *Mat) SliceOut(lo, hi int) (Mat, error) {
	if lo < 0 || hi > m.Out || lo >= hi {
		return Mat{}, fmt.Errorf("kernels: outputs [%d, %d) of a matrix of %d", lo, hi, m.Out)
	}
	if m.Parts != nil {
		return m.sliceParts(lo, hi, false)
	}
	s := *m
	s.Out = hi - lo
	st := m.stride()
	if m.Transposed {
		esz := m.rowBytes() / m.Out
		s.Data = m.Data[lo*esz : (m.In-1)*st+hi*esz]
		s.Stride = st
		if s.Out == m.Out {
			s.Stride = m.Stride
		}
	} else {
		s.Data = m.Data[lo*st : (hi-1)*st+m.rowBytes()]
	}
	if m.Scales != nil {
		s.Scales = make([]float32, m.Shards*s.Out)
		for sh := 0; sh < m.Shards; sh++ {
			copy(s.Scales[sh*s.Out:(sh+1)*s.Out], m.Scales[sh*m.Out+lo:sh*m.Out+hi])
		}
	}
	return s, s.Validate()
}

// SliceIn returns inputs [lo, hi) of m as a matrix of hi-lo inputs that
// views m's bytes (a row-parallel shard: the partial product W[:, lo:hi]·
// x[lo:hi], summed over the shards). In the [in, out] layout these are
// whole stored rows; in [out, in] a run of every row, so the result is
// strided. A block type's blocks and an I8 matrix's scale shards run along
// the input axis and cannot be split: lo and hi must fall on their
// boundaries (*SplitError otherwise).
func (m *Mat) SliceIn(lo, hi int) (Mat, error) {
	if lo < 0 || hi > m.In || lo >= hi {
		return Mat{}, fmt.Errorf("kernels: inputs [%d, %d) of a matrix of %d", lo, hi, m.In)
	}
	if m.Parts != nil {
		return m.sliceParts(lo, hi, true)
	}
	unit, what := 1, ""
	switch {
	case m.Type == tensor.I8:
		unit, what = m.In/m.Shards, "int8 scale shard"
	case m.Type.Quantized():
		unit, what = m.Type.BlockSize(), m.Type.String()+" block"
	}
	if lo%unit != 0 || hi%unit != 0 {
		return Mat{}, &SplitError{Unit: unit, What: what, Lo: lo, Hi: hi}
	}
	s := *m
	s.In = hi - lo
	st := m.stride()
	if m.Transposed {
		s.Data = m.Data[lo*st : (hi-1)*st+m.rowBytes()]
	} else {
		off := weightOffset(m.Type, lo)
		end, _ := m.Type.RowBytes(hi)
		s.Data = m.Data[off : (m.Out-1)*st+end]
		s.Stride = st
		if s.In == m.In {
			s.Stride = m.Stride
		}
	}
	if m.Type == tensor.I8 {
		s0, s1 := lo/unit, hi/unit
		s.Shards = s1 - s0
		s.Scales = m.Scales[s0*m.Out : s1*m.Out : s1*m.Out]
	}
	return s, s.Validate()
}

// SplitError is SliceIn's refusal to cut through a quantisation block or
// an int8 scale shard.
type SplitError struct {
	Unit   int    // elements of the block or shard along the input axis
	What   string // "Q8_0 block", "int8 scale shard", …
	Lo, Hi int    // the inputs asked for
}

func (e *SplitError) Error() string {
	return fmt.Sprintf("kernels: inputs [%d, %d) split a %s of %d elements", e.Lo, e.Hi, e.What, e.Unit)
}

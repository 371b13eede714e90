package convert

import (
	"fmt"

	"github.com/grok-go/grok/tensor"
)

// matrix is one [out, in] matrix of a source tensor — a plain matrix, one
// expert of a merged tensor, or a vector as a single row — that can be read
// row by row in the canonical (GGUF) layout whatever the source layout.
type matrix struct {
	typ     tensor.DType
	out, in int
	data    []byte // this matrix's bytes, aliasing the mapped source
	inOut   bool   // stored [in, out] (Haiku's layout): rows are gathered column-wise
	// For I8 (xAI's QuantizedWeight8bit): scale s·out + o applies to input
	// rows [s·in/shards, (s+1)·in/shards) of output o. The scales stay
	// encoded (scaleData, of scaleType: bf16 in xAI's files) until the
	// matrix is written, so that a plan of a whole model holds none of them.
	scaleData []byte
	scaleType tensor.DType
	shards    int
	scales    []float32 // decoded by loadScales while the matrix is written

	// A matrix the source holds as tensor-parallel slices (xai-org/grok-2's
	// experts) has data nil and pieces in rank order: along splitAxis 0
	// each holds the next n rows, along 1 the next n columns of every row.
	// Rows are gathered from them as they are written, so the whole matrix
	// is never in memory.
	pieces    []piece
	splitAxis int
}

// piece is one tensor-parallel slice of a split matrix: its mapped bytes
// and how many rows (axis 0) or columns (axis 1) of the matrix it holds.
type piece struct {
	data []byte
	n    int
}

// splitSource is a source that serves a tensor as the tensor-parallel
// slices it is stored in (safetensors.Model.Split), so that a conversion
// can stream them instead of having them joined in memory.
type splitSource interface {
	Split(name string) (parts []*tensor.Tensor, axis int, ok bool, err error)
}

// splitMatrix wraps the slices of an out×in matrix split along axis. Each
// slice must be a plain [out, in] matrix of one element type.
func splitMatrix(name string, parts []*tensor.Tensor, axis, out, in int) (matrix, error) {
	m := matrix{out: out, in: in, splitAxis: axis}
	if axis != 0 && axis != 1 {
		return m, fmt.Errorf("tensor %q: split along axis %d", name, axis)
	}
	sum := 0
	for i, t := range parts {
		if err := t.Check(); err != nil {
			return m, err
		}
		if i == 0 {
			m.typ = t.Type
		}
		if t.Type != m.typ || elemSize(t.Type) == 0 || t.Type == tensor.I8 || t.Transposed || len(t.Shape) != 2 || t.Shape[1-axis] != []int{out, in}[1-axis] {
			return m, fmt.Errorf("tensor %q: tensor-parallel slice %d is %v%v, which does not fit a split %d×%d matrix of one float type", name, i, t.Type, t.Shape, out, in)
		}
		m.pieces = append(m.pieces, piece{data: t.Data, n: t.Shape[axis]})
		sum += t.Shape[axis]
	}
	if want := []int{out, in}[axis]; sum != want || len(parts) == 0 {
		return m, fmt.Errorf("tensor %q: its tensor-parallel slices hold %d of its %d %s", name, sum, want, []string{"rows", "columns"}[axis])
	}
	return m, nil
}

// sourceBytes is the size of the matrix in the source.
func (m *matrix) sourceBytes() int64 {
	n := int64(len(m.data))
	for _, p := range m.pieces {
		n += int64(len(p.data))
	}
	return n
}

// loadScales decodes the matrix's scales (shards·out values) into
// m.scales.
func (m *matrix) loadScales() error {
	if m.shards == 0 {
		return nil
	}
	m.scales = make([]float32, m.shards*m.out)
	return tensor.DecodeRow(m.scales, m.scaleType, m.scaleData)
}

// matricesOf splits a source tensor into count matrices of out×in. Its
// shape must be [count,] out, in — or [count,] in, out when Transposed —
// exactly as the model accepts it (model/linear.go).
func matricesOf(t *tensor.Tensor, count, out, in int) ([]matrix, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	rows, cols := out, in
	if t.Transposed {
		rows, cols = in, out
	}
	shape := t.Shape
	if len(shape) == 2 && count == 1 {
		shape = []int{1, shape[0], shape[1]}
	}
	if len(shape) != 3 || shape[0] != count || shape[1] != rows || shape[2] != cols {
		want := []int{count, rows, cols}
		if count == 1 {
			want = want[1:]
		}
		return nil, fmt.Errorf("tensor %q has shape %v, want %v", t.Name, t.Shape, want)
	}
	if t.Transposed && t.Type == tensor.Q8_0 {
		return nil, fmt.Errorf("tensor %q: Q8_0 blocks must run along the input axis", t.Name)
	}
	shards := 0
	if t.Type == tensor.I8 {
		if t.Scales == nil {
			return nil, fmt.Errorf("tensor %q: int8 without scales (not a QuantizedWeight8bit) cannot be converted", t.Name)
		}
		ss := t.Scales.Shape
		if len(ss) == 2 && count == 1 {
			ss = []int{1, ss[0], ss[1]}
		}
		if len(ss) != 3 || ss[0] != count || ss[2] != out || ss[1] <= 0 || in%ss[1] != 0 {
			return nil, fmt.Errorf("tensor %q: scales shape %v does not fit %d×%d×%d", t.Name, t.Scales.Shape, count, in, out)
		}
		shards = ss[1]
		if err := t.Scales.Check(); err != nil {
			return nil, fmt.Errorf("tensor %q scales: %w", t.Name, err)
		}
		if elemSize(t.Scales.Type) == 0 || t.Scales.Type == tensor.I8 {
			return nil, fmt.Errorf("tensor %q: scales of type %v", t.Name, t.Scales.Type)
		}
	}
	per := len(t.Data) / count
	ms := make([]matrix, count)
	for e := range ms {
		ms[e] = matrix{typ: t.Type, out: out, in: in, data: t.Data[e*per : (e+1)*per], inOut: t.Transposed}
		if shards > 0 {
			sper := len(t.Scales.Data) / count
			ms[e].shards = shards
			ms[e].scaleType = t.Scales.Type
			ms[e].scaleData = t.Scales.Data[e*sper : (e+1)*sper]
		}
	}
	return ms, nil
}

// vectorOf wraps a 1-D tensor of n elements (a norm scale) as a 1×n matrix.
func vectorOf(t *tensor.Tensor, n int) (matrix, error) {
	if err := t.Check(); err != nil {
		return matrix{}, err
	}
	if len(t.Shape) != 1 || t.Shape[0] != n {
		return matrix{}, fmt.Errorf("tensor %q has shape %v, want [%d]", t.Name, t.Shape, n)
	}
	switch t.Type {
	case tensor.F32, tensor.F16, tensor.BF16:
	default:
		return matrix{}, fmt.Errorf("tensor %q: a %v vector cannot be converted (want F32, F16 or BF16)", t.Name, t.Type)
	}
	return matrix{typ: t.Type, out: 1, in: n, data: t.Data}, nil
}

// elemSize is the byte size of one element of a plain (unblocked) type.
func elemSize(t tensor.DType) int {
	switch t {
	case tensor.F32:
		return 4
	case tensor.F16, tensor.BF16:
		return 2
	case tensor.I8:
		return 1
	}
	return 0
}

// rawRows writes rows o0..o0+n-1 of the matrix, in the canonical layout and
// the source's element type, into dst (n·in elements). It is only used for
// plain element types; Q8_0 is never stored [in, out].
func (m *matrix) rawRows(dst []byte, o0, n int) {
	es := elemSize(m.typ)
	if !m.inOut {
		copy(dst, m.data[o0*m.in*es:(o0+n)*m.in*es])
		return
	}
	// Gather columns o0..o0+n of the stored [in, out] array: for each
	// stored row r, its n contiguous elements go to column r of the n
	// output rows. Reading n·es contiguous bytes per stored row keeps the
	// access to the mapped file sequential enough for large n.
	rowBytes := m.out * es
	stride := m.in * es
	for r := 0; r < m.in; r++ {
		src := m.data[r*rowBytes+o0*es : r*rowBytes+(o0+n)*es]
		d := dst[r*es:]
		switch es {
		case 1:
			for j, b := range src {
				d[j*stride] = b
			}
		case 2:
			for j := 0; j < n; j++ {
				d[j*stride], d[j*stride+1] = src[2*j], src[2*j+1]
			}
		default:
			for j := 0; j < n; j++ {
				copy(d[j*stride:j*stride+4], src[4*j:4*j+4])
			}
		}
	}
}

// plainRows returns rows o0..o0+n-1 of a matrix of a plain element type
// in the canonical layout: a view of the source where it holds them so,
// else gathered into scratch (n·in elements).
func (m *matrix) plainRows(scratch []byte, o0, n int) []byte {
	es := elemSize(m.typ)
	rb := m.in * es
	switch {
	case m.inOut:
		m.rawRows(scratch, o0, n)
		return scratch[:n*rb]
	case m.pieces == nil:
		return m.data[o0*rb : (o0+n)*rb]
	case m.splitAxis == 0:
		dst := scratch[:0]
		r, end, base := o0, o0+n, 0
		for _, p := range m.pieces {
			if r < end && r < base+p.n {
				hi := min(end, base+p.n)
				chunk := p.data[(r-base)*rb : (hi-base)*rb]
				if len(dst) == 0 && hi == end {
					return chunk // within one slice: no copy
				}
				dst = append(dst, chunk...)
				r = hi
			}
			base += p.n
		}
		return dst
	}
	dst := scratch[:0]
	for r := o0; r < o0+n; r++ {
		for _, p := range m.pieces {
			w := p.n * es
			dst = append(dst, p.data[r*w:(r+1)*w]...)
		}
	}
	return dst
}

// rows decodes rows o0..o0+n-1 of the matrix to float32 into dst (n·in
// values), dequantising int8 with its per-shard scales (loaded by
// loadScales). raw is scratch of at least n·in·elemSize bytes.
func (m *matrix) rows(dst []float32, raw []byte, o0, n int) error {
	if m.typ == tensor.Q8_0 {
		rb, _ := tensor.Q8_0.RowBytes(m.in)
		return tensor.DecodeRow(dst[:n*m.in], tensor.Q8_0, m.data[o0*rb:(o0+n)*rb])
	}
	if err := tensor.DecodeRow(dst[:n*m.in], m.typ, m.plainRows(raw, o0, n)); err != nil {
		return err
	}
	if m.typ == tensor.I8 {
		blk := m.in / m.shards
		for j := 0; j < n; j++ {
			o := o0 + j
			row := dst[j*m.in : (j+1)*m.in]
			for i := range row {
				row[i] *= m.scales[(i/blk)*m.out+o]
			}
		}
	}
	return nil
}

// exactQ8 reports whether the int8 matrix can become Q8_0 with its int8
// values kept: every block of 32 inputs of an output row lies within one
// scale shard, and every scale is exactly representable in fp16 (Q8_0's d).
// If not, it says why.
func (m *matrix) exactQ8() (bool, string) {
	if m.in%tensor.Q8BlockSize != 0 {
		return false, fmt.Sprintf("%d inputs are not a whole number of Q8_0 blocks of %d", m.in, tensor.Q8BlockSize)
	}
	if blk := m.in / m.shards; blk%tensor.Q8BlockSize != 0 {
		return false, fmt.Sprintf("its %d scale shards of %d input rows each cut through Q8_0 blocks of %d", m.shards, blk, tensor.Q8BlockSize)
	}
	scales := make([]float32, m.shards*m.out)
	if err := tensor.DecodeRow(scales, m.scaleType, m.scaleData); err != nil {
		return false, err.Error()
	}
	for _, s := range scales {
		if tensor.HalfToFloat(tensor.FloatToHalf(s)) != s {
			return false, fmt.Sprintf("scale %g is not exactly representable in fp16", s)
		}
	}
	return true, ""
}

// q8Rows writes rows o0..o0+n-1 of an int8 matrix as Q8_0 blocks whose
// quants are the int8 values and whose d is the shard's scale in fp16
// (exactQ8 must hold, and loadScales have run). raw is scratch of at least
// n·in bytes.
func (m *matrix) q8Rows(dst, raw []byte, o0, n int) []byte {
	m.rawRows(raw, o0, n)
	blk := m.in / m.shards
	for j := 0; j < n; j++ {
		o := o0 + j
		q := raw[j*m.in : (j+1)*m.in]
		for b := 0; b < m.in; b += tensor.Q8BlockSize {
			d := tensor.FloatToHalf(m.scales[(b/blk)*m.out+o])
			dst = append(dst, byte(d), byte(d>>8))
			dst = append(dst, q[b:b+tensor.Q8BlockSize]...)
		}
	}
	return dst
}

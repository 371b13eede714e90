package convert

import (
	"fmt"
	"io"
	"sync"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/tensor"
)

// blockElems bounds the float32 scratch of one block of rows (8 MB): large
// enough that gathering the columns of an [in, out] source reads long runs
// of each stored row, small next to any real tensor. (A variable so that a
// test can bound a conversion's memory with a small model.)
var blockElems = 2 << 20

// write produces the tensor's bytes, a block of rows at a time. The rows of
// a block are decoded and encoded by several goroutines (each row is
// independent), then written in order.
func (j *job) write(t *outTensor, w io.Writer) error {
	for _, m := range t.mats {
		if t.mode == modeCopy {
			if err := j.copyMatrix(w, &m); err != nil {
				return err
			}
			continue
		}
		if err := m.loadScales(); err != nil {
			return err
		}
		n := max(1, min(m.out, blockElems/m.in))
		es := max(elemSize(m.typ), 1)
		if cap(j.f32) < n*m.in {
			j.f32 = make([]float32, n*m.in)
		}
		if cap(j.raw) < n*m.in*es {
			j.raw = make([]byte, n*m.in*es)
		}
		for o := 0; o < m.out; o += n {
			if err := j.ctx.Err(); err != nil {
				return err
			}
			k := min(n, m.out-o)
			// Split the block into one run of rows per worker; small
			// blocks are not worth a goroutine.
			parts := max(1, min(j.workers, k*m.in/minParallelElems))
			if len(j.enc) < parts {
				j.enc = append(j.enc, make([][]byte, parts-len(j.enc))...)
			}
			errs := make([]error, parts)
			var wg sync.WaitGroup
			for p := 0; p < parts; p++ {
				r0, r1 := k*p/parts, k*(p+1)/parts
				encode := func() {
					enc := j.enc[p][:0]
					if t.mode == modeInt8Q8 {
						enc = m.q8Rows(enc, j.raw[r0*m.in*es:], o+r0, r1-r0)
					} else {
						buf := j.f32[r0*m.in : r1*m.in]
						if errs[p] = m.rows(buf, j.raw[r0*m.in*es:], o+r0, r1-r0); errs[p] == nil {
							enc, errs[p] = tensor.EncodeRow(enc, t.typ, buf)
							if errs[p] == nil && t.validate {
								if err := tensor.ValidateRow(t.typ, enc); err != nil {
									errs[p] = fmt.Errorf("tensor %s: quantized data validation failed: %w", t.name, err)
								}
							}
						}
					}
					j.enc[p] = enc
				}
				if parts == 1 {
					encode()
					continue
				}
				wg.Add(1)
				go func() { defer wg.Done(); encode() }()
			}
			wg.Wait()
			for p := 0; p < parts; p++ {
				if errs[p] != nil {
					return errs[p]
				}
				if _, err := w.Write(j.enc[p]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// copyMatrix writes a matrix's source bytes in the canonical layout: as
// they are mapped, or, for one split along its columns, gathered a block
// of rows at a time.
func (j *job) copyMatrix(w io.Writer, m *matrix) error {
	if m.pieces == nil {
		return j.copy(w, m.data)
	}
	if m.splitAxis == 0 {
		for _, p := range m.pieces {
			if err := j.copy(w, p.data); err != nil {
				return err
			}
		}
		return nil
	}
	es := elemSize(m.typ)
	n := max(1, min(m.out, blockElems/m.in))
	if cap(j.raw) < n*m.in*es {
		j.raw = make([]byte, n*m.in*es)
	}
	for o := 0; o < m.out; o += n {
		if err := j.ctx.Err(); err != nil {
			return err
		}
		k := min(n, m.out-o)
		if _, err := w.Write(m.plainRows(j.raw[:k*m.in*es], o, k)); err != nil {
			return err
		}
	}
	return nil
}

// copy writes data in pieces, so that a cancellation is noticed within a
// large tensor.
func (j *job) copy(w io.Writer, data []byte) error {
	const piece = 64 << 20
	for len(data) > 0 {
		if err := j.ctx.Err(); err != nil {
			return err
		}
		n := min(len(data), piece)
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// minParallelElems is the least work (elements) given to a goroutine.
const minParallelElems = 1 << 16

// addTensors registers the planned tensors with the writer; their data is
// produced while the writer writes the file.
func (j *job) addTensors(w *gguf.Writer, ts []*outTensor) {
	var total int64
	for _, t := range ts {
		total += t.size()
	}
	var done int64
	for i, t := range ts {
		size := t.size()
		j.res.Tensors++
		j.res.Bytes += size
		j.res.SourceBytes += int64(len(t.raw))
		for _, m := range t.mats {
			j.res.SourceBytes += m.sourceBytes()
		}
		write := func(out io.Writer) error {
			if j.progress != nil {
				done += size
				to := t.typ.String()
				if t.raw != nil {
					to = t.ggml.String()
				}
				fmt.Fprintf(j.progress, "[%*d/%d] %-32s %-14s → %-5s %-16s %9.1f MB (%3.0f%%)\n",
					len(fmt.Sprint(len(ts))), i+1, len(ts), t.name, t.from, to, fmt.Sprint(t.shape),
					float64(size)/1e6, 100*float64(done)/float64(max(total, 1)))
			}
			if t.raw != nil {
				return j.copy(out, t.raw)
			}
			return j.write(t, out)
		}
		if t.raw != nil {
			w.AddGGMLTensor(t.name, t.ggml, t.dims, size, write)
		} else {
			w.AddTensorFunc(t.name, t.typ, t.shape, size, write)
		}
	}
}

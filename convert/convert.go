// Package convert writes GGUF v3 files of llama.cpp's arch `grok` from any
// model the loader opens — GGUF, xAI's original checkpoint, Hugging Face
// safetensors — and requantises GGUF files as llama-quantize does. It backs
// the `grok convert` and `grok quantize` commands.
//
// The files use llama.cpp's tensor names and [out, in] layout (ggml's ne0 =
// in), merged expert tensors blk.N.ffn_{gate,up,down}_exps [E, out, in],
// the metadata keys of semantics §9 and an embedded SentencePiece
// vocabulary, so llama.cpp loads them as it loads its own converter's
// output. Tensor data is produced while the file is written, one block of
// rows at a time: a conversion holds no more than a few megabytes besides
// the memory-mapped input, whatever the model's size.
package convert

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
	"github.com/grok-go/grok/tokenizer"
)

// Type is the tensor type a conversion writes.
type Type int

// The conversion types. Keep keeps each tensor's type where GGUF can hold
// it (F32, F16, BF16, Q8_0) and turns xAI's int8 QuantizedWeight8bit into
// Q8_0 with the int8 values kept exactly.
const (
	Keep Type = iota
	F32
	F16
	BF16
	Q8_0

	// llama-quantize's mixtures (see Ftype): each matrix gets the type
	// llama-quantize's rules choose, quantised from float32 with ggml's
	// reference quantisers.
	Q4_0
	Q4_1
	Q5_0
	Q5_1
	Q2_K
	Q3_K_S
	Q3_K_M
	Q3_K_L
	Q4_K_S
	Q4_K_M
	Q5_K_S
	Q5_K_M
	Q6_K
	IQ4_NL
	IQ4_XS
)

var typeNames = [...]string{Keep: "keep", F32: "f32", F16: "f16", BF16: "bf16", Q8_0: "q8_0",
	Q4_0: "q4_0", Q4_1: "q4_1", Q5_0: "q5_0", Q5_1: "q5_1", Q2_K: "q2_k", Q3_K_S: "q3_k_s", Q3_K_M: "q3_k_m",
	Q3_K_L: "q3_k_l", Q4_K_S: "q4_k_s", Q4_K_M: "q4_k_m", Q5_K_S: "q5_k_s", Q5_K_M: "q5_k_m", Q6_K: "q6_k",
	IQ4_NL: "iq4_nl", IQ4_XS: "iq4_xs"}

// TypeNames lists the names ParseType accepts, for usage messages.
const TypeNames = "f32|f16|bf16|q8_0|keep|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k_s|q3_k_m|q3_k_l|q4_k_s|q4_k_m|q5_k_s|q5_k_m|q6_k|iq4_nl|iq4_xs"

// String returns the type's name as the command line spells it.
func (t Type) String() string {
	if t >= 0 && int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// ParseType maps a name (any case) to a Type; q3_k, q4_k and q5_k are
// aliases of the _M mixtures, as in llama-quantize.
func ParseType(s string) (Type, error) {
	for i, n := range typeNames {
		if strings.EqualFold(n, s) {
			return Type(i), nil
		}
	}
	if a, ok := map[string]Type{"Q3_K": Q3_K_M, "Q4_K": Q4_K_M, "Q5_K": Q5_K_M}[strings.ToUpper(s)]; ok {
		return a, nil
	}
	return 0, fmt.Errorf("unknown type %q (want %s)", s, TypeNames)
}

// dtype returns the tensor type of a fixed conversion type.
func (t Type) dtype() tensor.DType {
	switch t {
	case F16:
		return tensor.F16
	case BF16:
		return tensor.BF16
	case Q8_0:
		return tensor.Q8_0
	}
	return tensor.F32
}

// QuantizationVersion is ggml's GGML_QNT_VERSION, which llama.cpp writes as
// general.quantization_version into quantised files.
const QuantizationVersion = 2

// Options tunes Convert.
type Options struct {
	Type Type
	// Tokenizer, if set, is the vocabulary written into the file instead of
	// the source's own (loader.Model.Tokenizer).
	Tokenizer *tokenizer.Tokenizer
	// Name is general.name. Default: the source GGUF's general.name, else
	// the name of the source file or folder.
	Name string
	// Progress, if set, receives a line per tensor as it is written.
	Progress io.Writer
	// Warn, if set, is called with each warning as it arises (they are
	// also returned in Result.Warnings).
	Warn func(string)
}

// Result describes a finished conversion.
type Result struct {
	Tensors     int
	SourceBytes int64  // tensor data read from the source
	Bytes       int64  // tensor data written, without the header and padding
	FileType    uint32 // general.file_type written
	Warnings    []string
	Files       []string // Quantize: the files written (dst, or its shards)
}

// job is the state shared by the steps of one conversion.
type job struct {
	ctx      context.Context
	progress io.Writer
	warnFn   func(string)
	res      Result
	// Scratch reused across tensors: float32 rows, raw source rows, and
	// the encoded rows of each worker.
	f32     []float32
	raw     []byte
	enc     [][]byte
	workers int
}

func newJob(ctx context.Context, progress io.Writer, warn func(string)) *job {
	return &job{ctx: ctx, progress: progress, warnFn: warn, workers: runtime.GOMAXPROCS(0)}
}

func (j *job) warnf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	j.res.Warnings = append(j.res.Warnings, msg)
	if j.warnFn != nil {
		j.warnFn(msg)
	}
}

// writeMode says how a tensor's bytes are produced.
type writeMode int

const (
	modeCopy   writeMode = iota // same type, canonical layout: the source bytes as they are
	modeEncode                  // decode to float32, encode to the output type
	modeInt8Q8                  // xAI int8 → Q8_0 keeping the int8 values and the scales
)

// outTensor is one tensor of the output file and how to produce it.
type outTensor struct {
	name  string
	typ   tensor.DType
	shape []int // numpy order, [.., out, in]
	mats  []matrix
	mode  writeMode
	from  string // the source's type and layout, for progress lines
	// validate checks the encoded rows as llama-quantize does
	// (ggml_validate_row_data), failing on Inf or NaN values or scales.
	validate bool

	// A tensor copied as it is, of any ggml type (Quantize leaves such
	// tensors alone, as llama-quantize does): raw is set, mats unused.
	raw  []byte
	ggml gguf.GGMLType
	dims []int64
}

func (t *outTensor) size() int64 {
	if t.raw != nil {
		return int64(len(t.raw))
	}
	rb, _ := t.typ.RowBytes(t.mats[0].in) // checked when planned
	var n int64
	for _, m := range t.mats {
		n += int64(m.out) * int64(rb)
	}
	return n
}

// blockElems bounds the float32 scratch of one block of rows (8 MB): large
// enough that gathering the columns of an [in, out] source reads long runs
// of each stored row, small next to any real tensor.
const blockElems = 2 << 20

// write produces the tensor's bytes, a block of rows at a time. The rows of
// a block are decoded and encoded by several goroutines (each row is
// independent), then written in order.
func (j *job) write(t *outTensor, w io.Writer) error {
	for _, m := range t.mats {
		if t.mode == modeCopy {
			if err := j.copy(w, m.data); err != nil {
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
			j.res.SourceBytes += int64(len(m.data))
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

// describe names a source's type and layout for progress lines.
func describe(m *matrix) string {
	s := m.typ.String()
	if m.inOut {
		s += " [in,out]"
	}
	return s
}

// choose decides the output type and write mode of a tensor.
func (j *job) choose(t *outTensor, want Type) error {
	m0 := &t.mats[0]
	src := m0.typ
	t.from = describe(m0)
	switch {
	case loader.KeepsF32(t.name) || len(t.shape) == 1:
		t.typ = tensor.F32
	case want != Keep:
		t.typ = want.dtype()
	case src == tensor.I8:
		t.typ = tensor.Q8_0
	default:
		t.typ = src // F32, F16, BF16, Q8_0: all storable
	}
	t.mode = modeEncode
	if t.typ == src && !m0.inOut {
		t.mode = modeCopy
	}
	if t.typ == tensor.Q8_0 && m0.in%tensor.Q8BlockSize != 0 {
		if src == tensor.I8 && want == Keep {
			return fmt.Errorf("%s: the int8 values cannot be kept in Q8_0: %d inputs are not a whole number of blocks of %d; use --type f32, f16 or bf16", t.name, m0.in, tensor.Q8BlockSize)
		}
		// As llama.cpp's converter does when a row is not whole blocks.
		j.warnf("%s: %d inputs are not a whole number of Q8_0 blocks; written as F16", t.name, m0.in)
		t.typ, t.mode = tensor.F16, modeEncode
		if src == tensor.F16 && !m0.inOut {
			t.mode = modeCopy
		}
		return nil
	}
	if t.typ == tensor.Q8_0 && src == tensor.I8 {
		for e := range t.mats {
			if ok, why := t.mats[e].exactQ8(); !ok {
				if want == Keep {
					return fmt.Errorf("%s: the int8 values cannot be kept in Q8_0: %s; use --type q8_0 to requantise, or f32/f16/bf16", t.name, why)
				}
				j.warnf("%s: int8 values requantised to Q8_0 (not kept exactly): %s", t.name, why)
				return nil
			}
		}
		t.mode = modeInt8Q8
	}
	return nil
}

// layerNames lists a decoder layer's tensors in llama.cpp's order.
func layerNames(c *model.Config) []string {
	if c.NumExperts > 1 {
		return []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm",
			"ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "layer_output_norm"}
	}
	return []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm",
		"ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "layer_output_norm"}
}

// plan maps every tensor the model uses to an output tensor, in
// llama.cpp's file order: token_embd, the layers, output_norm (and an
// untied output.weight). Every shape and type is checked here, before a
// byte is written.
func (j *job) plan(src model.TensorSource, c *model.Config, want Type) ([]*outTensor, error) {
	D, K, F, E := c.EmbSize, c.KeySize, c.FFNSize, c.NumExperts
	HQ, HKV := c.NumQHeads*K, c.NumKVHeads*K
	var ts []*outTensor
	lookup := func(name string) (*tensor.Tensor, error) {
		t, ok := src.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("missing tensor %q", name)
		}
		return t, nil
	}
	add := func(name string, mats []matrix, shape []int) error {
		t := &outTensor{name: name, mats: mats, shape: shape}
		if err := j.choose(t, want); err != nil {
			return err
		}
		ts = append(ts, t)
		return nil
	}
	mat := func(name string, out, in int) error {
		t, err := lookup(name)
		if err != nil {
			return err
		}
		ms, err := matricesOf(t, 1, out, in)
		if err != nil {
			return err
		}
		return add(name, ms, []int{out, in})
	}
	vec := func(name, srcName string) error {
		t, err := lookup(srcName)
		if err != nil {
			return err
		}
		m, err := vectorOf(t, D)
		if err != nil {
			return err
		}
		return add(name, []matrix{m}, []int{D})
	}
	experts := func(name string, l int, kind string, out, in int) error {
		if t, ok := src.Lookup(name); ok {
			ms, err := matricesOf(t, E, out, in)
			if err != nil {
				return err
			}
			return add(name, ms, []int{E, out, in})
		}
		// One tensor per expert (safetensors): merged on the way.
		var ms []matrix
		for e := 0; e < E; e++ {
			t, err := lookup(fmt.Sprintf("blk.%d.ffn_%s.%d.weight", l, kind, e))
			if err != nil {
				return fmt.Errorf("%w (nor merged %s)", err, name)
			}
			m, err := matricesOf(t, 1, out, in)
			if err != nil {
				return err
			}
			if e > 0 && (m[0].typ != ms[0].typ || m[0].inOut != ms[0].inOut) {
				return fmt.Errorf("%s: expert %d is %s, expert 0 %s: a merged tensor needs one type", name, e, describe(&m[0]), describe(&ms[0]))
			}
			ms = append(ms, m[0])
		}
		return add(name, ms, []int{E, out, in})
	}
	if err := mat("token_embd.weight", c.VocabSize, D); err != nil {
		return nil, err
	}
	for l := 0; l < c.NumLayers; l++ {
		for _, s := range layerNames(c) {
			name := fmt.Sprintf("blk.%d.%s.weight", l, s)
			var err error
			switch s {
			case "attn_norm", "attn_output_norm", "ffn_norm":
				err = vec(name, name)
			case "layer_output_norm":
				srcName := name
				if _, ok := src.Lookup(name); !ok {
					srcName = fmt.Sprintf("blk.%d.post_ffw_norm.weight", l) // llama.cpp's other name
				}
				err = vec(name, srcName)
			case "attn_q":
				err = mat(name, HQ, D)
			case "attn_k", "attn_v":
				err = mat(name, HKV, D)
			case "attn_output":
				err = mat(name, D, HQ)
			case "ffn_gate_inp":
				err = mat(name, E, D)
			case "ffn_gate_exps":
				err = experts(name, l, "gate", F, D)
			case "ffn_up_exps":
				err = experts(name, l, "up", F, D)
			case "ffn_down_exps":
				err = experts(name, l, "down", D, F)
			case "ffn_gate", "ffn_up":
				err = mat(name, F, D)
			case "ffn_down":
				err = mat(name, D, F)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if err := vec("output_norm.weight", "output_norm.weight"); err != nil {
		return nil, err
	}
	if _, ok := src.Lookup("output.weight"); ok {
		if err := mat("output.weight", c.VocabSize, D); err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// fileType is general.file_type for the planned tensors: the type asked
// for, or with Keep the type holding most elements among the tensors that
// follow it (norms and router are F32 in every llama.cpp file type).
func fileType(ts []*outTensor, want Type) tensor.DType {
	if want != Keep {
		return want.dtype()
	}
	count := map[tensor.DType]int64{}
	best := tensor.F32
	for _, t := range ts {
		if loader.KeepsF32(t.name) {
			continue
		}
		for _, m := range t.mats {
			count[t.typ] += int64(m.out) * int64(m.in)
		}
		if count[t.typ] > count[best] {
			best = t.typ
		}
	}
	return best
}

// Convert writes the model m as a GGUF file at dst (see the package
// documentation). The file appears only when complete: it is written to a
// temporary file in dst's folder and renamed; when ctx is cancelled, or
// anything fails, the temporary file is removed and dst left as it was.
func Convert(ctx context.Context, m *loader.Model, dst string, opt Options) (*Result, error) {
	if opt.Type < Keep || int(opt.Type) >= len(typeNames) {
		return nil, fmt.Errorf("convert: unknown type %v", opt.Type)
	}
	mixture, isMixture := opt.Type.ftype()
	want := opt.Type
	if isMixture {
		want = F32 // planned as float32, then given the mixture's types
	}
	if err := CheckOutput(dst, m.Path); err != nil {
		return nil, err
	}
	j := newJob(ctx, opt.Progress, opt.Warn)
	c := &m.Config
	ts, err := j.plan(m.Source, c, want)
	if err != nil {
		return nil, fmt.Errorf("convert: %s: %w", m.Path, err)
	}
	if isMixture {
		if err := j.applyMixture(ts, mixture, c); err != nil {
			return nil, fmt.Errorf("convert: %s: %w", m.Path, err)
		}
	}
	ft := fileType(ts, want)
	quantised := false
	for _, t := range ts {
		quantised = quantised || t.typ.Quantized()
	}
	tok := m.Tokenizer
	if opt.Tokenizer != nil {
		tok = opt.Tokenizer
	}
	name := opt.Name
	if name == "" {
		name = defaultName(m)
	}
	kvs := loader.GGUFMetadata(name, c)
	vkvs, err := j.vocabKVs(tok, c)
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	kvs = append(kvs, vkvs...)
	if quantised {
		kvs = append(kvs, kv{Key: "general.quantization_version", Value: uint32(QuantizationVersion)})
	}
	j.res.FileType = loader.FileType(ft)
	if isMixture {
		j.res.FileType = uint32(mixture)
	}
	kvs = append(kvs, kv{Key: "general.file_type", Value: j.res.FileType})

	w := gguf.NewWriter()
	for _, p := range kvs {
		if err := w.AddKV(p.Key, p.Value); err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
	}
	j.addTensors(w, ts)
	if err := w.WriteFile(dst); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	return &j.res, nil
}

// kv is one metadata pair to write.
type kv = loader.MetaKV

// defaultName is general.name when none is given.
func defaultName(m *loader.Model) string {
	if m.GGUF != nil {
		if s, ok := m.GGUF.String("general.name"); ok && s != "" {
			return s
		}
	}
	p := filepath.Clean(m.Path)
	base := filepath.Base(p)
	if base == "ckpt-0" {
		base = filepath.Base(filepath.Dir(p))
	}
	for _, ext := range []string{".gguf", ".index.json", ".safetensors", ".json"} {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}

// CheckOutput fails when dst cannot be written: its folder is missing, it
// is a folder, or it is the input src itself (which is memory-mapped while
// the output is written). Convert and Quantize check this first; a caller
// may check it before the (slower) loading of the source.
func CheckOutput(dst, src string) error {
	if dst == "" {
		return errors.New("convert: no output path")
	}
	dir := filepath.Dir(dst)
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("convert: output folder %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("convert: output folder %s is not a folder", dir)
	}
	if st, err := os.Stat(dst); err == nil {
		if st.IsDir() {
			return fmt.Errorf("convert: output %s is a folder; give a file name", dst)
		}
		if in, err := os.Stat(src); err == nil && os.SameFile(st, in) {
			return fmt.Errorf("convert: output %s is the input file", dst)
		}
	}
	return nil
}

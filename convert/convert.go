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

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/tensor"
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
	IQ3_S
	IQ3_M
	IQ3_XXS // refused for grok: its attn_q would be IQ2_S, which needs an importance matrix
	IQ3_XS  // refused for grok: its attn_q would be IQ3_XXS, which needs an importance matrix
)

var typeNames = [...]string{Keep: "keep", F32: "f32", F16: "f16", BF16: "bf16", Q8_0: "q8_0",
	Q4_0: "q4_0", Q4_1: "q4_1", Q5_0: "q5_0", Q5_1: "q5_1", Q2_K: "q2_k", Q3_K_S: "q3_k_s", Q3_K_M: "q3_k_m",
	Q3_K_L: "q3_k_l", Q4_K_S: "q4_k_s", Q4_K_M: "q4_k_m", Q5_K_S: "q5_k_s", Q5_K_M: "q5_k_m", Q6_K: "q6_k",
	IQ4_NL: "iq4_nl", IQ4_XS: "iq4_xs", IQ3_S: "iq3_s", IQ3_M: "iq3_m", IQ3_XXS: "iq3_xxs", IQ3_XS: "iq3_xs"}

// TypeNames lists the names ParseType accepts, for usage messages.
const TypeNames = "f32|f16|bf16|q8_0|keep|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k_s|q3_k_m|q3_k_l|q4_k_s|q4_k_m|q5_k_s|q5_k_m|q6_k|iq3_s|iq3_m|iq4_nl|iq4_xs"

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
	// the source's own (loader.Model.Tokenizer): a loader.SentencePiece or
	// a loader.BPE.
	Tokenizer loader.Tokenizer
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

package convert

import (
	"errors"
	"fmt"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// errMissingTensor is the error of a tensor the source lacks.
var errMissingTensor = errors.New("missing tensor")

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

// plan maps every tensor the model uses to an output tensor, in
// llama.cpp's file order: token_embd, the layers, output_norm (and an
// untied output.weight). Every shape and type is checked here, before a
// byte is written.
func (j *job) plan(src model.TensorSource, c *model.Config, want Type) ([]*outTensor, error) {
	D, K, F, E := c.EmbSize, c.KeySize, c.FFNSize, c.NumExperts
	HQ, HKV := c.NumQHeads*K, c.NumKVHeads*K
	Fd := F // the dense MLP's width: Grok-2's beside the experts, or a dense model's
	if c.DenseFFNSize > 0 {
		Fd = c.DenseFFNSize
	}
	var ts []*outTensor
	lookup := func(name string) (*tensor.Tensor, error) {
		t, ok := src.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("%w %q", errMissingTensor, name)
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
	// matrix1 reads one out×in matrix, from its tensor-parallel slices
	// where the source holds it so (never joined in memory).
	splitter, _ := src.(splitSource)
	matrix1 := func(name string, out, in int) ([]matrix, error) {
		if splitter != nil {
			parts, axis, ok, err := splitter.Split(name)
			if err != nil {
				return nil, err
			}
			if ok {
				m, err := splitMatrix(name, parts, axis, out, in)
				return []matrix{m}, err
			}
		}
		t, err := lookup(name)
		if err != nil {
			return nil, err
		}
		return matricesOf(t, 1, out, in)
	}
	mat := func(name string, out, in int) error {
		ms, err := matrix1(name, out, in)
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
			m, err := matrix1(fmt.Sprintf("blk.%d.ffn_%s.%d.weight", l, kind, e), out, in)
			if err != nil {
				if errors.Is(err, errMissingTensor) {
					err = fmt.Errorf("%w (nor merged %s)", err, name)
				}
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
		for _, s := range loader.LayerTensors(c) {
			name := fmt.Sprintf("blk.%d.%s.weight", l, s)
			var err error
			switch s {
			case "attn_norm", "attn_output_norm", "ffn_norm":
				err = vec(name, name)
			case "layer_output_norm", "post_ffw_norm":
				// Sources may hold either of llama.cpp's names.
				srcName := fmt.Sprintf("blk.%d.layer_output_norm.weight", l)
				if _, ok := src.Lookup(srcName); !ok {
					srcName = fmt.Sprintf("blk.%d.post_ffw_norm.weight", l)
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
				err = mat(name, Fd, D)
			case "ffn_down":
				err = mat(name, D, Fd)
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

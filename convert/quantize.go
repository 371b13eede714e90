package convert

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/tensor"
)

// QuantizeOptions tunes Quantize.
type QuantizeOptions struct {
	Progress io.Writer    // as Options.Progress
	Warn     func(string) // as Options.Warn
}

// ParseQuantizeType maps llama-quantize's type argument — a name such as
// "q8_0" or "Q8_0", or its llama_ftype number ("7") — to a tensor type:
// Q8_0, F16 or BF16.
func ParseQuantizeType(s string) (tensor.DType, error) {
	for _, c := range []struct {
		name, num string
		dt        tensor.DType
	}{{"q8_0", "7", tensor.Q8_0}, {"f16", "1", tensor.F16}, {"bf16", "32", tensor.BF16}} {
		if strings.EqualFold(s, c.name) || s == c.num {
			return c.dt, nil
		}
	}
	return 0, fmt.Errorf("unknown quantisation type %q (want q8_0, f16 or bf16)", s)
}

// layerPrefix matches llama.cpp's sscanf("blk.%d.").
var layerPrefix = regexp.MustCompile(`^blk\.(-?\d+)\.`)

// layerOf returns the layer number of a tensor name, -1 for none.
func layerOf(name string) int {
	if m := layerPrefix.FindStringSubmatch(name); m != nil {
		var n int
		if _, err := fmt.Sscan(m[1], &n); err == nil {
			return n
		}
	}
	return -1
}

// quantizes reports whether llama-quantize converts a tensor to the target
// type (llama-quant.cpp, llama_model_quantize_impl): names ending in
// "weight", at least two dimensions larger than 1, not a norm and not the
// MoE router.
func quantizes(ti *gguf.TensorInfo) bool {
	dims := len(ti.Dims)
	for dims > 1 && ti.Dims[dims-1] == 1 {
		dims-- // ggml_n_dims ignores trailing 1s
	}
	return strings.HasSuffix(ti.Name, "weight") && dims >= 2 &&
		!strings.Contains(ti.Name, "_norm.weight") && !strings.Contains(ti.Name, "ffn_gate_inp.weight")
}

// Quantize converts a GGUF file to typ (Q8_0, F16 or BF16) as llama-quantize
// does, so that its output is what llama-quantize writes for the same input:
// the metadata copied with general.quantization_version and
// general.file_type set last, the tensors in llama.cpp's order (non-layer
// tensors, then layer by layer, each group by name), every matrix but the
// router converted with ggml's rounding, other tensors copied as they are.
// Unlike llama-quantize it writes a tensor whose rows are not whole Q8_0
// blocks as F16 (as llama.cpp's converter does) instead of failing. As
// with Convert, dst appears only when complete.
func Quantize(ctx context.Context, src, dst string, typ tensor.DType, opt QuantizeOptions) (*Result, error) {
	if typ != tensor.Q8_0 && typ != tensor.F16 && typ != tensor.BF16 {
		return nil, fmt.Errorf("quantize: type %v is not supported (Q8_0, F16 or BF16)", typ)
	}
	if err := CheckOutput(dst, src); err != nil {
		return nil, err
	}
	f, err := gguf.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	j := newJob(ctx, opt.Progress, opt.Warn)

	// Metadata: llama-quantize copies every pair, drops the split keys,
	// then sets quantization_version and file_type, which (re)appends them.
	w := gguf.NewWriter()
	j.res.FileType = LlamaFileType(typ)
	for _, p := range f.Metadata {
		switch p.Key {
		case "general.quantization_version", "general.file_type", "split.no", "split.count", "split.tensors.count":
			continue
		}
		if err := w.AddKV(p.Key, p.Value); err != nil {
			return nil, fmt.Errorf("quantize: %w", err)
		}
	}
	w.AddKV("general.quantization_version", uint32(QuantizationVersion))
	w.AddKV("general.file_type", j.res.FileType)

	// llama_model_loader's weight_name_comparer order.
	infos := make([]*gguf.TensorInfo, len(f.Tensors))
	for i := range f.Tensors {
		infos[i] = &f.Tensors[i]
	}
	sort.SliceStable(infos, func(a, b int) bool {
		la, lb := layerOf(infos[a].Name), layerOf(infos[b].Name)
		if la != lb {
			return la < lb
		}
		return infos[a].Name < infos[b].Name
	})

	var ts []*outTensor
	for _, ti := range infos {
		if !quantizes(ti) || ti.Type == mustType(typ) || ti.Size == 0 {
			// Copied as is, whatever its type: llama-quantize leaves it
			// alone.
			data, ok := f.TensorBytes(ti.Name)
			if !ok {
				return nil, fmt.Errorf("quantize: tensor %q: file is closed", ti.Name)
			}
			ts = append(ts, &outTensor{name: ti.Name, shape: ti.Shape(), from: ti.Type.String(), raw: data, ggml: ti.Type, dims: ti.Dims})
			continue
		}
		t, err := f.Tensor(ti.Name)
		if err != nil {
			return nil, fmt.Errorf("quantize: %w", err)
		}
		switch t.Type {
		case tensor.F32, tensor.F16, tensor.BF16:
		case tensor.Q8_0:
			j.warnf("%s: requantising Q8_0 to %v adds rounding error", ti.Name, typ)
		default:
			return nil, fmt.Errorf("quantize: tensor %q: cannot quantise type %v", ti.Name, t.Type)
		}
		in := t.Shape[len(t.Shape)-1]
		rb, _ := t.Type.RowBytes(in)
		ot := &outTensor{name: ti.Name, typ: typ, shape: t.Shape, mode: modeEncode, from: t.Type.String(),
			mats: []matrix{{typ: t.Type, out: len(t.Data) / rb, in: in, data: t.Data}}}
		if typ == tensor.Q8_0 && in%tensor.Q8BlockSize != 0 {
			j.warnf("%s: %d inputs are not a whole number of Q8_0 blocks; written as F16", ti.Name, in)
			ot.typ = tensor.F16
			if t.Type == tensor.F16 {
				ot.mode = modeCopy
			}
		}
		ts = append(ts, ot)
	}
	j.addTensors(w, ts)
	if err := w.WriteFile(dst); err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	return &j.res, nil
}

func mustType(dt tensor.DType) gguf.GGMLType {
	t, _ := gguf.TypeOf(dt)
	return t
}

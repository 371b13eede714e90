package convert

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// QuantizeOptions tunes Quantize.
type QuantizeOptions struct {
	Progress io.Writer    // as Options.Progress
	Warn     func(string) // as Options.Warn
	// SplitMaxBytes, if positive, writes gguf-split shards instead of one
	// file, as llama-gguf-split --split-max-size does: each shard's tensor
	// data at most this many bytes (a shard holds at least one tensor),
	// named DST-00001-of-0000N.gguf for DST minus its .gguf.
	SplitMaxBytes int64
}

// ParseSplitSize parses llama-gguf-split's --split-max-size argument: a
// positive whole number followed by M (10^6 bytes) or G (10^9 bytes).
func ParseSplitSize(s string) (int64, error) {
	if len(s) < 2 {
		return 0, fmt.Errorf("split size %q: want N followed by M or G (e.g. 500M, 4G)", s)
	}
	unit := map[byte]int64{'M': 1e6, 'G': 1e9}[s[len(s)-1]]
	if unit == 0 {
		return 0, fmt.Errorf("split size %q: supported units are M (megabytes) or G (gigabytes)", s)
	}
	n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("split size %q: want a positive whole number of M or G", s)
	}
	return n * unit, nil
}

// Ftype is llama.cpp's llama_ftype (include/llama.h): the mixture of tensor
// types llama-quantize writes, and the general.file_type it records.
type Ftype uint32

// The ftypes Quantize knows. The 1- and 2-bit i-quants, Q2_K_S, IQ3_XXS and
// IQ3_XS give some tensors types that llama-quantize writes only from an
// importance matrix, which Quantize does not take, so Quantize refuses them
// as llama-quantize refuses them without --imatrix (see imatrixRefusal):
// for grok models always, unless those tensors' rows are not whole
// super-blocks and fall back to other types.
const (
	FtypeF32     Ftype = 0
	FtypeF16     Ftype = 1
	FtypeQ4_0    Ftype = 2
	FtypeQ4_1    Ftype = 3
	FtypeQ8_0    Ftype = 7
	FtypeQ5_0    Ftype = 8
	FtypeQ5_1    Ftype = 9
	FtypeQ2_K    Ftype = 10
	FtypeQ3_K_S  Ftype = 11
	FtypeQ3_K_M  Ftype = 12
	FtypeQ3_K_L  Ftype = 13
	FtypeQ4_K_S  Ftype = 14
	FtypeQ4_K_M  Ftype = 15
	FtypeQ5_K_S  Ftype = 16
	FtypeQ5_K_M  Ftype = 17
	FtypeQ6_K    Ftype = 18
	FtypeIQ2_XXS Ftype = 19
	FtypeIQ2_XS  Ftype = 20
	FtypeQ2_K_S  Ftype = 21
	FtypeIQ3_XS  Ftype = 22
	FtypeIQ3_XXS Ftype = 23
	FtypeIQ1_S   Ftype = 24
	FtypeIQ4_NL  Ftype = 25
	FtypeIQ3_S   Ftype = 26
	FtypeIQ3_M   Ftype = 27
	FtypeIQ2_S   Ftype = 28
	FtypeIQ2_M   Ftype = 29
	FtypeIQ4_XS  Ftype = 30
	FtypeIQ1_M   Ftype = 31
	FtypeBF16    Ftype = 32
)

// ftypes lists the ftypes with llama-quantize's names for them and their
// default tensor type (llama_ftype_get_default_type).
var ftypes = []struct {
	ft   Ftype
	name string
	dt   tensor.DType
}{
	{FtypeQ4_0, "Q4_0", tensor.Q4_0},
	{FtypeQ4_1, "Q4_1", tensor.Q4_1},
	{FtypeQ5_0, "Q5_0", tensor.Q5_0},
	{FtypeQ5_1, "Q5_1", tensor.Q5_1},
	{FtypeQ2_K, "Q2_K", tensor.Q2_K},
	{FtypeQ3_K_S, "Q3_K_S", tensor.Q3_K},
	{FtypeQ3_K_M, "Q3_K_M", tensor.Q3_K},
	{FtypeQ3_K_L, "Q3_K_L", tensor.Q3_K},
	{FtypeQ4_K_S, "Q4_K_S", tensor.Q4_K},
	{FtypeQ4_K_M, "Q4_K_M", tensor.Q4_K},
	{FtypeQ5_K_S, "Q5_K_S", tensor.Q5_K},
	{FtypeQ5_K_M, "Q5_K_M", tensor.Q5_K},
	{FtypeQ6_K, "Q6_K", tensor.Q6_K},
	{FtypeIQ4_NL, "IQ4_NL", tensor.IQ4_NL},
	{FtypeIQ4_XS, "IQ4_XS", tensor.IQ4_XS},
	{FtypeIQ3_XXS, "IQ3_XXS", tensor.IQ3_XXS},
	{FtypeIQ3_XS, "IQ3_XS", tensor.IQ3_S},
	{FtypeIQ3_S, "IQ3_S", tensor.IQ3_S},
	{FtypeIQ3_M, "IQ3_M", tensor.IQ3_S},
	{FtypeQ8_0, "Q8_0", tensor.Q8_0},
	{FtypeF16, "F16", tensor.F16},
	{FtypeBF16, "BF16", tensor.BF16},
	{FtypeF32, "F32", tensor.F32},
	// Refused wherever a tensor keeps a type that needs an importance
	// matrix (for grok models: always); parsed so that the refusal says so.
	{FtypeQ2_K_S, "Q2_K_S", tensor.Q2_K},
	{FtypeIQ2_XXS, "IQ2_XXS", tensor.IQ2_XXS},
	{FtypeIQ2_XS, "IQ2_XS", tensor.IQ2_XS},
	{FtypeIQ2_S, "IQ2_S", tensor.IQ2_XS},
	{FtypeIQ2_M, "IQ2_M", tensor.IQ2_S},
	{FtypeIQ1_S, "IQ1_S", tensor.IQ1_S},
	{FtypeIQ1_M, "IQ1_M", tensor.IQ1_M},
}

// QuantizeTypeNames lists the type names ParseQuantizeType accepts.
// It leaves out the ftypes that need an importance matrix for grok's
// tensors (IQ3_XXS, IQ3_XS, IQ2_*, IQ1_*, Q2_K_S): those are parsed, so that
// Quantize can refuse them with the reason.
const QuantizeTypeNames = "q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq3_s, iq3_m, iq4_nl, iq4_xs, q8_0, f16, bf16, f32"

// String returns llama-quantize's name of the ftype (Q4_K_M, …).
func (f Ftype) String() string {
	for _, c := range ftypes {
		if c.ft == f {
			return c.name
		}
	}
	return fmt.Sprintf("Ftype(%d)", uint32(f))
}

// defaultType is the tensor type of the ftype's bulk (ok false if unknown).
func (f Ftype) defaultType() (tensor.DType, bool) {
	for _, c := range ftypes {
		if c.ft == f {
			return c.dt, true
		}
	}
	return 0, false
}

// ParseQuantizeType maps llama-quantize's type argument — a name such as
// "q4_k_m" or "Q4_K_M", or its llama_ftype number ("15") — to an ftype.
// As in llama-quantize, q3_k, q4_k and q5_k are aliases of the _M mixtures.
func ParseQuantizeType(s string) (Ftype, error) {
	switch strings.ToUpper(s) {
	case "Q3_K":
		return FtypeQ3_K_M, nil
	case "Q4_K":
		return FtypeQ4_K_M, nil
	case "Q5_K":
		return FtypeQ5_K_M, nil
	}
	for _, c := range ftypes {
		if strings.EqualFold(s, c.name) || s == fmt.Sprint(uint32(c.ft)) {
			return c.ft, nil
		}
	}
	return 0, fmt.Errorf("unknown quantisation type %q (want one of %s)", s, QuantizeTypeNames)
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
// type (llama-quant.cpp, tensor_allows_quantization): names ending in
// "weight", at least two dimensions larger than 1, not a norm, not the MoE
// router, nor one of the small tensors llama.cpp always keeps.
func quantizes(ti *gguf.TensorInfo) bool {
	dims := len(ti.Dims)
	for dims > 1 && ti.Dims[dims-1] == 1 {
		dims-- // ggml_n_dims ignores trailing 1s
	}
	if !strings.HasSuffix(ti.Name, "weight") || dims < 2 ||
		ti.Name == "position_embd.weight" || ti.Name == "token_types.weight" {
		return false
	}
	for _, s := range keptWeights {
		if strings.Contains(ti.Name, s) {
			return false
		}
	}
	return true
}

// keptWeights are the name parts tensor_allows_quantization refuses.
var keptWeights = []string{
	"_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
	"per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight",
	"indexer.k_proj.weight", "indexer.q_proj.weight",
	"time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
	"time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
	"time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
	"time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
	"attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos",
	".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
}

// Quantize converts a GGUF file to the ftype ft as llama-quantize does
// without an importance matrix, so that its output is byte for byte what
// llama-quantize writes for the same input: the metadata copied with
// general.quantization_version and general.file_type set last, the tensors
// in llama.cpp's order (non-layer tensors, then layer by layer, each group
// by name), each matrix given the type llama-quantize's rules choose for
// the ftype (see typeChooser) and quantised with ggml's reference
// quantisers, other tensors copied as they are. As with Convert, dst
// appears only when complete.
func Quantize(ctx context.Context, src, dst string, ft Ftype, opt QuantizeOptions) (*Result, error) {
	if _, ok := ft.defaultType(); !ok {
		return nil, fmt.Errorf("quantize: file type %d is not supported (want one of %s)", uint32(ft), QuantizeTypeNames)
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
	w, ts, err := j.quantizePlan(f, ft)
	if err != nil {
		return nil, err
	}
	j.addTensors(w, ts)
	if opt.SplitMaxBytes > 0 {
		prefix := strings.TrimSuffix(dst, ".gguf")
		if isShardOf(src, prefix) {
			return nil, fmt.Errorf("quantize: output %s would overwrite the input file %s", prefix+"-*-of-*.gguf", src)
		}
		paths, err := w.WriteSplit(prefix, 0, opt.SplitMaxBytes)
		if err != nil {
			return nil, fmt.Errorf("quantize: %w", err)
		}
		j.res.Files = paths
		return &j.res, nil
	}
	if err := w.WriteFile(dst); err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	j.res.Files = []string{dst}
	return &j.res, nil
}

// isShardOf reports whether path is (or may be) one of the shards
// prefix-NNNNN-of-NNNNN.gguf, which writing them would replace.
func isShardOf(path, prefix string) bool {
	a, err1 := filepath.Abs(path)
	p, err2 := filepath.Abs(prefix)
	if err1 != nil || err2 != nil {
		return false
	}
	rest, ok := strings.CutPrefix(a, p+"-")
	return ok && len(rest) == len("00001-of-00001.gguf") && strings.HasSuffix(rest, ".gguf") && rest[5:9] == "-of-"
}

// quantizePlan builds the output's metadata and tensors.
func (j *job) quantizePlan(f *gguf.File, ft Ftype) (*gguf.Writer, []*outTensor, error) {
	// Metadata: llama-quantize copies every pair, drops the split keys,
	// then sets quantization_version and file_type, which (re)appends them.
	w := gguf.NewWriter()
	j.res.FileType = uint32(ft)
	for _, p := range f.Metadata {
		switch p.Key {
		case "general.quantization_version", "general.file_type", "split.no", "split.count", "split.tensors.count":
			continue
		}
		if err := w.AddKV(p.Key, p.Value); err != nil {
			return nil, nil, fmt.Errorf("quantize: %w", err)
		}
	}
	w.AddKV("general.quantization_version", uint32(QuantizationVersion))
	w.AddKV("general.file_type", j.res.FileType)

	// llama_model_loader's weight_name_comparer order.
	infos := make([]*gguf.TensorInfo, len(f.Tensors))
	names := make([]string, len(f.Tensors))
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
	for i, ti := range infos {
		names[i] = ti.Name
	}
	tc := newTypeChooser(ft, paramsOf(f), names)

	var ts []*outTensor
	for _, ti := range infos {
		typ := tensor.DType(-1)
		if quantizes(ti) {
			t, warn, err := tc.choose(ti.Name, ti.Dims[0])
			if err != nil {
				return nil, nil, fmt.Errorf("quantize: %w", err)
			}
			if warn != "" {
				j.warnf("%s", warn)
			}
			typ = t
		}
		if typ < 0 || ti.Type == mustType(typ) || ti.Size == 0 {
			// Copied as is, whatever its type: llama-quantize leaves it
			// alone.
			data, ok := f.TensorBytes(ti.Name)
			if !ok {
				return nil, nil, fmt.Errorf("quantize: tensor %q: file is closed", ti.Name)
			}
			ts = append(ts, &outTensor{name: ti.Name, shape: ti.Shape(), from: ti.Type.String(), raw: data, ggml: ti.Type, dims: ti.Dims})
			continue
		}
		t, err := f.Tensor(ti.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("quantize: %w", err)
		}
		switch t.Type {
		case tensor.F32, tensor.F16, tensor.BF16:
		case tensor.Q8_0:
			j.warnf("%s: requantising Q8_0 to %v adds rounding error", ti.Name, typ)
		default:
			return nil, nil, fmt.Errorf("quantize: tensor %q: cannot quantise type %v", ti.Name, t.Type)
		}
		in := t.Shape[len(t.Shape)-1]
		rb, _ := t.Type.RowBytes(in)
		ts = append(ts, &outTensor{name: ti.Name, typ: typ, shape: t.Shape, mode: modeEncode, from: t.Type.String(),
			mats: []matrix{{typ: t.Type, out: len(t.Data) / rb, in: in, data: t.Data}}, validate: true})
	}
	if tc.nFallbk > 0 {
		j.warnf("%d of %d tensor(s) required fallback quantization", tc.nFallbk, len(infos))
	}
	return w, ts, nil
}

func mustType(dt tensor.DType) gguf.GGMLType {
	t, _ := gguf.TypeOf(dt)
	return t
}

// ftype returns the llama-quantize mixture a conversion Type names (ok
// false for Keep, F32, F16, BF16 and Q8_0, which Convert writes as they are).
func (t Type) ftype() (Ftype, bool) {
	if t <= Q8_0 || int(t) >= len(typeNames) {
		return 0, false
	}
	ft, err := ParseQuantizeType(typeNames[t])
	return ft, err == nil
}

// applyMixture gives each planned matrix of a conversion the type
// llama-quantize's rules choose for ft (the tensors were planned as F32, so
// every matrix is decoded to float32 and quantised from there, as
// llama-quantize does from an F32 file).
func (j *job) applyMixture(ts []*outTensor, ft Ftype, c *model.Config) error {
	p := modelParams{nLayer: c.NumLayers, nExpert: c.NumExperts}
	if c.NumKVHeads > 0 {
		p.nGQA = c.NumQHeads / c.NumKVHeads
	}
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.name
	}
	tc := newTypeChooser(ft, p, names)
	for _, t := range ts {
		dims := make([]int64, len(t.shape))
		for i, d := range t.shape {
			dims[len(dims)-1-i] = int64(d)
		}
		if t.raw != nil || loader.KeepsF32(t.name) || !quantizes(&gguf.TensorInfo{Name: t.name, Dims: dims}) {
			continue
		}
		typ, warn, err := tc.choose(t.name, dims[0])
		if err != nil {
			return err
		}
		if warn != "" {
			j.warnf("%s", warn)
		}
		t.typ, t.mode, t.validate = typ, modeEncode, true
	}
	if tc.nFallbk > 0 {
		j.warnf("%d of %d tensor(s) required fallback quantization", tc.nFallbk, len(ts))
	}
	return nil
}

// What follows chooses each tensor's type as llama-quantize does without an
// importance matrix, for the ftypes of ftypes (llama.cpp src/llama-quant.cpp:
// tensor_get_category, llama_tensor_get_type, llama_tensor_get_type_impl,
// tensor_type_fallback). The LLM_TYPE_70B rule does not apply: it is
// llama's, never grok's (whose 64-layer model is LLM_TYPE_314B).

// category is llama.cpp's tensor_category.
type category int

const (
	catOther category = iota
	catOutput
	catTokenEmbd
	catAttnQKV
	catAttnKVB
	catAttnV
	catAttnK
	catAttnQ
	catAttnOutput
	catFFNUp
	catFFNGate
	catFFNDown
)

// categoryOf is tensor_get_category: the first substring that matches, in
// llama.cpp's order.
func categoryOf(name string) category {
	switch name {
	case "output.weight":
		return catOutput
	case "token_embd.weight", "per_layer_token_embd.weight":
		return catTokenEmbd
	}
	for _, c := range []struct {
		sub string
		cat category
	}{
		{"attn_qkv.weight", catAttnQKV}, {"attn_kv_b.weight", catAttnKVB}, {"attn_v.weight", catAttnV},
		{"attn_k.weight", catAttnK}, {"attn_q.weight", catAttnQ}, {"attn_output.weight", catAttnOutput},
		{"ffn_up", catFFNUp}, {"ffn_gate", catFFNGate}, {"ffn_down", catFFNDown},
	} {
		if strings.Contains(name, c.sub) {
			return c.cat
		}
	}
	return catOther
}

// attnVLike is category_is_attn_v.
func (c category) attnVLike() bool { return c == catAttnV || c == catAttnQKV || c == catAttnKVB }

// modelParams are the hyperparameters the rules read (llama_hparams).
type modelParams struct {
	falcon  bool // general.architecture is falcon
	nLayer  int  // block_count (n_layer_all)
	nExpert int  // expert_count, 0 if absent
	nGQA    int  // head_count / head_count_kv, 0 without kv heads
}

// paramsOf reads the hyperparameters from a GGUF's metadata.
func paramsOf(f *gguf.File) modelParams {
	arch, _ := f.String("general.architecture")
	u := func(k string) int {
		v, _ := f.Uint(arch + "." + k)
		return int(min(v, 1<<31))
	}
	p := modelParams{falcon: arch == "falcon", nLayer: u("block_count"), nExpert: u("expert_count")}
	nHead := u("attention.head_count")
	nKV := nHead
	if _, ok := f.Get(arch + ".attention.head_count_kv"); ok {
		nKV = u("attention.head_count_kv")
	}
	if nKV > 0 {
		p.nGQA = nHead / nKV
	}
	return p
}

// typeChooser is quantize_state_impl: the running counters of the choice,
// which llama-quantize makes tensor by tensor in the output order.
type typeChooser struct {
	ft      Ftype
	def     tensor.DType
	p       modelParams
	tied    bool // no output.weight: token_embd is also the output
	nAttnV  int
	iAttnV  int
	iDown   int
	iGate   int
	iUp     int
	nFallbk int
}

// newTypeChooser counts what init_quantize_state_counters counts over the
// tensor names.
func newTypeChooser(ft Ftype, p modelParams, names []string) *typeChooser {
	def, _ := ft.defaultType()
	c := &typeChooser{ft: ft, def: def, p: p, tied: true}
	for _, n := range names {
		switch cat := categoryOf(n); {
		case cat.attnVLike():
			c.nAttnV++
		case cat == catOutput:
			c.tied = false
		}
	}
	return c
}

// useMoreBits is llama-quant.cpp's use_more_bits: the first and last eighth
// of the layers and every third one between.
func useMoreBits(i, n int) bool {
	return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2
}

// layer is llama_tensor_get_type_impl's layer_info: with experts, the layer
// comes from the name (blk.N.), which must be in [0, nLayer); without, the
// running counter is the layer.
func (c *typeChooser) layer(counter int, name string) (int, error) {
	if max(1, c.p.nExpert) > 1 {
		l := layerOf(name)
		if !layerPrefix.MatchString(name) {
			return 0, fmt.Errorf("failed to determine layer for tensor %s", name)
		}
		if l < 0 || l >= c.p.nLayer {
			return 0, fmt.Errorf("bad layer %d for tensor %s; must be in [0, %d)", l, name, c.p.nLayer)
		}
		return l, nil
	}
	return counter, nil
}

// choose returns the type of one quantisable tensor (llama_tensor_get_type
// for a tensor that tensor_allows_quantization accepts), and a warning when
// its rows do not fit the chosen type and a fallback is used.
func (c *typeChooser) choose(name string, ne0 int64) (tensor.DType, string, error) {
	t := c.def
	if !t.Quantized() {
		return t, "", nil // F16, BF16, F32: no mixture, no fallback
	}
	t, err := c.mixture(t, name, ne0)
	if err != nil {
		return 0, "", err
	}
	t, warn, err := c.fallback(t, name, ne0)
	if err == nil {
		err = c.imatrixRefusal(name, t)
	}
	return t, warn, err
}

// mixture is llama_tensor_get_type_impl without an importance matrix,
// restricted to the ftypes of ftypes (the TQ, Q1_0, Q2_0 and MXFP4 branches
// never fire for them).
func (c *typeChooser) mixture(t tensor.DType, name string, ne0 int64) (tensor.DType, error) {
	ft, p := c.ft, c.p
	cat := categoryOf(name)
	switch {
	case cat == catOutput || (c.tied && cat == catTokenEmbd):
		switch {
		case p.falcon || ne0%int64(t.BlockSize()) != 0:
			t = tensor.Q8_0
		case ft.oneOf(FtypeIQ2_XXS, FtypeIQ2_XS, FtypeIQ3_XXS, FtypeIQ1_S, FtypeIQ2_S, FtypeIQ2_M, FtypeIQ1_M):
			t = tensor.Q5_K
		case t != tensor.Q8_0:
			t = tensor.Q6_K
		}
	case cat == catTokenEmbd:
		switch {
		case ft.oneOf(FtypeIQ2_XXS, FtypeIQ2_XS, FtypeIQ1_S, FtypeIQ1_M):
			t = tensor.Q2_K
		case ft.oneOf(FtypeIQ2_S, FtypeIQ2_M, FtypeIQ3_XXS):
			t = tensor.IQ3_S
		}
	case ft.oneOf(FtypeIQ2_XXS, FtypeIQ2_XS, FtypeIQ1_S, FtypeIQ2_S, FtypeIQ2_M, FtypeIQ1_M):
		// The 2-bit and 1-bit i-quants, whose branch counts ffn_down by the
		// running counter and checks no layer names.
		iq2s := ft.oneOf(FtypeIQ2_S, FtypeIQ2_M)
		switch {
		case cat.attnVLike():
			switch {
			case p.nGQA >= 4 || p.nExpert >= 4:
				t = tensor.Q4_K
			case iq2s:
				t = tensor.IQ3_S
			default:
				t = tensor.Q2_K
			}
			c.iAttnV++
		case p.nExpert == 8 && cat == catAttnK:
			t = tensor.Q4_K
		case cat == catFFNDown:
			if c.iDown < p.nLayer/8 {
				t = tensor.Q2_K
				if iq2s {
					t = tensor.IQ3_S
				}
			}
			c.iDown++
		case cat == catAttnOutput:
			switch {
			case p.nExpert == 8:
				t = tensor.Q5_K
			case ft.oneOf(FtypeIQ1_S, FtypeIQ1_M):
				t = tensor.IQ2_XXS
			case iq2s:
				t = tensor.IQ3_S
			}
		}
	case cat.attnVLike():
		switch {
		case ft == FtypeQ2_K:
			t = tensor.Q3_K
			if p.nGQA >= 4 {
				t = tensor.Q4_K
			}
		case ft == FtypeQ2_K_S && p.nGQA >= 4:
			t = tensor.Q4_K
		case ft == FtypeIQ3_XXS:
			t = tensor.IQ3_S // IQ3_XXS only with an importance matrix
			if p.nGQA >= 4 {
				t = tensor.Q4_K
			}
		case ft.oneOf(FtypeIQ3_XS, FtypeIQ3_S) && p.nGQA >= 4:
			t = tensor.Q4_K
		case ft == FtypeIQ3_M:
			t = tensor.Q4_K
		case ft == FtypeQ3_K_M:
			t = tensor.Q4_K
			if c.iAttnV < 2 {
				t = tensor.Q5_K
			}
		case ft == FtypeQ3_K_L:
			t = tensor.Q5_K
		case ft.oneOf(FtypeIQ4_NL, FtypeIQ4_XS) && p.nGQA >= 4:
			t = tensor.Q5_K
		case ft.oneOf(FtypeQ4_K_M, FtypeQ5_K_M) && useMoreBits(c.iAttnV, c.nAttnV):
			t = tensor.Q6_K
		case ft == FtypeQ4_K_S && c.iAttnV < 4:
			t = tensor.Q5_K
		}
		if p.nExpert == 8 {
			t = tensor.Q8_0
		}
		c.iAttnV++
	case cat == catAttnK:
		switch {
		case p.nExpert == 8:
			t = tensor.Q8_0
		case ft == FtypeIQ3_XS:
			t = tensor.IQ3_XXS
		case ft == FtypeIQ3_XXS:
			t = tensor.IQ2_S
		}
	case cat == catAttnQ:
		switch ft {
		case FtypeIQ3_XS:
			t = tensor.IQ3_XXS
		case FtypeIQ3_XXS:
			t = tensor.IQ2_S
		}
	case cat == catFFNDown:
		i, err := c.layer(c.iDown, name)
		if err != nil {
			return 0, err
		}
		n := p.nLayer
		switch {
		case ft == FtypeQ2_K:
			t = tensor.Q3_K
		case ft == FtypeQ2_K_S:
			if i < n/8 {
				t = tensor.Q4_K
			}
		case ft == FtypeIQ3_XXS: // without an importance matrix
			t = tensor.Q3_K
			if i < n/8 {
				t = tensor.Q4_K
			}
		case ft == FtypeQ3_K_M:
			switch {
			case i < n/16:
				t = tensor.Q5_K
			case !p.falcon || useMoreBits(i, n):
				t = tensor.Q4_K
			default:
				t = tensor.Q3_K
			}
		case ft == FtypeIQ3_M && (i < n/8 || (p.nExpert == 8 && useMoreBits(i, n))):
			t = tensor.Q4_K
		case ft == FtypeQ3_K_L:
			t = tensor.Q5_K
			if p.falcon {
				t = tensor.Q4_K
			}
		case ft == FtypeQ4_K_M:
			if p.falcon {
				switch {
				case i < n/16:
					t = tensor.Q6_K
				case useMoreBits(i, n):
					t = tensor.Q5_K
				default:
					t = tensor.Q4_K
				}
			} else if useMoreBits(i, n) {
				t = tensor.Q6_K
			}
		case i < n/8 && ft.oneOf(FtypeIQ4_NL, FtypeIQ4_XS): // without an importance matrix
			t = tensor.Q5_K
		case ft == FtypeQ5_K_M && useMoreBits(i, n):
			t = tensor.Q6_K
		case ft == FtypeQ4_K_S && !p.falcon && i < n/8:
			t = tensor.Q5_K
		}
		c.iDown++
	case cat == catAttnOutput:
		switch {
		case p.falcon:
			if ft == FtypeQ3_K_L {
				t = tensor.Q4_K
			}
		case p.nExpert == 8:
			if ft.oneOf(FtypeQ2_K, FtypeIQ3_XS, FtypeIQ3_XXS, FtypeQ3_K_S, FtypeQ3_K_M, FtypeIQ4_NL,
				FtypeQ4_K_S, FtypeQ4_K_M, FtypeIQ3_S, FtypeIQ3_M, FtypeIQ4_XS) {
				t = tensor.Q5_K
			}
		default:
			switch ft {
			case FtypeQ2_K:
				t = tensor.Q3_K
			case FtypeIQ3_XXS:
				t = tensor.IQ3_S
			case FtypeQ3_K_M, FtypeIQ3_M:
				t = tensor.Q4_K
			case FtypeQ3_K_L:
				t = tensor.Q5_K
			}
		}
	case cat == catFFNGate, cat == catFFNUp:
		ctr := &c.iGate
		if cat == catFFNUp {
			ctr = &c.iUp
		}
		i, err := c.layer(*ctr, name)
		if err != nil {
			return 0, err
		}
		if ft == FtypeIQ3_XS && i >= p.nLayer/8 && i < 7*p.nLayer/8 {
			t = tensor.IQ3_XXS
		}
		*ctr++
	}
	return t, nil
}

// oneOf reports whether f is one of fs.
func (f Ftype) oneOf(fs ...Ftype) bool {
	for _, g := range fs {
		if f == g {
			return true
		}
	}
	return false
}

// imatrixRefusal is tensor_requires_imatrix: llama-quantize refuses to write
// the i-quants below IQ3_S, and Q2_K in a Q2_K_S file, without an importance
// matrix, except into token_embd and output. It returns the error Quantize
// gives for a tensor whose type is one of those, nil otherwise.
func (c *typeChooser) imatrixRefusal(name string, t tensor.DType) error {
	if name == "token_embd.weight" || name == "per_layer_token_embd.weight" || name == "output.weight" {
		return nil
	}
	switch t {
	case tensor.IQ3_XXS, tensor.IQ2_XXS, tensor.IQ2_XS, tensor.IQ2_S, tensor.IQ1_M, tensor.IQ1_S:
		return fmt.Errorf("%v needs an importance matrix, which grok quantize does not take: llama-quantize's rules give tensor %s type %v, "+
			"which it refuses to write without one (--imatrix) because the result would be garbage", c.ft, name, t)
	case tensor.Q2_K:
		if c.ft == FtypeQ2_K_S {
			return fmt.Errorf("%v needs an importance matrix, which grok quantize does not take: llama-quantize's rules give tensor %s type Q2_K, "+
				"which in a Q2_K_S file it refuses to write without one (--imatrix); the Q2_K mixture needs none", c.ft, name)
		}
	}
	return nil
}

// fallback is tensor_type_fallback: a type whose block does not divide the
// row becomes a 32-element type, and F16 if even that does not fit.
func (c *typeChooser) fallback(t tensor.DType, name string, ne0 int64) (tensor.DType, string, error) {
	bs := int64(t.BlockSize())
	if ne0%bs == 0 {
		return t, "", nil
	}
	c.nFallbk++
	r := t
	switch t {
	case tensor.IQ1_S, tensor.IQ1_M, tensor.IQ2_XXS, tensor.IQ2_XS, tensor.IQ2_S, tensor.IQ3_XXS, tensor.IQ3_S, tensor.IQ4_XS:
		r = tensor.IQ4_NL
	case tensor.Q2_K, tensor.Q3_K:
		r = tensor.Q4_0
	case tensor.Q4_K:
		r = tensor.Q5_0
	case tensor.Q5_K:
		r = tensor.Q5_1
	case tensor.Q6_K:
		r = tensor.Q8_0
	default:
		if bs > 32 {
			return 0, "", fmt.Errorf("no tensor type fallback is defined for type %v", t)
		}
	}
	if ne0%int64(r.BlockSize()) != 0 {
		r = tensor.F16
	}
	return r, fmt.Sprintf("%s: %d columns are not divisible by %d (required for %v); falling back to %v", name, ne0, bs, t, r), nil
}

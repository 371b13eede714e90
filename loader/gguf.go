package loader

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// Defaults llama.cpp's grok loader uses when a key is absent
// (src/models/grok.cpp; semantics §7): Grok-1's own values.
const (
	defaultEmbeddingScale = 78.38367176906169
	defaultLogitScale     = 0.5773502691896257
	defaultAttnOutScale   = 0.08838834764831845
	defaultAttnSoftcap    = 30
)

// defaultRouterSoftcap is SGLang's router soft-cap for Grok-2, a constant
// there (grok.py's Grok1MoE): the value of a Grok-2 file without the key.
const defaultRouterSoftcap = 30

// ConfigFromGGUF reads the model.Config of an arch-`grok` GGUF file from its
// metadata (semantics §9, §G5-§G6), falling back to the tensor shapes for
// sizes a writer may leave out.
func ConfigFromGGUF(f *gguf.File) (model.Config, error) {
	c, _, err := configFromGGUF(f, false)
	return c, err
}

// IsGrok2 reports whether a GGUF file holds a Grok-2 model: one with a
// dense MLP beside its experts (blk.0.ffn_gate.weight and an expert count
// above 1). llama.cpp's converter writes the same arch and keys for both
// generations, router_logit_softcapping included, so the tensors decide
// (semantics §G6).
func IsGrok2(f *gguf.File) bool {
	n, _ := f.Int("grok.expert_count")
	_, dense := f.Info("blk.0.ffn_gate.weight")
	return n > 1 && dense
}

// configFromGGUF is ConfigFromGGUF with the warnings the user should see:
// keys read but deliberately not applied. With yarn, the file's YaRN keys
// are applied as llama.cpp reads them (yarnFromGGUF) instead of ignored.
func configFromGGUF(f *gguf.File, yarn bool) (model.Config, []string, error) {
	var c model.Config
	var warns []string
	arch, _ := f.String("general.architecture")
	if arch != "grok" {
		return c, nil, fmt.Errorf("gguf: general.architecture is %q; this engine runs arch \"grok\"", arch)
	}
	var errs []error
	intKey := func(key string, required bool, def int) int {
		v, ok := f.Int("grok." + key)
		if !ok {
			if required {
				errs = append(errs, fmt.Errorf("missing metadata key grok.%s", key))
			}
			return def
		}
		if v < 0 || v > math.MaxInt32 {
			errs = append(errs, fmt.Errorf("grok.%s = %d is out of range", key, v))
			return def
		}
		return int(v)
	}
	floatKey := func(key string, def float64) float32 {
		if v, ok := f.Float("grok." + key); ok {
			return float32(v)
		}
		return float32(def)
	}
	c.EmbSize = intKey("embedding_length", true, 0)
	c.NumLayers = intKey("block_count", true, 0)
	c.NumQHeads = intKey("attention.head_count", true, 0)
	c.NumKVHeads = intKey("attention.head_count_kv", false, c.NumQHeads)
	defK := 0
	if c.NumQHeads > 0 {
		defK = c.EmbSize / c.NumQHeads
	}
	c.KeySize = intKey("attention.key_length", false, defK)
	if vl := intKey("attention.value_length", false, c.KeySize); vl != c.KeySize {
		errs = append(errs, fmt.Errorf("grok.attention.value_length %d differs from key_length %d (model.py uses one key_size)", vl, c.KeySize))
	}
	if rd := intKey("rope.dimension_count", false, c.KeySize); rd != c.KeySize {
		errs = append(errs, fmt.Errorf("grok.rope.dimension_count %d: partial rotary embeddings are not Grok-1's (key_size %d)", rd, c.KeySize))
	}
	c.FFNSize = intKey("expert_feed_forward_length", false, 0)
	if c.FFNSize == 0 {
		c.FFNSize = intKey("feed_forward_length", true, 0)
	}
	c.NumExperts = intKey("expert_count", false, 0)
	c.NumSelectedExperts = intKey("expert_used_count", false, 0)
	c.SequenceLen = intKey("context_length", true, 0)
	c.VocabSize = intKey("vocab_size", false, 0)
	if c.VocabSize == 0 {
		if toks, ok := f.Get("tokenizer.ggml.tokens"); ok {
			c.VocabSize = toks.Len()
		} else if ti, ok := f.Info("token_embd.weight"); ok && len(ti.Dims) == 2 {
			c.VocabSize = int(ti.Dims[1])
		}
	}
	c.RopeBase = floatKey("rope.freq_base", 10000)
	c.RMSEps = floatKey("attention.layer_norm_rms_epsilon", 1e-5)
	c.EmbeddingMultiplierScale = floatKey("embedding_scale", defaultEmbeddingScale)
	c.OutputMultiplierScale = floatKey("logit_scale", defaultLogitScale)
	c.AttnOutputMultiplier = floatKey("attention.output_scale", defaultAttnOutScale)
	c.AttnLogitCap = floatKey("attn_logit_softcapping", defaultAttnSoftcap)
	if grok2 := IsGrok2(f); grok2 {
		// Grok-2 (semantics §G2): with expert_feed_forward_length present,
		// feed_forward_length is the dense MLP's width (llama.cpp's n_ff);
		// without it, the tensor says.
		if v, ok := f.Int("grok.expert_feed_forward_length"); ok && v > 0 {
			c.DenseFFNSize = intKey("feed_forward_length", true, 0)
		} else if ti, ok := f.Info("blk.0.ffn_gate.weight"); ok && len(ti.Dims) == 2 && ti.Dims[1] <= math.MaxInt32 {
			c.DenseFFNSize = int(ti.Dims[1])
		}
		c.RouterLogitCap = floatKey("router_logit_softcapping", defaultRouterSoftcap)
		c.UntiedOutput = true
	}
	// grok.router_logit_softcapping is deliberately ignored for Grok-1:
	// model.py has no router softcap and llama.cpp's converter writes the
	// key for every grok file (semantics §7.4, §G6).
	scaling, _ := f.String("grok.rope.scaling.type")
	switch {
	case yarn:
		y, err := yarnFromGGUF(f, c.SequenceLen)
		if err != nil {
			errs = append(errs, err)
		}
		c.Yarn = y
	case scaling == "" || scaling == "none":
	case IsGrok2(f):
		factor, _ := f.Float("grok.rope.scaling.factor")
		warns = append(warns, fmt.Sprintf("grok.rope.scaling.type = %q (factor %g) ignored: Grok-2's rope_type \"original\" is plain RoPE (SGLang); llama.cpp's converter writes YaRN for it (semantics §G7); --rope-scaling yarn applies it as llama.cpp does", scaling, factor))
	default:
		errs = append(errs, fmt.Errorf("grok.rope.scaling.type = %q: RoPE scaling is not supported (Grok-1 has none; --rope-scaling yarn applies YaRN keys as llama.cpp does)", scaling))
	}
	// The final soft-cap and the attention temperature act wherever a file
	// sets them (semantics §G6).
	c.FinalLogitCap = floatKey("final_logit_softcapping", 0)
	c.AttnTemperatureLen = intKey("attention.temperature_length", false, 0)
	c.PadToken = 0
	if v, ok := f.Int("tokenizer.ggml.padding_token_id"); ok && v >= 0 {
		c.PadToken = int(v)
	}
	c.EOSToken = 2
	if v, ok := f.Int("tokenizer.ggml.eos_token_id"); ok && v >= 0 {
		c.EOSToken = int(v)
	}
	if err := errors.Join(errs...); err != nil {
		return c, nil, fmt.Errorf("gguf: %w", err)
	}
	if err := c.Validate(); err != nil {
		return c, nil, err
	}
	return c, warns, nil
}

// checkCounts compares the counts and sizes of c with the tensors f holds, so
// that a count the file cannot back (a block_count of 2^31-1 in a 4 MB file)
// is refused naming its key before anything is sized by it. Only layer 0 is
// compared shape by shape here; model.New checks every layer against c.
func checkCounts(f *gguf.File, c *model.Config) error {
	var errs []error
	layers, top := 0, ""
	for i := range f.Tensors {
		name := f.Tensors[i].Name
		n, ok, err := blockIndex(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok && n >= layers {
			layers, top = n+1, name
		}
	}
	switch {
	case layers == 0:
		errs = append(errs, fmt.Errorf("grok.block_count = %d, but the file has no blk.N tensors", c.NumLayers))
	case layers != c.NumLayers:
		errs = append(errs, fmt.Errorf("grok.block_count = %d, but the file has tensors for %d layers (the last is %s)", c.NumLayers, layers, top))
	}
	// dim compares axis ax (ggml order, innermost first) of a tensor with
	// the size the config gives it; an absent tensor is left to model.New.
	dim := func(key string, want int64, name string, ax int) {
		ti, ok := f.Info(name)
		if !ok || ax >= len(ti.Dims) || ti.Dims[ax] == want {
			return
		}
		errs = append(errs, fmt.Errorf("%s = %d, but %s has shape %v", key, want, name, ti.Shape()))
	}
	vocabKey := "grok.vocab_size"
	if _, ok := f.Get(vocabKey); !ok {
		vocabKey = "the vocabulary size (tokenizer.ggml.tokens)"
	}
	ffnKey := "grok.expert_feed_forward_length"
	if v, ok := f.Int(ffnKey); !ok || v == 0 {
		ffnKey = "grok.feed_forward_length"
	}
	K := int64(c.KeySize)
	dim("grok.embedding_length", int64(c.EmbSize), "token_embd.weight", 0)
	dim(vocabKey, int64(c.VocabSize), "token_embd.weight", 1)
	dim("grok.attention.head_count × key_length", int64(c.NumQHeads)*K, "blk.0.attn_q.weight", 1)
	dim("grok.attention.head_count_kv × key_length", int64(c.NumKVHeads)*K, "blk.0.attn_k.weight", 1)
	if c.NumExperts > 1 {
		dim("grok.expert_count", int64(c.NumExperts), "blk.0.ffn_gate_inp.weight", 1)
		dim("grok.expert_count", int64(c.NumExperts), "blk.0.ffn_gate_exps.weight", 2)
		dim(ffnKey, int64(c.FFNSize), "blk.0.ffn_gate_exps.weight", 1)
		dim(ffnKey, int64(c.FFNSize), "blk.0.ffn_gate.0.weight", 1)
		if c.DenseFFNSize > 0 {
			dim("grok.feed_forward_length", int64(c.DenseFFNSize), "blk.0.ffn_gate.weight", 1)
		}
	} else {
		dim(ffnKey, int64(c.FFNSize), "blk.0.ffn_gate.weight", 1)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// blockIndex returns N for a tensor named blk.N.*; ok is false for other
// names.
func blockIndex(name string) (n int, ok bool, err error) {
	rest, found := strings.CutPrefix(name, "blk.")
	if !found {
		return 0, false, nil
	}
	num, _, found := strings.Cut(rest, ".")
	if !found || num == "" {
		return 0, false, nil
	}
	for _, r := range num {
		if r < '0' || r > '9' {
			return 0, false, nil
		}
	}
	v, err := strconv.ParseUint(num, 10, 31)
	if err != nil {
		return 0, false, fmt.Errorf("tensor %q: layer index %s is out of range", name, num)
	}
	return int(v), true, nil
}

// ggufSource adapts a gguf.File to model.TensorSource.
type ggufSource struct{ f *gguf.File }

func (s ggufSource) Lookup(name string) (*tensor.Tensor, bool) {
	t, err := s.f.Tensor(name)
	if err != nil {
		return nil, false
	}
	return t, true
}

// checkTypes reports the first tensor whose type the engine cannot compute
// with, so that the user sees "type Q4_K is not supported" rather than a
// missing tensor.
func checkTypes(f *gguf.File) error {
	for i := range f.Tensors {
		if _, ok := f.Tensors[i].Type.DType(); !ok {
			return &gguf.UnsupportedTypeError{Tensor: f.Tensors[i].Name, Type: f.Tensors[i].Type}
		}
	}
	return nil
}

// Defaults of llama.cpp's grok loader for the YaRN keys
// (src/models/grok.cpp, llama-hparams.h).
const (
	defaultYarnBetaFast = 8
	defaultYarnBetaSlow = 1
)

// yarnFromGGUF reads a file's YaRN parameters as llama.cpp does for arch
// grok with default context parameters: llama_model's hparams
// (llama-model.cpp: rope.scaling.type, factor, original_context_length;
// models/grok.cpp: yarn_ext_factor, yarn_attn_factor, yarn_beta_fast/slow)
// turned into what llama_context hands ggml_rope_ext (llama-context.cpp):
// freq_scale 1/factor, ext_factor 1 when unset, and an attn_factor that
// cancels the 1 + 0.1·ln(factor) ggml applies itself, times
// rope.scaling.attn_factor. ctx is context_length (n_ctx_train), the
// original context when the file gives none.
func yarnFromGGUF(f *gguf.File, ctx int) (model.YarnScaling, error) {
	var y model.YarnScaling
	if typ, _ := f.String("grok.rope.scaling.type"); typ != "yarn" {
		if typ == "" {
			typ = "absent"
		} else {
			typ = strconv.Quote(typ)
		}
		return y, fmt.Errorf("--rope-scaling yarn: grok.rope.scaling.type is %s, not \"yarn\": the file has no YaRN to apply", typ)
	}
	get := func(key string, def float32) float32 {
		if v, ok := f.Float("grok.rope.scaling." + key); ok {
			return float32(v)
		}
		return def
	}
	factor := get("factor", 0)
	if _, ok := f.Float("grok.rope.scaling.factor"); !ok {
		if v, ok := f.Float("grok.rope.scale_linear"); ok { // the old key
			factor = float32(v)
		}
	}
	orig := ctx
	if v, ok := f.Int("grok.rope.scaling.original_context_length"); ok && v > 0 && v <= math.MaxInt32 {
		orig = int(v)
	}
	return llamaYarn(factor, orig, get("yarn_ext_factor", -1), get("yarn_attn_factor", 1), get("attn_factor", 1),
		get("yarn_beta_fast", defaultYarnBetaFast), get("yarn_beta_slow", defaultYarnBetaSlow)), nil
}

// llamaYarn is what llama_context hands ggml_rope_ext (llama-context.cpp)
// for a model whose YaRN hparams are these: freq_scale 1/factor (factor 0
// means 1), ext_factor 1 when unset (negative), and when ext_factor ≠ 0
// an attn_factor of mscale(factor)/(1 + 0.1·ln factor), which cancels the
// 1 + 0.1·ln(factor) ggml's rope_yarn applies itself, instead of
// yarnAttn; both times ropeAttn (rope.scaling.attn_factor).
func llamaYarn(factor float32, orig int, ext, yarnAttn, ropeAttn, betaFast, betaSlow float32) model.YarnScaling {
	freqScale := float32(1)
	if factor != 0 {
		freqScale = 1 / factor
	}
	y := model.YarnScaling{Factor: 1 / freqScale, OrigContext: orig, ExtFactor: ext, AttnFactor: yarnAttn, BetaFast: betaFast, BetaSlow: betaSlow}
	if y.ExtFactor < 0 {
		y.ExtFactor = 1
	}
	if y.ExtFactor != 0 {
		mscale := float32(1)
		if y.Factor > 1 {
			mscale = 0.1*float32(math.Log(float64(y.Factor))) + 1
		}
		y.AttnFactor = mscale * (1 / (1 + 0.1*float32(math.Log(float64(y.Factor)))))
	}
	y.AttnFactor *= ropeAttn
	return y
}

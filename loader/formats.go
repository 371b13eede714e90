package loader

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/grok-go/grok/formats/safetensors"
	"github.com/grok-go/grok/formats/xaickpt"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// detectDir tells which format a folder holds.
func detectDir(dir string) string {
	exists := func(p string) bool { _, err := os.Stat(filepath.Join(dir, p)); return err == nil }
	switch {
	case exists("ckpt-0") || filepath.Base(filepath.Clean(dir)) == "ckpt-0":
		return "xai"
	case exists(safetensors.IndexFileName) || exists(safetensors.SingleFileName):
		return "safetensors"
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors")); len(m) > 0 {
		return "safetensors"
	}
	return ""
}

func openXAI(dir string, opt Options) (*Model, error) {
	ck, err := xaickpt.Open(dir)
	if err != nil {
		return nil, err
	}
	xc := ck.Config()
	cfg := model.Config{
		VocabSize: xc.VocabSize, EmbSize: xc.EmbSize, KeySize: xc.KeySize,
		NumQHeads: xc.NumQHeads, NumKVHeads: xc.NumKVHeads, NumLayers: xc.NumLayers,
		FFNSize: xc.FFNSize, NumExperts: xc.NumExperts, NumSelectedExperts: xc.NumSelectedExperts,
		AttnOutputMultiplier:     float32(xc.AttnOutputMultiplier),
		EmbeddingMultiplierScale: float32(xc.EmbeddingMultiplierScale),
		OutputMultiplierScale:    float32(xc.OutputMultiplierScale),
		AttnLogitCap:             30, // model.py 864: hard-coded
		PadToken:                 xc.PadToken, EOSToken: xc.EOSToken, SequenceLen: xc.SequenceLen,
		RopeBase: float32(xc.RopeBase), RMSEps: float32(xc.RMSEps),
	}
	if opt.Preset != "" && ck.Preset() {
		p, ok := model.Presets[opt.Preset]
		if !ok {
			ck.Close()
			return nil, fmt.Errorf("loader: unknown preset %q", opt.Preset)
		}
		cfg = p()
	}
	lm, err := newModel(cfg, ck, opt)
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	m := &Model{LanguageModel: lm, Format: "xai", Path: dir, Source: ck, closers: []ioCloser{ck}}
	for _, p := range ck.Params() {
		if t, ok := ck.Lookup(p.Name); ok {
			m.tensors = append(m.tensors, describe(p.Name+" ("+p.File+")", p.Name, t))
		}
	}
	// The tokenizer is not in ckpt-0/: look next to config.json, then in
	// the parent folder (xai-org/grok-1's layout), or take the flag.
	ckdir := ck.Dir()
	m.Tokenizer, err = findTokenizer(opt.Tokenizer, filepath.Dir(ckdir), filepath.Dir(filepath.Dir(ckdir)), dir)
	if err == nil {
		err = checkVocab(m)
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

func openSafetensors(path string, opt Options) (*Model, error) {
	st, err := safetensors.Open(path)
	if err != nil {
		return nil, err
	}
	sc := st.Config()
	if sc == nil {
		st.Close()
		return nil, fmt.Errorf("%s: safetensors without config.json: the model's hyperparameters are unknown", path)
	}
	cfg := model.Config{
		VocabSize: sc.VocabSize, EmbSize: sc.EmbSize, KeySize: sc.KeySize,
		NumQHeads: sc.NumQHeads, NumKVHeads: sc.NumKVHeads, NumLayers: sc.NumLayers,
		FFNSize: sc.FFNSize, NumExperts: sc.NumExperts, NumSelectedExperts: sc.NumSelectedExperts,
		AttnOutputMultiplier:     float32(sc.AttnOutputMultiplier),
		EmbeddingMultiplierScale: float32(sc.EmbeddingMultiplierScale),
		OutputMultiplierScale:    float32(sc.OutputMultiplierScale),
		AttnLogitCap:             float32(sc.MaxAttnValue),
		PadToken:                 sc.PadToken, EOSToken: sc.EOSToken, SequenceLen: sc.SequenceLen,
		RopeBase: float32(sc.RopeBase), RMSEps: float32(sc.RMSEps),
		// Grok-2 (residual_moe; semantics §G6: the router soft-cap only
		// with the dense MLP, which ParseConfig sees to).
		DenseFFNSize: sc.DenseFFNSize, RouterLogitCap: float32(sc.RouterLogitCap),
		FinalLogitCap: float32(sc.FinalLogitCap), AttnTemperatureLen: sc.AttnTemperatureLen,
		UntiedOutput: sc.ResidualMoE,
	}
	if math.IsNaN(float64(cfg.AttnLogitCap)) {
		cfg.AttnLogitCap = 30
	}
	if opt.RopeScaling == "yarn" {
		if cfg.Yarn, err = yarnFromHF(sc); err != nil {
			st.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	var lm *model.LanguageModel
	if opt.WeightsOnly {
		err = cfg.Validate()
		lm = &model.LanguageModel{Config: cfg}
	} else {
		lm, err = newModel(cfg, st, opt)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m := &Model{LanguageModel: lm, Format: "safetensors", Path: path, Source: st, closers: []ioCloser{st}}
	if n := st.AssembledBytes(); n > 0 {
		m.Warnings = append(m.Warnings, fmt.Sprintf("the experts' tensor-parallel shards (*-TP-00N) were joined in memory: %d bytes copied%s; convert to GGUF (grok convert) to map them instead", n, joinReason(st)))
	}
	// rope_theta is absent from hpcai-tech's config by design (its code
	// hard-codes 10000, as model.py does); anything else missing deserves a word.
	var missing []string
	for _, k := range sc.Defaulted {
		// Grok-2's config has no attn_output_multiplier either: SGLang
		// uses head_dim^-0.5, the default.
		if k != "rope_theta" && !(k == "attn_output_multiplier" && sc.ResidualMoE) {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		m.Warnings = append(m.Warnings, "config.json lacks "+strings.Join(missing, ", ")+": defaults used")
	}
	for _, ti := range st.Tensors() {
		if ti.Canonical == "" {
			continue
		}
		if parts, _, split, err := st.Split(ti.Canonical); split {
			// Described from its slices: looking it up would join them.
			if err == nil {
				d := describe(ti.Name, ti.Canonical, parts[0])
				d.Shape, d.Bytes = ti.Shape, 0
				for _, p := range parts {
					d.Bytes += int64(len(p.Data))
				}
				m.tensors = append(m.tensors, d)
			}
			continue
		}
		if t, ok := st.Lookup(ti.Canonical); ok {
			m.tensors = append(m.tensors, describe(ti.Name, ti.Canonical, t))
		}
	}
	dir := path
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	if m.Tokenizer, err = findTokenizer(opt.Tokenizer, dir); err == nil {
		err = checkVocab(m)
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// joinReason says why building the network joined split tensors: the
// first one the model cannot multiply in place, as " (why)", or "".
func joinReason(st *safetensors.Model) string {
	for _, name := range st.Names() {
		if parts, axis, ok, err := st.Split(name); ok && err == nil {
			if err := model.PartsInPlace(parts, axis); err != nil {
				return " (" + strings.TrimPrefix(err.Error(), "model: ") + ")"
			}
		}
	}
	return ""
}

// checkVocab refuses a tokenizer that can produce ids the model has no
// embedding for.
func checkVocab(m *Model) error {
	if m.Tokenizer != nil && m.Tokenizer.VocabSize() > m.Config.VocabSize {
		return fmt.Errorf("%s: the tokenizer has %d pieces but the model only %d", m.Path, m.Tokenizer.VocabSize(), m.Config.VocabSize)
	}
	return nil
}

func describe(name, canon string, t *tensor.Tensor) TensorDesc {
	d := TensorDesc{Name: name, Type: t.Type.String(), Shape: t.Shape, Bytes: int64(len(t.Data)), canon: canon}
	if t.Transposed {
		d.Type += " [in,out]"
	}
	if t.Scales != nil {
		d.Type += fmt.Sprintf(" scales %v%v", t.Scales.Type, t.Scales.Shape)
		d.Bytes += int64(len(t.Scales.Data))
	}
	return d
}

var errNoFormat = errors.New("no model format recognised")

// yarnFromHF is YaRN for a Hugging Face Grok-2 config as llama.cpp runs
// the GGUF its converter writes from it (conversion/grok.py: rope_type
// "original" or "yarn" becomes rope.scaling.type yarn with the six keys
// below; no rope.scaling.attn_factor), read as yarnFromGGUF reads that file.
func yarnFromHF(sc *safetensors.Config) (model.YarnScaling, error) {
	if sc.RopeType != "original" && sc.RopeType != "yarn" {
		rt := "absent"
		if sc.RopeType != "" {
			rt = fmt.Sprintf("%q", sc.RopeType)
		}
		return model.YarnScaling{}, fmt.Errorf("--rope-scaling yarn: config.json's rope_type is %s; llama.cpp's converter writes YaRN only for \"original\" and \"yarn\"", rt)
	}
	y := sc.Yarn
	if len(y.Missing) > 0 {
		return model.YarnScaling{}, fmt.Errorf("--rope-scaling yarn: config.json lacks %s, which llama.cpp's converter writes as the YaRN keys", strings.Join(y.Missing, ", "))
	}
	if y.OriginalMaxPositions <= 0 || y.OriginalMaxPositions > math.MaxInt32 {
		return model.YarnScaling{}, fmt.Errorf("--rope-scaling yarn: original_max_position_embeddings = %d", y.OriginalMaxPositions)
	}
	return llamaYarn(float32(y.ScalingFactor), y.OriginalMaxPositions, float32(y.ExtrapolationFactor), float32(y.AttnFactor), 1,
		float32(y.BetaFast), float32(y.BetaSlow)), nil
}

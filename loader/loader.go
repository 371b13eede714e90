// Package loader opens a model in any supported format — GGUF (llama.cpp's
// arch `grok`), xAI's original checkpoint, Hugging Face safetensors — and
// builds the model and its tokenizer from it. It is the only place that knows
// both the formats and the model: formats yield named tensors and a config,
// the model consumes them.
package loader

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/mmap"
	"github.com/grok-go/grok/internal/safefile"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// Options tunes Open.
type Options struct {
	// Tokenizer is a tokenizer file (tokenizer.model, tokenizer.tok.json
	// or tokenizer.json), used instead of the one the model has or in place
	// of one it lacks.
	Tokenizer string
	// Preset names the config to use for an xAI checkpoint without config.json.
	Preset string

	// TP > 1 splits the model into TP shards on the model axis, run in
	// this process (model.NewTP) on Pool's threads (nil: the default
	// pool). Comm, if set, instead builds only this rank's shard of a
	// group (model.NewShard; an MPI rank). Bad shard counts are refused
	// before any weight is read.
	TP   int
	Pool *parallel.Pool
	Comm comm.Comm
	// Place, with TP > 1, places the shards' threads and memory
	// (model.TPOptions.Place; --numa).
	Place func(shard int)
	// WeightsOnly is for callers that read the tensors through Source and
	// never run the model (grok convert): for safetensors the network is
	// then not built — LanguageModel holds only the validated Config — so
	// that experts split into tensor-parallel shards (xai-org/grok-2) stay
	// mapped slices instead of being joined in memory. Other formats map
	// their tensors as they are and load as without it.
	WeightsOnly bool
	// RopeScaling is "" or "none" (the default: a GGUF's rope.scaling.*
	// keys, or Grok-2 config.json's YaRN keys, are not applied, as SGLang
	// runs Grok-2) or "yarn": apply them as llama.cpp reads them (for
	// config.json: as it reads the GGUF its converter writes; semantics §G3).
	RopeScaling string
}

// RopeScalings lists the values Options.RopeScaling accepts.
const RopeScalings = "none|yarn"

// checkRopeScaling refuses an Options.RopeScaling the loader does not
// know, and YaRN for a format that carries no keys for it.
func checkRopeScaling(opt Options, format string) error {
	switch opt.RopeScaling {
	case "", "none":
		return nil
	case "yarn":
		if format == "xai" {
			return errors.New("loader: --rope-scaling yarn applies the YaRN keys of a GGUF file or of Grok-2's config.json; an xAI checkpoint has none")
		}
		return nil
	}
	return fmt.Errorf("loader: unknown RoPE scaling %q (want %s)", opt.RopeScaling, RopeScalings)
}

// mappedSource lets a shard release the pages of the matrices it copies
// its slices out of (model.PageReleaser): the formats' tensors are views
// of files mapped by internal/mmap, which releases only those.
type mappedSource struct{ model.TensorSource }

func (mappedSource) Mapped(b []byte) bool  { return mmap.Mapped(b) }
func (mappedSource) ReleasePages(b []byte) { mmap.Release(b) }

// Split passes on the source's tensors stored in pieces
// (model.SplitSource), which the shard then multiplies in place.
func (s mappedSource) Split(name string) ([]*tensor.Tensor, int, bool, error) {
	if ss, ok := s.TensorSource.(model.SplitSource); ok {
		return ss.Split(name)
	}
	return nil, 0, false, nil
}

// newModel builds the model of cfg over src as opt asks: whole, split in
// process, or one rank's shard.
func newModel(cfg model.Config, src model.TensorSource, opt Options) (*model.LanguageModel, error) {
	switch {
	case opt.Comm != nil:
		return model.NewShard(cfg, mappedSource{src}, opt.Comm)
	case opt.TP > 1 || opt.TP < 0:
		return model.NewTPWith(cfg, src, opt.TP, opt.Pool, model.TPOptions{Place: opt.Place})
	}
	return model.New(cfg, src)
}

// Model is a loaded model: the network, the file it came from and, when the
// file has one, its tokenizer.
type Model struct {
	*model.LanguageModel
	Format string // "gguf", "xai", "safetensors"
	Path   string
	GGUF   *gguf.File // set for GGUF models (metadata, tensor table)
	// Source serves the file's tensors under the canonical (GGUF) names of
	// model.TensorSource, for conversion.
	Source model.TensorSource
	// Tokenizer is the model's tokenizer: embedded in a GGUF, or a
	// tokenizer file given in Options or found next to the model; nil if none.
	Tokenizer Tokenizer
	// Warnings are things the user should know about the file (e.g. config
	// keys that were missing and defaulted).
	Warnings []string

	closers  []ioCloser
	tensors  []TensorDesc // for formats other than GGUF
	replicas []*model.LanguageModel
}

// Replica builds another network over the model's mapped tensors (a
// replica of the data axis: `grok serve --dp`), split into tp shards on the
// model axis as Open's Options.TP does, running on pool's threads. Nothing
// is copied but what a split copies for each shard; Close closes it.
func (m *Model) Replica(tp int, pool *parallel.Pool) (*model.LanguageModel, error) {
	if m.Source == nil || m.LanguageModel == nil {
		return nil, errors.New("loader: no network to replicate")
	}
	lm, err := newModel(m.LanguageModel.Config, m.Source, Options{TP: tp, Pool: pool})
	if err != nil {
		return nil, err
	}
	if tp <= 1 {
		lm.Pool = pool
	}
	m.replicas = append(m.replicas, lm)
	return lm, nil
}

type ioCloser = io.Closer

// Close releases the model's mapped files. The model must not be used after.
func (m *Model) Close() error {
	var errs []error
	for _, c := range m.closers {
		errs = append(errs, c.Close())
	}
	m.closers = nil
	if m.LanguageModel != nil {
		m.LanguageModel.Close() // a sharded model's threads
	}
	for _, r := range m.replicas {
		r.Close()
	}
	m.replicas = nil
	return errors.Join(errs...)
}

// Open loads the model at path, detecting its format.
func Open(path string, opt Options) (*Model, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !st.IsDir() && gguf.IsPartName(path) {
		// The prefix of gguf-split shards names no file, and later byte
		// parts of a GGUF file lack the magic: gguf.OpenModel finds the set.
		return openGGUF(path, opt)
	}
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		switch f := detectDir(path); f {
		case "xai", "safetensors":
			if err := checkRopeScaling(opt, f); err != nil {
				return nil, err
			}
			if f == "xai" {
				return openXAI(path, opt)
			}
			return openSafetensors(path, opt)
		}
		return nil, fmt.Errorf("loader: %s: %w in this folder (want ckpt-0/, *.safetensors or a GGUF file)", path, errNoFormat)
	}
	if strings.HasSuffix(path, ".safetensors") || strings.HasSuffix(path, ".index.json") {
		if err := checkRopeScaling(opt, "safetensors"); err != nil {
			return nil, err
		}
		return openSafetensors(path, opt)
	}
	magic := make([]byte, 4)
	fh, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loader: %w", err)
	}
	_, err = io.ReadFull(fh, magic)
	fh.Close()
	if err == nil && string(magic) == gguf.Magic {
		return openGGUF(path, opt)
	}
	return nil, fmt.Errorf("loader: %s: unknown model format (not GGUF, safetensors or an xAI checkpoint folder)", path)
}

// openGGUF opens a GGUF model: one file, gguf-split shards or byte parts.
func openGGUF(path string, opt Options) (*Model, error) {
	if err := checkRopeScaling(opt, "gguf"); err != nil {
		return nil, err
	}
	f, err := gguf.OpenModel(path)
	if err != nil {
		return nil, err
	}
	m, err := fromGGUF(f, path, opt)
	if err == nil && opt.Tokenizer != "" {
		if m.Tokenizer, err = LoadTokenizer(opt.Tokenizer); err == nil {
			err = checkVocab(m)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	m.closers = append(m.closers, f)
	return m, nil
}

// FromGGUFBytes loads a GGUF model held in memory (e.g. embedded in the
// binary). data must not change while the model is in use.
func FromGGUFBytes(data []byte, name string) (*Model, error) {
	return FromGGUFBytesWith(data, name, Options{})
}

// FromGGUFBytesWith is FromGGUFBytes with options (the tokenizer and
// preset options do not apply).
func FromGGUFBytesWith(data []byte, name string, opt Options) (*Model, error) {
	if err := checkRopeScaling(opt, "gguf"); err != nil {
		return nil, err
	}
	f, err := gguf.Parse(data)
	if err != nil {
		return nil, err
	}
	return fromGGUF(f, name, opt)
}

func fromGGUF(f *gguf.File, path string, opt Options) (*Model, error) {
	cfg, warns, err := configFromGGUF(f, opt.RopeScaling == "yarn")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkTypes(f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkCounts(f, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	lm, err := newModel(cfg, ggufSource{f}, opt)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	tok, err := TokenizerFromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if tok != nil && tok.VocabSize() > cfg.VocabSize {
		return nil, fmt.Errorf("%s: the tokenizer has %d pieces but the model only %d", path, tok.VocabSize(), cfg.VocabSize)
	}
	return &Model{LanguageModel: lm, Format: "gguf", Path: path, GGUF: f, Source: ggufSource{f}, Tokenizer: tok, Warnings: warns}, nil
}

// TensorDesc describes one tensor of a model file for `grok inspect`.
type TensorDesc struct {
	Name  string
	Type  string
	Shape []int // numpy order, outermost first
	Bytes int64

	canon string // the name Source serves it under
}

// CheckFinite scans every tensor of the file that the engine can compute
// with — all of its values, Q8_0 block scales and int8 scales — for NaN and
// infinities. It returns the number of tensors scanned and one error (a
// *model.NonFiniteError) per bad tensor, in file order. It reads the whole
// model, so it takes as long as reading the file does.
func (m *Model) CheckFinite() (scanned int, bad []error) {
	check := func(t *tensor.Tensor, ok bool) {
		if !ok {
			return
		}
		scanned++
		if err := model.CheckFinite(t); err != nil {
			bad = append(bad, err)
		}
	}
	if m.GGUF != nil {
		for _, ti := range m.GGUF.Tensors {
			check(m.GGUF.Lookup(ti.Name))
		}
		return scanned, bad
	}
	splitter, _ := m.Source.(model.SplitSource)
	for _, d := range m.tensors {
		if splitter != nil {
			// Scanned piece by piece where the files store it so: looking
			// it up whole would join it in memory.
			if parts, axis, ok, err := splitter.Split(d.canon); ok {
				if err == nil {
					scanned++
					if err := checkFiniteParts(parts, axis); err != nil {
						bad = append(bad, err)
					}
				}
				continue
			}
		}
		check(m.Source.Lookup(d.canon))
	}
	return scanned, bad
}

// checkFiniteParts is model.CheckFinite of a 2-D tensor stored in pieces
// joined along axis (model.SplitSource), scanned piece by piece: the first
// bad value, its index that of the whole tensor.
func checkFiniteParts(parts []*tensor.Tensor, axis int) error {
	cols := 0
	for _, p := range parts {
		cols += p.Shape[1]
	}
	row0, col0 := 0, 0
	for _, p := range parts {
		err := model.CheckFinite(p)
		if e, ok := err.(*model.NonFiniteError); ok && e.Part == "" && len(p.Shape) == 2 && p.Shape[1] > 0 {
			r, c := e.Index/p.Shape[1], e.Index%p.Shape[1]
			if axis == 0 {
				e.Index = (row0+r)*p.Shape[1] + c
			} else {
				e.Index = r*cols + col0 + c
			}
		}
		if err != nil {
			return err
		}
		row0 += p.Shape[0]
		col0 += p.Shape[1]
	}
	return nil
}

// Tensors lists the file's tensors in file order.
func (m *Model) Tensors() []TensorDesc {
	if m.GGUF != nil {
		out := make([]TensorDesc, len(m.GGUF.Tensors))
		for i, t := range m.GGUF.Tensors {
			out[i] = TensorDesc{Name: t.Name, Type: t.Type.String(), Shape: t.Shape(), Bytes: t.Size}
		}
		return out
	}
	return m.tensors
}

// Package xaickpt opens xAI's original Grok-1 checkpoint: a folder ckpt-0/
// with one Python pickle per parameter (tensorNNNNN_000), int8 projection
// matrices with bfloat16 scales, as xai-org/grok-1 ships it. It serves the
// parameters under the canonical GGUF names the model looks up
// (model/weights.go) as views into the memory-mapped files.
//
// The pickles are never unpickled: a walker interprets their opcodes over
// placeholder values, allows only numpy's array reconstruction and the
// QuantizedWeight8bit dataclass, and takes the bytes of the arrays the
// pickle builds as ranges of the file. Which file holds which parameter
// follows from the configuration alone (JAX's sorted flattening of the
// Haiku parameter paths), and every array's declared dtype and shape are
// checked against its byte count and against what the configuration implies.
// docs/xai-checkpoint.md describes the format.
package xaickpt

import (
	"errors"
	"fmt"
	"github.com/grok-go/grok/internal/mmap"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/grok-go/grok/tensor"
)

// File names of a checkpoint folder.
const (
	CkptDirName    = "ckpt-0"
	ConfigFileName = "config.json"
)

// Checkpoint is an opened xAI checkpoint. Its tensors are read-only views
// into memory-mapped files: valid until Close; writing to their Data
// faults. A Checkpoint is safe for concurrent use.
type Checkpoint struct {
	cfg     Config
	preset  bool
	dir     string
	params  []ParamInfo
	tensors map[string]*tensor.Tensor // by canonical name
	release []func() error
}

// ParamInfo describes one checkpoint file.
type ParamInfo struct {
	File     string // file name in ckpt-0, e.g. "tensor00002_000"
	Path     string // Haiku module path, e.g. "transformer/decoder_layer_0/moe/linear"
	Name     string // the canonical GGUF name Lookup serves it under
	Protocol int    // the file's pickle protocol
}

// Open opens a checkpoint. dir is the folder holding ckpt-0/ and,
// optionally, config.json; or the ckpt-0 folder itself, with config.json
// beside it or in its parent. Without a config.json the checkpoint must be
// Grok-1's: 770 files whose payloads have Grok-1's sizes.
func Open(dir string) (*Checkpoint, error) {
	ckpt, cfgPaths, err := locate(dir)
	if err != nil {
		return nil, fmt.Errorf("xaickpt: %w", err)
	}
	c := &Checkpoint{dir: ckpt, tensors: make(map[string]*tensor.Tensor)}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	found := false
	for _, p := range cfgPaths {
		if _, err := os.Stat(p); err != nil {
			continue
		}
		cfg, err := LoadConfig(p)
		if err != nil {
			return nil, fmt.Errorf("xaickpt: %w", err)
		}
		c.cfg, found = *cfg, true
		break
	}
	if !found {
		c.cfg, c.preset = Grok1Config(), true
	}
	if err := c.load(); err != nil {
		return nil, fmt.Errorf("xaickpt: %w", err)
	}
	ok = true
	return c, nil
}

// locate finds the ckpt-0 folder and the places config.json may be.
func locate(dir string) (ckpt string, cfgPaths []string, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, err
	}
	if st, err := os.Stat(filepath.Join(abs, CkptDirName)); err == nil && st.IsDir() {
		return filepath.Join(abs, CkptDirName), []string{filepath.Join(abs, ConfigFileName)}, nil
	}
	if _, err := os.Stat(filepath.Join(abs, fileName(0))); err == nil {
		return abs, []string{filepath.Join(abs, ConfigFileName), filepath.Join(filepath.Dir(abs), ConfigFileName)}, nil
	}
	return "", nil, fmt.Errorf("%s holds neither %s/ nor %s", dir, CkptDirName, fileName(0))
}

// fileName is checkpoint.py's name for leaf i on host shard 0.
func fileName(i int) string { return fmt.Sprintf("tensor%05d_000", i) }

// listFiles returns the leaf indices of the tensor files in dir. Files of
// other host shards are refused: the released checkpoint is single-host.
func listFiles(dir string) (map[int]bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	idx := make(map[int]bool)
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, "tensor")
		num, shard, ok2 := strings.Cut(rest, "_")
		if !ok || !ok2 || len(num) < 5 || len(shard) != 3 || !digits(num) || !digits(shard) {
			continue
		}
		if shard != "000" {
			return nil, fmt.Errorf("%s: %s belongs to host shard %s; only single-host checkpoints (shard 000) are supported", dir, name, shard)
		}
		i, err := strconv.Atoi(num)
		if err != nil || fileName(i) != name {
			continue
		}
		idx[i] = true
	}
	return idx, nil
}

// layersHeld describes n layer files of per files a layer.
func layersHeld(n, per int) string {
	if n >= 0 && n%per == 0 {
		return fmt.Sprintf("%d layers", n/per)
	}
	return fmt.Sprintf("not a whole number of layers of %d files", per)
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// load maps and checks every file the configuration implies.
func (c *Checkpoint) load() error {
	files, err := listFiles(c.dir)
	if err != nil {
		return err
	}
	// The file count is checked against num_layers before the parameter
	// list is built from it: a config may declare thousands of layers.
	per := len(layerModules(&c.cfg))
	want := 2 + per*c.cfg.NumLayers
	if c.preset && len(files) != want {
		return fmt.Errorf("no %s next to %s, and it holds %d tensor files, not Grok-1's %d: add a config.json", ConfigFileName, c.dir, len(files), want)
	}
	if n := len(files) - 2; len(files) < want && (n < 0 || n%per == 0 || len(files) < want/2) {
		return fmt.Errorf("the config says num_layers = %d (%d tensor files), but %s holds %d tensor files (%s)",
			c.cfg.NumLayers, want, c.dir, len(files), layersHeld(n, per))
	}
	ps := params(&c.cfg)
	for i := range files {
		if i >= len(ps) {
			return fmt.Errorf("%s holds %s, but the config (%d layers, %d experts) implies only %d files", c.dir, fileName(i), c.cfg.NumLayers, c.cfg.NumExperts, len(ps))
		}
	}
	for i, p := range ps {
		name := fileName(i)
		if !files[i] {
			return fmt.Errorf("%s: missing %s, which should hold %s", c.dir, name, p.Path)
		}
		path := filepath.Join(c.dir, name)
		data, release, err := mmap.Map(path)
		if err != nil {
			return err
		}
		c.release = append(c.release, release)
		t, proto, err := readParam(p, data)
		if err != nil {
			return fmt.Errorf("%s (%s): %w", path, p.Path, err)
		}
		c.tensors[p.Canon] = t
		c.params = append(c.params, ParamInfo{File: name, Path: p.Path, Name: p.Canon, Protocol: proto})
	}
	return nil
}

// readParam walks one file and returns its tensor: the arrays the pickle
// builds, whose declared dtype and shape must be what the config implies
// for the parameter (the walker has checked them against the byte counts).
func readParam(p param, data []byte) (*tensor.Tensor, int, error) {
	res, err := walk(data)
	if err != nil {
		return nil, 0, err
	}
	t := &tensor.Tensor{Name: p.Canon, Shape: p.Shape, Transposed: p.Transposed}
	switch {
	case res.Kind == objQuantized && p.Quantized:
		wt, sc := res.Arrays[0], res.Arrays[1]
		if err := checkArray(wt, "int8 weight", p.Shape, "i1"); err != nil {
			return nil, 0, err
		}
		// Scales: bfloat16 as xAI writes them (ml_dtypes), or its bit
		// patterns as uint16 or 2-byte void, as the fixtures store them.
		if err := checkArray(sc, "bfloat16 scales", p.ScaleShape, "bfloat16", "u2", "V2"); err != nil {
			return nil, 0, err
		}
		t.Type, t.Data = tensor.I8, data[wt.Off:wt.Off+wt.Len]
		t.Scales = &tensor.Tensor{
			Name:  p.Canon + ".scales",
			Type:  tensor.BF16,
			Shape: p.ScaleShape,
			Data:  data[sc.Off : sc.Off+sc.Len],
		}
	case res.Kind == objQuantized:
		return nil, 0, fmt.Errorf("holds a QuantizedWeight8bit, but %s is a float array", p.Path)
	default:
		// A plain array: float32 as xAI stores embeddings, norms and the
		// router; a checkpoint may also hold unquantised projections
		// (float32, or 16-bit floats named by their dtype).
		a := res.Arrays[0]
		if err := checkArray(a, "float array", p.Shape, "f4", "bfloat16", "f2"); err != nil {
			return nil, 0, err
		}
		typ := floatTypes[a.DType]
		t.Type, t.Data = typ, data[a.Off:a.Off+a.Len]
	}
	if err := t.Check(); err != nil { // cannot fail after the checks; kept as a guard
		return nil, 0, err
	}
	return t, res.Protocol, nil
}

// floatTypes are the numpy dtypes a plain (unquantised) array may have.
var floatTypes = map[string]tensor.DType{"f4": tensor.F32, "bfloat16": tensor.BF16, "f2": tensor.F16}

// checkArray refuses an array the reader would misread: a dtype other than
// expected, big-endian bytes, Fortran order, or a declared shape other
// than the config's.
func checkArray(a array, what string, shape []int, dtypes ...string) error {
	where := fmt.Sprintf("pickle offset %d: the %s %v", a.At, what, shape)
	if !slices.Contains(dtypes, a.DType) {
		return fmt.Errorf("%s has numpy dtype %q", where, a.DType)
	}
	if a.Order == '>' {
		return fmt.Errorf("%s is big-endian", where)
	}
	if a.Fortran {
		return fmt.Errorf("%s is stored in Fortran (column-major) order", where)
	}
	if !slices.Equal(a.Shape, shape) {
		return fmt.Errorf("%s (the config's shape) is pickled with shape %s", where, shapeString(a.Shape))
	}
	return nil
}

// Config returns the configuration in use: config.json's, or Grok-1's.
func (c *Checkpoint) Config() Config { return c.cfg }

// Preset reports whether there was no config.json and Grok-1's
// configuration was used.
func (c *Checkpoint) Preset() bool { return c.preset }

// Dir returns the ckpt-0 folder.
func (c *Checkpoint) Dir() string { return c.dir }

// Params describes the checkpoint's files in file order.
func (c *Checkpoint) Params() []ParamInfo { return slices.Clone(c.params) }

// Names returns the canonical names of the checkpoint's tensors, sorted.
// Lookup also serves the per-expert names blk.N.ffn_{gate,up,down}.E.weight,
// which are not listed.
func (c *Checkpoint) Names() []string { return slices.Sorted(maps.Keys(c.tensors)) }

// Lookup returns the tensor with the given canonical GGUF name:
//
//	token_embd.weight                  F32 [V, D]
//	output_norm.weight, blk.N.*norm*   F32 [D]
//	blk.N.ffn_gate_inp.weight          F32 [D, E], Transposed
//	blk.N.attn_q/k/v.weight            I8 [D, H·K], Transposed, Scales BF16 [1, H·K]
//	blk.N.attn_output.weight           I8 [Hq·K, D], Transposed, Scales BF16 [S, D]
//	blk.N.ffn_gate_exps/up_exps.weight I8 [E, D, F], Transposed, Scales BF16 [E, 1, F]
//	blk.N.ffn_down_exps.weight         I8 [E, F, D], Transposed, Scales BF16 [E, S, D]
//	blk.N.ffn_gate/up/down.X.weight    expert X of the above, without the E axis
//
// (A projection stored unquantised is F32 without Scales; a dense model has
// blk.N.ffn_gate/up/down.weight.) Each call returns a fresh Tensor value, so
// callers cannot change what others see; the bytes are shared.
func (c *Checkpoint) Lookup(name string) (*tensor.Tensor, bool) {
	if t, ok := c.tensors[name]; ok {
		return clone(t), true
	}
	return c.expert(name)
}

// expert serves blk.N.ffn_{gate,up,down}.X.weight as a slice of the merged
// tensor: expert X's rows are contiguous in both the weight and the scales.
func (c *Checkpoint) expert(name string) (*tensor.Tensor, bool) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return nil, false
	}
	layer, rest, _ := strings.Cut(rest, ".")
	kind, rest, _ := strings.Cut(rest, ".")
	num, suffix, _ := strings.Cut(rest, ".")
	if suffix != "weight" || (kind != "ffn_gate" && kind != "ffn_up" && kind != "ffn_down") || !digits(num) || num == "" || !digits(layer) || layer == "" {
		return nil, false
	}
	merged, ok := c.tensors["blk."+layer+"."+kind+"_exps.weight"]
	if !ok {
		return nil, false
	}
	e, err := strconv.Atoi(num)
	if err != nil || strconv.Itoa(e) != num || e >= merged.Shape[0] {
		return nil, false
	}
	t := &tensor.Tensor{Name: name, Type: merged.Type, Shape: slices.Clone(merged.Shape[1:]), Transposed: merged.Transposed}
	t.Data = sliceExpert(merged.Data, e, merged.Shape[0])
	if s := merged.Scales; s != nil {
		t.Scales = &tensor.Tensor{Name: name + ".scales", Type: s.Type, Shape: slices.Clone(s.Shape[1:]), Data: sliceExpert(s.Data, e, s.Shape[0])}
	}
	return t, true
}

// sliceExpert returns the e-th of n equal parts of data.
func sliceExpert(data []byte, e, n int) []byte {
	per := len(data) / n
	return data[e*per : (e+1)*per : (e+1)*per]
}

// clone copies the Tensor value and its shapes, sharing the bytes.
func clone(t *tensor.Tensor) *tensor.Tensor {
	c := *t
	c.Shape = slices.Clone(t.Shape)
	if t.Scales != nil {
		c.Scales = clone(t.Scales)
	}
	return &c
}

// Close unmaps the files. Tensors obtained from c must not be used after.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, r := range c.release {
		errs = append(errs, r())
	}
	c.release = nil
	c.tensors = nil
	return errors.Join(errs...)
}

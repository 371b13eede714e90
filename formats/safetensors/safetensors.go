// Package safetensors opens Hugging Face safetensors conversions of Grok-1
// (one file, or shards with model.safetensors.index.json) and xai-org/grok-2
// as released (a folder of *-TP-common and *-TP-00N files, experts split
// for tensor parallelism: served as their mapped slices by Split, joined in
// memory only when looked up whole), memory-maps them
// and serves their tensors under the canonical GGUF names the model looks up
// (model/weights.go), translating from the hpcai-tech, keyfan and
// Mixtral-style spellings (see nameTable). It also reads config.json into a
// Config.
//
// Every header is validated when the file is opened: offsets inside the
// file, sizes equal to shape × dtype, no overlapping tensors, no absurd
// header lengths. A hostile or truncated file yields an error, never a panic
// or an allocation sized by the file's claims.
package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/grok-go/grok/internal/mmap"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/grok-go/grok/tensor"
)

// File names of a Hugging Face model folder.
const (
	SingleFileName = "model.safetensors"
	IndexFileName  = "model.safetensors.index.json"
	ConfigFileName = "config.json"
)

// Model is an opened safetensors checkpoint. Its tensors are read-only views
// into memory-mapped files: they stay valid until Close, and writing to
// their Data faults. A Model is safe for concurrent use.
type Model struct {
	cfg     *Config
	tensors map[string]*entry // by the file's own name
	canon   map[string]*entry // by canonical name
	release []func() error
	// assembled counts the bytes copied so far to join tensor-parallel
	// shards (see entry.join).
	assembled atomic.Int64
}

// entry is one tensor of an opened file.
type entry struct {
	rawEntry
	file  string // base name of the file that holds it
	data  []byte
	info  dtypeInfo
	canon string // canonical name, "" if nameTable does not know it

	// A tensor split into tensor-parallel shards (xai-org/grok-2's
	// experts) has data nil until a caller asks for it as one tensor:
	// parts are its slices in rank order, joined along axis by join, once.
	parts    []*entry
	axis     int
	joinOnce sync.Once
	owner    *Model
}

// TensorInfo describes one tensor of the files, whether or not the engine
// can use its dtype.
type TensorInfo struct {
	Name      string // the name in the file
	Canonical string // the canonical GGUF name Lookup serves it under, or ""
	DType     string // the safetensors dtype, e.g. "BF16"
	Shape     []int
	File      string // base name of the file that holds it
}

// Open opens a safetensors checkpoint. path may be a .safetensors file, an
// index (*.index.json), or a folder holding model.safetensors.index.json
// with its shards, model.safetensors, or neither (then every *.safetensors
// file in it, see openFolder). config.json next to the files is
// read if present; then every tensor the name table knows must have the
// shape it implies.
func Open(path string) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	dir := filepath.Dir(path)
	m := &Model{tensors: make(map[string]*entry), canon: make(map[string]*entry)}
	ok := false
	defer func() {
		if !ok {
			m.Close()
		}
	}()
	switch {
	case st.IsDir():
		dir = path
		if exists(filepath.Join(dir, IndexFileName)) {
			err = m.openIndex(filepath.Join(dir, IndexFileName))
		} else if exists(filepath.Join(dir, SingleFileName)) {
			err = m.openSingle(filepath.Join(dir, SingleFileName))
		} else {
			err = m.openFolder(dir)
		}
	case strings.HasSuffix(path, ".index.json"):
		err = m.openIndex(path)
	default:
		err = m.openSingle(path)
	}
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if cfgPath := filepath.Join(dir, ConfigFileName); exists(cfgPath) {
		if m.cfg, err = LoadConfig(cfgPath); err != nil {
			return nil, fmt.Errorf("safetensors: %w", err)
		}
	}
	if err := m.mapNames(); err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	ok = true
	return m, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// openFile maps and validates one safetensors file.
func (m *Model) openFile(path string) ([]*entry, error) {
	data, release, err := mmap.Map(path)
	if err != nil {
		return nil, err
	}
	m.release = append(m.release, release)
	raw, start, _, err := parseHeader(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	base := filepath.Base(path)
	out := make([]*entry, len(raw))
	for i, r := range raw {
		out[i] = &entry{
			rawEntry: r,
			file:     base,
			data:     data[start+r.Begin : start+r.End : start+r.End],
			info:     dtypes[r.DType],
		}
	}
	return out, nil
}

func (m *Model) openSingle(path string) error {
	entries, err := m.openFile(path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		m.tensors[e.Name] = e
	}
	return nil
}

// tpRank returns N of a file named *-TP-NNN.safetensors (xai-org/grok-2's
// tensor-parallel shards, as SGLang's _prepare_presharded_weights globs
// them), or -1 (*-TP-common.safetensors and any other name).
func tpRank(base string) int {
	stem, ok := strings.CutSuffix(base, ".safetensors")
	i := strings.LastIndex(stem, "-TP-")
	if !ok || i < 0 || len(stem)-i-4 != 3 {
		return -1
	}
	n := 0
	for _, c := range stem[i+4:] {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// openFolder opens every *.safetensors file of a folder without an index,
// as xai-org/grok-2 ships: pytorch_model-*-TP-common.safetensors and, for
// each of 8 tensor-parallel ranks, pytorch_model-*-TP-00N.safetensors
// holding that rank's slice of every expert under the expert's own name.
// A name found in several files must be in TP shards of distinct ranks
// 0..n-1; its slices are joined into one tensor (joinTP).
func (m *Model) openFolder(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("%s holds neither %s, %s nor any *.safetensors file", dir, IndexFileName, SingleFileName)
	}
	sort.Strings(files)
	type piece struct {
		rank int
		e    *entry
	}
	byName := map[string][]piece{}
	var names []string
	for _, f := range files {
		entries, err := m.openFile(f)
		if err != nil {
			return err
		}
		rank := tpRank(filepath.Base(f))
		for _, e := range entries {
			if byName[e.Name] == nil {
				names = append(names, e.Name)
			}
			byName[e.Name] = append(byName[e.Name], piece{rank, e})
		}
	}
	sort.Strings(names)
	for _, name := range names {
		ps := byName[name]
		if len(ps) == 1 {
			m.tensors[name] = ps[0].e
			continue
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].rank < ps[j].rank })
		parts := make([]*entry, len(ps))
		for i, p := range ps {
			if p.rank != i {
				return fmt.Errorf("tensor %q is in %d files (%s, %s, …), which are not the tensor-parallel shards *-TP-000 to *-TP-%03d", name, len(ps), ps[0].e.file, ps[1].e.file, len(ps)-1)
			}
			parts[i] = p.e
		}
		e, err := m.joinTP(name, parts)
		if err != nil {
			return err
		}
		m.tensors[name] = e
	}
	return nil
}

// joinTP checks that the tensor-parallel slices of one expert matrix fit
// together — w1/w3 slices follow each other (rows), w2 slices interleave
// row by row (columns) — and returns the entry of the whole tensor. Nothing
// is copied here: Split serves the slices as they are mapped (the engine
// multiplies by them in place, grok convert streams them), and only a
// caller that needs one contiguous matrix (Lookup; the engine when the
// slices of w2 are off its summation grid) has it assembled, on first use
// (join).
func (m *Model) joinTP(name string, parts []*entry) (*entry, error) {
	cn, ok := canonical(name)
	axis := -1
	if ok {
		axis = cn.row.tpAxis()
	}
	if axis < 0 {
		return nil, fmt.Errorf("tensor %q is in %d tensor-parallel shards, but only expert matrices (w1, w2, w3) are split so", name, len(parts))
	}
	p0 := parts[0]
	if len(p0.Shape) != 2 || p0.info.size == 0 {
		return nil, fmt.Errorf("tensor %q in %s: a split expert matrix must be 2-D of a fixed-width dtype, not %s%v", name, p0.file, p0.DType, p0.Shape)
	}
	shape := slices.Clone(p0.Shape)
	for _, p := range parts[1:] {
		if p.DType != p0.DType || len(p.Shape) != 2 || p.Shape[1-axis] != p0.Shape[1-axis] {
			return nil, fmt.Errorf("tensor %q: its slice in %s is %s%v, in %s %s%v: they cannot be joined along axis %d", name, p0.file, p0.DType, p0.Shape, p.file, p.DType, p.Shape, axis)
		}
		shape[axis] += p.Shape[axis]
	}
	return &entry{
		rawEntry: rawEntry{Name: name, DType: p0.DType, Shape: shape},
		file:     fmt.Sprintf("%s and %d more TP shards", p0.file, len(parts)-1),
		info:     p0.info,
		parts:    parts,
		axis:     axis,
		owner:    m,
	}, nil
}

// join assembles a split tensor's slices into one buffer, the first time
// it is needed; its bytes are at most the files' own.
func (e *entry) join() {
	e.joinOnce.Do(func() {
		total := 0
		for _, p := range e.parts {
			total += len(p.data)
		}
		buf := make([]byte, 0, total)
		if e.axis == 0 {
			for _, p := range e.parts {
				buf = append(buf, p.data...)
			}
		} else {
			for r := range e.Shape[0] {
				for _, p := range e.parts {
					w := p.Shape[1] * p.info.size
					buf = append(buf, p.data[r*w:(r+1)*w]...)
				}
			}
		}
		e.data = buf
		e.owner.assembled.Add(int64(total))
	})
}

// AssembledBytes returns how many bytes of tensor data have been copied so
// far to join the tensor-parallel slices of experts (by Lookup, Tensor or
// Raw of such a tensor; 0 for a checkpoint without them, or when only
// Split has served them).
func (m *Model) AssembledBytes() int64 { return m.assembled.Load() }

// Split returns the slices of a tensor (by canonical name) that the files
// hold split into tensor-parallel shards, in rank order, as views into the
// mapped files, and the axis they join along: 0 (rows follow each other:
// w1, w3) or 1 (each row is the slices' rows side by side: w2). ok is
// false for a tensor stored whole, or not at all; the error says why a
// split tensor is unusable (its dtype).
func (m *Model) Split(name string) (parts []*tensor.Tensor, axis int, ok bool, err error) {
	e, found := m.canon[name]
	if !found || e.parts == nil {
		return nil, 0, false, nil
	}
	parts = make([]*tensor.Tensor, len(e.parts))
	for i, p := range e.parts {
		if parts[i], err = p.tensor(name); err != nil {
			return nil, 0, true, err
		}
	}
	return parts, e.axis, true, nil
}

// openIndex opens the shards an index names and takes each tensor from the
// shard its weight_map gives: HF's size-based sharding cuts through layers,
// and a tensor found in another shard than the index says is not used.
func (m *Model) openIndex(path string) error {
	data, err := readSmallFile(path)
	if err != nil {
		return err
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("%s: empty or missing weight_map", path)
	}
	dir := filepath.Dir(path)
	shards := make(map[string]map[string]*entry)
	names := make([]string, 0, len(idx.WeightMap))
	for name := range idx.WeightMap {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic errors
	for _, name := range names {
		shard := idx.WeightMap[name]
		// The index is data from the download: it must not name files
		// outside the model's folder.
		if shard == "" || shard == "." || shard == ".." || filepath.Base(shard) != shard || strings.ContainsAny(shard, `/\`) {
			return fmt.Errorf("%s: tensor %q names shard %q, which is not a file name in %s", path, name, shard, dir)
		}
		byName, ok := shards[shard]
		if !ok {
			entries, err := m.openFile(filepath.Join(dir, shard))
			if err != nil {
				return err
			}
			byName = make(map[string]*entry, len(entries))
			for _, e := range entries {
				byName[e.Name] = e
			}
			shards[shard] = byName
		}
		e, ok := byName[name]
		if !ok {
			return fmt.Errorf("%s: weight_map puts %q in %s, which has no such tensor", path, name, shard)
		}
		m.tensors[name] = e
	}
	return nil
}

// mapNames gives each tensor its canonical name and, with a config, checks
// the shape that name implies.
func (m *Model) mapNames() error {
	layers := 0 // 1 + the highest layer index seen
	for _, raw := range slices.Sorted(maps.Keys(m.tensors)) {
		e := m.tensors[raw]
		cn, ok := canonical(raw)
		if !ok {
			continue
		}
		if cn.name == "output.weight" && m.cfg != nil && m.cfg.TieWordEmbeddings {
			continue // transformers ignores lm_head when embeddings are tied
		}
		if prev, dup := m.canon[cn.name]; dup {
			return fmt.Errorf("tensors %q and %q both map to %s", prev.Name, raw, cn.name)
		}
		if c := m.cfg; c != nil {
			if cn.layer >= c.NumLayers {
				return fmt.Errorf("tensor %q is for layer %d, but config.json has %d layers", raw, cn.layer, c.NumLayers)
			}
			if cn.expert >= c.NumExperts {
				return fmt.Errorf("tensor %q is for expert %d, but config.json has %d experts", raw, cn.expert, c.NumExperts)
			}
			if want := cn.row.shape(c); !slices.Equal(want, e.Shape) {
				return fmt.Errorf("tensor %q (%s) has shape %v, config.json implies %v", raw, cn.name, e.Shape, want)
			}
		}
		e.canon = cn.name
		m.canon[cn.name] = e
		layers = max(layers, cn.layer+1)
	}
	// The layer count must also not exceed what the files hold: the model
	// sizes its layers by it. (An expert count the files lack is caught by
	// the router's shape above.)
	if c := m.cfg; c != nil {
		if layers != c.NumLayers {
			return fmt.Errorf("config.json has num_hidden_layers = %d, but the files hold tensors for %d layers", c.NumLayers, layers)
		}
	}
	return nil
}

// Config returns the parsed config.json, or nil if there was none.
func (m *Model) Config() *Config { return m.cfg }

// Lookup returns the tensor with the given canonical GGUF name (see
// nameTable), or false if the files have none or its dtype is one the
// engine does not compute with; Tensor says which.
func (m *Model) Lookup(name string) (*tensor.Tensor, bool) {
	t, err := m.Tensor(name)
	return t, err == nil
}

// Tensor is Lookup with an error that says why a tensor is unavailable.
func (m *Model) Tensor(name string) (*tensor.Tensor, error) {
	e, ok := m.canon[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: no tensor maps to %q", name)
	}
	return e.tensor(name)
}

// Raw returns a tensor by the name it has in the files.
func (m *Model) Raw(name string) (*tensor.Tensor, error) {
	e, ok := m.tensors[name]
	if !ok {
		return nil, fmt.Errorf("safetensors: no tensor %q", name)
	}
	return e.tensor(name)
}

// tensor wraps the entry's bytes. Each call returns a fresh Tensor (with its
// own Shape) so that callers cannot change what others see.
func (e *entry) tensor(name string) (*tensor.Tensor, error) {
	if !e.info.usable {
		return nil, fmt.Errorf("safetensors: tensor %q in %s has dtype %s, which the engine does not compute with (F32, F16, BF16, I8)", e.Name, e.file, e.DType)
	}
	if e.parts != nil {
		e.join()
	}
	return &tensor.Tensor{
		Name:  name,
		Type:  e.info.typ,
		Shape: slices.Clone(e.Shape),
		Data:  e.data,
	}, nil
}

// Names returns the canonical names Lookup serves, sorted. Tensors with an
// unusable dtype are included: Lookup refuses them.
func (m *Model) Names() []string {
	return slices.Sorted(maps.Keys(m.canon))
}

// Tensors describes every tensor of the files (those the index selects, for
// a sharded checkpoint), sorted by name.
func (m *Model) Tensors() []TensorInfo {
	out := make([]TensorInfo, 0, len(m.tensors))
	for _, e := range m.tensors {
		out = append(out, TensorInfo{Name: e.Name, Canonical: e.canon, DType: e.DType, Shape: slices.Clone(e.Shape), File: e.file})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close unmaps the files. Tensors obtained from m must not be used after.
func (m *Model) Close() error {
	var errs []error
	for _, r := range m.release {
		errs = append(errs, r())
	}
	m.release = nil
	m.tensors, m.canon = nil, nil
	return errors.Join(errs...)
}

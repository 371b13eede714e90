package gguf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The metadata keys llama.cpp's gguf-split writes into every shard
// (LLM_KV_SPLIT_* of llama-arch.cpp): the shard's 0-based number (u16), the
// number of shards (u16) and the number of tensors of all shards (i32).
const (
	SplitNoKey           = "split.no"
	SplitCountKey        = "split.count"
	SplitTensorsCountKey = "split.tensors.count"
)

// ShardPath returns the name of shard no (0-based) of count, as
// llama_split_path builds it: prefix-00001-of-00009.gguf.
func ShardPath(prefix string, no, count int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, no+1, count)
}

// shardRE matches a shard's file name: prefix, 1-based number, count.
var shardRE = regexp.MustCompile(`^(.+)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// splitInfo says where the tensors of a File spanning several files live.
type splitInfo struct {
	shards    []string // gguf-split shards, in order; nil for parts
	parts     []string // byte parts, in order; nil for shards
	views     [][]byte // bytes of each tensor, by index in File.Tensors
	assembled int64    // heap bytes of tensors that straddle two parts
}

// Shards returns the paths of the gguf-split shards a File from OpenModel
// was assembled from, first shard first; nil for any other File.
func (f *File) Shards() []string {
	if f.split == nil {
		return nil
	}
	return f.split.shards
}

// Parts returns the paths of the byte parts (name.gguf.part1ofN, …) a File
// from OpenModel was read from, in order; nil for any other File.
func (f *File) Parts() []string {
	if f.split == nil {
		return nil
	}
	return f.split.parts
}

// AssembledBytes returns how many bytes of tensor data OpenModel copied to
// the heap: tensors that straddle two byte parts cannot be one view of a
// mapping. It is 0 for single files and shards, which are never copied.
func (f *File) AssembledBytes() int64 {
	if f.split == nil {
		return 0
	}
	return f.split.assembled
}

// OpenModel opens a model stored as one GGUF file, as a set of gguf-split
// shards, or as byte parts of one file, and returns it as one File. path
// may name:
//
//   - a GGUF file;
//   - any shard of a set (grok-1-Q4_K-00003-of-00009.gguf), or the set's
//     prefix (grok-1-Q4_K), which names no file;
//   - any part of a file cut into pieces (grok-1.Q4_K_M.gguf.part2of4), or
//     the file's name without the .partKofN suffix.
//
// The File's metadata is the first shard's (the only one with all of it)
// and its tensors are those of every shard; all files are memory-mapped and
// Close unmaps them all. The set is checked as a whole before it is used:
// every shard present once, in its place, agreeing on the count, and every
// tensor in exactly one shard. A shard's TensorInfo.Offset stays relative to
// its own shard's data section, and DataOffset is the first shard's.
func OpenModel(path string) (*File, error) {
	if base, _, _, ok := partName(filepath.Base(path)); ok {
		return openParts(filepath.Join(filepath.Dir(path), base))
	}
	st, err := os.Stat(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("gguf: %w", err)
		}
		return openAbsent(path, err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("gguf: %s is a folder, not a GGUF file", path)
	}
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	count, err := splitKey(f, path, SplitCountKey, 0)
	if err != nil || count <= 1 {
		if err != nil {
			f.Close()
		}
		return f, err
	}
	no, err := splitKey(f, path, SplitNoKey, -1)
	if err != nil {
		f.Close()
		return nil, err
	}
	if no >= count {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %s %d is not below %s %d", path, SplitNoKey, no, SplitCountKey, count)
	}
	m := shardRE.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: shard %d of %d, but the name does not end in -%05d-of-%05d.gguf, so the other shards cannot be found",
			path, no+1, count, no+1, count)
	}
	prefix := filepath.Join(filepath.Dir(path), m[1])
	if want := ShardPath(prefix, int(no), int(count)); filepath.Base(want) != filepath.Base(path) {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: its %s %d and %s %d say it should be named %s",
			path, SplitNoKey, no, SplitCountKey, count, filepath.Base(want))
	}
	return openShards(prefix, int(count), int(no), f)
}

// openAbsent opens what a path that names no file stands for: the prefix of
// a shard set or the name of a file cut into parts. notExist is the error
// of the plain path, returned when neither exists.
func openAbsent(path string, notExist error) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", notExist)
	}
	var hasParts bool
	counts := map[string][]int{} // prefix → counts of its first shards
	prefixes := []string{base}
	if p := strings.TrimSuffix(base, ".gguf"); p != base {
		prefixes = append(prefixes, p)
	}
	for _, e := range entries {
		name := e.Name()
		if b, _, _, ok := partName(name); ok && b == base {
			hasParts = true
		}
		if m := shardRE.FindStringSubmatch(name); m != nil && m[2] == "00001" {
			for _, p := range prefixes {
				if m[1] == p || m[1] == p+"-split" {
					n, _ := strconv.Atoi(m[3])
					counts[m[1]] = append(counts[m[1]], n)
				}
			}
		}
	}
	if hasParts {
		return openParts(path)
	}
	var found []string
	for p, ns := range counts {
		for _, n := range ns {
			found = append(found, ShardPath(filepath.Join(dir, p), 0, n))
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("gguf: %w (nor are there shards %s or parts %s)",
			notExist, base+"-00001-of-NNNNN.gguf", base+".part1ofN")
	case 1:
		return OpenModel(found[0])
	}
	return nil, fmt.Errorf("gguf: %s names several shard sets (%s); name one of their files", path, strings.Join(found, ", "))
}

// splitKey reads a split.* key of f as a non-negative integer that fits a
// u16, as gguf-split writes them. def is returned when the key is absent; a
// negative def makes the key required.
func splitKey(f *File, path, key string, def int64) (int64, error) {
	v, ok := f.Get(key)
	if !ok {
		if def < 0 {
			return 0, fmt.Errorf("gguf: %s: no %s key: not a gguf-split shard", path, key)
		}
		return def, nil
	}
	n, ok := v.Uint()
	if !ok || n > 0xffff {
		return 0, fmt.Errorf("gguf: %s: %s is %s (%v), want an unsigned 16-bit count", path, key, v, v.Type)
	}
	return int64(n), nil
}

// openShards opens shards 0…count-1 of prefix; shard given (already open as
// f) is reused. Every shard is checked to exist before any is mapped.
func openShards(prefix string, count, given int, f *File) (*File, error) {
	paths := make([]string, count)
	var missing []string
	for i := range paths {
		paths[i] = ShardPath(prefix, i, count)
		if i == given {
			continue
		}
		if _, err := os.Stat(paths[i]); err != nil {
			missing = append(missing, fmt.Sprintf("shard %d (%s): %v", i+1, filepath.Base(paths[i]), errors.Unwrap(err)))
		}
	}
	if len(missing) > 0 {
		f.Close()
		if len(missing) > 3 {
			missing = append(missing[:3], fmt.Sprintf("and %d more", len(missing)-3))
		}
		return nil, fmt.Errorf("gguf: %s: %d of the %d shards are missing: %s", paths[given], len(missing), count, strings.Join(missing, "; "))
	}
	files := make([]*File, count)
	files[given] = f
	closeAll := func() {
		for _, g := range files {
			if g != nil {
				g.Close()
			}
		}
	}
	for i := range files {
		if files[i] != nil {
			continue
		}
		g, err := Open(paths[i])
		if err != nil {
			closeAll()
			return nil, err
		}
		files[i] = g
	}
	out, err := assembleShards(paths, files)
	if err != nil {
		closeAll()
		return nil, err
	}
	return out, nil
}

// assembleShards checks that files, parsed from paths, form one complete
// gguf-split set in order, and joins them into one File that owns them.
func assembleShards(paths []string, files []*File) (*File, error) {
	count := len(files)
	seen := map[int64]string{}
	var total int64
	for i, g := range files {
		no, err := splitKey(g, paths[i], SplitNoKey, -1)
		if err != nil {
			return nil, err
		}
		if other, dup := seen[no]; dup {
			return nil, fmt.Errorf("gguf: %s: %s %d is also that of %s: a shard is duplicated", paths[i], SplitNoKey, no, other)
		}
		seen[no] = paths[i]
		if no != int64(i) {
			return nil, fmt.Errorf("gguf: %s: %s is %d, but the file is shard %d of %d (split.no %d)", paths[i], SplitNoKey, no, i+1, count, i)
		}
		c, err := splitKey(g, paths[i], SplitCountKey, -1)
		if err != nil {
			return nil, err
		}
		if c != int64(count) {
			return nil, fmt.Errorf("gguf: %s: %s is %d, but the set has %d shards (%s)", paths[i], SplitCountKey, c, count, paths[0])
		}
		total += int64(len(g.Tensors))
	}
	first := files[0]
	want, err := tensorsCount(first, paths[0])
	if err != nil {
		return nil, err
	}
	for i, g := range files[1:] {
		if w, err := tensorsCount(g, paths[i+1]); err == nil && w != want {
			return nil, fmt.Errorf("gguf: %s: %s is %d, but %s says %d", paths[i+1], SplitTensorsCountKey, w, paths[0], want)
		}
	}
	out := &File{
		Version:    first.Version,
		Alignment:  first.Alignment,
		Metadata:   first.Metadata,
		DataOffset: first.DataOffset,
		keys:       first.keys,
		Tensors:    make([]TensorInfo, 0, total),
		names:      make(map[string]int, total),
		split:      &splitInfo{shards: paths, views: make([][]byte, 0, total)},
	}
	owner := make([]int, 0, total)
	for s, g := range files {
		for _, ti := range g.Tensors {
			if j, dup := out.names[ti.Name]; dup {
				return nil, fmt.Errorf("gguf: tensor %q is in both %s and %s", ti.Name, paths[owner[j]], paths[s])
			}
			b, _ := g.TensorBytes(ti.Name)
			out.names[ti.Name] = len(out.Tensors)
			out.Tensors = append(out.Tensors, ti)
			out.split.views = append(out.split.views, b)
			owner = append(owner, s)
		}
	}
	if total != want {
		return nil, fmt.Errorf("gguf: %s: %s is %d, but the %d shards hold %d tensors", paths[0], SplitTensorsCountKey, want, count, total)
	}
	out.release = func() error {
		var errs []error
		for _, g := range files {
			errs = append(errs, g.Close())
		}
		return errors.Join(errs...)
	}
	return out, nil
}

// tensorsCount reads split.tensors.count, which gguf-split writes as an i32.
func tensorsCount(f *File, path string) (int64, error) {
	v, ok := f.Get(SplitTensorsCountKey)
	if !ok {
		return 0, fmt.Errorf("gguf: %s: no %s key: not a gguf-split shard", path, SplitTensorsCountKey)
	}
	n, ok := v.Int()
	if !ok || n < 0 || n > 1<<31-1 {
		return 0, fmt.Errorf("gguf: %s: %s is %s (%v), want a non-negative 32-bit count", path, SplitTensorsCountKey, v, v.Type)
	}
	return n, nil
}

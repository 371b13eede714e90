package gguf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/grok-go/grok/internal/mmap"
)

// partRE matches the name of a byte part, name.partKofN, as model hubs cut
// files too large to upload (e.g. grok-1.Q4_K_M.gguf.part1of4).
var partRE = regexp.MustCompile(`^(.+)\.part([0-9]+)of([0-9]+)$`)

// partName splits a part's file name into the name of the whole file, the
// part's 1-based number and the number of parts.
func partName(name string) (base string, k, n int, ok bool) {
	m := partRE.FindStringSubmatch(name)
	if m == nil {
		return "", 0, 0, false
	}
	k, err1 := strconv.Atoi(m[2])
	n, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return m[1], k, n, true
}

// maxPartHeader bounds the copy made when a GGUF header runs past the end of
// the first part. Real headers are a few MB (the vocabulary is most of it);
// the bound keeps a corrupt header from costing more than this.
const maxPartHeader = 64 << 20

// openParts opens the parts base.part1ofN … base.partNofN as one file.
func openParts(base string) (*File, error) {
	dir, name := filepath.Split(base)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	byK := map[int]string{}
	n, nFrom := 0, ""
	for _, e := range entries {
		b, k, cnt, ok := partName(e.Name())
		if !ok || b != name {
			continue
		}
		path := filepath.Join(dir, e.Name())
		switch {
		case nFrom == "":
			n, nFrom = cnt, path
		case cnt != n:
			return nil, fmt.Errorf("gguf: %s and %s disagree on the number of parts (%d and %d)", nFrom, path, n, cnt)
		}
		if k < 1 || k > cnt {
			return nil, fmt.Errorf("gguf: %s: there is no part %d of %d", path, k, cnt)
		}
		if other, dup := byK[k]; dup {
			return nil, fmt.Errorf("gguf: %s and %s are both part %d of %d", other, path, k, cnt)
		}
		byK[k] = path
	}
	if nFrom == "" {
		return nil, fmt.Errorf("gguf: %s: no parts %s.part1ofN: %w", base, name, fs.ErrNotExist)
	}
	if len(byK) != n {
		// Name the first few missing parts; n may be absurd, so stop early.
		var missing []string
		for k := 1; k <= n && len(missing) < 3; k++ {
			if _, ok := byK[k]; !ok {
				missing = append(missing, fmt.Sprintf("%s.part%dof%d", name, k, n))
			}
		}
		return nil, fmt.Errorf("gguf: %s: %d of the %d parts are missing (%v)", base, n-len(byK), n, missing)
	}
	paths := make([]string, n)
	for k, p := range byK {
		paths[k-1] = p
	}
	datas := make([][]byte, n)
	releases := make([]func() error, 0, n)
	releaseAll := func() error {
		var errs []error
		for _, r := range releases {
			errs = append(errs, r())
		}
		return errors.Join(errs...)
	}
	for i, p := range paths {
		data, release, err := mmap.Map(p)
		if err != nil {
			releaseAll()
			return nil, fmt.Errorf("gguf: %w", err)
		}
		datas[i] = data
		releases = append(releases, release)
	}
	f, err := assembleParts(paths, datas)
	if err != nil {
		releaseAll()
		return nil, err
	}
	f.release = releaseAll
	return f, nil
}

// assembleParts parses the parts datas (read from paths) as the bytes of one
// GGUF file laid end to end. A tensor inside one part is a view of it; a
// tensor that straddles parts is copied once into a buffer of its own.
func assembleParts(paths []string, datas [][]byte) (*File, error) {
	ends := make([]int64, len(datas)) // virtual offset of each part's end
	var total int64
	for i, d := range datas {
		total += int64(len(d))
		ends[i] = total
	}
	f, err := parseHeader(datas[0])
	if limit := min(total, maxPartHeader); err != nil && int64(len(datas[0])) < limit {
		// The header may run past the first part: parse it again from a
		// copy of the start of the whole, grown until it fits.
		for n := max(2*int64(len(datas[0])), 1<<16); ; n *= 2 {
			n = min(n, limit)
			buf := make([]byte, n)
			copyAt(buf, datas, ends, 0)
			if f, err = parseHeader(buf); err == nil || n == limit {
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%s, the first of %d parts)", err, paths[0], len(paths))
	}
	section := max(total-f.DataOffset, 0)
	if err := f.checkLayout(section); err != nil {
		return nil, fmt.Errorf("%w; the %d parts %s … %s hold %d bytes in all: is a part short or missing?",
			err, len(paths), filepath.Base(paths[0]), filepath.Base(paths[len(paths)-1]), total)
	}
	s := &splitInfo{parts: paths, views: make([][]byte, len(f.Tensors))}
	for i := range f.Tensors {
		ti := &f.Tensors[i]
		start := f.DataOffset + ti.Offset // inside the section: checked above
		if ti.Size == 0 {
			s.views[i] = []byte{}
			continue
		}
		p := sort.Search(len(ends), func(j int) bool { return ends[j] > start })
		if end := start + ti.Size; end <= ends[p] {
			lo := start - (ends[p] - int64(len(datas[p])))
			s.views[i] = datas[p][lo : lo+ti.Size : lo+ti.Size]
			continue
		}
		buf := make([]byte, ti.Size)
		copyAt(buf, datas, ends, start)
		s.views[i] = buf
		s.assembled += ti.Size
	}
	f.split = s
	return f, nil
}

// copyAt fills dst with the bytes of the parts from virtual offset off; the
// range must lie inside them.
func copyAt(dst []byte, datas [][]byte, ends []int64, off int64) {
	for i, d := range datas {
		lo := ends[i] - int64(len(d))
		if len(dst) == 0 {
			return
		}
		if off >= ends[i] {
			continue
		}
		n := copy(dst, d[off-lo:])
		dst, off = dst[n:], off+int64(n)
	}
}

// IsPartName reports whether path names a byte part of a GGUF file
// (name.partKofN), which OpenModel opens together with its siblings.
func IsPartName(path string) bool {
	_, _, _, ok := partName(filepath.Base(path))
	return ok
}

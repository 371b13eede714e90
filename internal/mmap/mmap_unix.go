//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// Package mmap maps model files read-only into memory, so that weights are
// views into the page cache rather than copies on the heap.
package mmap

import (
	"fmt"
	"math"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/grok-go/grok/internal/safefile"
)

// Map maps the whole file read-only; it refuses what is not a regular file. Tensor bytes are then views into
// the page cache: a 600 GB checkpoint costs no heap, and pages are read only
// when a tensor is touched. The returned release function unmaps it.
func Map(path string) ([]byte, func() error, error) {
	f, err := safefile.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size == 0 {
		// mmap of length 0 fails with EINVAL; an empty file is simply empty.
		return []byte{}, func() error { return nil }, nil
	}
	if size < 0 || size > math.MaxInt {
		return nil, nil, fmt.Errorf("%s: file size %d cannot be mapped", path, size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	adviseHuge(data)
	register(data)
	return data, func() error { unregister(data); return syscall.Munmap(data) }, nil
}

// mapsFiles: Map's bytes are file pages, which Release may drop.
const mapsFiles = true

var pageSize = syscall.Getpagesize()

// dropPages is madvise(MADV_DONTNEED) on whole pages of a read-only
// shared file mapping: the process lets go of them, and a later read
// faults them in again, unchanged.
func dropPages(b []byte) {
	unix.Madvise(b, unix.MADV_DONTNEED)
}

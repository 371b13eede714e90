//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gguf

import (
	"fmt"
	"math"
	"os"
	"syscall"
)

// Open memory-maps the file at path read-only and parses it. Tensor data is
// read from the page cache on demand, so opening a large model is cheap and
// its weights cost no heap. Close the File to unmap it.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	// The mapping outlives the descriptor.
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	size := st.Size()
	if size == 0 {
		// mmap rejects empty mappings; Parse gives the proper error.
		_, err := Parse(nil)
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	if size < 0 || uint64(size) > math.MaxInt {
		return nil, fmt.Errorf("gguf: %s: size %d cannot be mapped", path, size)
	}
	data, err := syscall.Mmap(int(fd.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gguf: mmap %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		syscall.Munmap(data)
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	f.release = func() error {
		if err := syscall.Munmap(data); err != nil {
			return fmt.Errorf("gguf: munmap %s: %w", path, err)
		}
		return nil
	}
	return f, nil
}

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package mmap

import (
	"math"

	"github.com/grok-go/grok/internal/safefile"
)

// Map reads the whole file into memory on systems where this package
// does not use mmap. It is correct but needs as much memory as the file.
func Map(path string) ([]byte, func() error, error) {
	data, err := safefile.ReadFile(path, math.MaxInt)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}

// mapsFiles: Map's bytes are a heap copy here, which Release must not drop.
const mapsFiles = false

var pageSize = 4096

func dropPages([]byte) {}

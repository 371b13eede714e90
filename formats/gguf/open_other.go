//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gguf

import (
	"fmt"
	"os"
)

// Open reads the file at path into memory and parses it. (On this platform
// the file is read rather than memory-mapped.) Close releases the buffer.
func Open(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	// Dropping the references lets the collector free the buffer once the
	// caller's tensors are gone too.
	f.release = func() error { return nil }
	return f, nil
}

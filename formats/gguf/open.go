package gguf

import (
	"fmt"

	"github.com/grok-go/grok/internal/mmap"
)

// Open memory-maps the file at path read-only and parses it. Tensor data is
// read from the page cache on demand, so opening a large model is cheap and
// its weights cost no heap. Close the File to unmap it.
func Open(path string) (*File, error) {
	data, release, err := mmap.Map(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		release()
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	f.release = release
	return f, nil
}

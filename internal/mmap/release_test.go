package mmap

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Release drops only pages of Map's mappings, and what it drops reads back
// unchanged; heap bytes are never Mapped, so never dropped (which would
// zero them).
func TestRelease(t *testing.T) {
	want := make([]byte, 5*pageSize+123)
	for i := range want {
		want[i] = byte(i*7 + i/4096)
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, want, 0o644); err != nil {
		t.Fatal(err)
	}
	data, release, err := Map(p)
	if err != nil {
		t.Fatal(err)
	}
	sub := data[100 : 4*pageSize+7]
	if Mapped(sub) != mapsFiles || Mapped(data) != mapsFiles {
		t.Errorf("Mapped(part of a mapping) = %v, want %v", Mapped(sub), mapsFiles)
	}
	heap := bytes.Clone(want)
	if Mapped(heap) || Mapped(nil) {
		t.Error("heap bytes reported as mapped")
	}
	Release(sub)
	Release(heap)
	if !bytes.Equal(data, want) || !bytes.Equal(heap, want) {
		t.Error("released bytes changed")
	}
	if err := release(); err != nil {
		t.Fatal(err)
	}
	if Mapped(sub) {
		t.Error("an unmapped region is still Mapped")
	}
}

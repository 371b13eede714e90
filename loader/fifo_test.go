//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package loader

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenRefusesFIFOs: a FIFO given as a model, or standing in for one
// file of a multi-file model, is refused at once instead of blocking the
// process until some writer appears.
func TestOpenRefusesFIFOs(t *testing.T) {
	cases := []struct {
		name string
		src  string // a fixture folder copied, one file of it replaced by a FIFO
		fifo string // the file made a FIFO (relative to the copy)
		open string // what is opened (relative to the copy)
	}{
		{"gguf", "", "model.gguf", "model.gguf"},
		{"safetensors shard", "../testdata/hf-safetensors-tiny", "model-00002-of-00002.safetensors", "."},
		{"xai tensor file", "../testdata/xai-ckpt-tiny", "ckpt-0/tensor00003_000", "."},
		{"safetensors config.json", "../testdata/hf-safetensors-tiny", "config.json", "."},
		{"safetensors index", "../testdata/hf-safetensors-tiny", "model.safetensors.index.json", "."},
		{"xai config.json", "../testdata/xai-ckpt-tiny", "config.json", "."},
		{"tokenizer.model beside a checkpoint", "../testdata/xai-ckpt-tiny", "tokenizer.model", "."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.src != "" {
				copyTree(t, c.src, dir)
			}
			fifo := filepath.Join(dir, c.fifo)
			os.Remove(fifo)
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Skipf("no FIFOs here: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				m, err := Open(filepath.Join(dir, c.open), Options{})
				if err == nil {
					m.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "FIFO") {
					t.Errorf("Open = %v, want an error saying it is a FIFO", err)
				}
			case <-time.After(20 * time.Second): // a hang detector, not a timing target
				t.Fatal("Open blocked on a FIFO")
			}
		})
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

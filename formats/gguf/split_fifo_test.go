//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gguf

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenModelRefusesFIFOs: a FIFO standing in for a shard or a part is
// refused at once, naming it, instead of blocking until a writer appears.
func TestOpenModelRefusesFIFOs(t *testing.T) {
	data, orig := tiny(t)
	for _, tc := range []struct {
		name string
		make func(t *testing.T, dir string) (fifo, open string)
	}{
		{"shard", func(t *testing.T, dir string) (string, string) {
			paths, err := copyWriter(t, orig).WriteSplit(filepath.Join(dir, "m"), 8, 0)
			must(t, err)
			return paths[2], paths[0]
		}},
		{"part", func(t *testing.T, dir string) (string, string) {
			paths := writeParts(t, filepath.Join(dir, "m.gguf"), data, []int{100000, 200000})
			return paths[1], paths[0]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fifo, open := tc.make(t, t.TempDir())
			must(t, os.Remove(fifo))
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Skipf("no FIFOs here: %v", err)
			}
			done := make(chan error, 1)
			go func() {
				f, err := OpenModel(open)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "FIFO") || !strings.Contains(err.Error(), filepath.Base(fifo)) {
					t.Errorf("OpenModel = %v, want an error naming the FIFO %s", err, filepath.Base(fifo))
				}
			case <-time.After(20 * time.Second): // a hang detector, not a timing target
				t.Fatal("OpenModel blocked on a FIFO")
			}
		})
	}
}

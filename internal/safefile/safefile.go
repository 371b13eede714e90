// Package safefile opens model files and writes output files with the care
// hostile or interrupted runs need: only regular files are read (a FIFO or a
// device would block or never end), and outputs appear whole or not at all,
// durably, with the leftovers of a killed run removed by the next one.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Open opens path for reading if it is a regular file (symbolic links are
// followed). It never blocks on a FIFO: the file is opened non-blocking
// and checked before anything is read.
func Open(path string) (*os.File, error) {
	f, err := openNonblock(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &NotRegularError{Path: path, Mode: st.Mode()}
	}
	if err := clearNonblock(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// NotRegularError reports a path that is not a regular file.
type NotRegularError struct {
	Path string
	Mode os.FileMode
}

func (e *NotRegularError) Error() string {
	kind := "not a regular file"
	switch {
	case e.Mode.IsDir():
		kind = "a folder"
	case e.Mode&os.ModeNamedPipe != 0:
		kind = "a FIFO"
	case e.Mode&os.ModeDevice != 0:
		kind = "a device"
	case e.Mode&os.ModeSocket != 0:
		kind = "a socket"
	}
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, kind)
}

// ReadFile reads a whole regular file of at most max bytes.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes is more than the %d this file may have", path, st.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: grew past the %d bytes this file may have while being read", path, max)
	}
	return data, nil
}

// A File is an output being written: a hidden temporary file beside the
// destination, locked while it is written, that Commit renames into place.
type File struct {
	*os.File
	dst  string
	done bool
}

// tempPrefix is the name prefix of path's temporary files.
func tempPrefix(path string) string { return "." + filepath.Base(path) + ".tmp" }

// Create starts writing path. It first removes the temporary files that
// earlier runs writing the same path left when they were killed (those no
// live writer holds locked).
func Create(path string) (*File, error) {
	RemoveStale(path)
	f, err := os.CreateTemp(filepath.Dir(path), tempPrefix(path)+"*")
	if err != nil {
		return nil, err
	}
	if err := lock(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{File: f, dst: path}, nil
}

// Commit makes the written bytes durable and renames the file into place:
// the data and then the folder entry are synced, so that after a crash the
// destination holds either its old content or all of the new.
func (f *File) Commit() error {
	if f.done {
		return errors.New("safefile: file already committed or aborted")
	}
	f.done = true
	err := f.Sync()
	if err == nil {
		// CreateTemp makes the file private; a model file is ordinary data.
		err = f.Chmod(0o644)
	}
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), f.dst)
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	return syncDir(filepath.Dir(f.dst))
}

// Abort discards the file. It is a no-op after Commit, so it can be deferred.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.File.Close()
	os.Remove(f.Name())
}

// RemoveStale removes the temporary files of path that no running writer
// holds: what a killed convert or quantize left behind. It returns how
// many it removed.
func RemoveStale(path string) int {
	dir := filepath.Dir(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	prefix := tempPrefix(path)
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if stale(p) && os.Remove(p) == nil {
			n++
		}
	}
	return n
}

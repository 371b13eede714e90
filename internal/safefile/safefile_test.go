//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safefile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "model.gguf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	reg := filepath.Join(dir, "ok.bin")
	if err := os.WriteFile(reg, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.bin")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, want string // want: "" for success, else a word of the error
	}{
		{reg, ""},
		{link, ""},
		{fifo, "a FIFO"},
		{dir, "a folder"},
		{"/dev/zero", "a device"},
		{filepath.Join(dir, "missing"), "no such file"},
	}
	for _, c := range cases {
		done := make(chan error, 1)
		go func() {
			f, err := Open(c.path)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second): // a hang detector, not a timing target
			t.Fatalf("Open(%s) blocked", c.path)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Open(%s): %v", c.path, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Open(%s) = %v, want an error saying %q", c.path, err, c.want)
		}
		var nre *NotRegularError
		if c.want == "a FIFO" && !errors.As(err, &nre) {
			t.Errorf("Open(%s): error %T is not a NotRegularError", c.path, err)
		}
	}
	if _, err := ReadFile(fifo, 1<<20); err == nil || !strings.Contains(err.Error(), "a FIFO") {
		t.Errorf("ReadFile(fifo) = %v", err)
	}
}

func TestReadFileLimit(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p, 100); err != nil || len(b) != 100 {
		t.Errorf("ReadFile at the limit: %d bytes, %v", len(b), err)
	}
	if _, err := ReadFile(p, 99); err == nil {
		t.Error("ReadFile over the limit: no error")
	}
}

func TestCreateCommitAbort(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.gguf")
	if err := os.WriteFile(dst, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("partial")
	f.Abort()
	f.Abort() // a no-op
	if b, _ := os.ReadFile(dst); string(b) != "old" {
		t.Errorf("after Abort the destination holds %q", b)
	}
	f, err = Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("new")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	f.Abort() // after Commit: nothing happens
	if b, _ := os.ReadFile(dst); string(b) != "new" {
		t.Errorf("after Commit the destination holds %q", b)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	if err := f.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}
	assertFiles(t, dir, "out.gguf")
}

// TestStaleTempFilesRemoved kills a writer (a child process holding a
// temporary file, as a convert killed by SIGKILL would) and checks that the
// next Create of the same output removes its file, but never a live one's.
func TestStaleTempFilesRemoved(t *testing.T) {
	if os.Getenv("SAFEFILE_CHILD") != "" {
		f, err := Create(os.Getenv("SAFEFILE_CHILD"))
		if err != nil {
			os.Exit(2)
		}
		f.WriteString("half a model")
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Hour) // until killed
		return
	}
	dir := t.TempDir()
	dst := filepath.Join(dir, "out.gguf")
	// A stale file of another output stays.
	other := filepath.Join(dir, ".other.gguf.tmp123")
	os.WriteFile(other, nil, 0o600)

	child := exec.Command(os.Args[0], "-test.run=^TestStaleTempFilesRemoved$")
	child.Env = append(os.Environ(), "SAFEFILE_CHILD="+dst)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		child.Process.Kill()
		t.Fatalf("child: %q %v", buf, err)
	}
	// While the writer lives, its file is not stale.
	if n := RemoveStale(dst); n != 0 {
		t.Errorf("RemoveStale removed %d files of a live writer", n)
	}
	child.Process.Kill()
	child.Wait()
	if got := tempFiles(t, dir, dst); len(got) != 1 {
		t.Fatalf("the killed writer left %v, want one temporary file", got)
	}
	f, err := Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if got := tempFiles(t, dir, dst); len(got) != 1 || got[0] != filepath.Base(f.Name()) {
		t.Errorf("after Create the temporary files are %v, want only %s", got, filepath.Base(f.Name()))
	}
	f.WriteString("x")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	assertFiles(t, dir, ".other.gguf.tmp123", "out.gguf")
}

func tempFiles(t *testing.T, dir, dst string) []string {
	t.Helper()
	var out []string
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		if strings.HasPrefix(e.Name(), tempPrefix(dst)) {
			out = append(out, e.Name())
		}
	}
	return out
}

func assertFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("folder holds %v, want %v", got, want)
	}
}

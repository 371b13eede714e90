//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package safefile

import (
	"os"
	"syscall"
)

func openNonblock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

func clearNonblock(f *os.File) error {
	// Reading a regular file never blocks, but the flag would stay on the
	// descriptor; clear it so that the file behaves as os.Open's would.
	return syscall.SetNonblock(int(f.Fd()), false)
}

// lock takes an exclusive advisory lock on a temporary file for as long as
// the descriptor is open, so that RemoveStale can tell a live writer's file
// from a dead one's: the kernel drops the lock when the writer dies.
func lock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// stale reports whether no process holds p's lock.
func stale(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// syncDir syncs a folder, so that a rename in it survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package safefile

import "os"

func openNonblock(path string) (*os.File, error) { return os.Open(path) }

func clearNonblock(*os.File) error { return nil }

func lock(*os.File) error { return nil }

// stale is false where files cannot be locked: without a lock a live
// writer's file cannot be told from a dead one's, so none is removed.
func stale(string) bool { return false }

// syncDir does nothing where folders cannot be synced: the rename is then
// as durable as the system makes it.
func syncDir(string) error { return nil }

//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package mmap

// adviseHuge does nothing where madvise has no huge-page advice for file
// mappings.
func adviseHuge([]byte) {}

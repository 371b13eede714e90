//go:build !linux

package mmap

// HugeShare reports that the share of 2 MiB pages is not known off Linux.
func HugeShare([][]byte) (share float64, ok bool) { return 0, false }

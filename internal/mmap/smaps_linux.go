package mmap

import (
	"os"
	"unsafe"
)

// HugeShare returns the share of the bytes of bufs (views into mappings,
// such as a model's tensors) that the kernel maps with 2 MiB pages, from
// /proc/self/smaps; ok is false where that cannot be read. A file whose
// pages came into the page cache as small folios stays mapped with 4 KiB
// pages (adviseHuge helps only what is read in after it).
func HugeShare(bufs [][]byte) (share float64, ok bool) {
	ranges := make([][2]uintptr, 0, len(bufs))
	for _, b := range bufs {
		if len(b) > 0 {
			p := uintptr(unsafe.Pointer(&b[0]))
			ranges = append(ranges, [2]uintptr{p, p + uintptr(len(b))})
		}
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return hugeShare(f, ranges)
}

package mmap

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// hugeShare reads smaps (the format of /proc/self/smaps) and returns the
// share of the bytes of ranges (start, end pairs of addresses) that lie in
// mappings with 2 MiB pages, each mapping counted at its FilePmdMapped +
// AnonHugePages over its Size; ok is false when no range meets a mapping.
func hugeShare(smaps io.Reader, ranges [][2]uintptr) (share float64, ok bool) {
	var in, huge float64
	var lo, hi uintptr // the current mapping
	var size, pmd float64
	flush := func() {
		if hi <= lo || size == 0 {
			return
		}
		for _, r := range ranges {
			a, b := max(r[0], lo), min(r[1], hi)
			if a < b {
				in += float64(b - a)
				huge += float64(b-a) * min(1, pmd/size)
			}
		}
	}
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if a, b, isRange := strings.Cut(f[0], "-"); isRange && !strings.HasSuffix(f[0], ":") {
			flush()
			x, err1 := strconv.ParseUint(a, 16, 64)
			y, err2 := strconv.ParseUint(b, 16, 64)
			lo, hi, size, pmd = 0, 0, 0, 0
			if err1 == nil && err2 == nil {
				lo, hi = uintptr(x), uintptr(y)
			}
			continue
		}
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Size:":
			size = v
		case "FilePmdMapped:", "AnonHugePages:":
			pmd += v
		}
	}
	flush()
	if in == 0 {
		return 0, false
	}
	return huge / in, true
}

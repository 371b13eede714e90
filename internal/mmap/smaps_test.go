package mmap

import (
	"math"
	"strings"
	"testing"
)

// A synthetic smaps: mapping A (0x1000000-0x1400000, 4 MiB) has 2 MiB of
// its file in 2 MiB pages, B (0x2000000-0x2200000) none, C is anonymous
// with all of its 2 MiB in huge pages.
const smapsText = `01000000-01400000 r--s 00000000 fd:01 123 /models/a.gguf
Size:               4096 kB
KernelPageSize:        4 kB
Rss:                4096 kB
FilePmdMapped:      2048 kB
VmFlags: rd sh mr mw me ms hg
02000000-02200000 r--s 00000000 fd:01 124 /models/b.gguf
Size:               2048 kB
FilePmdMapped:         0 kB
03000000-03200000 rw-p 00000000 00:00 0
Size:               2048 kB
AnonHugePages:      2048 kB
FilePmdMapped:         0 kB
`

func TestHugeShare(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ranges [][2]uintptr
		want   float64
		ok     bool
	}{
		{"all of A", [][2]uintptr{{0x1000000, 0x1400000}}, 0.5, true},
		{"A and B", [][2]uintptr{{0x1000000, 0x1400000}, {0x2000000, 0x2200000}}, 2.0 / 6, true},
		{"part of A", [][2]uintptr{{0x1100000, 0x1200000}}, 0.5, true},
		{"range over the gap", [][2]uintptr{{0x1300000, 0x2100000}}, 0.25, true}, // 1 MiB of A, 1 of B
		{"anonymous huge", [][2]uintptr{{0x3000000, 0x3200000}}, 1, true},
		{"outside every mapping", [][2]uintptr{{0x5000000, 0x5001000}}, 0, false},
	} {
		got, ok := hugeShare(strings.NewReader(smapsText), tc.ranges)
		if ok != tc.ok || math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: hugeShare = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

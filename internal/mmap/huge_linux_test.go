package mmap

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// TestMapAdvisesHugePages checks that Map's mapping carries the huge-page
// advice (VmFlags "hg" in /proc/self/smaps), on kernels built with
// transparent huge pages. Whether the kernel then maps 2 MiB pages depends
// on the page cache's folios, so only the advice is checked.
func TestMapAdvisesHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
		t.Skip("kernel without transparent huge pages")
	}
	path := filepath.Join(t.TempDir(), "w")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	data, release, err := Map(path)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	flags, err := vmFlags(uintptr(unsafe.Pointer(&data[0])))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(" "+flags+" ", " hg ") {
		t.Errorf("mapping's VmFlags %q lack hg (MADV_HUGEPAGE)", flags)
	}
	if s, ok := HugeShare([][]byte{data}); !ok || s < 0 || s > 1 {
		t.Errorf("HugeShare of the mapping = %v, %v; want a share in [0, 1]", s, ok)
	}
}

// vmFlags returns the VmFlags line of the mapping that starts at addr.
func vmFlags(addr uintptr) (string, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", err
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", addr)
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, start):
			in = true
		case in && strings.HasPrefix(line, "VmFlags:"):
			return strings.TrimSpace(strings.TrimPrefix(line, "VmFlags:")), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no mapping at %#x in /proc/self/smaps", addr)
}

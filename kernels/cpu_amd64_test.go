//go:build amd64 && !noasm

package kernels

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// l1dBytes agrees with what Linux reports for cpu0's first data cache.
func TestL1dBytes(t *testing.T) {
	for i := 0; i < 4; i++ {
		dir := "/sys/devices/system/cpu/cpu0/cache/index" + strconv.Itoa(i) + "/"
		typ, err1 := os.ReadFile(dir + "type")
		lvl, err2 := os.ReadFile(dir + "level")
		size, err3 := os.ReadFile(dir + "size")
		if err1 != nil || err2 != nil || err3 != nil {
			t.Skip("no cache sizes in sysfs")
		}
		if strings.TrimSpace(string(typ)) != "Data" || strings.TrimSpace(string(lvl)) != "1" {
			continue
		}
		kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(string(size)), "K"))
		if err != nil {
			t.Fatalf("sysfs size %q", size)
		}
		if got := l1dBytes(); got != kib<<10 {
			t.Fatalf("l1dBytes() = %d, sysfs says %d KiB", got, kib)
		}
		return
	}
	t.Skip("no L1 data cache in sysfs")
}

// amd agrees with Linux's vendor_id, and the best level on an AMD CPU
// with AVX-512 VNNI is the Zen-tuned one (elsewhere it ranks below).
func TestAMDVendor(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo")
	}
	var vendor string
	for _, line := range strings.Split(string(info), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "vendor_id" {
			vendor = strings.TrimSpace(v)
			break
		}
	}
	if vendor == "" {
		t.Skip("no vendor_id in /proc/cpuinfo")
	}
	if got, want := amd(), vendor == "AuthenticAMD"; got != want {
		t.Fatalf("amd() = %v, vendor_id %q", got, vendor)
	}
	names := Variants()
	zen := slices.Index(names, "AVX512VNNI-Zen")
	if zen < 0 {
		return // no AVX-512 VNNI here
	}
	if best := len(names) - 1; (zen == best) != amd() {
		t.Fatalf("variants %v on vendor %q: the Zen-tuned one should be best exactly on AMD", names, vendor)
	}
}

// Every vector constant of 64 to 512 bytes of the generated kernels starts
// a cache line in this very binary (kernels/_asm alignConsts): the Go
// linker aligns data to at most 32 bytes, which left most of them split
// across two lines, a different set with every change of the binary.
func TestVectorConstsAligned(t *testing.T) {
	var addrs [numVecConsts]uintptr
	vecConstAddrs(&addrs)
	if numVecConsts < 50 {
		t.Fatalf("%d vector constants, want the generator's (≥ 50)", numVecConsts)
	}
	seen := map[uintptr]bool{}
	for i, p := range addrs {
		if p == 0 || seen[p] {
			t.Fatalf("constant %d at %#x: missing or repeated", i, p)
		}
		seen[p] = true
		if p%64 != 0 {
			t.Errorf("constant %d at %#x, not 64-byte aligned", i, p)
		}
	}
}

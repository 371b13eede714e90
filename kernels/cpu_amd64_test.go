//go:build amd64 && !noasm

package kernels

import (
	"os"
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

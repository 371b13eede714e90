// Package sysmem tells how much memory the process may still use: the
// system's available memory, bounded by the cgroup's limit where one is set
// (a container's memory.max counts, not the host's RAM).
package sysmem

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Available returns the bytes of memory the process can still take without
// swapping or being killed, and whether the system said. Page cache counts as
// available, as in the kernel's MemAvailable.
func Available() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	avail, ok := parseMeminfo(b)
	if !ok {
		return 0, false
	}
	if lim, ok := cgroupRoom(); ok && lim < avail {
		avail = lim
	}
	return avail, true
}

// parseMeminfo returns MemAvailable of /proc/meminfo in bytes.
func parseMeminfo(b []byte) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb < 0 {
				return 0, false
			}
			return kb * 1024, true
		}
	}
	return 0, false
}

// cgroupRoom returns memory.max − memory.current of the process's cgroup
// (v2), if it has a limit.
func cgroupRoom() (int64, bool) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	path, ok := cgroupPath(b)
	if !ok {
		return 0, false
	}
	dir := "/sys/fs/cgroup" + path
	return room(readFile(dir+"/memory.max"), readFile(dir+"/memory.current"))
}

// cgroupPath returns the cgroup v2 path ("0::/path") of /proc/self/cgroup.
func cgroupPath(b []byte) (string, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p, true
		}
	}
	return "", false
}

// room is max − current, for a limit that is set ("max" means none).
func room(max, current string) (int64, bool) {
	max, current = strings.TrimSpace(max), strings.TrimSpace(current)
	m, err := strconv.ParseInt(max, 10, 64)
	if err != nil {
		return 0, false // "max", or unreadable
	}
	c, err := strconv.ParseInt(current, 10, 64)
	if err != nil {
		c = 0
	}
	return max64(m-c, 0), true
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func readFile(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return string(b)
}

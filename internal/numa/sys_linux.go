package numa

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Pin sets the calling OS thread's CPU affinity to cpus. Lock the
// goroutine to its thread first (runtime.LockOSThread), or the runtime
// moves it to other threads and the pinning holds for whoever runs there.
func Pin(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		if c >= len(set)*64 {
			return fmt.Errorf("numa: CPU %d is past the %d an affinity mask holds here", c, len(set)*64)
		}
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("numa: sched_setaffinity: %w", err)
	}
	return nil
}

// ThreadCPUs returns the calling OS thread's CPU affinity.
func ThreadCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("numa: sched_getaffinity: %w", err)
	}
	var out []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// Prefer makes the calling OS thread's new pages come from node when it
// has free memory (set_mempolicy MPOL_PREFERRED), for anonymous memory and
// for file pages it reads into the page cache alike. mbind would place
// only the former.
func Prefer(node int) error {
	var mask unix.CPUSet // a node mask has the same layout
	if node < 0 || node >= len(mask)*64 {
		return fmt.Errorf("numa: node %d is past the %d a node mask holds here", node, len(mask)*64)
	}
	mask.Set(node)
	if err := unix.SetMemPolicy(unix.MPOL_PREFERRED, &mask); err != nil {
		return fmt.Errorf("numa: set_mempolicy: %w", err)
	}
	return nil
}

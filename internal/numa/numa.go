// Package numa reads a machine's NUMA topology from sysfs and places
// threads and memory on its nodes: the --numa of an in-process --tp run
// puts each shard on a node (its threads pinned to the node's CPUs, its
// memory first touched there), so that each node's memory bandwidth
// serves the shard that runs on it.
package numa

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// DefaultRoot is where Linux describes the NUMA nodes.
const DefaultRoot = "/sys/devices/system/node"

// maxCPU bounds the CPU and node numbers a list may name (the kernel's
// own limit is 8192 CPUs), so that a bad file cannot make a huge list.
const maxCPU = 1 << 14

// maxFile bounds the bytes read from one sysfs file.
const maxFile = 64 << 10

// Node is one online NUMA node with CPUs.
type Node struct {
	ID   int
	CPUs []int // ascending
}

// Topology is the machine's online nodes that have CPUs, by ascending ID.
// A node with memory but no CPUs (a memory expander) runs no threads and
// is not in it.
type Topology struct {
	Nodes []Node
}

// ErrNoTopology is returned by Read where the OS describes no nodes (no
// sysfs node directory: not Linux, or a kernel without NUMA support).
var ErrNoTopology = errors.New("numa: the OS describes no NUMA nodes")

// Read returns the topology described under root (DefaultRoot on a real
// machine; tests pass a fake tree): the nodes listed in root/online (or,
// without that file, the nodeN directories), each with the CPUs of
// root/nodeN/cpulist.
func Read(root string) (Topology, error) {
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return Topology{}, fmt.Errorf("%w (%s)", ErrNoTopology, root)
	}
	var ids []int
	if s, err := readSmall(filepath.Join(root, "online")); err == nil {
		if ids, err = ParseList(s); err != nil {
			return Topology{}, fmt.Errorf("numa: %s: %w", filepath.Join(root, "online"), err)
		}
	} else if errors.Is(err, os.ErrNotExist) {
		ents, err := os.ReadDir(root)
		if err != nil {
			return Topology{}, fmt.Errorf("numa: %w", err)
		}
		for _, e := range ents {
			if id, ok := strings.CutPrefix(e.Name(), "node"); ok && e.IsDir() {
				if n, err := strconv.Atoi(id); err == nil && n >= 0 && n < maxCPU {
					ids = append(ids, n)
				}
			}
		}
		slices.Sort(ids)
	} else {
		return Topology{}, fmt.Errorf("numa: %w", err)
	}
	var t Topology
	for _, id := range ids {
		p := filepath.Join(root, fmt.Sprintf("node%d", id), "cpulist")
		s, err := readSmall(p)
		if err != nil {
			return Topology{}, fmt.Errorf("numa: node %d is online but: %w", id, err)
		}
		cpus, err := ParseList(s)
		if err != nil {
			return Topology{}, fmt.Errorf("numa: %s: %w", p, err)
		}
		if len(cpus) > 0 {
			t.Nodes = append(t.Nodes, Node{ID: id, CPUs: cpus})
		}
	}
	if len(t.Nodes) == 0 {
		return Topology{}, fmt.Errorf("%w with CPUs (%s)", ErrNoTopology, root)
	}
	return t, nil
}

func readSmall(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxFile {
		return "", fmt.Errorf("%s is over %d bytes", path, maxFile)
	}
	return string(b), nil
}

// ParseList parses the kernel's list format ("0-3,8-11", "0", "" for
// none; a trailing newline allowed) into ascending, distinct numbers.
func ParseList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := listNumber(lo)
		if err != nil {
			return nil, fmt.Errorf("bad list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = listNumber(hi); err != nil {
				return nil, fmt.Errorf("bad list %q: %w", s, err)
			}
			if b < a {
				return nil, fmt.Errorf("bad list %q: range %d-%d runs backwards", s, a, b)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func listNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if n >= maxCPU {
		return 0, fmt.Errorf("%d is past the largest number supported (%d)", n, maxCPU-1)
	}
	return n, nil
}

// Place is where one shard (or one thread) runs: a node and its CPUs.
type Place struct {
	Node int
	CPUs []int
}

// Plan places n shards (or a pool's n threads) on t's nodes round-robin:
// shard i on node i mod len(t.Nodes), in ID order, the node's whole CPU
// list its threads' affinity (the OS spreads them over it).
func (t Topology) Plan(n int) []Place {
	if len(t.Nodes) == 0 {
		return nil
	}
	out := make([]Place, n)
	for i := range out {
		nd := t.Nodes[i%len(t.Nodes)]
		out[i] = Place{Node: nd.ID, CPUs: nd.CPUs}
	}
	return out
}

// Setup returns the function each thread of a placed run calls first, on
// its own OS thread (locked to it): setup(i) pins the thread to the CPUs
// of plan[i mod len(plan)] and, if memory is set, prefers that node's
// memory for the pages it touches first. The first failure is passed to
// warn, once (a pinning the OS refuses leaves the thread where it was;
// the run goes on).
func Setup(plan []Place, memory bool, warn func(error)) func(i int) {
	var once sync.Once
	fail := func(err error) { once.Do(func() { warn(err) }) }
	return func(i int) {
		if len(plan) == 0 {
			return
		}
		p := plan[i%len(plan)]
		if err := Pin(p.CPUs); err != nil {
			fail(err)
		}
		if memory {
			if err := Prefer(p.Node); err != nil {
				fail(err)
			}
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/grok-go/grok/parallel"
)

// fakeNodes writes a sysfs node tree of the given cpulists (node i's at
// index i) and returns its root.
func fakeNodes(t *testing.T, cpulists ...string) string {
	root := t.TempDir()
	online := "0"
	if len(cpulists) > 1 {
		online = "0-" + string(rune('0'+len(cpulists)-1))
	}
	if err := os.WriteFile(filepath.Join(root, "online"), []byte(online+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, l := range cpulists {
		d := filepath.Join(root, "node"+string(rune('0'+i)))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cpulist"), []byte(l+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// --numa on one node, or without a topology, says so in one line and
// places nothing; on two it places shards round-robin, or, without --tp,
// pins the pool's workers.
func TestPlaceNUMA(t *testing.T) {
	var e strings.Builder
	if place := placeNUMA(filepath.Join(t.TempDir(), "none"), 2, parallel.Default(), &e); place != nil || !strings.Contains(e.String(), "describes no NUMA nodes") || strings.Count(e.String(), "\n") != 1 {
		t.Errorf("no topology: placement %v, stderr %q", place != nil, e.String())
	}
	e.Reset()
	if place := placeNUMA(fakeNodes(t, "0-1"), 2, parallel.Default(), &e); place != nil || e.String() != "--numa: this machine has one NUMA node (node 0): nothing to place\n" {
		t.Errorf("one node: placement %v, stderr %q", place != nil, e.String())
	}
	// Two fake nodes that both name CPU 0, which every machine has.
	two := fakeNodes(t, "0", "0")
	e.Reset()
	place := placeNUMA(two, 4, parallel.Default(), &e)
	if place == nil || !strings.Contains(e.String(), "shards 0→node 0, 1→node 1, 2→node 0, 3→node 1") {
		t.Errorf("two nodes, 4 shards: placement %v, stderr %q", place != nil, e.String())
	}
	e.Reset()
	p := parallel.New(3)
	defer p.Close()
	if place := placeNUMA(two, 1, p, &e); place != nil || !strings.Contains(e.String(), "2 worker threads spread over 2 NUMA nodes") {
		t.Errorf("two nodes, no --tp: placement %v, stderr %q", place != nil, e.String())
	}
	if runtime.GOOS == "linux" {
		var ran atomic.Int32
		p.ForAligned(64, 1, func(int, int, int) { ran.Add(1) })
		if ran.Load() == 0 || strings.Contains(e.String(), "refuses") {
			t.Errorf("the pinned pool ran %d ranges; stderr %q", ran.Load(), e.String())
		}
	}
}

// On this machine's real topology --numa runs, and says once what it did
// (here: one node, nothing placed), with --tp and without.
func TestNUMAFlag(t *testing.T) {
	for _, tp := range []string{"1", "2"} {
		o, e, code := grok(t, "run", "--numa", "--tp", tp, "--temp", "0", "-n", "4", "-q", "In the beginning")
		if code != 0 || o == "" {
			t.Fatalf("run --numa --tp %s: exit %d: %s", tp, code, e)
		}
		if n := strings.Count(e, "--numa:"); n != 1 {
			t.Errorf("run --numa --tp %s: %d --numa lines on stderr, want 1: %q", tp, n, e)
		}
	}
}

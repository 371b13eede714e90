package numa

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		err  string
	}{
		{"", nil, ""},
		{"\n", nil, ""},
		{"0", []int{0}, ""},
		{"0-3\n", []int{0, 1, 2, 3}, ""},
		{"0-3,8-11", []int{0, 1, 2, 3, 8, 9, 10, 11}, ""},
		{"8-9,0,4", []int{0, 4, 8, 9}, ""},
		{"0-2,1-3", []int{0, 1, 2, 3}, ""},
		{"3-1", nil, "backwards"},
		{"a", nil, "not a number"},
		{"1,,2", nil, "not a number"},
		{"-1", nil, "not a number"},
		{"0-", nil, "not a number"},
		{"0-99999999", nil, "past the largest"},
	} {
		got, err := ParseList(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseList(%q) = %v, %v; want an error with %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// fakeTree writes a sysfs-like node directory: files maps a path under
// the root to its contents.
func fakeTree(t *testing.T, files map[string]string) string {
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestRead(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  []Node
		err   string
	}{
		{"one node", map[string]string{"online": "0\n", "node0/cpulist": "0-1\n"}, []Node{{0, []int{0, 1}}}, ""},
		{"two sockets", map[string]string{"online": "0-1\n", "node0/cpulist": "0-3,8-11\n", "node1/cpulist": "4-7,12-15\n"},
			[]Node{{0, []int{0, 1, 2, 3, 8, 9, 10, 11}}, {1, []int{4, 5, 6, 7, 12, 13, 14, 15}}}, ""},
		{"an offline node is left out", map[string]string{"online": "0,2\n", "node0/cpulist": "0-1\n", "node1/cpulist": "2-3\n", "node2/cpulist": "4-5\n"},
			[]Node{{0, []int{0, 1}}, {2, []int{4, 5}}}, ""},
		{"a memory-only node is left out", map[string]string{"online": "0-1\n", "node0/cpulist": "0-3\n", "node1/cpulist": "\n"},
			[]Node{{0, []int{0, 1, 2, 3}}}, ""},
		{"no online file: the node directories", map[string]string{"node1/cpulist": "2-3\n", "node0/cpulist": "0-1\n", "nodeX/cpulist": "9\n"},
			[]Node{{0, []int{0, 1}}, {1, []int{2, 3}}}, ""},
		{"an online node without its cpulist", map[string]string{"online": "0-1\n", "node0/cpulist": "0\n"}, nil, "node 1 is online"},
		{"a bad cpulist", map[string]string{"online": "0\n", "node0/cpulist": "0-x\n"}, nil, "not a number"},
		{"a bad online list", map[string]string{"online": "zero\n"}, nil, "not a number"},
		{"no node with CPUs", map[string]string{"online": "0\n", "node0/cpulist": "\n"}, nil, "describes no NUMA nodes"},
	} {
		topo, err := Read(fakeTree(t, c.files))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: Read = %v, %v; want an error with %q", c.name, topo, err, c.err)
			}
			continue
		}
		if err != nil || !slices.EqualFunc(topo.Nodes, c.want, func(a, b Node) bool { return a.ID == b.ID && slices.Equal(a.CPUs, b.CPUs) }) {
			t.Errorf("%s: Read = %v, %v; want %v", c.name, topo.Nodes, err, c.want)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrNoTopology) {
		t.Errorf("Read of a missing directory: %v, want ErrNoTopology", err)
	}
}

func TestPlan(t *testing.T) {
	two := Topology{Nodes: []Node{{0, []int{0, 1}}, {1, []int{2, 3}}}}
	four := Topology{Nodes: []Node{{0, []int{0}}, {1, []int{1}}, {2, []int{2}}, {3, []int{3}}}}
	gappy := Topology{Nodes: []Node{{0, []int{0, 1}}, {3, []int{6, 7}}}}
	for _, c := range []struct {
		name  string
		topo  Topology
		n     int
		nodes []int
	}{
		{"one node, 4 shards", Topology{Nodes: []Node{{0, []int{0, 1}}}}, 4, []int{0, 0, 0, 0}},
		{"two nodes, 2 shards", two, 2, []int{0, 1}},
		{"two nodes, 4 shards", two, 4, []int{0, 1, 0, 1}},
		{"two nodes, 3 shards", two, 3, []int{0, 1, 0}},
		{"four nodes, 2 shards", four, 2, []int{0, 1}},
		{"nodes 0 and 3", gappy, 4, []int{0, 3, 0, 3}},
		{"no nodes", Topology{}, 2, nil},
	} {
		plan := c.topo.Plan(c.n)
		var got []int
		for i, p := range plan {
			got = append(got, p.Node)
			want := c.topo.Nodes[i%len(c.topo.Nodes)].CPUs
			if !slices.Equal(p.CPUs, want) {
				t.Errorf("%s: shard %d on CPUs %v, want node %d's %v", c.name, i, p.CPUs, p.Node, want)
			}
		}
		if !slices.Equal(got, c.nodes) {
			t.Errorf("%s: shards on nodes %v, want %v", c.name, got, c.nodes)
		}
	}
}

// A real pinning: a locked thread pinned to CPU 0 reads back CPU 0 only.
// It runs on a goroutine of its own that exits locked, so its thread, with
// its narrowed affinity, ends with it.
func TestPinThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("pinning is Linux's")
	}
	type result struct {
		before, after []int
		err           error
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread()
		var r result
		if r.before, r.err = ThreadCPUs(); r.err == nil {
			if r.err = Pin([]int{0}); r.err == nil {
				r.after, r.err = ThreadCPUs()
			}
		}
		done <- r
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !slices.Contains(r.before, 0) {
		t.Skipf("this process may not run on CPU 0 (affinity %v)", r.before)
	}
	if !slices.Equal(r.after, []int{0}) {
		t.Errorf("after pinning to CPU 0 the thread's affinity is %v (was %v)", r.after, r.before)
	}
	if err := Pin([]int{1 << 20}); err == nil {
		t.Error("a CPU past the mask was accepted")
	}
}

// Setup pins its thread to the plan's CPUs and prefers the node's memory
// (node 0 exists everywhere Linux runs); a refusal reaches warn once.
func TestSetup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("pinning is Linux's")
	}
	var warned []error
	warn := func(err error) { warned = append(warned, err) }
	done := make(chan []int)
	go func() {
		runtime.LockOSThread()
		Setup([]Place{{Node: 0, CPUs: []int{0}}}, true, warn)(0)
		cpus, _ := ThreadCPUs()
		// A node past the mask: both calls fail, one warning.
		bad := Setup([]Place{{Node: 1 << 20, CPUs: []int{1 << 20}}}, true, warn)
		bad(0)
		bad(1)
		done <- cpus
	}()
	if cpus := <-done; !slices.Equal(cpus, []int{0}) {
		t.Errorf("Setup left the thread on CPUs %v, want [0]", cpus)
	}
	if len(warned) != 1 {
		t.Errorf("%d warnings for a plan the OS refuses, want 1: %v", len(warned), warned)
	}
}

func TestTouch(t *testing.T) {
	b := make([]byte, 3*PageSize+5)
	for i := range b {
		b[i] = 1
	}
	if got := Touch(b); got != 5 { // pages 0..3 and the last byte
		t.Errorf("Touch read %d bytes of 1, want 5", got)
	}
	TouchWrite(b)
	for i, v := range b {
		if v != 1 {
			t.Fatalf("TouchWrite changed byte %d to %d", i, v)
		}
	}
	Touch(nil)
	TouchWrite(nil)
}

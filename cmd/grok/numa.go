package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/grok-go/grok/internal/numa"
	"github.com/grok-go/grok/parallel"
)

const numaHelp = "on a machine of several NUMA nodes: with --tp N, run shard i on node i mod nodes (its threads pinned to the node's CPUs, its weights' pages, KV memory and scratch first touched there); without --tp, spread the thread pool's workers over the nodes round-robin, as llama.cpp's --numa distribute; on one node it says so and does nothing"

// numaRoot is where --numa reads the topology (tests point it at a fake
// tree).
var numaRoot = numa.DefaultRoot

// placeNUMA applies --numa for a run of shards shards on pool, writing one
// line to stderr about what it does: it returns the shards' placement
// (loader.Options.Place) for shards > 1; for one, it pins pool's workers
// round-robin over the nodes and returns nil. On one node, or where the
// OS describes none, it only says so.
func placeNUMA(root string, shards int, pool *parallel.Pool, stderr io.Writer) func(int) {
	topo, err := numa.Read(root)
	if err != nil {
		fmt.Fprintf(stderr, "--numa: %v: nothing placed\n", err)
		return nil
	}
	if len(topo.Nodes) == 1 {
		fmt.Fprintf(stderr, "--numa: this machine has one NUMA node (node %d): nothing to place\n", topo.Nodes[0].ID)
		return nil
	}
	warn := func(err error) {
		fmt.Fprintf(stderr, "--numa: %v (a thread the OS refuses to pin runs where it was)\n", err)
	}
	if shards <= 1 {
		// llama.cpp's --numa distribute: worker i on node i mod nodes.
		// The weights are shared by every thread, so their pages are left
		// where they fall; the caller's own thread (worker 0) is left too.
		pool.SetWorkerSetup(numa.Setup(topo.Plan(len(topo.Nodes)), false, warn))
		fmt.Fprintf(stderr, "--numa: the pool's %d worker threads spread over %d NUMA nodes round-robin (the caller's thread and the memory left as they are)\n", pool.Threads()-1, len(topo.Nodes))
		return nil
	}
	plan := topo.Plan(shards)
	var on []string
	for i, p := range plan {
		on = append(on, fmt.Sprintf("%d→node %d", i, p.Node))
	}
	note := ""
	if shards < len(topo.Nodes) {
		note = fmt.Sprintf("; %d of the %d nodes unused", len(topo.Nodes)-shards, len(topo.Nodes))
	}
	fmt.Fprintf(stderr, "--numa: shards %s (threads pinned to the node's CPUs, memory first touched there%s)\n", strings.Join(on, ", "), note)
	return numa.Setup(plan, true, warn)
}

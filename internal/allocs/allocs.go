// Package allocs counts the heap allocations a piece of code makes, exactly
// (not averaged as testing.AllocsPerRun does, whose rounding hides a few
// per loop), leaving out those the runtime makes for its own background
// work: a GC's mark workers, the scavenger's timer, a new thread. Those
// come at a GC's whim, not from the code measured, and a test that counted
// them would fail by chance.
package allocs

import (
	"fmt"
	"runtime"
	"strings"
)

// Count runs f with every allocation recorded and returns how many heap
// objects were allocated while it ran, the runtime's own background
// allocations left out, and a description of where the counted ones were
// made (at most a few stacks). Other goroutines' allocations while f runs
// are counted too: call it when only the code measured runs.
func Count(f func()) (n uint64, where string) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()

	runtime.GC() // publishes the profile of everything allocated so far
	before := snapshot()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	if m1.Mallocs == m0.Mallocs {
		return 0, ""
	}
	runtime.GC()
	after := snapshot()
	var b strings.Builder
	shown := 0
	for k, a := range after {
		d := a.objects - before[k].objects
		if d <= 0 || a.runtimeOwn {
			continue
		}
		n += uint64(d)
		if shown < 4 {
			shown++
			fmt.Fprintf(&b, "%d allocation(s) at:\n%s", d, a.stack)
		}
	}
	return n, b.String()
}

type record struct {
	objects    int64
	runtimeOwn bool
	stack      string
}

// snapshot returns the allocation profile by stack.
func snapshot() map[[32]uintptr]record {
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	out := make(map[[32]uintptr]record, len(recs))
	for _, r := range recs {
		own, stack := describe(r.Stack())
		out[r.Stack0] = record{objects: r.AllocObjects, runtimeOwn: own, stack: stack}
	}
	return out
}

// describe reports whether a stack is the runtime's own or this
// package's (no frame of another package on it, or a frame of snapshot's)
// and formats it. A stack of runtime frames only is a runtime goroutine's
// or a system stack's (a new thread, a goroutine record, a GC's work); an
// allocation the code measured caused, such as a sudog for a goroutine
// that parks, has that code's frames on its stack.
func describe(pcs []uintptr) (own bool, stack string) {
	var b strings.Builder
	frames := runtime.CallersFrames(pcs)
	onlyRuntime, mine := true, false
	for {
		fr, more := frames.Next()
		if !strings.HasPrefix(fr.Function, "runtime.") {
			onlyRuntime = false
		}
		if strings.HasSuffix(fr.Function, "internal/allocs.snapshot") {
			mine = true
		}
		fmt.Fprintf(&b, "\t%s\n", fr.Function)
		if !more {
			break
		}
	}
	return onlyRuntime || mine, b.String()
}

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

// Site is where some of the counted allocations were made.
type Site struct {
	Objects int64
	Stack   []string // function names, innermost first
}

// Has reports whether a function whose name contains sub is on the stack.
func (s Site) Has(sub string) bool {
	for _, f := range s.Stack {
		if strings.Contains(f, sub) {
			return true
		}
	}
	return false
}

// Sites is the counted allocations of a run, by stack.
type Sites []Site

// Total is the number of objects allocated.
func (ss Sites) Total() int64 {
	var n int64
	for _, s := range ss {
		n += s.Objects
	}
	return n
}

// String lists the first few sites.
func (ss Sites) String() string {
	var b strings.Builder
	for i, s := range ss {
		if i == 4 {
			fmt.Fprintf(&b, "and %d more sites\n", len(ss)-i)
			break
		}
		fmt.Fprintf(&b, "%d allocation(s) at:\n\t%s\n", s.Objects, strings.Join(s.Stack, "\n\t"))
	}
	return b.String()
}

// Count runs f with every allocation recorded and returns the heap
// objects allocated while it ran, by stack, the runtime's own background
// allocations left out. Other goroutines' allocations while f runs are
// counted too: call it when only the code measured runs.
func Count(f func()) Sites {
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
		return nil
	}
	runtime.GC()
	var out Sites
	for k, a := range snapshot() {
		if d := a.objects - before[k].objects; d > 0 && !a.runtimeOwn {
			out = append(out, Site{Objects: d, Stack: a.stack})
		}
	}
	return out
}

type record struct {
	objects    int64
	runtimeOwn bool
	stack      []string
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
func describe(pcs []uintptr) (own bool, stack []string) {
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
		stack = append(stack, fr.Function)
		if !more {
			break
		}
	}
	return onlyRuntime || mine, stack
}

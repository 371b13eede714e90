package main

import (
	"math"
	"strings"
	"testing"

	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/runner"
)

// A model declaring a context larger than memory: run and serve cap the
// default context with a note, and refuse an explicit one naming the flag.
func TestContextLargerThanMemory(t *testing.T) {
	m, err := loader.Open(tiny, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Config.SequenceLen = math.MaxInt32
	var notes []string
	note := func(s string) { notes = append(notes, s) }

	_, err = newEngine(m, nil, runner.Options{Slots: 1, Context: math.MaxInt32, MemoryLimit: 1 << 30}, "-c", note)
	if err == nil || !strings.Contains(err.Error(), "lower the context with -c") || !strings.Contains(err.Error(), "GB") {
		t.Errorf("explicit context: %v, want an error naming -c", err)
	}
	eng, err := newEngine(m, nil, runner.Options{Slots: 2, MemoryLimit: 8 << 20}, "--ctx", note)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if eng.Context() >= math.MaxInt32 || eng.Context() < 1 {
		t.Errorf("default context %d", eng.Context())
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "does not fit in memory") || !strings.Contains(notes[0], "--ctx") {
		t.Errorf("notes %q, want one saying the context was capped, naming --ctx", notes)
	}
}

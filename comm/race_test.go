//go:build race

package comm

// raceEnabled reports a -race build, whose instrumentation allocates.
const raceEnabled = true

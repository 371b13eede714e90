//go:build race

package park

// raceEnabled reports a -race build, whose instrumentation allocates.
const raceEnabled = true

//go:build race

package parallel

// raceEnabled reports a -race build, whose instrumentation allocates.
const raceEnabled = true

//go:build race

package model_test

// raceEnabled reports a -race build, in which sync.Pool drops objects at
// random and allocation counts mean nothing.
const raceEnabled = true

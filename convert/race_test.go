//go:build race

package convert

// raceEnabled lets slow tests that exercise no concurrency skip under the
// race detector, which makes them ten times slower.
const raceEnabled = true

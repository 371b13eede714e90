//go:build race

package server

// The race detector makes the model's arithmetic about ten times slower,
// so the heaviest tests do less work under it.
const (
	raceEnabled  = true
	loadRequests = 64 // requests TestLoad sends (500 without -race)
	loadPrompts  = 2  // distinct prompts in TestLoad
)

//go:build !race

package server

// See race_on_test.go.
const (
	raceEnabled  = false
	loadRequests = 500 // requests TestLoad sends
	loadPrompts  = 8   // distinct prompts in TestLoad
)

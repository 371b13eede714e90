//go:build !linux

package numa

import "errors"

var errUnsupported = errors.New("numa: thread and memory placement needs Linux")

// Pin is Linux's only; elsewhere it fails.
func Pin(cpus []int) error { return errUnsupported }

// ThreadCPUs is Linux's only; elsewhere it fails.
func ThreadCPUs() ([]int, error) { return nil, errUnsupported }

// Prefer is Linux's only; elsewhere it fails.
func Prefer(node int) error { return errUnsupported }

//go:build unix

package park

import (
	"errors"
	"syscall"
)

// isRetry reports an interrupted read or write, which is tried again.
func isRetry(err error) bool {
	return errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN)
}

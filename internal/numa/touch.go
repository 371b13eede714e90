package numa

import "os"

// PageSize is the size Touch steps by.
var PageSize = os.Getpagesize()

// Touch reads one byte of every page of b, so that pages not yet present
// (a mapped file's, not yet in the page cache) are faulted in now, by this
// thread and under its memory policy. Pages already present stay where
// they are.
//
//go:noinline
func Touch(b []byte) (sum byte) {
	for i := 0; i < len(b); i += PageSize {
		sum += b[i]
	}
	if len(b) > 0 {
		sum += b[len(b)-1]
	}
	return sum
}

// zero is 0, in a variable so that the compiler keeps TouchWrite's stores.
var zero byte

// TouchWrite writes every page of b with what it holds, so that anonymous
// memory the allocator has not yet touched (which a read would map to the
// shared zero page) gets pages of its own, placed by this thread's policy.
// Nothing else may use b meanwhile.
func TouchWrite(b []byte) {
	for i := 0; i < len(b); i += PageSize {
		b[i] += zero
	}
	if len(b) > 0 {
		b[len(b)-1] += zero
	}
}

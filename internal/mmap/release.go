package mmap

import (
	"sync"
	"unsafe"
)

// The mappings Map made and has not unmapped, so that Release touches only
// file pages: dropping the pages of anonymous memory would zero them.
var (
	regionsMu sync.Mutex
	regions   = map[uintptr]uintptr{} // start → end
)

func register(b []byte) {
	if len(b) == 0 {
		return
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	regionsMu.Lock()
	regions[lo] = lo + uintptr(len(b))
	regionsMu.Unlock()
}

func unregister(b []byte) {
	if len(b) == 0 {
		return
	}
	regionsMu.Lock()
	delete(regions, uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	regionsMu.Unlock()
}

// Mapped reports whether b lies within a mapping made by Map (on systems
// where Map maps; elsewhere never).
func Mapped(b []byte) bool {
	if len(b) == 0 || !mapsFiles {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	hi := lo + uintptr(len(b))
	regionsMu.Lock()
	defer regionsMu.Unlock()
	for s, e := range regions {
		if lo >= s && hi <= e {
			return true
		}
	}
	return false
}

// Release tells the OS that this process will not read the whole pages
// within b again soon: they leave its resident set, and a later read
// fetches them again from the page cache or the file. It does nothing
// unless b lies within a mapping made by Map (Mapped).
func Release(b []byte) {
	if !Mapped(b) {
		return
	}
	page := uintptr(pageSize)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := int((start+page-1)&^(page-1) - start)          // first whole page
	hi := int((start+uintptr(len(b)))&^(page-1) - start) // end of the last
	if hi <= lo {
		return
	}
	dropPages(b[lo:hi])
}

package park

import (
	"encoding/binary"
	"os"

	"golang.org/x/sys/unix"
)

// sem is a wake-up token an eventfd holds. Its descriptor is non-blocking,
// so os.File reads it through the runtime's poller: a read that finds no
// token parks the goroutine until a write makes the descriptor readable.
type sem struct {
	f    *os.File
	ch   chan struct{} // the fallback when there is no eventfd
	rbuf [8]byte
	one  [8]byte
}

func (s *sem) init() {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		s.ch = make(chan struct{}, 1)
		return
	}
	s.f = os.NewFile(uintptr(fd), "park")
	binary.NativeEndian.PutUint64(s.one[:], 1)
}

func (s *sem) wait() {
	if s.f == nil {
		<-s.ch
		return
	}
	for {
		// A read returns the tokens posted (one, as Wake posts) and
		// clears the count.
		if n, err := s.f.Read(s.rbuf[:]); n == 8 || err != nil && !isRetry(err) {
			return
		}
	}
}

func (s *sem) post() {
	if s.f == nil {
		s.ch <- struct{}{}
		return
	}
	for {
		// A write fails only when the count would overflow, which one
		// token per sleep never reaches.
		if n, err := s.f.Write(s.one[:]); n == 8 || err != nil && !isRetry(err) {
			return
		}
	}
}

func (s *sem) close() {
	if s.f != nil {
		s.f.Close()
	}
}

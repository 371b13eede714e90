//go:build unix && !linux

package park

import "os"

// sem is a wake-up token a pipe holds. os.Pipe's descriptors are
// non-blocking and read through the runtime's poller: a read that finds
// no byte parks the goroutine until a write makes the pipe readable.
type sem struct {
	r, w *os.File
	ch   chan struct{} // the fallback when there is no pipe
	rbuf [1]byte
	one  [1]byte
}

func (s *sem) init() {
	r, w, err := os.Pipe()
	if err != nil {
		s.ch = make(chan struct{}, 1)
		return
	}
	s.r, s.w = r, w
	s.one[0] = 1
}

func (s *sem) wait() {
	if s.r == nil {
		<-s.ch
		return
	}
	for {
		if n, err := s.r.Read(s.rbuf[:]); n == 1 || err != nil && !isRetry(err) {
			return
		}
	}
}

func (s *sem) post() {
	if s.r == nil {
		s.ch <- struct{}{}
		return
	}
	for {
		if n, err := s.w.Write(s.one[:]); n == 1 || err != nil && !isRetry(err) {
			return
		}
	}
}

func (s *sem) close() {
	if s.r != nil {
		s.r.Close()
		s.w.Close()
	}
}

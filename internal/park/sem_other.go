//go:build !unix

package park

// sem is a wake-up token on a channel where there is no pollable
// descriptor to sleep on: a sleep then takes a runtime sudog, which may
// allocate.
type sem struct{ ch chan struct{} }

func (s *sem) init()  { s.ch = make(chan struct{}, 1) }
func (s *sem) wait()  { <-s.ch }
func (s *sem) post()  { s.ch <- struct{}{} }
func (s *sem) close() {}

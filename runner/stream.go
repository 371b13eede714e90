package runner

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grok-go/grok/sampler"
	"github.com/grok-go/grok/tokenizer"
)

// Stream is a submitted request. Recv returns its events in order.
type Stream struct {
	req    Request
	ctx    context.Context
	cancel atomic.Bool

	mu     sync.Mutex
	events []Event
	notify chan struct{}
	ended  bool // the final event has been queued

	// Owned by the engine loop.
	slot int
	// feed is the tokens to put in memory before sampling: the prompt,
	// or after a preemption all of history; fed of them are in.
	feed      []int
	fed       int
	fedAll    bool  // this step feeds the last of feed
	last      int   // the token to feed next (after the feed)
	order     int64 // admission order, for preemption (newest first)
	resumed   bool  // preempted once: the usage's cache and queue figures stay the first admission's
	generated []int
	history   []int
	smp       *sampler.Sampler
	dec       tokenizer.TextDecoder
	stop      stopMatcher
	usage     Usage
	submitted time.Time
	started   time.Time
	firstTok  time.Time
}

// Recv waits for the next event. After the Done event it returns io.EOF.
func (s *Stream) Recv(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if len(s.events) > 0 {
			ev := s.events[0]
			s.events[0] = Event{}
			s.events = s.events[1:]
			s.mu.Unlock()
			return ev, nil
		}
		ended := s.ended
		s.mu.Unlock()
		if ended {
			return Event{}, io.EOF
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Cancel asks the engine to stop the request; its slot is freed at the next step.
func (s *Stream) Cancel() { s.cancel.Store(true) }

func (s *Stream) push(ev Event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	if ev.Done {
		s.ended = true
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *Stream) cancelled() bool { return s.cancel.Load() || s.ctx.Err() != nil }

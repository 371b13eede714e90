package comm

import (
	"sync/atomic"
	"time"
)

// Counting wraps a Comm and counts its collectives: how many, the bytes
// of their buffers, and the time spent in them (waiting for the other
// ranks included: that is what a collective costs the caller). Its
// counters may be read while the endpoint is in use.
type Counting struct {
	Comm
	calls, bytes, nanos atomic.Int64
}

// Stats are a Counting's totals since it was made or last Reset.
type Stats struct {
	// Calls counts AllReduceSum, AllGather and Bcast calls (Barrier and
	// Abort are not collectives of the forward pass).
	Calls int64
	// Bytes is the payload of those calls on this rank: the buffer of an
	// AllReduceSum or Bcast, the gathered result of an AllGather. (What
	// crosses a network depends on the algorithm: a ring all-reduce sends
	// about twice the payload.)
	Bytes int64
	// Time is the wall time spent inside them.
	Time time.Duration
}

// NewCounting returns c wrapped in a Counting.
func NewCounting(c Comm) *Counting { return &Counting{Comm: c} }

// Stats returns the totals so far.
func (c *Counting) Stats() Stats {
	return Stats{Calls: c.calls.Load(), Bytes: c.bytes.Load(), Time: time.Duration(c.nanos.Load())}
}

// Reset zeroes the totals.
func (c *Counting) Reset() {
	c.calls.Store(0)
	c.bytes.Store(0)
	c.nanos.Store(0)
}

func (c *Counting) count(bytes int, t0 time.Time) {
	c.nanos.Add(int64(time.Since(t0)))
	c.calls.Add(1)
	c.bytes.Add(int64(bytes))
}

// AllReduceSum counts Comm.AllReduceSum.
func (c *Counting) AllReduceSum(buf []float32) error {
	t0 := time.Now()
	err := c.Comm.AllReduceSum(buf)
	c.count(4*len(buf), t0)
	return err
}

// AllGather counts Comm.AllGather.
func (c *Counting) AllGather(dst, src []float32) error {
	t0 := time.Now()
	err := c.Comm.AllGather(dst, src)
	c.count(4*len(dst), t0)
	return err
}

// Bcast counts Comm.Bcast.
func (c *Counting) Bcast(buf []byte, root int) error {
	t0 := time.Now()
	err := c.Comm.Bcast(buf, root)
	c.count(len(buf), t0)
	return err
}

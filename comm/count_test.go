package comm

import "testing"

// Counting passes every call through and counts the collectives and their
// payload bytes on its rank.
func TestCounting(t *testing.T) {
	cs, err := NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	counted := []*Counting{NewCounting(cs[0]), NewCounting(cs[1])}
	errs := make(chan error, 2)
	sums := make([][]float32, 2)
	for r, c := range counted {
		go func() {
			buf := []float32{float32(r + 1), 10}
			if err := c.AllReduceSum(buf); err != nil {
				errs <- err
				return
			}
			sums[r] = buf
			dst := make([]float32, 6)
			if err := c.AllGather(dst, []float32{1, 2, 3}); err != nil {
				errs <- err
				return
			}
			if err := c.Bcast(make([]byte, 5), 0); err != nil {
				errs <- err
				return
			}
			errs <- c.Barrier()
		}()
	}
	for range counted {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for r, c := range counted {
		if sums[r][0] != 3 || sums[r][1] != 20 {
			t.Errorf("rank %d: sum %v", r, sums[r])
		}
		s := c.Stats()
		if s.Calls != 3 || s.Bytes != 4*2+4*6+5 || s.Time < 0 {
			t.Errorf("rank %d: %+v, want 3 calls of 37 bytes", r, s)
		}
		c.Reset()
		if s := c.Stats(); s != (Stats{}) {
			t.Errorf("after Reset: %+v", s)
		}
	}
}

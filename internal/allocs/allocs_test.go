package allocs

import "testing"

var sink []byte

func allocTwice() {
	sink = make([]byte, 100)
	sink = make([]byte, 200)
}

// Count sees each allocation, with the stack it came from, and none where
// there is none.
func TestCount(t *testing.T) {
	if s := Count(func() {}); s.Total() != 0 {
		t.Errorf("nothing allocated %d objects:\n%s", s.Total(), s)
	}
	s := Count(allocTwice)
	if s.Total() != 2 {
		t.Errorf("two makes counted %d objects:\n%s", s.Total(), s)
	}
	for _, site := range s {
		if !site.Has("allocs.allocTwice") {
			t.Errorf("a site without the allocating function:\n%s", Sites{site})
		}
	}
}

package runner

import (
	"strings"
	"testing"
)

func TestStopMatcher(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stops   []string
		chunks  []string
		want    string
		stopped bool
	}{
		{"no stops", nil, []string{"a", "b"}, "ab", false},
		{"whole chunk", []string{"END"}, []string{"abc", "END", "x"}, "abc", true},
		{"split over chunks", []string{"END"}, []string{"abE", "N", "Dzz"}, "ab", true},
		{"false start released", []string{"END"}, []string{"abE", "Nx", "y"}, "abENxy", false},
		{"earliest of two", []string{"yy", "x"}, []string{"ayyx"}, "a", true},
		{"stop at start", []string{"\n"}, []string{"\nabc"}, "", true},
		{"prefix kept until end", []string{"###"}, []string{"a#", "#"}, "a##", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := stopMatcher{stops: tc.stops}
			var out strings.Builder
			stopped := false
			for _, c := range tc.chunks {
				r, s := m.push(c)
				out.WriteString(r)
				if s {
					stopped = true
					break
				}
				for _, st := range tc.stops {
					if strings.Contains(out.String(), st) {
						t.Fatalf("released text %q contains stop %q", out.String(), st)
					}
				}
			}
			if !stopped {
				out.WriteString(m.flush())
			}
			if out.String() != tc.want || stopped != tc.stopped {
				t.Errorf("got %q stopped=%v, want %q stopped=%v", out.String(), stopped, tc.want, tc.stopped)
			}
		})
	}
}

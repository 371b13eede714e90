package runner

import "strings"

// stopMatcher holds back generated text that might be the start of a stop
// string, so that a stop string is never streamed to the client, even when
// it arrives split over several tokens.
type stopMatcher struct {
	stops   []string
	pending string
}

// push adds text and returns what can be released now, and whether a stop
// string was found (the text released then ends just before it).
func (m *stopMatcher) push(text string) (release string, stopped bool) {
	if len(m.stops) == 0 {
		return text, false
	}
	m.pending += text
	first := -1
	for _, s := range m.stops {
		if i := strings.Index(m.pending, s); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		release, m.pending = m.pending[:first], ""
		return release, true
	}
	// Keep the longest suffix that is a proper prefix of some stop string.
	keep := 0
	for _, s := range m.stops {
		for k := min(len(s)-1, len(m.pending)); k > keep; k-- {
			if strings.HasSuffix(m.pending, s[:k]) {
				keep = k
				break
			}
		}
	}
	release = m.pending[:len(m.pending)-keep]
	m.pending = m.pending[len(m.pending)-keep:]
	return release, false
}

// flush releases whatever is held back (the sequence ended without a stop).
func (m *stopMatcher) flush() string {
	s := m.pending
	m.pending = ""
	return s
}

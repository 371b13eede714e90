package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer of Grok-2 (xAI's word_split "V1") is the regular
// expression
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// applied with tiktoken's find_iter (fancy-regex: leftmost-first
// alternation with backtracking). Go's regexp has no lookahead, so
// splitter is that expression written out by hand. Character classes are
// those of Rust's regex crate, which tiktoken uses: \p{L} and \p{N} are
// the Unicode general categories (Go's unicode tables), \s is the
// White_Space property (unicode.IsSpace), and (?i) folds case with simple
// case folding, so 's also matches 'S and 'ſ (U+017F). A byte that is not
// part of valid UTF-8 (which Rust's &str cannot hold) counts as one
// character that is neither letter, number nor space, like U+FFFD; it is
// kept as it is, so the byte-level BPE still encodes the input exactly.

// Character classes of the scanner.
const (
	clsOther  = iota // not a letter, number or space
	clsLetter        // \p{L}
	clsNumber        // \p{N}
	clsSpace         // \s other than \r and \n
	clsCRLF          // \r or \n
)

// asciiClass is the class of each ASCII byte.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		switch {
		case c == '\r' || c == '\n':
			t[c] = clsCRLF
		case c == ' ' || (c >= '\t' && c <= '\f'):
			t[c] = clsSpace
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			t[c] = clsLetter
		case c >= '0' && c <= '9':
			t[c] = clsNumber
		default:
			t[c] = clsOther
		}
	}
	return t
}()

// charAt returns the class and byte length of the character at s[i]
// (i < len(s)).
func charAt(s string, i int) (cls uint8, n int) {
	c := s[i]
	if c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && n == 1:
		return clsOther, 1
	case unicode.IsLetter(r):
		return clsLetter, n
	case unicode.IsNumber(r):
		return clsNumber, n
	case unicode.IsSpace(r):
		return clsSpace, n
	}
	return clsOther, n
}

// splitter is the pre-tokenizer: a V1-style pattern whose number
// alternative is \p{N}{1,maxDigits} (1 for Grok-2).
type splitter struct {
	maxDigits int
	// noLookahead drops the \s+(?!\S) alternative; only tests use it, to
	// compare the rest with Go's regexp.
	noLookahead bool
}

// next returns the end of the piece that starts at s[i] (i < len(s)). The
// expression matches at every position, so pieces tile the text.
func (sp *splitter) next(s string, i int) int {
	cls, n := charAt(s, i)
	switch cls {
	case clsLetter: // [^\r\n\p{L}\p{N}]? takes nothing, then \p{L}+
		return scanClass(s, i+n, clsLetter)
	case clsNumber: // \p{N}{1,maxDigits}
		j := i + n
		for k := 1; k < sp.maxDigits && j < len(s); k++ {
			c, m := charAt(s, j)
			if c != clsNumber {
				break
			}
			j += m
		}
		return j
	case clsCRLF:
		return sp.spaces(s, i)
	}
	if s[i] == '\'' {
		if m := contraction(s[i+1:]); m > 0 {
			return i + 1 + m
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ with one leading character.
	j := i + n
	var next uint8 = 0xff
	if j < len(s) {
		next, _ = charAt(s, j)
	}
	if next == clsLetter {
		return scanClass(s, j, clsLetter)
	}
	if cls == clsOther || (s[i] == ' ' && next == clsOther) {
		//  ?[^\s\p{L}\p{N}]+[\r\n]*
		if cls != clsOther {
			i++
		}
		j = scanClass(s, i, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	return sp.spaces(s, i)
}

// spaces matches \s*[\r\n]+|\s+(?!\S)|\s+ at a space s[i].
func (sp *splitter) spaces(s string, i int) int {
	// The run of spaces, its last \r or \n, and where its last character
	// starts.
	end, lastCRLF, last := i, -1, i
	for end < len(s) {
		c, m := charAt(s, end)
		if c != clsSpace && c != clsCRLF {
			break
		}
		if c == clsCRLF {
			lastCRLF = end
		}
		last = end
		end += m
	}
	switch {
	case lastCRLF >= 0: // \s* backs off to the last \r or \n
		return lastCRLF + 1
	case end == len(s) || sp.noLookahead: // \s+(?!\S) at the end, or \s+
		return end
	case last > i: // \s+(?!\S) leaves the last space for the next piece
		return last
	}
	return end // \s+: one space before a non-space
}

// scanClass returns the end of the run of characters of class cls that
// starts at s[i].
func scanClass(s string, i int, cls uint8) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiClass[c] != cls {
				return i
			}
			i++
			continue
		}
		c, m := charAt(s, i)
		if c != cls {
			return i
		}
		i += m
	}
	return i
}

// contraction returns the length of the contraction suffix that follows
// an apostrophe: (?i:s|t|re|ve|m|ll|d), or 0.
func contraction(s string) int {
	if len(s) == 0 {
		return 0
	}
	lower := func(k int) byte {
		if k < len(s) {
			return s[k] | 0x20
		}
		return 0
	}
	switch lower(0) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	if len(s) >= 2 && s[0] == 0xc5 && s[1] == 0xbf { // ſ folds to s
		return 2
	}
	return 0
}

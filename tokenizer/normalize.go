package tokenizer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"
)

// spaceSymbol is U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's kSpaceSymbol,
// which stands for a space inside pieces.
const spaceSymbol = "\u2581"

// replacementChar is what SentencePiece's normalizer puts in place of each
// byte that does not start a valid UTF-8 sequence.
const replacementChar = "\uFFFD"

// oneCharLen is SentencePiece's string_util::OneCharLen: the length of a
// UTF-8 sequence judged by its first byte alone. The model splits the
// normalized text into initial symbols with it (clamped to the text end).
func oneCharLen(b byte) int {
	return int("\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x02\x02\x03\x04"[b>>4])
}

// charLenAt is oneCharLen clamped to the end of s, as PrefixMatcher does
// with std::min(w.size(), OneCharLen(w.data())).
func charLenAt(s string, i int) int {
	n := oneCharLen(s[i])
	if i+n > len(s) {
		n = len(s) - i
	}
	return n
}

// prefixMatcher finds the longest user-defined symbol at the start of a
// text, like SentencePiece's normalizer::PrefixMatcher, which runs a
// common-prefix search over a trie of the USER_DEFINED pieces and keeps the
// longest hit. It is a radix trie: a node per symbol or branch, at most
// two per symbol whatever their lengths, with edge labels read from the
// symbols themselves.
type prefixMatcher struct {
	root  [256]int32 // child of the root for each first byte; 0 when none
	keys  []string   // the symbols, sorted
	nodes []trieNode // nodes[0] is the root
}

type trieNode struct {
	key    int32 // index in keys of a symbol below the node, which spells its path
	depth  int32 // length of the prefix the node stands for
	id     int32 // piece id of the symbol equal to that prefix, or -1
	lo, hi int32 // children: nodes[lo:hi], sorted by label
	label  byte  // first byte of the edge into the node
}

// newPrefixMatcher builds a matcher for the pieces ids, whose strings
// (piece(id)) are distinct and not empty.
func newPrefixMatcher(ids []int32, piece func(int) string) *prefixMatcher {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, func(a, b int32) int { return strings.Compare(piece(int(a)), piece(int(b))) })
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = piece(int(id))
	}
	// Build breadth first: the keys below a node form a contiguous range
	// of the sorted keys, [nodes[i].key, end[i]), so the children of a
	// node are its range split by the byte after its prefix.
	m := &prefixMatcher{keys: keys, nodes: make([]trieNode, 1, 2*len(keys)+1)}
	m.nodes[0] = trieNode{id: -1}
	end := make([]int32, 1, cap(m.nodes))
	end[0] = int32(len(keys))
	for i := 0; i < len(m.nodes); i++ {
		lo, hi, d := int(m.nodes[i].key), int(end[i]), int(m.nodes[i].depth)
		if lo < hi && len(keys[lo]) == d {
			m.nodes[i].id = ids[lo]
			lo++
		}
		m.nodes[i].lo = int32(len(m.nodes))
		for j := lo; j < hi; {
			c := keys[j][d]
			k := j + 1
			for k < hi && keys[k][d] == c {
				k++
			}
			depth := len(keys[j])
			if k-j > 1 {
				depth = d + 1 + commonPrefixLen(keys[j][d+1:], keys[k-1][d+1:])
			}
			if i == 0 {
				m.root[c] = int32(len(m.nodes))
			}
			m.nodes = append(m.nodes, trieNode{key: int32(j), depth: int32(depth), id: -1, label: c})
			end = append(end, int32(k))
			j = k
		}
		m.nodes[i].hi = int32(len(m.nodes))
	}
	return m
}

// commonPrefixLen returns the length of the longest common prefix of a and b.
func commonPrefixLen(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// matchPrefix returns the length and piece id of the longest symbol of m
// that prefixes s, or 0, -1 when there is none.
func matchPrefix[S string | []byte](m *prefixMatcher, s S) (n int, id int32) {
	id = -1
	if len(s) == 0 {
		return 0, -1
	}
	node := m.root[s[0]]
	for matched := 1; node != 0; {
		nd := &m.nodes[node]
		d := int(nd.depth)
		if d > len(s) {
			return n, id
		}
		k := m.keys[nd.key]
		for i := matched; i < d; i++ {
			if s[i] != k[i] {
				return n, id
			}
		}
		if nd.id >= 0 {
			n, id = d, nd.id
		}
		if d == len(s) {
			return n, id
		}
		c := s[d]
		node = 0
		for j := nd.lo; j < nd.hi; j++ {
			if m.nodes[j].label == c {
				node = j
				break
			}
		}
		matched = d + 1
	}
	return n, id
}

// charsMap is SentencePiece's precompiled normalization rule set (the
// precompiled_charsmap of a NormalizerSpec such as nmt_nfkc): a Darts-clone
// double-array trie over input byte strings whose values are offsets of
// NUL-terminated replacement strings. Blob layout, as written by
// Normalizer::EncodePrecompiledCharsMap: little-endian uint32 trie size in
// bytes, the trie units, then the replacement strings.
type charsMap struct {
	units      []uint32
	normalized []byte
}

func newCharsMap(blob []byte) (*charsMap, error) {
	if len(blob) <= 4 {
		return nil, errors.New("tokenizer: precompiled_charsmap is too short")
	}
	size := binary.LittleEndian.Uint32(blob)
	blob = blob[4:]
	if uint64(size) > uint64(len(blob)) {
		return nil, errors.New("tokenizer: precompiled_charsmap trie size exceeds the blob")
	}
	c := &charsMap{
		units:      make([]uint32, size/4),
		normalized: blob[size:],
	}
	for i := range c.units {
		c.units[i] = binary.LittleEndian.Uint32(blob[4*i:])
	}
	return c, nil
}

// longestPrefix is Darts::DoubleArray::commonPrefixSearch over s keeping
// the longest hit, as Normalizer::NormalizePrefix does (it looks at no more
// than 32 hits). It returns the match length (0 for none) and the
// replacement. Out-of-range units or offsets, possible only in a corrupt
// model, end the search instead of panicking.
func (c *charsMap) longestPrefix(s string) (int, string) {
	const maxResults = 32
	units := c.units
	if len(units) == 0 {
		return 0, ""
	}
	pos := uint32(0) ^ dartsOffset(units[0])
	length, value, hits := 0, uint32(0), 0
	for i := 0; i < len(s) && hits < maxResults; i++ {
		pos ^= uint32(s[i])
		if pos >= uint32(len(units)) {
			break
		}
		u := units[pos]
		if u&(1<<31|0xff) != uint32(s[i]) { // label
			break
		}
		pos ^= dartsOffset(u)
		if u>>8&1 == 1 { // has_leaf
			if pos >= uint32(len(units)) {
				break
			}
			length, value = i+1, units[pos]&(1<<31-1)
			hits++
		}
	}
	if length == 0 {
		return 0, ""
	}
	if uint64(value) >= uint64(len(c.normalized)) {
		return length, ""
	}
	rep := c.normalized[value:]
	for j, b := range rep {
		if b == 0 {
			rep = rep[:j]
			break
		}
	}
	return length, string(rep)
}

func dartsOffset(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }

// normalize appends the normalized form of in to dst, as SentencePiece's
// Normalizer::Normalize does: each prefix is replaced by its user-defined
// match (kept as is), its precompiled_charsmap rule, or else its UTF-8
// character, where a byte that does not start a valid sequence becomes
// U+FFFD and only that byte is consumed; then spaces become U+2581 (when
// escape_whitespaces), a U+2581 is prefixed (add_dummy_prefix) and, when
// remove_extra_whitespaces is set, leading, trailing and repeated spaces are
// dropped. An empty (or all-space) input normalizes to nothing, without the
// dummy prefix.
func (t *Tokenizer) normalize(dst []byte, in string) []byte {
	if t.fastNormalize {
		return t.normalizeIdentity(dst, in)
	}
	if t.removeExtraWS {
		for len(in) > 0 {
			rep, n := t.normalizePrefix(in)
			if rep != " " {
				break
			}
			in = in[n:]
		}
	}
	if len(in) == 0 {
		return dst
	}
	start := len(dst)
	if t.addDummyPrefix {
		dst = append(dst, t.spaceSym...)
	}
	isPrevSpace := t.removeExtraWS
	for len(in) > 0 {
		rep, n := t.normalizePrefix(in)
		if isPrevSpace {
			rep = strings.TrimLeft(rep, " ")
		}
		if rep != "" {
			dst = t.appendEscaped(dst, rep)
			isPrevSpace = rep[len(rep)-1] == ' '
		}
		in = in[n:]
		if !t.removeExtraWS {
			isPrevSpace = false
		}
	}
	if t.removeExtraWS {
		for bytes.HasSuffix(dst[start:], []byte(t.spaceSym)) {
			dst = dst[:len(dst)-len(t.spaceSym)]
		}
	}
	return dst
}

// normalizePrefix is Normalizer::NormalizePrefix: the replacement for the
// start of in and the number of input bytes it consumes (at least 1).
func (t *Tokenizer) normalizePrefix(in string) (string, int) {
	if t.user != nil {
		if n, _ := matchPrefix(t.user, in); n > 0 {
			return in[:n], n
		}
	}
	if t.charsmap != nil {
		if n, rep := t.charsmap.longestPrefix(in); n > 0 {
			return rep, n
		}
	}
	r, n := utf8.DecodeRuneInString(in)
	if r == utf8.RuneError && n == 1 {
		return replacementChar, 1
	}
	return in[:n], n
}

func (t *Tokenizer) appendEscaped(dst []byte, s string) []byte {
	if !t.escapeWS {
		return append(dst, s...)
	}
	for {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, spaceSymbol...)
		s = s[i+1:]
	}
}

// normalizeIdentity is normalize for the common case of the identity rule
// set without remove_extra_whitespaces (Grok-1). User-defined matches need
// no special care here: every user-defined symbol is valid UTF-8 (checked
// when the fast path is chosen), so copying it character by character gives
// the same bytes.
func (t *Tokenizer) normalizeIdentity(dst []byte, in string) []byte {
	if len(in) == 0 {
		return dst
	}
	if t.addDummyPrefix {
		dst = append(dst, t.spaceSym...)
	}
	for i := 0; i < len(in); {
		// Copy the longest run that needs no change in one go.
		j := i
		for j < len(in) && in[j] < utf8.RuneSelf && in[j] != ' ' {
			j++
		}
		for j < len(in) && in[j] >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(in[j:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			j += n
		}
		if j > i {
			dst = append(dst, in[i:j]...)
			i = j
			continue
		}
		if in[i] == ' ' {
			if t.escapeWS {
				dst = append(dst, spaceSymbol...)
			} else {
				dst = append(dst, ' ')
			}
		} else {
			dst = append(dst, replacementChar...)
		}
		i++
	}
	return dst
}

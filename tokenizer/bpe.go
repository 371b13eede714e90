package tokenizer

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode/utf8"
)

// BPE is a byte-level BPE tokenizer of the tiktoken kind, the one Grok-2
// uses: the text is split into pieces by the pre-tokenizer (see
// bpe_split.go), each piece that is a token is that token, and the others
// are merged from their bytes, the pair of lowest priority first (the
// leftmost of equals). In xAI's tokenizer.tok.json the priority of a pair
// is the rank, which is the id, of the token it makes; in a Hugging Face
// tokenizer.json it is the pair's index in the merges list. Special tokens
// are recognised in the text only when the caller allows them.
//
// A BPE is immutable and safe for concurrent use.
type BPE struct {
	// tokens holds the bytes of every id, special tokens included: id i is
	// data[off[i]:off[i+1]]; kind tells regular, special or unused ids.
	data string
	off  []uint32
	kind []uint8

	whole        map[string]uint32 // regular token bytes -> id
	byteID       [256]uint32       // id of each single byte
	pairs        pairMap           // (left, right) ids -> priority, merged id
	ignoreMerges bool              // a piece that is a token is that token (tiktoken; HF's ignore_merges)
	split        splitter

	specials       specialMatcher
	specialIDs     map[string]int // special token text -> id
	defaultAllowed Allowed
	eos, pad, sep  int
}

// Kinds of ids.
const (
	idUnused = iota
	idRegular
	idSpecial
)

// Names of Grok-2's control tokens (SGLang's and vLLM's Grok-2 tokenizer).
const (
	grokEOS = "<|eos|>"
	grokPad = "<|pad|>"
	grokSep = "<|separator|>"
)

// bpeToken is one entry of a vocabulary being built.
type bpeToken struct {
	b  []byte
	id int
}

// bpeMerge is one merge of a Hugging Face vocabulary: the ids of its
// halves, in priority order.
type bpeMerge struct{ l, r uint32 }

// newBPE checks and builds a tokenizer. merges is nil for a tiktoken
// vocabulary, whose pairs are derived from the ranks.
func newBPE(regular, special []bpeToken, merges []bpeMerge, split splitter, ignoreMerges bool) (*BPE, error) {
	n := 0
	total := 0
	for _, set := range [][]bpeToken{regular, special} {
		for i, t := range set {
			if len(t.b) == 0 {
				return nil, fmt.Errorf("tokenizer: token %d (id %d) has no bytes", i, t.id)
			}
			if err := checkPiece(t.id, len(t.b)); err != nil {
				return nil, err
			}
			if t.id < 0 || t.id >= maxVocabSize {
				return nil, fmt.Errorf("tokenizer: token id %d is outside [0, %d)", t.id, maxVocabSize)
			}
			n = max(n, t.id+1)
			total += len(t.b)
		}
	}
	if err := checkVocab(n, total); err != nil {
		return nil, err
	}
	b := &BPE{
		kind:         make([]uint8, n),
		whole:        make(map[string]uint32, len(regular)),
		split:        split,
		specialIDs:   make(map[string]int, len(special)),
		ignoreMerges: ignoreMerges,
		eos:          -1, pad: -1, sep: -1,
	}
	bytesOf := make([]string, n)
	for _, t := range regular {
		if b.kind[t.id] != idUnused {
			return nil, fmt.Errorf("tokenizer: id %d is given to two tokens", t.id)
		}
		s := string(t.b)
		if prev, dup := b.whole[s]; dup {
			return nil, fmt.Errorf("tokenizer: tokens %d and %d have the same bytes %q", prev, t.id, s)
		}
		b.kind[t.id] = idRegular
		b.whole[s] = uint32(t.id)
		bytesOf[t.id] = s
	}
	for c := range 256 {
		id, ok := b.whole[string([]byte{byte(c)})]
		if !ok {
			return nil, fmt.Errorf("tokenizer: the byte 0x%02x is not a token; a byte-level vocabulary needs all 256", c)
		}
		b.byteID[c] = id
	}
	for _, t := range special {
		if b.kind[t.id] != idUnused {
			return nil, fmt.Errorf("tokenizer: special token %q has id %d, which another token has", t.b, t.id)
		}
		s := string(t.b)
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("tokenizer: special token %d (%q) is not valid UTF-8", t.id, s)
		}
		if _, dup := b.specialIDs[s]; dup {
			return nil, fmt.Errorf("tokenizer: special token %q is given twice", s)
		}
		b.kind[t.id] = idSpecial
		b.specialIDs[s] = t.id
		bytesOf[t.id] = s
	}
	var sb strings.Builder
	sb.Grow(total)
	b.off = make([]uint32, n+1)
	for i, s := range bytesOf {
		sb.WriteString(s)
		b.off[i+1] = uint32(sb.Len())
	}
	b.data = sb.String()
	b.specials = newSpecialMatcher(b.specialIDs)
	b.eos, b.pad, b.sep = b.specialID(grokEOS), b.specialID(grokPad), b.specialID(grokSep)

	if merges == nil {
		b.pairs = rankPairs(regular, b.whole)
	} else {
		var err error
		if b.pairs, err = b.mergePairs(merges); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// rankPairs derives the pairs of a tiktoken vocabulary: every split of a
// token into two tokens is a pair whose priority is the token's rank.
// Since all single bytes are tokens, every part tiktoken's merge loop
// holds is a token, and its byte-string lookups become these.
func rankPairs(regular []bpeToken, whole map[string]uint32) pairMap {
	count := 0
	for _, t := range regular {
		count += len(t.b) - 1
	}
	pm := newPairMap(min(count, 1<<24))
	for _, t := range regular {
		s := string(t.b)
		for k := 1; k < len(s); k++ {
			l, ok := whole[s[:k]]
			if !ok {
				continue
			}
			r, ok := whole[s[k:]]
			if !ok {
				continue
			}
			pm.put(l, r, uint32(t.id), uint32(t.id))
		}
	}
	return pm
}

// mergePairs builds the pairs of a Hugging Face merges list.
func (b *BPE) mergePairs(merges []bpeMerge) (pairMap, error) {
	pm := newPairMap(len(merges))
	for i, m := range merges {
		res, ok := b.whole[b.tokenBytes(int(m.l))+b.tokenBytes(int(m.r))]
		if !ok {
			return pairMap{}, fmt.Errorf("tokenizer: merge %d (%q %q) makes %q, which is not in the vocabulary", i, b.tokenBytes(int(m.l)), b.tokenBytes(int(m.r)), b.tokenBytes(int(m.l))+b.tokenBytes(int(m.r)))
		}
		if _, _, dup := pm.get(m.l, m.r); dup {
			return pairMap{}, fmt.Errorf("tokenizer: merge %d (%q %q) is listed twice", i, b.tokenBytes(int(m.l)), b.tokenBytes(int(m.r)))
		}
		pm.put(m.l, m.r, uint32(i), res)
	}
	return pm, nil
}

func (b *BPE) tokenBytes(id int) string { return b.data[b.off[id]:b.off[id+1]] }

func (b *BPE) specialID(s string) int {
	if id, ok := b.specialIDs[s]; ok {
		return id
	}
	return -1
}

// VocabSize returns one more than the largest id, special tokens included.
func (b *BPE) VocabSize() int { return len(b.kind) }

// EOS returns the id of <|eos|>, or -1 if the vocabulary has none.
func (b *BPE) EOS() int { return b.eos }

// PAD returns the id of <|pad|>, or -1.
func (b *BPE) PAD() int { return b.pad }

// Separator returns the id of <|separator|>, which ends each turn of
// Grok-2's chat template, or -1.
func (b *BPE) Separator() int { return b.sep }

// SpecialID returns the id of the special token with text s.
func (b *BPE) SpecialID(s string) (int, bool) {
	id, ok := b.specialIDs[s]
	return id, ok
}

// IsSpecial reports whether id is a special token.
func (b *BPE) IsSpecial(id int) bool { return id >= 0 && id < len(b.kind) && b.kind[id] == idSpecial }

// TokenBytes returns the bytes of id (a special token's text), or nil for
// an id that no token has.
func (b *BPE) TokenBytes(id int) []byte {
	if id < 0 || id >= len(b.kind) || b.kind[id] == idUnused {
		return nil
	}
	return []byte(b.tokenBytes(id))
}

// Allowed is a set of special tokens that Encode may emit. Its zero value
// allows none.
type Allowed struct {
	all  bool
	text map[string]bool
}

// AllSpecial allows every special token.
var AllSpecial = Allowed{all: true}

func (a Allowed) has(s string) bool { return a.all || a.text[s] }

// AllowSpecial returns the set of the given special tokens; a text that is
// not a special token of b is an error.
func (b *BPE) AllowSpecial(texts ...string) (Allowed, error) {
	a := Allowed{text: make(map[string]bool, len(texts))}
	for _, s := range texts {
		if _, ok := b.specialIDs[s]; !ok {
			return Allowed{}, fmt.Errorf("tokenizer: %q is not a special token", s)
		}
		a.text[s] = true
	}
	return a, nil
}

// DefaultAllowed returns the special tokens that Grok-2's servers (SGLang's
// and vLLM's tokenizer for tokenizer.tok.json) recognise in a prompt:
// the file's default_allowed_special, <|pad|>, <|separator|>, <|eos|>,
// <|control1|>..<|control704|> and <|reserved_3|>..<|reserved_127|>, as far
// as the vocabulary has them. For a Hugging Face tokenizer.json, whose
// added tokens are always matched, it is every special token.
func (b *BPE) DefaultAllowed() Allowed { return b.defaultAllowed }

// grokDefaultAllowed is the servers' set (see DefaultAllowed) plus extra.
func (b *BPE) grokDefaultAllowed(extra []string) Allowed {
	a := Allowed{text: map[string]bool{}}
	add := func(s string) {
		if _, ok := b.specialIDs[s]; ok {
			a.text[s] = true
		}
	}
	for _, s := range extra {
		add(s)
	}
	add(grokPad)
	add(grokSep)
	add(grokEOS)
	for i := 1; i < 705; i++ {
		add(fmt.Sprintf("<|control%d|>", i))
	}
	for i := 3; i < 128; i++ {
		add(fmt.Sprintf("<|reserved_%d|>", i))
	}
	return a
}

// DisallowedSpecialError reports a special token in the text that
// EncodeStrict was not allowed to emit, as tiktoken's encode does by
// default.
type DisallowedSpecialError struct {
	Token  string
	Offset int // byte offset in the text
}

func (e *DisallowedSpecialError) Error() string {
	return fmt.Sprintf("tokenizer: the text contains the special token %q at byte %d, which is not allowed", e.Token, e.Offset)
}

// Encode returns the ids of text. A special token of allowed in the text is
// encoded as its id; any other special token's text is encoded as plain
// text (tiktoken's encode with disallowed_special=(), as Grok-2's servers
// call it).
func (b *BPE) Encode(text string, allowed Allowed) []int {
	ids, _ := b.encode(text, allowed, false)
	return ids
}

// EncodeStrict is Encode, except that a special token in the text that
// allowed does not have is an error, as with tiktoken's default
// disallowed_special="all".
func (b *BPE) EncodeStrict(text string, allowed Allowed) ([]int, error) {
	return b.encode(text, allowed, true)
}

// EncodeOrdinary encodes text with no special tokens (tiktoken's
// encode_ordinary).
func (b *BPE) EncodeOrdinary(text string) []int {
	ids, _ := b.encode(text, Allowed{}, false)
	return ids
}

// Special tokens are found leftmost first; of several that start at the
// same byte the longest is taken. One that is not allowed is skipped by a
// byte, like tiktoken's loop over its special-token regex.
func (b *BPE) encode(text string, allowed Allowed, strict bool) ([]int, error) {
	s := scratchPool.Get().(*bpeScratch)
	defer scratchPool.Put(s)
	ids := make([]int, 0, len(text)/4+1)
	start := 0
	for {
		end, n, from := len(text), 0, start
		for len(b.specialIDs) > 0 {
			p, m := b.specials.find(text, from)
			if p < 0 {
				break
			}
			if allowed.has(text[p : p+m]) {
				end, n = p, m
				break
			}
			if strict {
				return nil, &DisallowedSpecialError{Token: text[p : p+m], Offset: p}
			}
			from = p + 1
		}
		ids = b.encodeOrdinary(s, text[start:end], ids)
		if n == 0 {
			return ids, nil
		}
		ids = append(ids, b.specialIDs[text[end:end+n]])
		start = end + n
	}
}

// encodeOrdinary appends the ids of a text without special tokens.
func (b *BPE) encodeOrdinary(s *bpeScratch, text string, ids []int) []int {
	for i := 0; i < len(text); {
		j := b.split.next(text, i)
		ids = b.encodePiece(s, text[i:j], ids)
		i = j
	}
	return ids
}

// encodePiece appends the ids of one piece.
func (b *BPE) encodePiece(s *bpeScratch, p string, ids []int) []int {
	if len(p) == 1 {
		return append(ids, int(b.byteID[p[0]]))
	}
	if b.ignoreMerges {
		if id, ok := b.whole[p]; ok {
			return append(ids, int(id))
		}
	}
	if len(p) > heapMergeBytes {
		return b.mergeHeap(s, p, ids)
	}
	// Short pieces: tiktoken's loop, a scan for the lowest pair each merge.
	part := s.part[:0]
	for i := 0; i < len(p); i++ {
		part = append(part, bpePart{id: b.byteID[p[i]]})
	}
	for i := 0; i+1 < len(part); i++ {
		part[i].prio, part[i].res = b.pairs.get2(part[i].id, part[i+1].id)
	}
	part[len(part)-1].prio = noPair
	for {
		best := -1
		bp := uint32(noPair)
		for i := 0; i+1 < len(part); i++ {
			if part[i].prio < bp {
				bp, best = part[i].prio, i
			}
		}
		if best < 0 {
			break
		}
		part[best].id = part[best].res
		part = append(part[:best+1], part[best+2:]...)
		if best+1 < len(part) {
			part[best].prio, part[best].res = b.pairs.get2(part[best].id, part[best+1].id)
		} else {
			part[best].prio = noPair
		}
		if best > 0 {
			part[best-1].prio, part[best-1].res = b.pairs.get2(part[best-1].id, part[best].id)
		}
	}
	for _, x := range part {
		ids = append(ids, int(x.id))
	}
	s.part = part
	return ids
}

// heapMergeBytes is the piece length above which merging uses a heap:
// the scan costs O(n) a merge, the heap O(log n).
const heapMergeBytes = 64

const noPair = math.MaxUint32

// bpePart is a part of a piece being merged: its id, and the priority and
// result of merging it with the next part.
type bpePart struct {
	id, prio, res uint32
}

// heapEntry is a candidate merge of the symbols at byte offset pos (left)
// and the next one; it is stale unless they still have ids l and r.
type heapEntry struct {
	key  uint64 // priority<<32 | pos: lowest priority, then leftmost
	l, r uint32
}

// mergeHeap merges a long piece with a heap of candidate pairs and a
// linked list of symbols indexed by their first byte.
func (b *BPE) mergeHeap(s *bpeScratch, p string, ids []int) []int {
	n := len(p)
	s.id = growU32(s.id, n)
	s.next = growU32(s.next, n)
	s.prev = growU32(s.prev, n)
	h := s.heap[:0]
	const none = math.MaxUint32
	for i := range n {
		s.id[i] = b.byteID[p[i]]
		s.next[i] = uint32(i + 1)
		s.prev[i] = uint32(i - 1)
	}
	s.next[n-1] = none
	s.prev[0] = none
	push := func(pos uint32) {
		r := s.next[pos]
		if r == none {
			return
		}
		if prio, _, ok := b.pairs.get(s.id[pos], s.id[r]); ok {
			h = heapPushEntry(h, heapEntry{key: uint64(prio)<<32 | uint64(pos), l: s.id[pos], r: s.id[r]})
		}
	}
	for i := range n - 1 {
		push(uint32(i))
	}
	for len(h) > 0 {
		e := h[0]
		h = heapPopEntry(h)
		pos := uint32(e.key)
		r := s.next[pos]
		if s.prev[pos] == pos || r == none || s.id[pos] != e.l || s.id[r] != e.r {
			continue // stale
		}
		_, res, _ := b.pairs.get(e.l, e.r)
		s.id[pos] = res
		rn := s.next[r]
		s.next[pos] = rn
		if rn != none {
			s.prev[rn] = pos
		}
		s.prev[r] = r // mark dead
		push(pos)
		if pp := s.prev[pos]; pp != none {
			push(pp)
		}
	}
	for i := uint32(0); i != none; i = s.next[i] {
		ids = append(ids, int(s.id[i]))
	}
	s.heap = h
	return ids
}

func growU32(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, n)
	}
	return s[:n]
}

func heapPushEntry(h []heapEntry, e heapEntry) []heapEntry {
	h = append(h, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].key <= h[i].key {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func heapPopEntry(h []heapEntry) []heapEntry {
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].key < h[l].key {
			m = r
		}
		if h[i].key <= h[m].key {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return h
}

// bpeScratch is the per-call working memory of Encode, reused through
// scratchPool so that encoding allocates only its output.
type bpeScratch struct {
	part           []bpePart
	id, next, prev []uint32
	heap           []heapEntry
}

var scratchPool = sync.Pool{New: func() any { return new(bpeScratch) }}

// pairMap is an open-addressing hash table from a pair of ids to the
// priority of merging them and the id they make.
type pairMap struct {
	keys  []uint64 // left<<32 | right, or emptyPair
	vals  []uint64 // priority<<32 | result
	shift uint
	n     int
}

const emptyPair = math.MaxUint64

func newPairMap(capacity int) pairMap {
	size, shift := 16, uint(60)
	for size < 2*capacity {
		size *= 2
		shift--
	}
	pm := pairMap{keys: make([]uint64, size), vals: make([]uint64, size), shift: shift}
	for i := range pm.keys {
		pm.keys[i] = emptyPair
	}
	return pm
}

func (pm *pairMap) slot(key uint64) uint64 { return (key * 0x9E3779B97F4A7C15) >> pm.shift }

// put adds a pair; the first priority given for a pair stays.
func (pm *pairMap) put(l, r, prio, res uint32) {
	if 2*(pm.n+1) > len(pm.keys) {
		old, oldv := pm.keys, pm.vals
		*pm = newPairMap(len(old))
		for i, k := range old {
			if k != emptyPair {
				pm.insert(k, oldv[i])
			}
		}
	}
	pm.insert(uint64(l)<<32|uint64(r), uint64(prio)<<32|uint64(res))
}

func (pm *pairMap) insert(key, val uint64) {
	mask := uint64(len(pm.keys) - 1)
	for i := pm.slot(key); ; i = (i + 1) & mask {
		switch pm.keys[i] {
		case emptyPair:
			pm.keys[i], pm.vals[i] = key, val
			pm.n++
			return
		case key:
			if val>>32 < pm.vals[i]>>32 {
				pm.vals[i] = val
			}
			return
		}
	}
}

func (pm *pairMap) get(l, r uint32) (prio, res uint32, ok bool) {
	key := uint64(l)<<32 | uint64(r)
	mask := uint64(len(pm.keys) - 1)
	for i := pm.slot(key); ; i = (i + 1) & mask {
		switch pm.keys[i] {
		case emptyPair:
			return noPair, 0, false
		case key:
			v := pm.vals[i]
			return uint32(v >> 32), uint32(v), true
		}
	}
}

// get2 is get without the flag: noPair when l and r do not merge.
func (pm *pairMap) get2(l, r uint32) (prio, res uint32) {
	prio, res, _ = pm.get(l, r)
	return prio, res
}

// specialMatcher finds special tokens in a text.
type specialMatcher struct {
	first [256]bool
	lens  []int // the distinct lengths, longest first
	text  map[string]int
}

func newSpecialMatcher(text map[string]int) specialMatcher {
	m := specialMatcher{text: text}
	seen := map[int]bool{}
	for s := range text {
		m.first[s[0]] = true
		if !seen[len(s)] {
			seen[len(s)] = true
			m.lens = append(m.lens, len(s))
		}
	}
	for i := range m.lens { // a few lengths: insertion sort, longest first
		for j := i; j > 0 && m.lens[j] > m.lens[j-1]; j-- {
			m.lens[j], m.lens[j-1] = m.lens[j-1], m.lens[j]
		}
	}
	return m
}

// find returns the offset and length of the first special token in
// s[from:], the longest of those that start there, or -1.
func (m *specialMatcher) find(s string, from int) (int, int) {
	for p := from; p < len(s); p++ {
		if !m.first[s[p]] {
			continue
		}
		for _, n := range m.lens {
			if p+n <= len(s) {
				if _, ok := m.text[s[p:p+n]]; ok {
					return p, n
				}
			}
		}
	}
	return -1, 0
}

// DecodeBytes returns the bytes of ids, special tokens' text included. An
// id that no token has is an error.
func (b *BPE) DecodeBytes(ids []int) ([]byte, error) {
	out := make([]byte, 0, len(ids)*4)
	for _, id := range ids {
		if id < 0 || id >= len(b.kind) || b.kind[id] == idUnused {
			return nil, fmt.Errorf("tokenizer: no token has id %d", id)
		}
		out = append(out, b.data[b.off[id]:b.off[id+1]]...)
	}
	return out, nil
}

// Decode returns the text of ids, with one U+FFFD for each byte that does
// not start a valid UTF-8 sequence (as the SentencePiece decoder does).
func (b *BPE) Decode(ids []int) (string, error) {
	raw, err := b.DecodeBytes(ids)
	if err != nil {
		return "", err
	}
	if utf8.Valid(raw) {
		return string(raw), nil
	}
	d := decoderState{pending: raw}
	return string(d.decodeBytes(nil, true)), nil
}

// BPEStreamDecoder decodes ids one at a time, for streaming generated
// text. The chunks it returns are valid UTF-8, and concatenated (Add
// outputs followed by Flush) they equal Decode of all the ids: the bytes
// of a character split across tokens are held back until it is complete
// or cannot be completed. It is not safe for concurrent use.
type BPEStreamDecoder struct {
	b   *BPE
	st  decoderState
	buf []byte
}

// NewDecoder returns a BPEStreamDecoder at the start of a text.
func (b *BPE) NewDecoder() *BPEStreamDecoder { return &BPEStreamDecoder{b: b} }

// Add decodes one more id and returns the text it completes, which may be
// empty. An id that no token has is an error and leaves d unchanged.
func (d *BPEStreamDecoder) Add(id int) (string, error) {
	b := d.b
	if id < 0 || id >= len(b.kind) || b.kind[id] == idUnused {
		return "", fmt.Errorf("tokenizer: no token has id %d", id)
	}
	d.st.pending = append(d.st.pending, b.data[b.off[id]:b.off[id+1]]...)
	d.buf = d.st.decodeBytes(d.buf[:0], false)
	return string(d.buf), nil
}

// Flush returns the bytes held back, one U+FFFD each.
func (d *BPEStreamDecoder) Flush() string {
	d.buf = d.st.decodeBytes(d.buf[:0], true)
	return string(d.buf)
}

// Reset makes d ready to decode a new text.
func (d *BPEStreamDecoder) Reset() { d.st = decoderState{pending: d.st.pending[:0]} }

// Interface is what the runner, the server and the CLI use of a model's
// tokenizer, whichever kind it is: Grok-1's SentencePiece or Grok-2's
// byte-level BPE (wrapped as loader.SentencePiece and loader.BPE).
type Interface interface {
	// Encode turns text into ids, as the model's reference servers do.
	Encode(text string) []int
	// Decode turns ids into text; an id no token has is an error.
	Decode(ids []int) (string, error)
	// NewTextDecoder returns a streaming decoder at the start of a text.
	NewTextDecoder() TextDecoder
	// VocabSize is one more than the largest id.
	VocabSize() int
	// BOS is the id a document starts with (-1 if none).
	BOS() int
	// EOS is the id that ends a document (-1 if none).
	EOS() int
	// Piece is the token's vocabulary entry, for display (server/vocab.go):
	// SentencePiece's piece, or a BPE token's text ("<0xNN>" for a single
	// byte that is not UTF-8 by itself, as SentencePiece's byte pieces).
	Piece(id int) string
}

// TextDecoder is the streaming decoder of either tokenizer: the
// SentencePiece Tokenizer's StreamDecoder and the BPE's BPEStreamDecoder
// both have it, so a runner can stream with either.
type TextDecoder interface {
	Add(id int) (string, error)
	Flush() string
	Reset()
}

var (
	_ TextDecoder = (*StreamDecoder)(nil)
	_ TextDecoder = (*BPEStreamDecoder)(nil)
)

package tokenizer

import (
	"math"
	"slices"
	"strings"
)

// Encoding follows SentencePiece's bpe_model.cc (Model::SampleEncode with
// no dropout), fed by the normalizer:
//
//  1. The normalized text is split into initial symbols: the longest
//     USER_DEFINED piece at the position (such a symbol is frozen: it never
//     merges), else one UTF-8 character.
//  2. Every adjacent pair of unfrozen symbols whose concatenation is a
//     NORMAL, USER_DEFINED or UNUSED piece goes into a priority queue keyed
//     by that piece's score (higher first; the leftmost pair on ties).
//  3. The best pair is popped; if both of its symbols are still as they were
//     it is merged and the pairs with its new neighbours are queued.
//  4. Each final symbol becomes PieceToId(symbol); UNUSED pieces are split
//     back into the two symbols that formed them (resegmentation); and
//     with byte_fallback an unknown symbol becomes its UTF-8 bytes.
//
// Two exact shortcuts make this faster without changing the result:
//
//   - Symbols carry merge ids instead of strings, and the merge table is
//     keyed by (left id, right id). Every merged symbol is a piece, and an
//     initial symbol is one character, so building the table from every
//     way of cutting every piece into two such parts at a character
//     boundary finds every pair SentencePiece's string lookup would find.
//     A character that occurs inside a piece without being one gets a
//     "virtual" id above the vocabulary.
//   - The text is cut into independent segments at frozen symbols and
//     before a space symbol whose preceding character never precedes a
//     space symbol inside a piece: no pair can straddle such a cut, so the
//     merges in each segment happen in the same relative order as in one
//     global queue. This keeps the queue and symbol list small and in
//     cache. It is turned off for models with UNUSED pieces, because there
//     SentencePiece's resegmentation table (rev_merge) is shared by the
//     whole text and depends on the global order of queue insertions.

// symbol is one node of the doubly linked list of symbols of a segment.
type symbol struct {
	start, size int32 // byte span in the normalized text; size 0 once merged away
	prev, next  int32 // neighbours in the segment, -1 at its ends
	id          int32 // merge id, -1 if the symbol can take part in no merge
	frozen      bool
}

// pair is a queued candidate merge of symbol left with its right
// neighbour. The right symbol is not stored: if it is no longer the
// neighbour it was, the lengths no longer add up (see bpe).
type pair struct {
	order uint64 // priority: larger first; see pairOrder
	size  int32  // byte length of the merged piece, to detect stale pairs
	id    int32  // merge id of the merged piece
}

// pairOrder packs SentencePiece's SymbolPairComparator (higher score
// first, then the leftmost pair) into one integer, larger first: the
// score mapped to an order-preserving uint32 in the high half, the
// complement of the left index in the low half.
func pairOrder(score float32, left int32) uint64 {
	b := math.Float32bits(score)
	if b == 1<<31 {
		b = 0 // -0 == +0, as for the C++ comparison
	}
	if b&(1<<31) != 0 {
		b = ^b
	} else {
		b |= 1 << 31
	}
	return uint64(b)<<32 | uint64(^uint32(left))
}

func (p *pair) left() int32 { return int32(^uint32(p.order)) }

// scratch holds the per-call buffers, recycled through Tokenizer.pool.
type scratch struct {
	norm []byte
	syms []symbol
	heap []pair
	rev  map[int32][2]int32 // rev_merge for UNUSED pieces
}

// buildEncoder fills the merge-id tables. See the comment at the top of
// this file.
func (t *Tokenizer) buildEncoder() {
	n := int32(len(t.types))
	t.charID = make(map[string]int32)
	for i := range t.asciiID {
		t.asciiID[i] = -1
	}
	setChar := func(c string, id int32) {
		if len(c) == 1 && c[0] < 0x80 {
			t.asciiID[c[0]] = id
		} else {
			t.charID[c] = id
		}
	}
	lookupChar := func(c string) (int32, bool) {
		if len(c) == 1 && c[0] < 0x80 {
			return t.asciiID[c[0]], t.asciiID[c[0]] >= 0
		}
		id, ok := t.charID[c]
		return id, ok
	}
	isChar := func(s string) bool { return len(s) > 0 && charLenAt(s, 0) == len(s) }
	newVirtual := func(c string) int32 {
		out := int32(t.unk)
		if id, ok := t.reserved.get(&t.v, c); ok {
			out = id
		}
		id := n + int32(len(t.virtual))
		t.virtual = append(t.virtual, virtualSymbol{str: c, out: out})
		setChar(c, id)
		return id
	}
	mergeable := func(id int32) bool {
		return t.types[id] == typeNormal || t.types[id] == typeUnused
	}

	// The pieces that pieceIDs holds, and the ones that can merge.
	var keys []int32
	for i := range int(n) {
		if t.indexed(i) {
			keys = append(keys, int32(i))
		}
	}
	// Single characters that are pieces keep their piece ids. A character
	// that is a USER_DEFINED piece never reaches the table: the prefix
	// matcher always takes it as a frozen symbol.
	for _, id := range keys {
		if p := t.piece(int(id)); isChar(p) && mergeable(id) {
			setChar(p, id)
		}
	}
	// Characters that are reserved pieces (PieceToId finds them first).
	for i := range int(n) {
		if indexedType(t.types[i]) {
			continue
		}
		if p := t.piece(i); isChar(p) {
			if _, ok := lookupChar(p); !ok {
				if _, user := t.pieceIDs.get(&t.v, p); !user {
					newVirtual(p)
				}
			}
		}
	}

	// part is the merge id that a symbol with text s would carry, or -1 if
	// no unfrozen symbol can have that text; q is the id of the piece s,
	// or -1 if s is not one.
	part := func(s string, q int32) int32 {
		if q >= 0 {
			if mergeable(q) {
				return q
			}
			return -1 // USER_DEFINED: always frozen
		}
		if !isChar(s) {
			return -1 // only pieces arise from merges
		}
		if id, ok := lookupChar(s); ok {
			return id
		}
		return newVirtual(s)
	}
	// symbolID is part for a string looked up in pieceIDs.
	symbolID := func(s string) int32 {
		q, _ := t.pieceIDs.get(&t.v, s)
		return part(s, q)
	}

	// Which prefixes and suffixes of a piece are pieces comes from links
	// between the pieces (see prefixLinks): looking each one up would hash
	// every prefix and suffix, quadratic in the piece's length.
	rv := reverseVocab(&t.v)
	prefixOf, _ := prefixLinks(int(n), keys, func(id int32) string { return t.piece(int(id)) })
	suffixOf, _ := prefixLinks(int(n), keys, func(id int32) string { return rv.piece(int(id)) })
	var pre, suf []int32 // by length: the piece that is p's prefix (suffix) of that length, or -1

	// Two passes over the cuts: the first counts the merges, so that the
	// table is made once at its final size.
	var joins []int32 // merge ids of characters seen right before a space symbol inside a piece
	merges := 0
	for pass := range 2 {
		if pass == 1 {
			t.merges = newPairTable(merges)
		}
		for _, id := range keys {
			p := t.piece(int(id))
			if !mergeable(id) {
				continue
			}
			pre = fillLinks(pre, len(p), id, prefixOf, t.v.off)
			suf = fillLinks(suf, len(p), id, suffixOf, t.v.off)
			// Cut p after each of its characters (as the text would be
			// split into initial symbols).
			for prev, cut := 0, charLenAt(p, 0); cut < len(p); prev, cut = cut, cut+charLenAt(p, cut) {
				if l := part(p[:cut], pre[cut]); l >= 0 {
					if r := part(p[cut:], suf[len(p)-cut]); r >= 0 {
						if pass == 0 {
							merges++
						} else {
							t.merges.put(pairKey(l, r), id, t.scores[id])
						}
					}
				}
				if pass == 1 && strings.HasPrefix(p[cut:], t.spaceSym) {
					// A character followed by a space symbol inside a
					// piece: the text may not be cut between the two.
					// (symbolID is -1 only for a USER_DEFINED character,
					// which is frozen and so a cut anyway.)
					if c := symbolID(p[prev:cut]); c >= 0 {
						joins = append(joins, c)
					}
				}
			}
		}
	}
	t.joinsSpace = make([]bool, int(n)+len(t.virtual))
	for _, c := range joins {
		t.joinsSpace[c] = true
	}
	t.segment = !t.hasUnused
}

// fillLinks sets buf[k], for k in [0, size], to the piece of length k
// reached from id through link, or -1.
func fillLinks(buf []int32, size int, id int32, link []int32, off []uint32) []int32 {
	buf = slices.Grow(buf[:0], size+1)[:size+1]
	for i := range buf {
		buf[i] = -1
	}
	for q := link[id]; q >= 0; q = link[q] {
		buf[off[q+1]-off[q]] = q
	}
	return buf
}

// Encode returns the ids of text, as SentencePiece's
// SentencePieceProcessor::EncodeAsIds does (no BOS or EOS). Invalid UTF-8
// is allowed: each byte that does not start a valid sequence counts as
// U+FFFD. It returns an empty slice for an empty text.
func (t *Tokenizer) Encode(text string) []int {
	s, _ := t.pool.Get().(*scratch)
	if s == nil {
		s = &scratch{}
	}
	s.norm = t.normalize(s.norm[:0], text)
	ids := make([]int, 0, len(s.norm)/3+1)
	ids = t.encodeNormalized(s, ids)
	if cap(s.norm) > 1<<22 || cap(s.syms) > 1<<16 || cap(s.heap) > 1<<16 {
		// Do not let one huge input pin big buffers in the pool.
		s = &scratch{}
	}
	t.pool.Put(s)
	return ids
}

// EncodeBytes is Encode for raw bytes, which need not be valid UTF-8.
func (t *Tokenizer) EncodeBytes(text []byte) []int {
	return t.Encode(string(text))
}

// encodeNormalized splits s.norm into initial symbols and runs BPE on each
// segment.
func (t *Tokenizer) encodeNormalized(s *scratch, ids []int) []int {
	norm := s.norm
	syms := s.syms[:0]
	if t.hasUnused {
		if s.rev == nil {
			s.rev = make(map[int32][2]int32)
		}
		clear(s.rev)
	}
	for i := 0; i < len(norm); {
		if t.user != nil && t.user.root[norm[i]] != 0 {
			if n, id := matchPrefix(t.user, norm[i:]); n > 0 {
				if t.segment {
					ids = t.bpe(s, norm, syms, ids)
					syms = syms[:0]
					ids = t.emit(s, ids, id, norm[i:i+n])
				} else {
					syms = append(syms, symbol{start: int32(i), size: int32(n), id: id, frozen: true})
				}
				i += n
				continue
			}
		}
		n := oneCharLen(norm[i])
		if i+n > len(norm) {
			n = len(norm) - i
		}
		id := int32(-1)
		if c := norm[i]; c < 0x80 {
			id = t.asciiID[c]
		} else if v, ok := t.charID[string(norm[i:i+n])]; ok {
			id = v
		}
		if t.segment && len(syms) > 0 && string(norm[i:i+n]) == t.spaceSym {
			if prev := syms[len(syms)-1].id; prev < 0 || !t.joinsSpace[prev] {
				ids = t.bpe(s, norm, syms, ids)
				syms = syms[:0]
			}
		}
		syms = append(syms, symbol{start: int32(i), size: int32(n), id: id})
		i += n
	}
	ids = t.bpe(s, norm, syms, ids)
	s.syms = syms[:0]
	return ids
}

// bpe merges the symbols of one segment and appends their ids.
func (t *Tokenizer) bpe(s *scratch, norm []byte, syms []symbol, ids []int) []int {
	switch len(syms) {
	case 0:
		return ids
	case 1:
		return t.emit(s, ids, syms[0].id, norm[syms[0].start:syms[0].start+syms[0].size])
	}
	for i := range syms {
		syms[i].prev = int32(i) - 1
		syms[i].next = int32(i) + 1
	}
	syms[len(syms)-1].next = -1

	h := s.heap[:0]
	for i := 1; i < len(syms); i++ {
		h = t.addPair(s, h, syms, int32(i-1), int32(i))
	}
	for len(h) > 0 {
		top := h[0]
		h = heapPop(h)
		li := top.left()
		l := &syms[li]
		// Skip pairs whose symbols have changed since they were queued,
		// with SentencePiece's test: either is gone, or the lengths no
		// longer add up. (A symbol only grows by absorbing its right
		// neighbour, which then is gone, so the test also catches a
		// changed neighbour.)
		if l.size == 0 || l.next < 0 {
			continue
		}
		r := &syms[l.next]
		if r.size == 0 || l.size+r.size != top.size {
			continue
		}
		l.size += r.size
		l.id = top.id
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = li
		}
		r.size = 0
		h = t.addPair(s, h, syms, l.prev, li)
		h = t.addPair(s, h, syms, li, l.next)
	}
	s.heap = h[:0]

	for i := int32(0); i >= 0; i = syms[i].next {
		sy := &syms[i]
		ids = t.emit(s, ids, sy.id, norm[sy.start:sy.start+sy.size])
	}
	return ids
}

// addPair is MaybeAddNewSymbolPair.
func (t *Tokenizer) addPair(s *scratch, h []pair, syms []symbol, l, r int32) []pair {
	if l < 0 || r < 0 {
		return h
	}
	sl, sr := &syms[l], &syms[r]
	if sl.frozen || sr.frozen || sl.id < 0 || sr.id < 0 {
		return h
	}
	m := t.merges.get(pairKey(sl.id, sr.id))
	if m == nil {
		return h
	}
	if t.hasUnused && t.types[m.id] == typeUnused {
		// rev_merge[piece] = (left, right): the last pair queued for an
		// UNUSED piece is how it is split again at the end.
		s.rev[m.id] = [2]int32{sl.id, sr.id}
	}
	return heapPush(h, pair{order: pairOrder(m.score, l), size: sl.size + sr.size, id: m.id})
}

// emit appends the ids for a final symbol with merge id id and text str.
func (t *Tokenizer) emit(s *scratch, ids []int, id int32, str []byte) []int {
	out := int32(t.unk)
	if id >= 0 {
		if int(id) < len(t.canon) {
			out = t.canon[id]
		} else {
			out = t.virtual[int(id)-len(t.canon)].out
		}
	}
	if t.hasUnused && out >= 0 && t.types[out] == typeUnused {
		if rv, ok := s.rev[id]; ok {
			ids = t.emit(s, ids, rv[0], []byte(t.mergeIDString(rv[0])))
			return t.emit(s, ids, rv[1], []byte(t.mergeIDString(rv[1])))
		}
	}
	if t.byteFallback && (out < 0 || int(out) == t.unk) {
		// SentencePieceProcessor::PopulateSentencePieceText: an unknown
		// piece is replaced by the byte pieces of its UTF-8 bytes.
		for i := 0; i < len(str); i++ {
			b := t.byteIDs[str[i]]
			if b < 0 {
				b = int32(t.unk)
			}
			ids = append(ids, int(b))
		}
		return ids
	}
	if out >= 0 && int(out) == t.unk && len(ids) > 0 && ids[len(ids)-1] == t.unk {
		// PopulateSentencePieceText merges a run of unknown pieces into
		// one, "so that decoder can copy or generate unknown tokens
		// easily".
		return ids
	}
	return append(ids, int(out))
}

func (t *Tokenizer) mergeIDString(id int32) string {
	if int(id) < len(t.types) {
		return t.piece(int(id))
	}
	return t.virtual[int(id)-len(t.types)].str
}

// heapPush and heapPop keep h a binary max-heap on pair.order.
func heapPush(h []pair, p pair) []pair {
	h = append(h, p)
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if h[i].order <= h[parent].order {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	return h
}

func heapPop(h []pair) []pair {
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		best := l
		if r := l + 1; r < len(h) && h[r].order > h[l].order {
			best = r
		}
		if h[best].order <= h[i].order {
			break
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
	return h
}

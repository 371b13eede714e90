package tokenizer

import (
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
)

// Limits on what a model file may declare, checked before anything is built
// from it.
const (
	// maxPieceBytes bounds one piece: SentencePiece's trainer caps
	// max_sentencepiece_length at 512 characters (2 KiB of UTF-8) and
	// Grok-1's longest piece is 48 bytes; 4 KiB leaves room for long
	// user-defined symbols.
	maxPieceBytes = 4 << 10
	// maxVocabSize bounds the number of pieces: the largest SentencePiece
	// vocabularies in use have about 256k pieces (Gemma, mT5); 2M is 8 times
	// that.
	maxVocabSize = 1 << 21
)

// checkPiece refuses a piece longer than maxPieceBytes.
func checkPiece(i, n int) error {
	if n > maxPieceBytes {
		return fmt.Errorf("tokenizer: piece %d is %d bytes long, more than the %d allowed", i, n, maxPieceBytes)
	}
	return nil
}

// checkVocab refuses a vocabulary of n pieces of total bytes that is too
// large.
func checkVocab(n, total int) error {
	if n > maxVocabSize {
		return fmt.Errorf("tokenizer: %d pieces, more than the %d allowed", n, maxVocabSize)
	}
	if uint64(total) > math.MaxUint32 {
		return fmt.Errorf("tokenizer: pieces total %d bytes, more than 4 GiB", total)
	}
	return nil
}

// vocab is the list of piece strings, stored flat: piece i is
// data[off[i]:off[i+1]]. This costs 4 bytes a piece besides its text,
// where a []string costs 16 and a separate allocation each.
type vocab struct {
	data string
	off  []uint32
}

func (v *vocab) len() int { return len(v.off) - 1 }

func (v *vocab) piece(i int) string { return v.data[v.off[i]:v.off[i+1]] }

// vocabBuilder fills a vocab of a known size.
type vocabBuilder struct {
	b   strings.Builder
	off []uint32
}

// newVocabBuilder prepares for n pieces of total bytes in all, which the
// caller has passed through checkVocab.
func newVocabBuilder(n, total int) *vocabBuilder {
	b := &vocabBuilder{off: make([]uint32, 1, n+1)}
	b.b.Grow(total)
	return b
}

func (b *vocabBuilder) add(p []byte) {
	b.b.Write(p)
	b.off = append(b.off, uint32(b.b.Len()))
}

func (b *vocabBuilder) addString(p string) {
	b.b.WriteString(p)
	b.off = append(b.off, uint32(b.b.Len()))
}

func (b *vocabBuilder) done() vocab { return vocab{data: b.b.String(), off: b.off} }

// pieceIndex maps piece strings to ids. It is an open-addressing hash table
// of ids whose keys are the pieces of a vocab: 4 bytes a slot at a load of
// at most 1/2, where a map[string]int32 costs some 30 to 60 bytes an entry.
type pieceIndex struct {
	slots []int32 // id+1; 0 when free
	seed  maphash.Seed
}

// newPieceIndex makes an index for up to n pieces.
func newPieceIndex(n int) pieceIndex {
	size := 8
	for size < 2*n {
		size *= 2
	}
	return pieceIndex{slots: make([]int32, size), seed: maphash.MakeSeed()}
}

// slot returns the slot holding s, or the free slot where s would go.
func (x *pieceIndex) slot(v *vocab, s string) *int32 {
	mask := uint64(len(x.slots) - 1)
	for i := maphash.String(x.seed, s) & mask; ; i = (i + 1) & mask {
		sl := &x.slots[i]
		if *sl == 0 || v.piece(int(*sl-1)) == s {
			return sl
		}
	}
}

// get returns the id of s.
func (x *pieceIndex) get(v *vocab, s string) (int32, bool) {
	if len(x.slots) == 0 {
		return -1, false
	}
	id := *x.slot(v, s)
	return id - 1, id != 0
}

// add records piece id under its string unless that string is already
// there; it reports whether it was added. The index must have been made
// for enough pieces.
func (x *pieceIndex) add(v *vocab, id int32) bool {
	sl := x.slot(v, v.piece(int(id)))
	if *sl != 0 {
		return false
	}
	*sl = id + 1
	return true
}

// prefixLinks returns, for each id in keys (distinct strings of key),
// the id in keys of its longest proper prefix among them, or -1; ids not
// in keys get -1. It also returns how many bytes it compared outside the
// sort (at most twice the keys' total length). Following the links from a key visits every key that
// prefixes it, longest first. In sorted order, the keys prefixing a key
// are those on a stack of the keys before it that form a chain of
// prefixes, so one pass does it; the pass looks at each key's bytes a
// bounded number of times, and the sort takes O(n log n) comparisons.
func prefixLinks(n int, keys []int32, key func(int32) string) (link []int32, compared int) {
	sorted := append([]int32(nil), keys...)
	sortByKey(sorted, key)
	link = make([]int32, n)
	for i := range link {
		link[i] = -1
	}
	var stack []int32
	for _, id := range sorted {
		s := key(id)
		for len(stack) > 0 {
			top := key(stack[len(stack)-1])
			if len(top) <= len(s) {
				compared += len(top) // an upper bound on HasPrefix's work
				if strings.HasPrefix(s, top) {
					break
				}
			}
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 {
			link[id] = stack[len(stack)-1]
		}
		stack = append(stack, id)
	}
	return link, compared
}

// reverseVocab returns a vocab whose piece i is piece i of v reversed.
func reverseVocab(v *vocab) vocab {
	var b strings.Builder
	b.Grow(len(v.data))
	for i := 0; i < v.len(); i++ {
		p := v.piece(i)
		for j := len(p) - 1; j >= 0; j-- {
			b.WriteByte(p[j])
		}
	}
	return vocab{data: b.String(), off: v.off}
}

func sortByKey(ids []int32, key func(int32) string) {
	slices.SortFunc(ids, func(a, b int32) int { return strings.Compare(key(a), key(b)) })
}

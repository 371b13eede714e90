package tokenizer

import "math"

// pairTable maps a pair of merge ids to the piece they merge into. It is an
// open-addressing hash table with linear probing: one lookup per candidate
// pair is the encoder's hottest operation, and a flat table of 16-byte
// slots costs about one cache miss per lookup.
type pairTable struct {
	slots []pairSlot
	shift uint // 64 - log2(len(slots))
	n     int
}

type pairSlot struct {
	key   uint64 // pairKey(left, right); emptyKey when free
	id    int32
	score float32
}

// emptyKey cannot be a pairKey: merge ids are below 1<<31.
const emptyKey = math.MaxUint64

func pairKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

func newPairTable(capacity int) *pairTable {
	size := 16
	for size*3 < capacity*4 { // load factor at most 3/4
		size *= 2
	}
	t := &pairTable{slots: make([]pairSlot, size), shift: uint(64 - log2(size))}
	for i := range t.slots {
		t.slots[i].key = emptyKey
	}
	return t
}

func log2(n int) int {
	k := 0
	for 1<<k < n {
		k++
	}
	return k
}

func (t *pairTable) index(key uint64) uint64 {
	return (key * 0x9E3779B97F4A7C15) >> t.shift // Fibonacci hashing
}

// put sets the target of key, replacing an earlier one.
func (t *pairTable) put(key uint64, id int32, score float32) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == emptyKey {
			t.n++
		} else if s.key != key {
			continue
		}
		*s = pairSlot{key: key, id: id, score: score}
		return
	}
}

func (t *pairTable) grow() {
	old := t.slots
	*t = *newPairTable(len(old))
	for _, s := range old {
		if s.key != emptyKey {
			t.put(s.key, s.id, s.score)
		}
	}
}

// get returns the slot for key, or nil.
func (t *pairTable) get(key uint64) *pairSlot {
	mask := uint64(len(t.slots) - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == key {
			return s
		}
		if s.key == emptyKey {
			return nil
		}
	}
}

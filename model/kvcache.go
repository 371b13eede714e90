package model

import (
	"fmt"
	"math"
)

// KVMemory is model.py's KVMemory/Memory (180-206, 805-844): for every layer a
// preallocated key and value buffer of SequenceLen rows per slot, and one step
// per slot (the number of rows written). Keys are stored after RoPE, so a
// cached row never needs recomputing.
//
// Unlike model.py, the memory also remembers which rows hold pad tokens, so
// that a pad written by an earlier call stays masked as a key: this makes
// incremental decoding give the same logits as one full pass (semantics §4).
type KVMemory struct {
	Slots, SeqLen, KVHeads, KeySize int

	k, v  [][]float32 // per layer: [slot][kv head][row][K]
	step  []int       // per slot
	keyOK [][]bool    // per slot, per row: token > pad_token

	shards []*KVMemory // NewTP's model: each shard's memory (tp.go)
}

// KVMemoryBytes returns what NewKVMemory(c, slots, seqLen) allocates, in
// bytes: keys and values in float32 for every layer, and a pad flag per row.
// It is a float64 so that absurd sizes compare instead of overflowing.
func KVMemoryBytes(c *Config, slots, seqLen int) float64 {
	rows := float64(slots) * float64(seqLen)
	return rows*float64(c.NumLayers)*2*float64(c.NumKVHeads*c.KeySize)*4 + rows
}

// MaxKVContext returns the most rows per slot whose KV memory for slots
// slots fits in limit bytes (0 if not even one row fits).
func MaxKVContext(c *Config, slots int, limit float64) int {
	per := KVMemoryBytes(c, slots, 1)
	if per <= 0 || limit < per {
		return 0
	}
	return int(min(limit/per, math.MaxInt32))
}

// NewKVMemory allocates memory for the given number of slots (sequences that
// can be decoded together) of seqLen rows each. seqLen ≤ 0 means the model's
// sequence_len.
func NewKVMemory(c *Config, slots, seqLen int) (*KVMemory, error) {
	if seqLen <= 0 {
		seqLen = c.SequenceLen
	}
	if slots <= 0 {
		return nil, fmt.Errorf("model: KV memory needs at least one slot, got %d", slots)
	}
	row := c.NumKVHeads * c.KeySize
	per := float64(slots) * float64(seqLen) * float64(row)
	if per*float64(c.NumLayers)*8 > math.MaxInt64/2 || per > math.MaxInt32*16 {
		return nil, fmt.Errorf("model: KV memory of %d slots × %d rows is too large", slots, seqLen)
	}
	m := &KVMemory{Slots: slots, SeqLen: seqLen, KVHeads: c.NumKVHeads, KeySize: c.KeySize}
	n := slots * seqLen * row
	m.k = make([][]float32, c.NumLayers)
	m.v = make([][]float32, c.NumLayers)
	for l := range m.k {
		m.k[l] = make([]float32, n)
		m.v[l] = make([]float32, n)
	}
	m.step = make([]int, slots)
	m.keyOK = make([][]bool, slots)
	for s := range m.keyOK {
		m.keyOK[s] = make([]bool, seqLen)
	}
	return m, nil
}

// Bytes returns the memory's size in bytes.
func (m *KVMemory) Bytes() int64 {
	return int64(len(m.k)) * 2 * int64(m.Slots) * int64(m.SeqLen) * int64(m.KVHeads*m.KeySize) * 4
}

// Step returns the number of rows written for a slot.
func (m *KVMemory) Step(slot int) int { return m.step[slot] }

// Reset empties a slot so that a new sequence can start in it. Old rows need
// not be cleared: rows at or past the step are never read (memory_mask).
func (m *KVMemory) Reset(slot int) { m.step[slot] = 0 }

// Truncate rewinds a slot to n rows (n ≤ Step), e.g. to reuse a shared prompt prefix.
func (m *KVMemory) Truncate(slot, n int) error {
	if n < 0 || n > m.step[slot] {
		return fmt.Errorf("model: cannot truncate slot %d from %d to %d rows", slot, m.step[slot], n)
	}
	m.step[slot] = n
	return nil
}

// head returns layer l's keys and values of one kv head of a slot:
// [SeqLen][K] each. A head's rows are contiguous, so attention reads them
// as one matrix (the scores' weights, then the output's).
func (m *KVMemory) head(l, slot, kvh int) (k, v []float32) {
	n := m.SeqLen * m.KeySize
	o := (slot*m.KVHeads + kvh) * n
	return m.k[l][o : o+n], m.v[l][o : o+n]
}

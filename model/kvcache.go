package model

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/tensor"
)

// PageRows is the number of token positions (rows) in one page of KV
// memory. 16 is the small end of the usual 16–64: a sequence wastes at
// most 15 rows of its last page, a page of one kv head is still one
// contiguous run of 16·K elements (4 KiB at K = 128 in f16) for the
// attention's gather, and a slot's page table stays short (512 entries at
// 8192 tokens). Prefix sharing is not coarsened by it: a page matched only
// in part is copied, not shared (see Attach).
const PageRows = 16

// KVMemory is model.py's KVMemory/Memory (180-206, 805-844) kept in pages:
// a pool of fixed-size pages, each holding PageRows positions of keys and
// values for every layer and kv head, and per slot (a sequence being
// decoded) a page table and a step (the number of rows written). Keys are
// stored after RoPE, so a cached row never needs recomputing.
//
// Pages are reference counted: a slot's page table holds one reference to
// each of its pages, and whoever shares pages between slots (the runner's
// prefix cache) holds its own with Retain. A page with more than one
// reference is read-only: Forward copies it before writing into it. Since
// a page's contents are a function of the tokens up to its last row (keys
// and values of a token depend only on the tokens before it, bit for bit:
// incremental decoding equals one full pass), two sequences with the same
// prefix may share its pages.
//
// Keys and values are stored as KType and VType (F32, F16, BF16 or Q8_0,
// row by row); attention decodes the rows it reads back to float32, so its
// result is float32 attention over the decoded stored values.
//
// Unlike model.py, the memory also remembers which rows hold pad tokens, so
// that a pad written by an earlier call stays masked as a key: this makes
// incremental decoding give the same logits as one full pass (semantics §4).
type KVMemory struct {
	Slots, SeqLen, KVHeads, KeySize int
	KType, VType                    tensor.DType

	layers     int
	kRow, vRow int      // bytes of one row of one kv head
	k, v       [][]byte // per layer: [page][kv head][PageRows][row bytes]
	*kvBook             // which pages hold what; NewTP's shards share one

	shards []*KVMemory // NewTP's model: each shard's memory (tp.go)
}

// kvBook is the bookkeeping of a memory's pages, apart from their keys
// and values so that the shards of a NewTP model (each with its own kv
// heads) share it: a page, a page table or a step then means the same in
// every shard, and Attach, Reset or Truncate act on all at once.
type kvBook struct {
	keyOK []bool  // [page][PageRows]: token > pad_token
	refs  []int32 // per page
	free  []int   // free pages, a stack
	table [][]int // per slot: its pages in row order
	step  []int   // per slot
	// grouped is set while a NewTP group's Forward runs its shards: the
	// group took the call's pages, wrote the pad flags and advances the
	// steps; each shard only writes its rows.
	grouped bool
	// mirror is set once MirrorSlot or CopyPage was used: the pages are
	// another memory's to take (see MirrorSlot).
	mirror bool
	mems   []*KVMemory // the memories over this book, whose pages a copy copies
}

// KVOptions sizes a KV memory.
type KVOptions struct {
	Slots int
	// SeqLen is the most rows of one slot (≤ 0: the model's sequence_len).
	SeqLen int
	// Pages is the pool's size (0: enough for every slot's whole SeqLen,
	// KVPages(Slots, SeqLen)).
	Pages int
	// KType and VType are the element types of keys and values: F32 (the
	// zero value), F16, BF16 or Q8_0 (which needs a key size that is a
	// multiple of 32).
	KType, VType tensor.DType
}

// CheckKVType reports whether t can store keys or values of key size K.
func CheckKVType(t tensor.DType, K int) error {
	switch t {
	case tensor.F32, tensor.F16, tensor.BF16:
		return nil
	case tensor.Q8_0:
		if K%tensor.Q8BlockSize != 0 {
			return fmt.Errorf("model: a q8_0 KV memory needs a key size that is a multiple of %d, not %d", tensor.Q8BlockSize, K)
		}
		return nil
	}
	return fmt.Errorf("model: %v is not a KV memory type (f32, f16, bf16, q8_0)", t)
}

// KVPages returns the pages that slots sequences of seqLen rows each take.
func KVPages(slots, seqLen int) int {
	return slots * ((seqLen + PageRows - 1) / PageRows)
}

// KVPageBytes returns the bytes of one page of KV memory for c with keys
// of type kt and values of type vt: PageRows rows of every layer and kv
// head, and a pad flag per row. It is a float64 so that absurd sizes
// compare instead of overflowing (an unusable type counts as float32).
func KVPageBytes(c *Config, kt, vt tensor.DType) float64 {
	rb := func(t tensor.DType) float64 {
		n, err := t.RowBytes(c.KeySize)
		if err != nil {
			n = 4 * c.KeySize
		}
		return float64(n)
	}
	return PageRows * (float64(c.NumLayers)*float64(c.NumKVHeads)*(rb(kt)+rb(vt)) + 1)
}

// KVMemoryBytes returns what NewKVMemory(c, slots, seqLen) allocates, in
// bytes: float32 keys and values for every layer in pages of PageRows
// rows, and a pad flag per row.
func KVMemoryBytes(c *Config, slots, seqLen int) float64 {
	return float64(KVPages(slots, seqLen)) * KVPageBytes(c, tensor.F32, tensor.F32)
}

// MaxKVContext returns the most rows per slot whose float32 KV memory for
// slots slots fits in limit bytes (0 if not even one page fits).
func MaxKVContext(c *Config, slots int, limit float64) int {
	return MaxKVContextTypes(c, slots, limit, tensor.F32, tensor.F32)
}

// MaxKVContextTypes is MaxKVContext for keys of type kt and values of type
// vt, in whole pages.
func MaxKVContextTypes(c *Config, slots int, limit float64, kt, vt tensor.DType) int {
	per := float64(slots) * KVPageBytes(c, kt, vt)
	if per <= 0 || limit < per {
		return 0
	}
	return int(min(limit/per, math.MaxInt32/PageRows)) * PageRows
}

// NewKVMemory allocates a float32 memory for the given number of slots
// (sequences that can be decoded together) of seqLen rows each, with pages
// enough for all of them. seqLen ≤ 0 means the model's sequence_len.
func NewKVMemory(c *Config, slots, seqLen int) (*KVMemory, error) {
	return NewPagedKVMemory(c, KVOptions{Slots: slots, SeqLen: seqLen})
}

// NewPagedKVMemory allocates a KV memory as o says. Its shape (layers, kv
// heads, key size) comes from c, so a model cut into shards with fewer kv
// heads gets a memory of its own size.
func NewPagedKVMemory(c *Config, o KVOptions) (*KVMemory, error) {
	seqLen := o.SeqLen
	if seqLen <= 0 {
		seqLen = c.SequenceLen
	}
	if o.Slots <= 0 {
		return nil, fmt.Errorf("model: KV memory needs at least one slot, got %d", o.Slots)
	}
	for _, t := range []tensor.DType{o.KType, o.VType} {
		if err := CheckKVType(t, c.KeySize); err != nil {
			return nil, err
		}
	}
	pages := o.Pages
	if pages <= 0 {
		if float64(o.Slots)*float64(seqLen) > math.MaxInt32*16 {
			return nil, fmt.Errorf("model: KV memory of %d slots × %d rows is too large", o.Slots, seqLen)
		}
		pages = KVPages(o.Slots, seqLen)
	}
	kRow, _ := o.KType.RowBytes(c.KeySize)
	vRow, _ := o.VType.RowBytes(c.KeySize)
	perLayer := float64(pages) * float64(c.NumKVHeads) * PageRows * float64(max(kRow, vRow))
	if perLayer*float64(c.NumLayers)*2 > math.MaxInt64/2 || perLayer > math.MaxInt32*64 || pages > math.MaxInt32/PageRows {
		return nil, fmt.Errorf("model: KV memory of %d pages of %d rows is too large", pages, PageRows)
	}
	b := &kvBook{}
	b.keyOK = make([]bool, pages*PageRows)
	b.refs = make([]int32, pages)
	b.free = make([]int, pages)
	for i := range b.free {
		b.free[i] = pages - 1 - i // page 0 on top: a fresh memory fills in order
	}
	b.table = make([][]int, o.Slots)
	for i := range b.table {
		// Full length up front: a page table that grows while decoding
		// would allocate a generated token's step.
		b.table[i] = make([]int, 0, (seqLen+PageRows-1)/PageRows)
	}
	b.step = make([]int, o.Slots)
	m := &KVMemory{Slots: o.Slots, SeqLen: seqLen, KType: o.KType, VType: o.VType, kvBook: b}
	m.allocRows(c, pages)
	b.mems = []*KVMemory{m}
	return m, nil
}

// allocRows sizes m for c's layers, kv heads and key size and allocates
// the keys and values of pages pages.
func (m *KVMemory) allocRows(c *Config, pages int) {
	m.KVHeads, m.KeySize, m.layers = c.NumKVHeads, c.KeySize, c.NumLayers
	m.kRow, _ = m.KType.RowBytes(c.KeySize)
	m.vRow, _ = m.VType.RowBytes(c.KeySize)
	m.k = make([][]byte, c.NumLayers)
	m.v = make([][]byte, c.NumLayers)
	for l := range m.k {
		m.k[l] = makeAligned(pages * c.NumKVHeads * PageRows * m.kRow)
		m.v[l] = makeAligned(pages * c.NumKVHeads * PageRows * m.vRow)
	}
}

// newKVShard returns a memory of shard config c (its kv heads) over base's
// pages: the same types, pool and book, its own keys and values.
func newKVShard(c *Config, base *KVMemory) *KVMemory {
	m := &KVMemory{Slots: base.Slots, SeqLen: base.SeqLen, KType: base.KType, VType: base.VType, kvBook: base.kvBook}
	m.allocRows(c, base.Pages())
	base.mems = append(base.mems, m)
	return m
}

// preparePages takes the pages a call's inputs need (ErrNoPages, with
// nothing changed, when the pool has too few free ones).
func (m *KVMemory) preparePages(inputs []Input) error {
	if m.mirror {
		return m.checkMirrored(inputs)
	}
	_, err := m.PreparePages(inputs, nil)
	return err
}

// PageCopy is a page PreparePages copied: Src, shared, into Dst, fresh,
// which took its place in a slot's table.
type PageCopy struct{ Dst, Src int }

// PreparePages takes the pages a Forward call of inputs needs, as Forward
// does before it computes (which then finds them taken), and appends the
// copies of shared pages it made to copies: ErrNoPages, with nothing
// changed, when the pool has too few free ones. With the page tables it
// leaves, the copies are all another memory needs to mirror this one's
// pages (MirrorSlot, CopyPage): cluster's leader sends them to the other
// ranks before each call.
func (m *KVMemory) PreparePages(inputs []Input, copies []PageCopy) ([]PageCopy, error) {
	if m.mirror {
		return copies, errors.New("model: PreparePages on a memory that mirrors another's pages")
	}
	need := 0
	for i, in := range inputs {
		if in.Slot < 0 || in.Slot >= m.Slots || len(in.Tokens) > m.SeqLen-m.step[in.Slot] {
			return copies, fmt.Errorf("model: input %d: %d rows after %d in slot %d of %d × %d", i, len(in.Tokens), m.stepOf(in.Slot), in.Slot, m.Slots, m.SeqLen)
		}
		need += m.PagesNeeded(in.Slot, len(in.Tokens))
	}
	if need > m.FreePages() {
		return copies, ErrNoPages
	}
	for _, in := range inputs {
		if len(in.Tokens) == 0 {
			continue // no row to write: no copy either
		}
		if c, ok := m.prepare(in.Slot, len(in.Tokens)); ok {
			copies = append(copies, c)
		}
	}
	return copies, nil
}

// stepOf is Step, or -1 for a slot out of range (for messages).
func (m *KVMemory) stepOf(slot int) int {
	if slot < 0 || slot >= m.Slots {
		return -1
	}
	return m.step[slot]
}

// MirrorSlot sets a slot's page table and step to another memory's of the
// same shape, for a memory that follows that one page for page (a cluster
// follower's: rank 0 takes the pages, PreparePages, and the followers use
// the same ids). The memory then never takes pages of its own: its free
// list is dropped, its references count only page tables (so that Reset
// and Truncate still work), and a Forward whose rows the tables do not
// cover is refused. pages is copied.
func (m *KVMemory) MirrorSlot(slot int, pages []int, step int) error {
	if slot < 0 || slot >= m.Slots {
		return fmt.Errorf("model: MirrorSlot of slot %d of %d", slot, m.Slots)
	}
	if step < 0 || step > m.SeqLen || len(pages) > (m.SeqLen+PageRows-1)/PageRows || step > len(pages)*PageRows {
		return fmt.Errorf("model: MirrorSlot of %d rows in %d pages, for a slot of %d rows", step, len(pages), m.SeqLen)
	}
	for _, p := range pages {
		if p < 0 || p >= len(m.refs) {
			return fmt.Errorf("model: MirrorSlot of page %d of %d", p, len(m.refs))
		}
	}
	m.startMirror()
	for _, p := range m.table[slot] {
		m.refs[p]--
	}
	for _, p := range pages {
		m.refs[p]++
	}
	m.table[slot] = append(m.table[slot][:0], pages...)
	m.step[slot] = step
	return nil
}

// CopyPage copies page src's rows (every layer, kv head and pad flag) to
// page dst, as PreparePages did on the memory this one mirrors (see
// MirrorSlot, which this also makes the memory).
func (m *KVMemory) CopyPage(dst, src int) error {
	if dst < 0 || dst >= len(m.refs) || src < 0 || src >= len(m.refs) {
		return fmt.Errorf("model: CopyPage of page %d to %d, of %d", src, dst, len(m.refs))
	}
	m.startMirror()
	m.copyPage(dst, src)
	return nil
}

// startMirror makes m a mirror: no free pages (it takes none), and
// references that count page tables only.
func (m *KVMemory) startMirror() {
	if m.mirror {
		return
	}
	m.mirror = true
	m.free = m.free[:0:0]
	clear(m.refs)
	for _, t := range m.table {
		for _, p := range t {
			m.refs[p]++
		}
	}
}

// checkMirrored is preparePages for a mirror: the pages were taken by the
// memory it mirrors, and the tables must cover the call's rows.
func (m *KVMemory) checkMirrored(inputs []Input) error {
	for i, in := range inputs {
		if end := m.step[in.Slot] + len(in.Tokens); end > len(m.table[in.Slot])*PageRows {
			return fmt.Errorf("model: input %d: slot %d's %d pages do not hold rows up to %d, and a mirrored memory takes no pages of its own", i, in.Slot, len(m.table[in.Slot]), end)
		}
	}
	return nil
}

// makeAligned returns n zero bytes aligned for float32 (F32 pages are read
// as []float32).
func makeAligned(n int) []byte {
	w := make([]float32, (n+3)/4)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}

// Bytes returns the memory's size in bytes, pad flags included (and, for
// NewTP's model, every shard's keys and values).
func (m *KVMemory) Bytes() int64 {
	b := int64(len(m.keyOK))
	for _, x := range m.mems {
		for l := range x.k {
			b += int64(len(x.k[l]) + len(x.v[l]))
		}
	}
	return b
}

// Pages returns the pool's number of pages.
func (m *KVMemory) Pages() int { return len(m.refs) }

// FreePages returns the number of pages no one references.
func (m *KVMemory) FreePages() int { return len(m.free) }

// Step returns the number of rows written for a slot.
func (m *KVMemory) Step(slot int) int { return m.step[slot] }

// PageTable returns a slot's pages in row order: row r is in page
// PageTable(slot)[r/PageRows]. The slice is the memory's; do not change it.
func (m *KVMemory) PageTable(slot int) []int { return m.table[slot] }

// Refs returns the references held to page p.
func (m *KVMemory) Refs(p int) int { return int(m.refs[p]) }

// Retain adds a reference to page p, which must be in use.
func (m *KVMemory) Retain(p int) {
	if m.refs[p] <= 0 {
		panic(fmt.Sprintf("model: Retain of free KV page %d", p))
	}
	m.refs[p]++
}

// Release drops a reference to page p; the page is free when none is left.
func (m *KVMemory) Release(p int) {
	switch m.refs[p] {
	case 0:
		panic(fmt.Sprintf("model: Release of free KV page %d", p))
	case 1:
		if !m.mirror { // a mirror's pages are taken by the memory it mirrors
			m.free = append(m.free, p)
		}
	}
	m.refs[p]--
}

func (m *KVMemory) alloc() int {
	p := m.free[len(m.free)-1]
	m.free = m.free[:len(m.free)-1]
	m.refs[p] = 1
	return p
}

// Reset empties a slot so that a new sequence can start in it, releasing
// its pages.
func (m *KVMemory) Reset(slot int) {
	for _, p := range m.table[slot] {
		m.Release(p)
	}
	m.table[slot] = m.table[slot][:0]
	m.step[slot] = 0
}

// Truncate rewinds a slot to n rows (n ≤ Step), e.g. to reuse a shared
// prompt prefix, releasing the pages past row n.
func (m *KVMemory) Truncate(slot, n int) error {
	if n < 0 || n > m.step[slot] {
		return fmt.Errorf("model: cannot truncate slot %d from %d to %d rows", slot, m.step[slot], n)
	}
	keep := (n + PageRows - 1) / PageRows
	for _, p := range m.table[slot][keep:] {
		m.Release(p)
	}
	m.table[slot] = m.table[slot][:keep]
	m.step[slot] = n
	return nil
}

// Attach starts an empty slot on rows rows already in memory: the pages
// (each retained for the slot) hold its first rows rows, the last one
// perhaps only in part. They may be shared: the slot never writes into a
// page another holder references (Forward copies it first).
func (m *KVMemory) Attach(slot int, pages []int, rows int) error {
	if m.step[slot] != 0 || len(m.table[slot]) != 0 {
		return fmt.Errorf("model: Attach to slot %d, which holds %d rows", slot, m.step[slot])
	}
	if rows < 0 || rows > m.SeqLen || (rows+PageRows-1)/PageRows != len(pages) {
		return fmt.Errorf("model: Attach of %d rows in %d pages", rows, len(pages))
	}
	for _, p := range pages {
		if p < 0 || p >= len(m.refs) || m.refs[p] <= 0 {
			return fmt.Errorf("model: Attach of page %d, which is not in use", p)
		}
	}
	for _, p := range pages {
		m.Retain(p)
	}
	m.table[slot] = append(m.table[slot][:0], pages...)
	m.step[slot] = rows
	return nil
}

// ReplacePage swaps page i of a slot's table for page p, whose rows must
// hold the same values (the prefix cache found the same tokens' page
// already in memory), so that only one copy stays.
func (m *KVMemory) ReplacePage(slot, i, p int) {
	if old := m.table[slot][i]; old != p {
		m.Retain(p)
		m.table[slot][i] = p
		m.Release(old)
	}
}

// PagesNeeded returns how many free pages appending n rows to a slot
// takes: the new pages, and a copy of a shared last page written into.
func (m *KVMemory) PagesNeeded(slot, n int) int {
	s := m.step[slot]
	need := (s+n+PageRows-1)/PageRows - len(m.table[slot])
	if s%PageRows != 0 && n > 0 && m.refs[m.table[slot][s/PageRows]] > 1 {
		need++
	}
	return max(need, 0)
}

// WritePage returns the page a slot's next row goes into if that page
// is already in its table and shared (Forward would copy it), else -1.
func (m *KVMemory) WritePage(slot int) int {
	s := m.step[slot]
	if s%PageRows == 0 || s/PageRows >= len(m.table[slot]) {
		return -1
	}
	if p := m.table[slot][s/PageRows]; m.refs[p] > 1 {
		return p
	}
	return -1
}

// ErrNoPages is returned by Forward when the pool has too few free pages
// for the call: the caller frees some (evicts cached pages, or preempts a
// sequence) and calls again.
var ErrNoPages = errors.New("model: the KV memory has no free page left")

// prepare makes slot's table cover rows [step, step+n) with pages the slot
// alone holds, copying a shared last page and allocating new ones, and
// returns the copy it made, if any. The caller checked PagesNeeded against
// FreePages.
func (m *KVMemory) prepare(slot, n int) (c PageCopy, copied bool) {
	s := m.step[slot]
	t := m.table[slot]
	if s%PageRows != 0 {
		if old := t[s/PageRows]; m.refs[old] > 1 {
			p := m.alloc()
			m.copyPage(p, old)
			t[s/PageRows] = p
			m.Release(old)
			c, copied = PageCopy{Dst: p, Src: old}, true
		}
	}
	for len(t) < (s+n+PageRows-1)/PageRows {
		t = append(t, m.alloc())
	}
	m.table[slot] = t
	return c, copied
}

// copyPage copies page src to dst, every layer and head of every memory
// over the book, and its pad flags.
func (m *KVMemory) copyPage(dst, src int) {
	for _, x := range m.mems {
		kb, vb := x.KVHeads*PageRows*x.kRow, x.KVHeads*PageRows*x.vRow
		for l := 0; l < x.layers; l++ {
			copy(x.k[l][dst*kb:(dst+1)*kb], x.k[l][src*kb:(src+1)*kb])
			copy(x.v[l][dst*vb:(dst+1)*vb], x.v[l][src*vb:(src+1)*vb])
		}
	}
	copy(m.keyOK[dst*PageRows:(dst+1)*PageRows], m.keyOK[src*PageRows:(src+1)*PageRows])
}

// setKeyOK records whether row pos of slot holds a real token.
func (m *KVMemory) setKeyOK(slot, pos int, ok bool) {
	m.keyOK[m.table[slot][pos/PageRows]*PageRows+pos%PageRows] = ok
}

// offset returns the byte offset of row pos of kv head kvh of a slot in a
// layer's key (rb = kRow) or value (rb = vRow) pool.
func (m *KVMemory) offset(slot, kvh, pos, rb int) int {
	p := m.table[slot][pos/PageRows]
	return ((p*m.KVHeads+kvh)*PageRows + pos%PageRows) * rb
}

// write stores the key and value of row pos of kv head kvh of a slot in
// layer l, rounded to the memory's types. Rows of different positions may
// be written concurrently.
func (m *KVMemory) write(l, slot, kvh, pos int, k, v []float32) {
	encodeKV(m.k[l][m.offset(slot, kvh, pos, m.kRow):][:m.kRow], m.KType, k)
	encodeKV(m.v[l][m.offset(slot, kvh, pos, m.vRow):][:m.vRow], m.VType, v)
}

// gather decodes rows [0, n) of kv head kvh of a slot in layer l into km
// and vm (n×K float32 each) and their pad flags into ok: one contiguous
// matrix each, as attention multiplies by them. Copying keeps the sums of
// attention where they were before pages (one product over all rows), so
// the page layout, the sharing and the batch never change a bit.
func (m *KVMemory) gather(l, slot, kvh, n int, km, vm []float32, ok []bool) {
	K := m.KeySize
	t := m.table[slot]
	for r0 := 0; r0 < n; r0 += PageRows {
		p, rows := t[r0/PageRows], min(PageRows, n-r0)
		o := (p*m.KVHeads + kvh) * PageRows
		decodeKV(km[r0*K:(r0+rows)*K], m.KType, m.k[l][o*m.kRow:(o+rows)*m.kRow])
		decodeKV(vm[r0*K:(r0+rows)*K], m.VType, m.v[l][o*m.vRow:(o+rows)*m.vRow])
		copy(ok[r0:r0+rows], m.keyOK[p*PageRows:p*PageRows+rows])
	}
}

// directKeys reports whether attention may multiply queries by the stored
// keys in their pages: the types whose matrix kernels compute exactly
// what the F32 kernels compute on the decoded values (they widen each
// element and then do the same sums; TestKVDirectScoresEqualGathered).
// Q8_0's kernels scale each block's sum instead, so its keys are decoded
// first.
func (m *KVMemory) directKeys() bool {
	return m.KType == tensor.F32 || m.KType == tensor.F16 || m.KType == tensor.BF16
}

// directValues reports whether attention may multiply its weights by the
// stored values in their pages: the types kernels.AddInOut takes, which
// adds a product's rows to the output one after another, so that page by
// page gives the bits of one product over the gathered rows.
func (m *KVMemory) directValues() bool {
	return m.VType == tensor.F32 || m.VType == tensor.F16 || m.VType == tensor.BF16
}

// gatherOK copies the pad flags of rows [0, n) of a slot into ok.
func (m *KVMemory) gatherOK(slot, n int, ok []bool) {
	t := m.table[slot]
	for r0 := 0; r0 < n; r0 += PageRows {
		p, rows := t[r0/PageRows], min(PageRows, n-r0)
		copy(ok[r0:r0+rows], m.keyOK[p*PageRows:p*PageRows+rows])
	}
}

// pageValues computes o = w·V for the G weight rows w (G×n) over rows
// [0, n) of kv head kvh of a slot in layer l, page by page with the values
// where they are stored (directValues): o is G×K, tmp scratch of
// G·PageRows.
func (m *KVMemory) pageValues(l, slot, kvh, n int, w []float32, G int, o, tmp []float32) {
	K := m.KeySize
	t := m.table[slot]
	clear(o[:G*K])
	for r0 := 0; r0 < n; r0 += PageRows {
		p, rows := t[r0/PageRows], min(PageRows, n-r0)
		off := (p*m.KVHeads + kvh) * PageRows
		for g := 0; g < G; g++ {
			copy(tmp[g*rows:(g+1)*rows], w[g*n+r0:g*n+r0+rows])
		}
		vals := kernels.Mat{Type: m.VType, Out: K, In: rows, Transposed: true, Data: m.v[l][off*m.vRow : (off+rows)*m.vRow]}
		kernels.AddInOut(o, tmp, G, &vals)
	}
}

// gatherValues is gather for the values and pad flags only.
func (m *KVMemory) gatherValues(l, slot, kvh, n int, vm []float32, ok []bool) {
	K := m.KeySize
	t := m.table[slot]
	for r0 := 0; r0 < n; r0 += PageRows {
		p, rows := t[r0/PageRows], min(PageRows, n-r0)
		o := (p*m.KVHeads + kvh) * PageRows
		decodeKV(vm[r0*K:(r0+rows)*K], m.VType, m.v[l][o*m.vRow:(o+rows)*m.vRow])
		copy(ok[r0:r0+rows], m.keyOK[p*PageRows:p*PageRows+rows])
	}
}

// pageScores computes scores = q·kᵀ for the G query vectors q over rows
// [0, n) of kv head kvh of a slot in layer l, page by page with the keys
// where they are stored (directKeys): scores is G×n, tmp scratch of
// G·PageRows. Each score is one dot product, whatever the page it is in.
func (m *KVMemory) pageScores(l, slot, kvh, n int, q []float32, G int, scores, tmp []float32) {
	K := m.KeySize
	t := m.table[slot]
	for r0 := 0; r0 < n; r0 += PageRows {
		p, rows := t[r0/PageRows], min(PageRows, n-r0)
		o := (p*m.KVHeads + kvh) * PageRows
		keys := kernels.Mat{Type: m.KType, Out: rows, In: K, Data: m.k[l][o*m.kRow : (o+rows)*m.kRow]}
		kernels.MatMulRows(tmp, q, G, &keys, 0, rows)
		for g := 0; g < G; g++ {
			copy(scores[g*n+r0:g*n+r0+rows], tmp[g*rows:(g+1)*rows])
		}
	}
}

// encodeKV rounds one row to type t into dst (exactly the row's bytes).
func encodeKV(dst []byte, t tensor.DType, src []float32) {
	switch t {
	case tensor.F32:
		copy(unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(dst))), len(src)), src)
	case tensor.F16:
		h := halves(dst, len(src))
		for i, x := range src {
			h[i] = tensor.FloatToHalf(x)
		}
	case tensor.BF16:
		h := halves(dst, len(src))
		for i, x := range src {
			h[i] = tensor.FloatToBF16(x)
		}
	default:
		// Q8_0 (checked at construction): ggml's quantize_row_q8_0.
		_, _ = tensor.EncodeRow(dst[:0], t, src)
	}
}

// decodeKV decodes len(dst) values of type t from src (whole rows).
func decodeKV(dst []float32, t tensor.DType, src []byte) {
	kernels.Widen(dst, t, src)
}

// halves views the first n 16-bit elements of src, in the machine's
// byte order (the memory is never written to a file).
func halves(src []byte, n int) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(src))), n)[:n:n]
}

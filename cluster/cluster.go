// Package cluster is the command channel of a model whose shards run as
// separate processes, the ranks of an MPI job (`mpirun -np N grok …`).
//
// Rank 0, the leader, runs the command the user gave (run, logits, bench,
// serve) unchanged, over its own shard; its LanguageModel's Hook is a
// Leader, which broadcasts each Forward call before it computes. The
// other ranks, the followers, loop in Follower.Run: receive a call and run
// the same Forward on their own shard and their own KV memory (of the same
// slots, pages and types, their kv heads only), taking part in its
// collectives.
//
// The followers' memories mirror rank 0's page for page: the leader first
// has rank 0's memory take the pages the call needs
// (KVMemory.PreparePages), then sends the memory's shape, the page copies
// that made (a shared page a slot writes into, e.g. where a prefix
// cache's match ends mid-page), every slot's step, the page table of each
// slot whose table changed since the last call (Reset, Truncate, a prefix
// cache's Attach or ReplacePage, the pages just taken), and per input the
// slot, the tokens and AllLogits. A follower makes the same copies, sets
// those tables and steps (KVMemory.MirrorSlot: it never takes pages of its
// own) and runs the call. Every write to a page then happens on every rank
// at once, into the same page id, so a page rank 0 keeps alive between
// calls (the runner's prefix cache) holds the same rows on every rank and
// the cache works under mpirun as in one process.
//
// While idle the leader sends a heartbeat every second, which every rank
// answers with a barrier, so that with a comm whose collectives time out
// (comm/mpi) a dead or stalled rank ends the job within that timeout
// whether or not requests are running. Close sends shutdown.
//
// Agree checks, before any of that, that the ranks loaded the same model
// and run the same build.
package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// HeartbeatEvery is how often an idle leader tells the followers it is alive.
const HeartbeatEvery = time.Second

const (
	magic = 0x43_4B_52_47 // "GRKC"

	kindForward   = 1 // the payload: see Leader.BeginForward
	kindHeartbeat = 2
	kindShutdown  = 3

	headerBytes = 48
	// maxPayload bounds a call's description: 4 bytes a token or page
	// table entry, so far more than any batch's prompt chunk and its
	// memory's tables.
	maxPayload = 1 << 30

	// unchanged, for a slot's table length, says the follower holds it.
	unchanged = math.MaxUint32
)

// header is the fixed part of every command, broadcast first. A forward
// call's names the KV memory and its shape (slots, rows a slot, pages,
// key and value types), so that a follower allocates its own the first
// time it sees it.
type header struct {
	kind, seq, mem, slots, seqLen, payload, code uint32
	pages, ktype, vtype                          uint32
}

func (h *header) encode(b []byte) {
	for i, v := range []uint32{magic, h.kind, h.seq, h.mem, h.slots, h.seqLen, h.payload, h.code, h.pages, h.ktype, h.vtype} {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
}

// kvOptions is the memory shape h names.
func (h *header) kvOptions() model.KVOptions {
	return model.KVOptions{Slots: int(h.slots), SeqLen: int(h.seqLen), Pages: int(h.pages),
		KType: tensor.DType(h.ktype), VType: tensor.DType(h.vtype)}
}

func (h *header) decode(b []byte) error {
	u := func(i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }
	if u(0) != magic {
		return fmt.Errorf("cluster: command %#x without the magic: the ranks disagree on the protocol", u(0))
	}
	*h = header{kind: u(1), seq: u(2), mem: u(3), slots: u(4), seqLen: u(5), payload: u(6), code: u(7),
		pages: u(8), ktype: u(9), vtype: u(10)}
	return nil
}

// Leader is rank 0's end of the channel: a model.ForwardHook.
type Leader struct {
	c  comm.Comm
	mu sync.Mutex // held from BeginForward to EndForward, and by a heartbeat

	seq    uint32
	mems   []*liveMem
	nextID uint32
	last   time.Time
	beats  int
	closed bool
	err    error // the first failed send: the group is then aborted

	hdr     [headerBytes]byte
	payload []byte

	stop chan struct{}
	done chan struct{}
}

// liveMem is a KV memory the followers hold a copy of: when the leader's
// is collected, theirs are dropped.
type liveMem struct {
	id  uint32
	mem weak.Pointer[model.KVMemory]
	// tables are the slots' page tables as the followers hold them: as
	// the last call sent them.
	tables [][]int
	// copies are the page copies rank 0's memory made that the followers
	// have yet to make (a call that took pages but was not sent carries
	// them to the next).
	copies []model.PageCopy
}

// NewLeader starts rank 0's side over c and its heartbeat, one every
// `every` while no Forward runs (≤ 0: HeartbeatEvery).
func NewLeader(c comm.Comm, every time.Duration) *Leader {
	if every <= 0 {
		every = HeartbeatEvery
	}
	l := &Leader{c: c, last: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go l.heartbeat(every)
	return l
}

var _ model.ForwardHook = (*Leader)(nil)

func (l *Leader) heartbeat(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		if !l.mu.TryLock() {
			continue // a Forward runs: its collectives show the ranks alive
		}
		if !l.closed && l.err == nil && time.Since(l.last) >= every {
			if err := l.send(header{kind: kindHeartbeat}, nil); err == nil {
				l.beats++
				l.fail(l.c.Barrier())
			}
			l.last = time.Now()
		}
		l.mu.Unlock()
	}
}

// Heartbeats returns the number of heartbeats sent.
func (l *Leader) Heartbeats() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.beats
}

// fail records the first error of the group and aborts it: after a failed
// collective the ranks no longer agree on what comes next.
func (l *Leader) fail(err error) error {
	if err != nil && l.err == nil {
		l.err = err
		l.c.Abort(1)
	}
	return err
}

func (l *Leader) send(h header, payload []byte) error {
	l.seq++
	h.seq = l.seq
	h.payload = uint32(len(payload))
	h.encode(l.hdr[:])
	if err := l.c.Bcast(l.hdr[:], 0); err != nil {
		return l.fail(err)
	}
	if len(payload) > 0 {
		if err := l.c.Bcast(payload, 0); err != nil {
			return l.fail(err)
		}
	}
	return nil
}

// memID returns mem's entry (its id on the followers), and the ids of
// memories the leader has dropped since the last call.
func (l *Leader) memID(mem *model.KVMemory) (lm *liveMem, dropped []uint32) {
	kept := l.mems[:0]
	for _, m := range l.mems {
		p := m.mem.Value()
		if p == nil {
			dropped = append(dropped, m.id)
			continue
		}
		kept = append(kept, m)
	}
	l.mems = kept
	for _, m := range l.mems {
		if m.mem.Value() == mem {
			return m, dropped
		}
	}
	l.nextID++
	m := &liveMem{id: l.nextID, mem: weak.Make(mem), tables: make([][]int, mem.Slots)}
	l.mems = append(l.mems, m)
	return m, dropped
}

// record keeps the slots' page tables as sent.
func (m *liveMem) record(mem *model.KVMemory) {
	for slot := range m.tables {
		if t := mem.PageTable(slot); !slices.Equal(t, m.tables[slot]) {
			m.tables[slot] = append(m.tables[slot][:0], t...)
		}
	}
}

// BeginForward takes the call's pages in mem and sends the call to the
// followers. It holds the channel until EndForward, so that no heartbeat
// falls between the call's collectives.
//
// The payload, in little-endian uint32s: the number of memories dropped
// and their ids; the number of page copies and each one's (dst, src);
// per slot its step and its page table's length, then its pages, or
// unchanged when the follower holds it; the number of inputs and per
// input its slot, start step, AllLogits (0 or 1), token count and tokens.
func (l *Leader) BeginForward(mem *model.KVMemory, inputs []model.Input) error {
	l.mu.Lock()
	if l.err != nil || l.closed {
		err := l.err
		if err == nil {
			err = errors.New("cluster: the followers were shut down")
		}
		l.mu.Unlock()
		return err
	}
	lm, dropped := l.memID(mem)
	// The pages first, here: the followers take none of their own, they
	// use the ids rank 0's memory chose.
	var err error
	if lm.copies, err = mem.PreparePages(inputs, lm.copies); err != nil {
		l.mu.Unlock()
		return err
	}
	id := lm.id
	p := l.payload[:0]
	p = binary.LittleEndian.AppendUint32(p, uint32(len(dropped)))
	for _, d := range dropped {
		p = binary.LittleEndian.AppendUint32(p, d)
	}
	p = binary.LittleEndian.AppendUint32(p, uint32(len(lm.copies)))
	for _, c := range lm.copies {
		p = binary.LittleEndian.AppendUint32(p, uint32(c.Dst))
		p = binary.LittleEndian.AppendUint32(p, uint32(c.Src))
	}
	// Every slot's step, not only the inputs', and the tables that
	// changed: a slot rank 0 reset, truncated or attached cached pages to
	// since is the same on the followers before this call.
	for slot := range mem.Slots {
		p = binary.LittleEndian.AppendUint32(p, uint32(mem.Step(slot)))
		t := mem.PageTable(slot)
		if slices.Equal(t, lm.tables[slot]) {
			p = binary.LittleEndian.AppendUint32(p, unchanged)
			continue
		}
		p = binary.LittleEndian.AppendUint32(p, uint32(len(t)))
		for _, pg := range t {
			p = binary.LittleEndian.AppendUint32(p, uint32(pg))
		}
	}
	p = binary.LittleEndian.AppendUint32(p, uint32(len(inputs)))
	for _, in := range inputs {
		all := uint32(0)
		if in.AllLogits {
			all = 1
		}
		for _, v := range []int{in.Slot, mem.Step(in.Slot), int(all), len(in.Tokens)} {
			p = binary.LittleEndian.AppendUint32(p, uint32(v))
		}
		for _, t := range in.Tokens {
			p = binary.LittleEndian.AppendUint32(p, uint32(t))
		}
	}
	l.payload = p
	if len(p) > maxPayload {
		l.mu.Unlock()
		return fmt.Errorf("cluster: a forward call of %d bytes is too large to send", len(p))
	}
	h := header{kind: kindForward, mem: id, slots: uint32(mem.Slots), seqLen: uint32(mem.SeqLen),
		pages: uint32(mem.Pages()), ktype: uint32(mem.KType), vtype: uint32(mem.VType)}
	if err := l.send(h, p); err != nil {
		l.mu.Unlock()
		return err
	}
	lm.record(mem)
	lm.copies = lm.copies[:0]
	return nil
}

// EndForward releases the channel.
func (l *Leader) EndForward() {
	l.last = time.Now()
	l.mu.Unlock()
}

// Close stops the heartbeat and tells the followers to exit with code.
// Further Forward calls fail.
func (l *Leader) Close(code int) error {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.err != nil {
		return l.err
	}
	return l.send(header{kind: kindShutdown, code: uint32(code)}, nil)
}

// Forwarder is the follower's model: a shard's LanguageModel.
type Forwarder interface {
	Forward(mem *model.KVMemory, inputs []model.Input) ([]float32, error)
}

// Follower is the state of a follower rank: the KV memories it mirrors.
type Follower struct {
	c      comm.Comm
	lm     Forwarder
	newMem func(model.KVOptions) (*model.KVMemory, error)
	mems   map[uint32]*model.KVMemory
	seq    uint32
	inputs []model.Input
	tokens []int
	table  []int

	// Calls and Heartbeats count the commands followed.
	Calls, Heartbeats int
}

// NewFollower returns the follower side over c for the shard lm; newMem
// allocates the shard's KV memory of the shape of one of the leader's
// (LanguageModel.NewPagedKVMemory).
func NewFollower(c comm.Comm, lm Forwarder, newMem func(model.KVOptions) (*model.KVMemory, error)) *Follower {
	return &Follower{c: c, lm: lm, newMem: newMem, mems: map[uint32]*model.KVMemory{}}
}

// Memory returns the follower's copy of the leader's memory id (1, 2, … in
// the order the leader first used them), or nil.
func (f *Follower) Memory(id int) *model.KVMemory { return f.mems[uint32(id)] }

// Run follows the leader's commands until it shuts down, and returns the
// exit code it sent. An error means this rank can no longer follow (a
// failed collective, or a command it cannot carry out); the caller should
// abort the group, whose other ranks are waiting on this one.
func (f *Follower) Run() (code int, err error) {
	var hb [headerBytes]byte
	var payload []byte
	for {
		if err := f.c.Bcast(hb[:], 0); err != nil {
			return 1, err
		}
		var h header
		if err := h.decode(hb[:]); err != nil {
			return 1, err
		}
		f.seq++
		if h.seq != f.seq {
			return 1, fmt.Errorf("cluster: command %d after %d: a command was lost", h.seq, f.seq-1)
		}
		if h.payload > maxPayload {
			return 1, fmt.Errorf("cluster: a command of %d bytes", h.payload)
		}
		if h.payload > 0 {
			if cap(payload) < int(h.payload) {
				payload = make([]byte, h.payload)
			}
			payload = payload[:h.payload]
			if err := f.c.Bcast(payload, 0); err != nil {
				return 1, err
			}
		}
		switch h.kind {
		case kindHeartbeat:
			f.Heartbeats++
			if err := f.c.Barrier(); err != nil {
				return 1, err
			}
		case kindShutdown:
			if h.code > math.MaxInt32 {
				return 1, nil
			}
			return int(h.code), nil
		case kindForward:
			f.Calls++
			if err := f.forward(&h, payload); err != nil {
				return 1, err
			}
		default:
			return 1, fmt.Errorf("cluster: unknown command kind %d", h.kind)
		}
	}
}

// forward carries out one Forward call.
func (f *Follower) forward(h *header, p []byte) error {
	next := func() (uint32, error) {
		if len(p) < 4 {
			return 0, errors.New("cluster: a forward call cut short")
		}
		v := binary.LittleEndian.Uint32(p)
		p = p[4:]
		return v, nil
	}
	nd, err := next()
	if err != nil {
		return err
	}
	for range nd {
		d, err := next()
		if err != nil {
			return err
		}
		delete(f.mems, d)
	}
	o := h.kvOptions()
	mem := f.mems[h.mem]
	if mem == nil {
		if mem, err = f.newMem(o); err != nil {
			return fmt.Errorf("cluster: the KV memory of %d slots × %d rows: %w", h.slots, h.seqLen, err)
		}
		f.mems[h.mem] = mem
	}
	if mem.Slots != o.Slots || mem.SeqLen != o.SeqLen || mem.Pages() != o.Pages || mem.KType != o.KType || mem.VType != o.VType {
		return fmt.Errorf("cluster: memory %d is %d × %d in %d pages of %v/%v here, %d × %d in %d pages of %v/%v on rank 0",
			h.mem, mem.Slots, mem.SeqLen, mem.Pages(), mem.KType, mem.VType, o.Slots, o.SeqLen, o.Pages, o.KType, o.VType)
	}
	nc, err := next()
	if err != nil {
		return err
	}
	if int(nc) > len(p)/8 {
		return fmt.Errorf("cluster: a forward call of %d page copies in %d bytes", nc, len(p))
	}
	for range nc {
		dst, _ := next()
		src, _ := next()
		if err := mem.CopyPage(int(dst), int(src)); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if len(p)/8 < mem.Slots {
		return errors.New("cluster: a forward call cut short")
	}
	maxTable := (mem.SeqLen + model.PageRows - 1) / model.PageRows
	for slot := range mem.Slots {
		step, _ := next()
		n, err := next()
		if err != nil {
			return err
		}
		table := mem.PageTable(slot)
		if n != unchanged {
			if int(n) > maxTable || int(n) > len(p)/4 {
				return fmt.Errorf("cluster: slot %d: a page table of %d pages in %d bytes, for %d rows", slot, n, len(p), mem.SeqLen)
			}
			f.table = f.table[:0]
			for range n {
				pg, _ := next()
				f.table = append(f.table, int(pg))
			}
			table = f.table
		}
		if err := mem.MirrorSlot(slot, table, int(step)); err != nil {
			return fmt.Errorf("cluster: slot %d at step %d on rank 0: %w", slot, step, err)
		}
	}
	n, err := next()
	if err != nil {
		return err
	}
	if int(n) > len(p)/16 {
		return fmt.Errorf("cluster: a forward call of %d inputs in %d bytes", n, len(p))
	}
	f.inputs = f.inputs[:0]
	f.tokens = f.tokens[:0]
	type span struct{ lo, hi int }
	spans := make([]span, 0, n)
	for range n {
		var v [4]uint32
		for j := range v {
			if v[j], err = next(); err != nil {
				return err
			}
		}
		slot, start, all, nt := int(v[0]), int(v[1]), v[2] != 0, int(v[3])
		if slot >= mem.Slots {
			return fmt.Errorf("cluster: slot %d of %d", slot, mem.Slots)
		}
		if nt > len(p)/4 {
			return fmt.Errorf("cluster: an input of %d tokens in %d bytes", nt, len(p))
		}
		if mem.Step(slot) != start {
			return fmt.Errorf("cluster: input %d: slot %d is at step %d, the call says %d", len(spans), slot, mem.Step(slot), start)
		}
		lo := len(f.tokens)
		for range nt {
			t, _ := next()
			f.tokens = append(f.tokens, int(int32(t)))
		}
		spans = append(spans, span{lo, len(f.tokens)})
		f.inputs = append(f.inputs, model.Input{Slot: slot, AllLogits: all})
	}
	for i, s := range spans {
		f.inputs[i].Tokens = f.tokens[s.lo:s.hi]
	}
	_, err = f.lm.Forward(mem, f.inputs)
	return err
}

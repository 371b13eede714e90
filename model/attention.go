package model

import (
	"math"

	"github.com/grok-go/grok/kernels"
)

// MultiHeadAttention is model.py's MultiHeadAttention (720-891) with grouped
// kv heads: query head h reads kv head h / G, and K/V are never repeated.
type MultiHeadAttention struct {
	Query, Key, Value, Linear Linear // q, k, v and output projections, no bias
	Rotary                    RotaryEmbedding
	NumQHeads, NumKVHeads     int
	KeySize                   int
	AttnOutputMultiplier      float32
	AttnLogitCap              float32
	// TemperatureLen is Grok-2's attn_temperature_len (0: none): see
	// temperature.
	TemperatureLen int
}

// temperature is the factor a query at 0-based position pos multiplies its
// soft-capped scores by: log2(pos)/log2(L) past L = TemperatureLen, else 1
// (SGLang's extend and decode kernels; semantics §G4).
func (a *MultiHeadAttention) temperature(pos int) float32 {
	if a.TemperatureLen <= 0 || pos <= a.TemperatureLen {
		return 1
	}
	return float32(math.Log2(float64(pos)) / math.Log2(float64(a.TemperatureLen)))
}

// attnScratch is attention's part of the workspace.
type attnScratch struct {
	q, o     []float32  // N×Hq·K
	k, v     []float32  // N×Hkv·K
	cos, sin []float32  // N×K/2: each row's RoPE table, for every layer
	scores   []float32  // per thread: G×S (G query heads a kv head)
	kg, vg   []float32  // per thread: S×K, a kv head's keys and values decoded from the pages
	okg      []bool     // per thread: S pad flags
	pageTmp  []float32  // per thread: G×PageRows, one page's scores
	capG     int        // S the gather buffers were sized for
	items    []attnItem // work items of the call

	ropeTabJob ropeTableTask
	ropeJob    ropeTask
	attnJob    attnTask
}

// grow sizes the per-row buffers for N rows.
func (s *attnScratch) grow(c *Config, N int) {
	qd, kd := c.NumQHeads*c.KeySize, c.NumKVHeads*c.KeySize
	s.q, s.o = make([]float32, N*qd), make([]float32, N*qd)
	s.k, s.v = make([]float32, N*kd), make([]float32, N*kd)
	s.cos, s.sin = make([]float32, N*c.KeySize/2), make([]float32, N*c.KeySize/2)
}

// attnSeq is one sequence of a batched call: its rows in the call's
// activations, its memory slot and its starting position.
type attnSeq struct {
	row, n int // first row in the batch and number of tokens
	slot   int
	start  int // memory step before this call
}

// Forward runs attention for layer l over the whole batch. x holds the
// normed inputs (N×D); the result (N×D) goes to dst. Every step runs on the
// workspace's thread pool (see matmul.go for the split).
func (a *MultiHeadAttention) Forward(dst, x []float32, N int, l int, seqs []attnSeq, mem *KVMemory, ws *workspace) {
	K, Hq, Hkv := a.KeySize, a.NumQHeads, a.NumKVHeads
	qd, kd := Hq*K, Hkv*K
	q, k, v, o := ws.q[:N*qd], ws.k[:N*kd], ws.v[:N*kd], ws.o[:N*qd]
	ws.matmul(x, N, 0, []*Linear{&a.Query, &a.Key, &a.Value}, q, k, v)

	ws.ropeJob = ropeTask{a: a, ws: ws, mem: mem, layer: l, q: q, k: k, v: v}
	ws.pool.Run(N, 1, &ws.ropeJob)
	ws.ropeJob = ropeTask{}

	// Every key a query needs is now in memory.
	ws.items = ws.items[:0]
	for i, s := range seqs {
		for kvh := 0; kvh < Hkv; kvh++ {
			for t0 := 0; t0 < s.n; t0 += tokenBlock {
				ws.items = append(ws.items, attnItem{seq: i, kvh: kvh, t0: t0, t1: min(t0+tokenBlock, s.n)})
			}
		}
	}
	if ws.capG != ws.capS*K || len(ws.okg) != ws.threads*ws.capS {
		ws.kg, ws.vg = make([]float32, ws.threads*ws.capS*K), make([]float32, ws.threads*ws.capS*K)
		ws.okg = make([]bool, ws.threads*ws.capS)
		ws.pageTmp = make([]float32, ws.threads*Hq/Hkv*PageRows)
		ws.capG = ws.capS * K
	}
	ws.attnJob = attnTask{a: a, ws: ws, mem: mem, layer: l, q: q, o: o, scores: ws.scores, S: ws.capS}
	ws.pool.Run(len(ws.items), 1, &ws.attnJob)
	ws.attnJob = attnTask{}

	ws.matmul(o, N, 0, []*Linear{&a.Linear}, dst)
}

// attendGroup computes, for one query token, the outputs o of the G query
// heads q that share one kv head, over that head's keys and values km, vm
// (row-major, K values a row, decoded from the memory's pages; km nil: the
// scores already hold q·k, from pageScores; vm nil: o is left to the caller,
// and scores hold the weights, from pageValues); the token sees rows
// 0..len(ok)-1, and ok[j] says whether key j is a real token (not a pad).
// scores is scratch of G·len(ok).
//
// Scores are q·k (no 1/√K) × attn_output_multiplier, then cap·tanh(s/cap),
// then × temp (Grok-2's attention temperature; 1 for Grok-1), masked keys
// get -1e30 and the softmax is fp32 (model.py 860-876). A masked
// key's weight exp(-1e30 - max) is exactly 0 whenever one key is visible, so
// masked keys get weight 0 here too. If every visible key is masked (a pad
// token whose causal window holds only pads), model.py would spread the
// weight uniformly over all memory slots, a value that depends on the memory
// size; we define the output as zero instead (tested in attention_test.go).
//
// The G heads go through both products together, as G "tokens" of the
// matrix kernels: the keys are read once, as the weights of scores = q·Kᵀ,
// and the values once, as the [in, out] weights of o = p·V. Each score and
// each output element comes out of the same kernel arithmetic whatever the
// batch, so a token's attention does not depend on what else runs.
func (a *MultiHeadAttention) attendGroup(o, q, km, vm []float32, ok []bool, scores []float32, temp float32) {
	K, n := a.KeySize, len(ok)
	G := len(q) / K
	visible, masked := false, false
	for _, v := range ok {
		visible = visible || v
		masked = masked || !v
	}
	if !visible {
		clear(o)
		return
	}
	if km != nil {
		keys := kernels.F32Mat(km[:n*K], n, K, false)
		kernels.MatMulRows(scores, q, G, &keys, 0, n)
	}
	for g := 0; g < G; g++ {
		row := scores[g*n : (g+1)*n]
		kernels.Softcap(row, a.AttnOutputMultiplier, a.AttnLogitCap)
		if temp != 1 {
			for j := range row {
				row[j] *= temp
			}
		}
		if masked {
			for j, v := range ok {
				if !v {
					row[j] = float32(math.Inf(-1))
				}
			}
		}
		kernels.Softmax(row)
		if masked {
			for j, v := range ok {
				if !v {
					row[j] = 0
				}
			}
		}
	}
	if vm != nil {
		vals := kernels.F32Mat(vm[:n*K], K, n, true)
		kernels.MatMulRows(o, scores, G, &vals, 0, K)
	}
}

// tokenBlock is how many query tokens of one sequence and kv head form one
// attention work item: small enough to balance a long prompt across threads,
// large enough that an item is worth a claim.
const tokenBlock = 16

// attnItem is one attention work item: query tokens [t0, t1) of sequence
// seq, for the G query heads of kv head kvh.
type attnItem struct {
	seq, kvh, t0, t1 int
}

// attnTask runs attention items.
type attnTask struct {
	a      *MultiHeadAttention
	ws     *workspace
	mem    *KVMemory
	layer  int
	q, o   []float32
	scores []float32 // per thread: S
	S      int
}

func (t *attnTask) Run(worker, lo, hi int) {
	a, ws := t.a, t.ws
	K, Hq, Hkv := a.KeySize, a.NumQHeads, a.NumKVHeads
	qd, G := Hq*K, Hq/Hkv
	scratch := t.scores[worker*G*t.S : (worker+1)*G*t.S]
	km, vm := ws.kg[worker*t.S*K:(worker+1)*t.S*K], ws.vg[worker*t.S*K:(worker+1)*t.S*K]
	ok := ws.okg[worker*t.S : (worker+1)*t.S]
	tmp := ws.pageTmp[worker*G*PageRows : (worker+1)*G*PageRows]
	for _, it := range ws.items[lo:hi] {
		s := ws.seqs[it.seq]
		n := s.start + it.t1 // the item's last token sees the most rows; its first ones a prefix
		if it.t1-it.t0 == 1 && t.mem.directKeys() {
			// One token (decoding): its scores straight from the stored
			// keys and its output from the stored values where their
			// types allow it, sparing their decoding; the same bits
			// (directKeys, directValues).
			pos, r := s.start+it.t0, s.row+it.t0
			h0 := r*qd + it.kvh*G*K
			o, q := t.o[h0:h0+G*K], t.q[h0:h0+G*K]
			vals := vm
			if direct := t.mem.directValues(); direct {
				t.mem.gatherOK(s.slot, n, ok)
				vals = nil
			} else {
				t.mem.gatherValues(t.layer, s.slot, it.kvh, n, vals, ok)
			}
			t.mem.pageScores(t.layer, s.slot, it.kvh, n, q, G, scratch[:G*n], tmp)
			a.attendGroup(o, q, nil, vals, ok[:pos+1], scratch[:G*n], a.temperature(pos))
			if vals == nil {
				t.mem.pageValues(t.layer, s.slot, it.kvh, n, scratch[:G*n], G, o, tmp)
			}
			continue
		}
		t.mem.gather(t.layer, s.slot, it.kvh, n, km, vm, ok)
		for tok := it.t0; tok < it.t1; tok++ {
			pos, r := s.start+tok, s.row+tok
			h0 := r*qd + it.kvh*G*K // the G query heads of this kv head
			a.attendGroup(t.o[h0:h0+G*K], t.q[h0:h0+G*K], km, vm, ok[:pos+1], scratch[:G*(pos+1)], a.temperature(pos))
		}
	}
}

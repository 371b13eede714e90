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
// workspace's thread pool (see parallel.go for the split).
func (a *MultiHeadAttention) Forward(dst, x []float32, N int, l int, seqs []attnSeq, mem *KVMemory, ws *workspace) {
	K, Hq, Hkv := a.KeySize, a.NumQHeads, a.NumKVHeads
	qd, kd := Hq*K, Hkv*K
	q, k, v, o := ws.q[:N*qd], ws.k[:N*kd], ws.v[:N*kd], ws.o[:N*qd]
	ws.matmul(x, N, 0, []*Linear{&a.Query, &a.Key, &a.Value}, q, k, v)

	ws.ropeJob = ropeTask{a: a, ws: ws, mem: mem, layer: l, q: q, k: k, v: v, cos: ws.cos, sin: ws.sin}
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
	ws.attnJob = attnTask{a: a, ws: ws, mem: mem, layer: l, q: q, o: o, scores: ws.scores, S: ws.capS}
	ws.pool.Run(len(ws.items), 1, &ws.attnJob)
	ws.attnJob = attnTask{}

	ws.matmul(o, N, 0, []*Linear{&a.Linear}, dst)
}

// attendHead computes one query head's output over keys 0..len(scores)-1.
// Scores are q·k (no 1/√K) × attn_output_multiplier, then cap·tanh(s/cap),
// masked keys get -1e30 and the softmax is fp32 (model.py 860-876). A masked
// key's weight exp(-1e30 - max) is exactly 0 whenever one key is visible, so
// masked keys are skipped. If every visible key is masked (a pad token whose
// causal window holds only pads), model.py would spread the weight uniformly
// over all memory slots, a value that depends on the memory size; we define
// the output as zero instead (tested in attention_test.go).
func (a *MultiHeadAttention) attendHead(oh, qh, km, vm []float32, ok []bool, scores []float32, kvh, kd int) {
	K := a.KeySize
	off := kvh * K
	maxS := float32(math.Inf(-1))
	any := false
	for j := range scores {
		if !ok[j] {
			continue
		}
		s := kernels.Dot(qh, km[j*kd+off:j*kd+off+K]) * a.AttnOutputMultiplier
		if c := a.AttnLogitCap; c > 0 {
			s = c * float32(math.Tanh(float64(s/c)))
		}
		scores[j] = s
		if s > maxS {
			maxS = s
		}
		any = true
	}
	clear(oh)
	if !any {
		return
	}
	var sum float64
	for j := range scores {
		if ok[j] {
			e := math.Exp(float64(scores[j] - maxS))
			scores[j] = float32(e)
			sum += e
		}
	}
	inv := float32(1 / sum)
	for j := range scores {
		if ok[j] {
			kernels.Axpy(oh, scores[j]*inv, vm[j*kd+off:j*kd+off+K])
		}
	}
}

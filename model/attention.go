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
// normed inputs (N×D); the result (N×D) goes to dst.
func (a *MultiHeadAttention) Forward(dst, x []float32, N int, l int, seqs []attnSeq, mem *KVMemory, ws *workspace) {
	K, Hq, Hkv := a.KeySize, a.NumQHeads, a.NumKVHeads
	qd, kd := Hq*K, Hkv*K
	q, k, v, o := ws.q[:N*qd], ws.k[:N*kd], ws.v[:N*kd], ws.o[:N*qd]
	a.Query.Forward(q, x, N)
	a.Key.Forward(k, x, N)
	a.Value.Forward(v, x, N)

	cos, sin := ws.cos[:K/2], ws.sin[:K/2]
	for _, s := range seqs {
		km, vm := mem.rows(l, s.slot)
		for t := 0; t < s.n; t++ {
			pos, r := s.start+t, s.row+t
			// RoPE on q and k before the cache write (model.py 801-844).
			a.Rotary.Apply(q[r*qd:(r+1)*qd], Hq, pos, cos, sin)
			a.Rotary.Apply(k[r*kd:(r+1)*kd], Hkv, pos, cos, sin)
			copy(km[pos*kd:(pos+1)*kd], k[r*kd:(r+1)*kd])
			copy(vm[pos*kd:(pos+1)*kd], v[r*kd:(r+1)*kd])
		}
	}

	G := Hq / Hkv
	for _, s := range seqs {
		km, vm := mem.rows(l, s.slot)
		ok := mem.keyOK[s.slot]
		for t := 0; t < s.n; t++ {
			pos, r := s.start+t, s.row+t
			scores := ws.scores[:pos+1]
			for h := 0; h < Hq; h++ {
				kvh := h / G
				qh := q[r*qd+h*K : r*qd+(h+1)*K]
				oh := o[r*qd+h*K : r*qd+(h+1)*K]
				a.attendHead(oh, qh, km, vm, ok, scores, kvh, kd)
			}
		}
	}
	a.Linear.Forward(dst, o, N)
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

package model

import (
	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/parallel"
)

// workspace holds every activation buffer of a forward call, sized for the
// largest call seen so far, and the loop bodies handed to the thread pool,
// so that steady-state decoding allocates nothing. Each block's own scratch
// is a struct beside the block (attnScratch in attention.go, ffnScratch in
// moe.go, matScratch in matmul.go), embedded here.
type workspace struct {
	capN, capS, threads int
	h, xn, a            []float32 // N×D: the residual stream, normed inputs, a block's output
	logits              []float32 // rows×V
	seqs                []attnSeq // the call's sequences
	rowSeq              []int     // N: index in seqs of each row
	outRows             []int     // rows of h whose logits are wanted
	// rowFast says which rows of h multiply at the fast precision
	// (LanguageModel.Precision) in every layer but the last's feed-forward;
	// fast is the mask of the products running now (nil: all exact).
	rowFast, fast []bool

	// The thread pool the loops run on. Each loop body is a struct reused
	// for every loop, so that handing it to the pool allocates nothing (a
	// closure would escape to the heap on every call).
	pool *parallel.Pool

	// A shard's group (nil unsharded) and the first error of a collective
	// of the call (see reduce).
	comm    comm.Comm
	commErr error

	attnScratch
	ffnScratch
	matScratch
}

// ensure sizes the buffers for N rows, memories of S rows per slot and the
// given number of threads. S is the memory's capacity, not the length used
// so far, so that a growing context costs no reallocation.
func (w *workspace) ensure(c *Config, N, S, threads int) {
	if N > w.capN {
		N = max(N, w.capN)
		D := c.EmbSize
		w.h, w.xn, w.a = make([]float32, N*D), make([]float32, N*D), make([]float32, N*D)
		w.rowSeq = make([]int, N)
		w.rowFast = make([]bool, N)
		w.attnScratch.grow(c, N)
		w.ffnScratch.grow(c, N)
		w.capN = N
	}
	if S > w.capS || threads != w.threads {
		w.capS = max(S, w.capS)
		w.scores = make([]float32, threads*c.NumQHeads/max(c.NumKVHeads, 1)*w.capS)
		w.threads = threads
	}
}

// maxExpertRows bounds the rows the MoE's buffers hold beyond N.
var maxExpertRows = 512 // a variable for tests of the grouped path

func (w *workspace) ensureLogits(rows, V int) []float32 {
	if cap(w.logits) < rows*V {
		w.logits = make([]float32, rows*V)
	}
	return w.logits[:rows*V]
}

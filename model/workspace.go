package model

import "github.com/grok-go/grok/parallel"

// workspace holds every activation buffer of a forward call, sized for the
// largest call seen so far, and the loop bodies handed to the thread pool,
// so that steady-state decoding allocates nothing.
type workspace struct {
	capN, capS, threads int
	h, xn, a            []float32 // N×D
	q, o                []float32 // N×Hq·K
	k, v                []float32 // N×Hkv·K
	cos, sin            []float32 // N×K/2: each row's RoPE table, for every layer
	scores              []float32 // per thread: G×S (G query heads a kv head)
	probs               []float32 // N×E
	idx                 []int     // N×k
	gate                []float32 // N×k
	rows                []int     // N×k: rows grouped by expert
	rowGate             []float32 // N×k
	expertStart         []int     // E+1: where each expert's rows start in rows
	expertFill          []int     // E
	parts               []expertPart
	capE                int       // rows of xs, y, h1 and h2
	xs, y               []float32 // capE×D
	h1, h2              []float32 // capE×F
	logits              []float32 // rows×V
	seqs                []attnSeq
	outRows             []int      // rows of h whose logits are wanted
	rowSeq              []int      // N: index in seqs of each row
	items               []attnItem // attention work items of the call

	// The thread pool and the loop bodies run on it. Each task is a struct
	// reused for every loop, so that handing it to the pool allocates
	// nothing (a closure would escape to the heap on every call).
	pool    *parallel.Pool
	matJob  matTask
	ffnJob  ffnTask
	upJob   expertUpTask
	downJob expertDownTask

	// Products by row blocks (decoding int8 [in, out] layers): the
	// partials' buffers, by slot, and the loop computing them.
	bparts     [][][]float32
	blockJob   blockTask
	ropeTabJob ropeTableTask
	ropeJob    ropeTask
	attnJob    attnTask
}

// ensure sizes the buffers for N rows, memories of S rows per slot and the
// given number of threads. S is the memory's capacity, not the length used
// so far, so that a growing context costs no reallocation.
func (w *workspace) ensure(c *Config, N, S, threads int) {
	if N > w.capN {
		N = max(N, w.capN)
		D, qd, kd := c.EmbSize, c.NumQHeads*c.KeySize, c.NumKVHeads*c.KeySize
		E, k := max(c.NumExperts, 1), max(c.NumSelectedExperts, 1)
		w.h, w.xn, w.a = make([]float32, N*D), make([]float32, N*D), make([]float32, N*D)
		w.q, w.o = make([]float32, N*qd), make([]float32, N*qd)
		w.k, w.v = make([]float32, N*kd), make([]float32, N*kd)
		w.probs = make([]float32, N*E)
		w.idx, w.gate = make([]int, N*k), make([]float32, N*k)
		w.rows, w.rowGate = make([]int, N*k), make([]float32, N*k)
		w.expertStart, w.expertFill = make([]int, E+1), make([]int, E)
		w.parts = make([]expertPart, 0, E)
		// The experts' rows of a call: N·k, up to maxExpertRows (long
		// prompts run their experts in groups).
		w.capE = max(N, min(N*k, maxExpertRows))
		w.xs, w.y = make([]float32, w.capE*D), make([]float32, w.capE*D)
		w.h1, w.h2 = make([]float32, w.capE*c.FFNSize), make([]float32, w.capE*c.FFNSize)
		w.rowSeq = make([]int, N)
		w.cos, w.sin = make([]float32, N*c.KeySize/2), make([]float32, N*c.KeySize/2)
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

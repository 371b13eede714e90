package model

// workspace holds every activation buffer of a forward call, sized for the
// largest call seen so far, so that steady-state decoding allocates nothing.
type workspace struct {
	capN, capS int
	h, xn, a   []float32 // N×D
	q, o       []float32 // N×Hq·K
	k, v       []float32 // N×Hkv·K
	cos, sin   []float32 // K/2
	scores     []float32 // S
	probs      []float32 // N×E
	idx        []int     // N×k
	gate       []float32 // N×k
	rows       []int     // N (rows routed to one expert)
	rowGate    []float32 // N
	xs, y      []float32 // N×D
	h1, h2     []float32 // N×F
	logits     []float32 // rows×V
	seqs       []attnSeq
	outRows    []int // rows of h whose logits are wanted
}

func (w *workspace) ensure(c *Config, N, S int) {
	if N <= w.capN && S <= w.capS {
		return
	}
	N, S = max(N, w.capN), max(S, w.capS)
	D, qd, kd := c.EmbSize, c.NumQHeads*c.KeySize, c.NumKVHeads*c.KeySize
	E, k := max(c.NumExperts, 1), max(c.NumSelectedExperts, 1)
	w.h, w.xn, w.a = make([]float32, N*D), make([]float32, N*D), make([]float32, N*D)
	w.q, w.o = make([]float32, N*qd), make([]float32, N*qd)
	w.k, w.v = make([]float32, N*kd), make([]float32, N*kd)
	w.cos, w.sin = make([]float32, c.KeySize/2), make([]float32, c.KeySize/2)
	w.scores = make([]float32, S)
	w.probs = make([]float32, N*E)
	w.idx, w.gate = make([]int, N*k), make([]float32, N*k)
	w.rows, w.rowGate = make([]int, 0, N*k), make([]float32, 0, N*k)
	w.xs, w.y = make([]float32, N*D), make([]float32, N*D)
	w.h1, w.h2 = make([]float32, N*c.FFNSize), make([]float32, N*c.FFNSize)
	w.capN, w.capS = N, S
}

func (w *workspace) ensureLogits(rows, V int) []float32 {
	if cap(w.logits) < rows*V {
		w.logits = make([]float32, rows*V)
	}
	return w.logits[:rows*V]
}

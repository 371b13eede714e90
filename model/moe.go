package model

import (
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/parallel"
)

// ffnScratch is the feed-forward part of the workspace: the router's
// output and the experts' gathered rows (DenseBlock uses h1 and h2 too).
type ffnScratch struct {
	probs       []float32 // N×E
	idx         []int     // N×k
	gate        []float32 // N×k
	rows        []int     // N×k: rows grouped by expert
	rowGate     []float32 // N×k
	expertStart []int     // E+1: where each expert's rows start in rows
	expertFill  []int     // E
	parts       []expertPart
	capE        int       // rows of xs, y, h1 and h2
	xs, y       []float32 // capE×D
	h1, h2      []float32 // capE×F

	ffnJob  ffnTask
	upJob   expertUpTask
	downJob expertDownTask
}

// grow sizes the buffers for N rows.
func (s *ffnScratch) grow(c *Config, N int) {
	D := c.EmbSize
	E, k := max(c.NumExperts, 1), max(c.NumSelectedExperts, 1)
	s.probs = make([]float32, N*E)
	s.idx, s.gate = make([]int, N*k), make([]float32, N*k)
	s.rows, s.rowGate = make([]int, N*k), make([]float32, N*k)
	s.expertStart, s.expertFill = make([]int, E+1), make([]int, E)
	s.parts = make([]expertPart, 0, E)
	// The experts' rows of a call: N·k, up to maxExpertRows (long
	// prompts run their experts in groups).
	s.capE = max(N, min(N*k, maxExpertRows))
	s.xs, s.y = make([]float32, s.capE*D), make([]float32, s.capE*D)
	s.h1, s.h2 = make([]float32, s.capE*c.FFNSize), make([]float32, s.capE*c.FFNSize)
}

// MoELayer is model.py's MoELayer (272-400): each token goes through its
// top-k experts, expert e computing (gelu(x·W_e) ⊙ (x·V_e))·W1_e with
// W = moe/linear (the gelu branch), V = moe/linear_v, W1 = moe/linear_1, and
// the results are summed weighted by the router's raw probabilities.
//
// Only selected experts run. Tokens of the whole batch are grouped by
// expert, so that each expert's weights are read once per call. A token's
// contributions are added in expert-index order, which does not depend on
// what else is in the batch: a ragged batch gives the same bits as each
// sequence alone.
type MoELayer struct {
	Router                   Router
	Linear, LinearV, Linear1 []Linear // per expert: D→F, D→F, F→D
}

// Forward writes the MoE output for n rows of x into dst. The router and
// the gathering are serial (small). In decoding, the selected experts then
// run together: one pool loop over all their hidden units (linear,
// linear_v and the gelu product) and one over the D outputs (linear_1 and
// the gated sum), so that a step costs two loops per layer however many
// experts its tokens picked. With more rows (prefill) each expert runs in
// loops of its own, which split its work evenly across the threads.
func (m *MoELayer) Forward(dst, x []float32, n int, ws *workspace) {
	k := m.Router.TopK
	E := len(m.Linear)
	D, F := m.Linear[0].W.In, m.Linear[0].W.Out
	idx, gate := ws.idx[:n*k], ws.gate[:n*k]
	m.Router.Route(idx, gate, ws.probs[:n*E], x, n)
	clear(dst[:n*D])

	// Group the routed rows by expert (counting sort, rows ascending within
	// an expert).
	rows, gates := ws.rows[:n*k], ws.rowGate[:n*k]
	start := ws.expertStart[:E+1]
	clear(start)
	for _, e := range idx {
		start[e+1]++
	}
	for e := 0; e < E; e++ {
		start[e+1] += start[e]
	}
	fill := ws.expertFill[:E]
	copy(fill, start[:E])
	for i := 0; i < n; i++ {
		for j := 0; j < k; j++ {
			e := idx[i*k+j]
			rows[fill[e]], gates[fill[e]] = i, gate[i*k+j]
			fill[e]++
		}
	}

	// Run the experts in index order, in groups of at most capE rows.
	parts := ws.parts[:0]
	used := 0 // rows of the group so far
	for e := 0; e <= E; e++ {
		c := 0
		if e < E {
			c = start[e+1] - start[e]
		}
		if e == E || used+c > ws.capE || used > 0 && used+c > mergeRows {
			if len(parts) > 0 {
				m.runExperts(dst, parts, F, ws)
			}
			parts, used = parts[:0], 0
		}
		if e == E || c == 0 {
			continue
		}
		r0 := start[e]
		p := expertPart{
			e: e, rows: rows[r0 : r0+c], gates: gates[r0 : r0+c],
			xs: ws.xs[used*D : (used+c)*D], y: ws.y[used*D : (used+c)*D],
			h1: ws.h1[used*F : (used+c)*F], h2: ws.h2[used*F : (used+c)*F],
		}
		for r, i := range p.rows {
			copy(p.xs[r*D:(r+1)*D], x[i*D:(i+1)*D])
		}
		parts = append(parts, p)
		used += c
	}
	ws.parts = parts[:0]
}

// mergeRows is the most rows a group of several experts may hold: a
// decode step of up to 16 sequences with two experts each. Beyond it the
// per-expert work is large and uneven, and one loop per expert balances
// the threads better than one loop over many.
const mergeRows = 32

// runExperts runs one group of experts on the pool and adds their gated
// outputs to dst.
func (m *MoELayer) runExperts(dst []float32, parts []expertPart, F int, ws *workspace) {
	off := 0
	for i := range parts {
		parts[i].off = off
		off = alignUp(off + F)
	}
	rows := 0
	for i := range parts {
		rows += len(parts[i].rows)
	}
	up := &ws.upJob
	*up = expertUpTask{m: m, parts: parts}
	align := ws.align(m.Linear[0].W.Transposed, rows, off)
	if ws.blocked(&m.Linear[0].W, rows) {
		// Decoding an xAI checkpoint: linear and linear_v by row blocks,
		// combined (and the gelu product taken) in the loop over F.
		for i := range parts {
			p := &parts[i]
			w, v := &m.Linear[p.e].W, &m.LinearV[p.e].W
			p.gateParts = ws.blockParts(2*i, w.Blocks(), len(p.rows)*w.Out)
			p.upParts = ws.blockParts(2*i+1, v.Blocks(), len(p.rows)*v.Out)
			ws.blockJob.add(w, p.xs, len(p.rows), p.gateParts)
			ws.blockJob.add(v, p.xs, len(p.rows), p.upParts)
		}
		ws.runBlocks()
		align = parallel.DefaultAlign
	}
	ws.pool.Run(off, align, up)
	*up = expertUpTask{}
	if ws.blocked(&m.Linear1[0].W, rows) {
		// linear_1 by row blocks, combined in the loop over D below.
		for i := range parts {
			p := &parts[i]
			w1 := &m.Linear1[p.e].W
			p.downParts = ws.blockParts(i, w1.Blocks(), len(p.rows)*w1.Out)
			ws.blockJob.add(w1, p.h1, len(p.rows), p.downParts)
		}
		ws.runBlocks()
	}
	down := &ws.downJob
	*down = expertDownTask{m: m, parts: parts, dst: dst}
	ws.pool.Run(m.Linear1[0].W.Out, parallel.DefaultAlign, down)
	*down = expertDownTask{}
	for i := range parts {
		parts[i].gateParts, parts[i].upParts, parts[i].downParts = nil, nil, nil
	}
}

// expertPart is one expert's share of an MoE call: the c rows routed to it,
// gathered, and its buffers for them.
type expertPart struct {
	e      int
	rows   []int     // the row of x and dst of each gathered row
	gates  []float32 // the router's probability for each
	xs, y  []float32 // c×D: gathered inputs, linear_1 outputs
	h1, h2 []float32 // c×F
	off    int       // start of the expert's hidden units in expertUpTask's index space
	// Row-block partials of linear, linear_v and linear_1 when they run by
	// blocks (decoding xAI int8), else nil.
	gateParts, upParts, downParts [][]float32
}

// expertUpTask is the first half of every expert of a group as one loop:
// the experts' F hidden units laid end to end (each starting aligned),
// h1 = gelu(xs·Wᵀ) ⊙ (xs·Vᵀ) over a range of them.
type expertUpTask struct {
	m     *MoELayer
	parts []expertPart
}

func (t *expertUpTask) Run(_, lo, hi int) {
	for i := range t.parts {
		p := &t.parts[i]
		w := &t.m.Linear[p.e].W
		F := w.Out
		a, b := max(lo, p.off), min(hi, p.off+F)
		if a >= b {
			continue
		}
		a, b = a-p.off, b-p.off
		c := len(p.rows)
		if p.gateParts != nil {
			kernels.CombineBlocks(p.h1, p.gateParts, c, w, a, b)
			kernels.CombineBlocks(p.h2, p.upParts, c, &t.m.LinearV[p.e].W, a, b)
		} else {
			kernels.MatMulRows(p.h1, p.xs, c, w, a, b)
			kernels.MatMulRows(p.h2, p.xs, c, &t.m.LinearV[p.e].W, a, b)
		}
		for r := 0; r < c; r++ {
			h := p.h1[r*F+a : r*F+b]
			kernels.GeluMul(h, h, p.h2[r*F+a:r*F+b])
		}
	}
}

// expertDownTask is the second half of every expert of a group as one loop
// over the D outputs: for a range of them, each expert in index order
// computes y = h1·W1ᵀ and adds gate·y to its rows of dst. Every element of
// dst thus receives its experts' terms in index order, whatever the ranges.
type expertDownTask struct {
	m     *MoELayer
	parts []expertPart
	dst   []float32
}

func (t *expertDownTask) Run(_, lo, hi int) {
	for i := range t.parts {
		p := &t.parts[i]
		w := &t.m.Linear1[p.e].W
		D := w.Out
		if p.downParts != nil {
			kernels.CombineBlocks(p.y, p.downParts, len(p.rows), w, lo, hi)
		} else {
			kernels.MatMulRows(p.y, p.h1, len(p.rows), w, lo, hi)
		}
		for r, row := range p.rows {
			kernels.Axpy(t.dst[row*D+lo:row*D+hi], p.gates[r], p.y[r*D+lo:r*D+hi])
		}
	}
}

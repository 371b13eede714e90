package model

import "github.com/grok-go/grok/parallel"

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
	align := ws.align(m.Linear[0].W.InOut, rows, off)
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

package model

import (
	"math"

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
	allRows     []int     // N: 0, 1, …, N-1 (the dense MLP's rows)
	parts       []expertPart
	capE        int                // rows of xs and y
	xs, y       []float32          // capE×D
	xsFast      []bool             // capE: the precision of each row of xs
	qParts      []kernels.FastActs // two per part of a group: its xs and h1 quantised
	h1, h2      []float32          // capE×F (+ N×DenseFFNSize for a dense MLP beside the experts)

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
	s.parts = make([]expertPart, 0, E+1)
	s.allRows = make([]int, N)
	for i := range s.allRows {
		s.allRows[i] = i
	}
	// The experts' rows of a call: N·k, up to maxExpertRows (long
	// prompts run their experts in groups).
	s.capE = max(N, min(N*k, maxExpertRows))
	s.xs, s.y = make([]float32, s.capE*D), make([]float32, s.capE*D)
	s.xsFast = make([]bool, s.capE)
	h := s.capE*c.FFNSize + N*c.DenseFFNSize
	s.h1, s.h2 = make([]float32, h), make([]float32, h)
}

// MoELayer is model.py's MoELayer (272-400): each token goes through its
// top-k experts, expert e computing (gelu(x·W_e) ⊙ (x·V_e))·W1_e with
// W = moe/linear (the gelu branch), V = moe/linear_v, W1 = moe/linear_1, and
// the results are summed weighted by the router's raw probabilities.
//
// Grok-2 adds a dense MLP (Residual) on the same input: the layer's output
// is then (mlp + moe)/√2 (SGLang's moe_with_rmoe, semantics §G2 steps 8-9).
// It runs in the experts' loops as one more part, over every row, with gate
// 1, after the experts: its down loop adds it to the experts' sum and
// divides by √2 in the same pass.
//
// Only selected experts run. Tokens of the whole batch are grouped by
// expert, so that each expert's weights are read once per call. A token's
// contributions are added in expert-index order (the dense MLP last), which
// does not depend on what else is in the batch: a ragged batch gives the
// same bits as each sequence alone.
type MoELayer struct {
	Router                   Router
	Linear, LinearV, Linear1 []Linear    // per expert: D→F, D→F, F→D
	Residual                 *DenseBlock // Grok-2's dense MLP beside the experts, or nil
}

// Forward writes the MoE output for n rows of x into dst. The router and
// the gathering are serial (small). In decoding, the selected experts (and
// the dense MLP) then run together: one pool loop over all their hidden
// units (linear, linear_v and the gelu product) and one over the D outputs
// (linear_1 and the gated sum), so that a step costs two loops per layer
// however many experts its tokens picked. With more rows (prefill) each
// expert runs in loops of its own, which split its work evenly across the
// threads.
func (m *MoELayer) Forward(dst, x []float32, n int, ws *workspace) {
	k := m.Router.TopK
	E := len(m.Linear)
	D := m.Linear[0].W.In
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

	// Run the experts in index order, then the dense MLP, in groups of at
	// most capE rows. used counts a group's rows (of xs and y), hUsed its
	// hidden floats (of h1 and h2).
	parts := ws.parts[:0]
	used, hUsed := 0, 0
	for e := 0; e <= E; e++ {
		var p expertPart
		c := 0
		switch {
		case e < E:
			c = start[e+1] - start[e]
			if c == 0 {
				continue
			}
			r0 := start[e]
			p = expertPart{
				w: &m.Linear[e].W, v: &m.LinearV[e].W, w1: &m.Linear1[e].W,
				rows: rows[r0 : r0+c], gates: gates[r0 : r0+c],
			}
		case m.Residual != nil:
			c = n
			d := m.Residual
			p = expertPart{
				w: &d.Linear.W, v: &d.LinearV.W, w1: &d.Linear1.W,
				rows: ws.allRows[:n], residual: true,
			}
		default:
			continue
		}
		hc := c * p.w.Out
		if used+c > ws.capE || hUsed+hc > len(ws.h1) || used > 0 && used+c > mergeRows {
			if len(parts) > 0 {
				m.runExperts(dst, parts, ws)
			}
			parts, used, hUsed = parts[:0], 0, 0
		}
		p.y = ws.y[used*D : (used+c)*D]
		p.h1, p.h2 = ws.h1[hUsed:hUsed+hc], ws.h2[hUsed:hUsed+hc]
		if p.residual {
			p.xs = x[:n*D] // every row, in order: nothing to gather
			p.fast = ws.fast
		} else {
			p.xs = ws.xs[used*D : (used+c)*D]
			for r, i := range p.rows {
				copy(p.xs[r*D:(r+1)*D], x[i*D:(i+1)*D])
			}
			if ws.fast != nil {
				p.fast = ws.xsFast[used : used+c]
				for r, i := range p.rows {
					p.fast[r] = ws.fast[i]
				}
			}
		}
		parts = append(parts, p)
		used += c
		hUsed += hc
	}
	if len(parts) > 0 {
		m.runExperts(dst, parts, ws)
	}
	clear(parts)
	ws.parts = parts[:0]
}

// mergeRows is the most rows a group of several experts may hold: a
// decode step of up to 16 sequences with two experts each. Beyond it the
// per-expert work is large and uneven, and one loop per expert balances
// the threads better than one loop over many.
const mergeRows = 32

// runExperts runs one group of experts on the pool and adds their gated
// outputs to dst.
func (m *MoELayer) runExperts(dst []float32, parts []expertPart, ws *workspace) {
	off, rows := 0, 0
	for i := range parts {
		parts[i].off = off
		off = alignUp(off + parts[i].w.Out)
		rows += len(parts[i].rows)
	}
	if ws.fast != nil {
		for len(ws.qParts) < 2*len(parts) {
			ws.qParts = append(ws.qParts, kernels.FastActs{})
		}
		for i := range parts {
			p := &parts[i]
			p.qx = ws.quantizeFast(&ws.qParts[2*i], p.xs, len(p.rows), p.w.In, p.fast, p.w, p.v)
		}
	}
	up := &ws.upJob
	*up = expertUpTask{parts: parts}
	align := ws.align(parts[0].w.Transposed, rows, off)
	blocked := false
	for i := range parts {
		// Decoding an xAI checkpoint: linear and linear_v by row blocks,
		// combined (and the gelu product taken) in the loop over F.
		p := &parts[i]
		if !ws.blocked(p.w, rows) || !ws.blocked(p.v, rows) {
			continue
		}
		p.gateParts = ws.blockParts(2*i, p.w.Blocks(), len(p.rows)*p.w.Out, rows*p.w.Out)
		p.upParts = ws.blockParts(2*i+1, p.v.Blocks(), len(p.rows)*p.v.Out, rows*p.v.Out)
		ws.blockJob.add(p.w, p.xs, len(p.rows), p.gateParts)
		ws.blockJob.add(p.v, p.xs, len(p.rows), p.upParts)
		blocked = true
	}
	if blocked {
		ws.runBlocks()
		align = parallel.DefaultAlign
	}
	ws.pool.Run(off, align, up)
	*up = expertUpTask{}
	blocked = false
	for i := range parts {
		// linear_1 by row blocks, combined in the loop over D below.
		p := &parts[i]
		if !ws.blocked(p.w1, rows) {
			continue
		}
		p.downParts = ws.blockParts(i, p.w1.Blocks(), len(p.rows)*p.w1.Out, rows*p.w1.Out)
		ws.blockJob.add(p.w1, p.h1, len(p.rows), p.downParts)
		blocked = true
	}
	if blocked {
		ws.runBlocks()
	}
	if ws.fast != nil {
		for i := range parts {
			p := &parts[i]
			p.qh = ws.quantizeFast(&ws.qParts[2*i+1], p.h1, len(p.rows), p.w1.In, p.fast, p.w1)
		}
	}
	down := &ws.downJob
	*down = expertDownTask{parts: parts, dst: dst}
	ws.pool.Run(parts[0].w1.Out, parallel.DefaultAlign, down)
	*down = expertDownTask{}
	for i := range parts {
		parts[i].gateParts, parts[i].upParts, parts[i].downParts = nil, nil, nil
		parts[i].qx, parts[i].qh = nil, nil
	}
}

// expertPart is one expert's share of an MoE call: the c rows routed to it,
// gathered, and its buffers for them. The dense MLP of a residual MoE is a
// part too, over every row.
type expertPart struct {
	w, v, w1 *kernels.Mat      // linear, linear_v, linear_1
	rows     []int             // the row of x and dst of each gathered row
	gates    []float32         // the router's probability for each (nil: 1)
	residual bool              // the dense MLP: gate 1, and dst is then divided by √2
	fast     []bool            // per gathered row: fast precision (nil: all exact)
	qx, qh   *kernels.FastActs // xs and h1 quantised for the fast rows, or nil
	xs, y    []float32         // c×D: gathered inputs, linear_1 outputs
	h1, h2   []float32         // c×F
	off      int               // start of the part's hidden units in expertUpTask's index space
	// Row-block partials of linear, linear_v and linear_1 when they run by
	// blocks (decoding xAI int8), else nil.
	gateParts, upParts, downParts [][]float32
}

// expertUpTask is the first half of every expert of a group as one loop:
// the experts' F hidden units laid end to end (each starting aligned),
// h1 = gelu(xs·Wᵀ) ⊙ (xs·Vᵀ) over a range of them.
type expertUpTask struct {
	parts []expertPart
}

func (t *expertUpTask) Run(_, lo, hi int) {
	for i := range t.parts {
		p := &t.parts[i]
		F := p.w.Out
		a, b := max(lo, p.off), min(hi, p.off+F)
		if a >= b {
			continue
		}
		a, b = a-p.off, b-p.off
		c := len(p.rows)
		if p.gateParts != nil {
			kernels.CombineBlocks(p.h1, p.gateParts, c, p.w, a, b)
			kernels.CombineBlocks(p.h2, p.upParts, c, p.v, a, b)
		} else {
			mulRows(p.h1, p.xs, c, p.w, a, b, p.fast, p.qx)
			mulRows(p.h2, p.xs, c, p.v, a, b, p.fast, p.qx)
		}
		for r := 0; r < c; r++ {
			h := p.h1[r*F+a : r*F+b]
			kernels.GeluMul(h, h, p.h2[r*F+a:r*F+b])
		}
	}
}

// sqrt2 divides the sum of a residual MoE's two branches (SGLang divides
// by 1.4142135623730951).
const sqrt2 float32 = math.Sqrt2

// expertDownTask is the second half of every expert of a group as one loop
// over the D outputs: for a range of them, each expert in index order
// computes y = h1·W1ᵀ and adds gate·y to its rows of dst. Every element of
// dst thus receives its experts' terms in index order, whatever the ranges.
// The dense MLP of a residual MoE comes last: it adds y and divides the
// sum by √2.
type expertDownTask struct {
	parts []expertPart
	dst   []float32
}

func (t *expertDownTask) Run(_, lo, hi int) {
	for i := range t.parts {
		p := &t.parts[i]
		D := p.w1.Out
		if p.downParts != nil {
			kernels.CombineBlocks(p.y, p.downParts, len(p.rows), p.w1, lo, hi)
		} else {
			mulRows(p.y, p.h1, len(p.rows), p.w1, lo, hi, p.fast, p.qh)
		}
		for r, row := range p.rows {
			d, y := t.dst[row*D+lo:row*D+hi], p.y[r*D+lo:r*D+hi]
			if !p.residual {
				kernels.Axpy(d, p.gates[r], y)
				continue
			}
			for j := range d {
				d[j] = (d[j] + y[j]) / sqrt2
			}
		}
	}
}

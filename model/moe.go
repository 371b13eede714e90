package model

import "github.com/grok-go/grok/kernels"

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
// the gathering are serial (small); each expert's matrix products run on the
// workspace's thread pool.
func (m *MoELayer) Forward(dst, x []float32, n int, ws *workspace) {
	k := m.Router.TopK
	E := len(m.Linear)
	D, F := m.Linear[0].W.In, m.Linear[0].W.Out
	idx, gate := ws.idx[:n*k], ws.gate[:n*k]
	m.Router.Route(idx, gate, ws.probs[:n*E], x, n)
	clear(dst[:n*D])
	for e := 0; e < E; e++ {
		// Gather the rows routed to e.
		rows := ws.rows[:0]
		gates := ws.rowGate[:0]
		for i := 0; i < n; i++ {
			for j := 0; j < k; j++ {
				if idx[i*k+j] == e {
					rows = append(rows, i)
					gates = append(gates, gate[i*k+j])
				}
			}
		}
		c := len(rows)
		if c == 0 {
			continue
		}
		xs := ws.xs[:c*D]
		for r, i := range rows {
			copy(xs[r*D:(r+1)*D], x[i*D:(i+1)*D])
		}
		y := ws.y[:c*D]
		ws.ffn(y, xs, c, &m.Linear[e], &m.LinearV[e], &m.Linear1[e], ws.h1[:c*F], ws.h2[:c*F])
		for r, i := range rows {
			kernels.Axpy(dst[i*D:(i+1)*D], gates[r], y[r*D:(r+1)*D])
		}
	}
}

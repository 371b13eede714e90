package model

import "github.com/grok-go/grok/kernels"

// Router is model.py's Router (208-269): fp32 logits x·w over the experts,
// softmax, and the top-k probabilities — used as gates as they are, NOT
// renormalised to sum 1 (semantics §3, §7.1; llama.cpp differs here). No
// noise and no bias. Grok-1 has no soft-cap (model.py); Grok-2 caps the
// logits before the softmax (SGLang, semantics §G2 step 6).
type Router struct {
	W        Linear // E×D
	TopK     int
	LogitCap float32 // r = cap·tanh(r/cap) before the softmax; 0: none
}

// Route computes, for n rows of x, the selected experts and their gates:
// idx and gate are n×TopK, in descending probability, lower expert index
// first on ties. probs (n×E) is scratch.
func (r *Router) Route(idx []int, gate, probs, x []float32, n int) {
	E := r.W.W.Out
	r.W.Forward(probs, x, n)
	for i := 0; i < n; i++ {
		p := probs[i*E : (i+1)*E]
		if r.LogitCap > 0 {
			kernels.Softcap(p, 1, r.LogitCap)
		}
		kernels.Softmax(p)
		ix, g := idx[i*r.TopK:(i+1)*r.TopK], gate[i*r.TopK:(i+1)*r.TopK]
		for j := range ix {
			best := -1
			for e := 0; e < E; e++ {
				if taken(ix[:j], e) {
					continue
				}
				if best < 0 || p[e] > p[best] {
					best = e
				}
			}
			ix[j], g[j] = best, p[best]
		}
	}
}

func taken(ix []int, e int) bool {
	for _, v := range ix {
		if v == e {
			return true
		}
	}
	return false
}

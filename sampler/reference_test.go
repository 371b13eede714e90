package sampler

import (
	"math"
	"sort"
)

// This file holds a deliberately plain reference implementation: every step
// sorts the whole vocabulary and follows the runners.py formulas literally.
// The fast path in sampler.go and select.go is compared against it.

// refResult is the reference's answer: the final distribution over the whole
// vocabulary (0 for removed tokens) and, for greedy decoding, the token.
type refResult struct {
	probs  []float64
	kept   []bool // survivors of the filters (a survivor's probability can underflow to 0)
	greedy int
	err    bool
}

// refAdjusted returns the penalised, scaled logits with removed tokens
// (masked or -Inf) as -Inf.
func refAdjusted(p Params, allowed []bool, logits []float32, history []int) []float64 {
	x := make([]float64, len(logits))
	for i, l := range logits {
		x[i] = float64(l)
	}
	if p.penalised() {
		win := history
		n := p.RepeatLastN
		if n == 0 {
			n = 64
		}
		if n > 0 && n < len(history) {
			win = history[len(history)-n:]
		}
		count := map[int]int{}
		for _, t := range win {
			count[t]++
		}
		rep := float64(p.RepeatPenalty)
		if rep == 0 {
			rep = 1
		}
		for t, c := range count {
			if x[t] <= 0 {
				x[t] *= rep
			} else {
				x[t] /= rep
			}
			x[t] -= float64(c)*float64(p.FrequencyPenalty) + float64(p.PresencePenalty)
		}
	}
	temp := float64(p.Temperature)
	if temp == 0 {
		temp = 1
	}
	for i := range x {
		x[i] /= temp
		if allowed != nil && !allowed[i] {
			x[i] = math.Inf(-1)
		}
	}
	return x
}

// refTopP is runners.py's top_p_filter written out: sort ascending, softmax,
// cumulative sum, threshold at the first index with cumsum >= 1 - top_p
// (argmax of an all-false vector is index 0), keep logits >= threshold. ids
// are the candidates, w their unnormalised probabilities by token id.
func refTopP(x, w []float64, ids []int, topP float64) []int {
	s := append([]int(nil), ids...)
	sort.Slice(s, func(i, j int) bool { return x[s[i]] < x[s[j]] })
	z := 0.0
	for _, c := range s {
		z += w[c]
	}
	cum, ti := 0.0, 0
	for i, c := range s {
		cum += w[c] / z
		if cum >= 1-topP {
			ti = i
			break
		}
	}
	t := x[s[ti]]
	var kept []int
	for _, c := range ids {
		if x[c] >= t {
			kept = append(kept, c)
		}
	}
	return kept
}

func reference(p Params, allowed []bool, logits []float32, history []int) refResult {
	x := refAdjusted(p, allowed, logits, history)
	var ids []int
	for i, v := range x {
		if v > math.Inf(-1) {
			ids = append(ids, i)
		}
	}
	if len(ids) == 0 {
		return refResult{err: true}
	}
	if p.Temperature == 0 {
		best := ids[0]
		for _, c := range ids {
			if x[c] > x[best] {
				best = c
			}
		}
		return refResult{greedy: best}
	}
	if k := p.TopK; k > 0 && k < len(ids) {
		v := make([]float64, len(ids))
		for i, c := range ids {
			v[i] = x[c]
		}
		sort.Sort(sort.Reverse(sort.Float64Slice(v)))
		t := v[k-1]
		var kept []int
		for _, c := range ids {
			if x[c] >= t {
				kept = append(kept, c)
			}
		}
		ids = kept
	}
	xmax := math.Inf(-1)
	for _, c := range ids {
		xmax = math.Max(xmax, x[c])
	}
	w := make([]float64, len(x))
	for _, c := range ids {
		w[c] = math.Exp(x[c] - xmax)
	}
	if p.TopP > 0 && p.TopP < 1 {
		ids = refTopP(x, w, ids, float64(p.TopP))
	}
	if p.MinP > 0 {
		var kept []int
		for _, c := range ids {
			if w[c] >= float64(p.MinP) { // p_i >= min_p·p_max, as w_max = 1
				kept = append(kept, c)
			}
		}
		ids = kept
	}
	z := 0.0
	for _, c := range ids {
		z += w[c]
	}
	probs := make([]float64, len(x))
	kept := make([]bool, len(x))
	for _, c := range ids {
		probs[c], kept[c] = w[c]/z, true
	}
	return refResult{probs: probs, kept: kept}
}

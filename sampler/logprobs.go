package sampler

import "math"

// Logprobs returns the log-probability of token under softmax(row), the
// model's own distribution before any sampling parameter, and the k most
// likely tokens (higher logit first, lower id on ties), computed
// in float64 so that the normaliser neither overflows nor loses the tail.
func Logprobs(row []float32, token, k int) (float32, []TokenProb) {
	m := math.Inf(-1)
	for _, v := range row {
		m = max(m, float64(v))
	}
	var z float64
	for _, v := range row {
		z += math.Exp(float64(v) - m)
	}
	logZ := m + math.Log(z)
	lp := func(id int) float32 { return float32(float64(row[id]) - logZ) }
	if k == 0 {
		return lp(token), nil
	}
	top := make([]int, 0, k)
	for id, v := range row {
		if len(top) == k && v <= row[top[k-1]] {
			continue // ties keep the lower id already listed
		}
		if len(top) < k {
			top = append(top, id)
		} else {
			top[k-1] = id
		}
		for j := len(top) - 1; j > 0 && row[top[j]] > row[top[j-1]]; j-- {
			top[j], top[j-1] = top[j-1], top[j]
		}
	}
	out := make([]TokenProb, len(top))
	for i, id := range top {
		l := lp(id)
		out[i] = TokenProb{Token: id, Logprob: l, Prob: float32(math.Exp(float64(l)))}
	}
	return lp(token), out
}

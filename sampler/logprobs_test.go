package sampler

import (
	"math"
	"testing"
)

// Logprobs against a float64 log-softmax computed directly, ties listed
// lower id first, and logits large enough to overflow a naive exp.
func TestLogprobs(t *testing.T) {
	for _, tc := range []struct {
		row   []float32
		token int
		k     int
		top   []int
	}{
		{[]float32{0, 0}, 1, 2, []int{0, 1}},
		{[]float32{1, 3, 2, 3}, 2, 3, []int{1, 3, 2}},
		{[]float32{1000, 999, -1000}, 1, 1, []int{0}},
		{[]float32{-5, -7}, 0, 0, nil},
	} {
		m := math.Inf(-1)
		for _, v := range tc.row {
			m = max(m, float64(v))
		}
		var z float64
		for _, v := range tc.row {
			z += math.Exp(float64(v) - m)
		}
		want := func(id int) float64 { return float64(tc.row[id]) - m - math.Log(z) }
		got, top := Logprobs(tc.row, tc.token, tc.k)
		if math.Abs(float64(got)-want(tc.token)) > 1e-6 {
			t.Errorf("%v: logprob of %d = %g, want %g", tc.row, tc.token, got, want(tc.token))
		}
		if len(top) != len(tc.top) {
			t.Fatalf("%v: top %+v, want ids %v", tc.row, top, tc.top)
		}
		for i, id := range tc.top {
			if top[i].Token != id || math.Abs(float64(top[i].Logprob)-want(id)) > 1e-6 ||
				math.Abs(float64(top[i].Prob)-math.Exp(want(id))) > 1e-6 {
				t.Errorf("%v: top[%d] = %+v, want id %d logprob %g", tc.row, i, top[i], id, want(id))
			}
		}
	}
}

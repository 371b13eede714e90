package sampler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// logw returns float32 logits whose softmax at temperature 1 is proportional
// to the given weights, so test distributions can be written by hand.
func logw(weights ...float64) []float32 {
	l := make([]float32, len(weights))
	for i, w := range weights {
		l[i] = float32(math.Log(w))
	}
	return l
}

// normalize scales ws to sum to 1.
func normalize(ws ...float64) []float64 {
	z := 0.0
	for _, w := range ws {
		z += w
	}
	out := make([]float64, len(ws))
	for i, w := range ws {
		out[i] = w / z
	}
	return out
}

// softmax of float64 logits, for hand-adjusted logits.
func softmax(x ...float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	w := make([]float64, len(x))
	for i, v := range x {
		w[i] = math.Exp(v - m)
	}
	return normalize(w...)
}

func mustNew(t testing.TB, vocab int, p Params) *Sampler {
	t.Helper()
	s, err := New(vocab, p)
	if err != nil {
		t.Fatalf("New(%d, %+v): %v", vocab, p, err)
	}
	return s
}

// distribution returns the sampler's final distribution over the whole
// vocabulary for one call, read from its internals (Top holds only 8).
func distribution(t testing.TB, s *Sampler, logits []float32, history []int) []float64 {
	t.Helper()
	probs, _ := distributionKept(t, s, logits, history)
	return probs
}

// distributionKept also reports which tokens survived the filters: a kept
// token can have probability 0 when its exp underflows.
func distributionKept(t testing.TB, s *Sampler, logits []float32, history []int) (probs []float64, kept []bool) {
	t.Helper()
	n, imax, err := s.prepare(logits, history)
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	probs = make([]float64, s.vocab)
	kept = make([]bool, s.vocab)
	if s.p.Temperature == 0 {
		probs[imax], kept[imax] = 1, true
		return probs, kept
	}
	cand, z := s.filter(n, s.x[imax])
	for _, c := range cand {
		probs[c], kept[c] = s.w[c]/z, true
	}
	return probs, kept
}

func assertProbs(t *testing.T, got, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if (want[i] == 0) != (got[i] == 0) || math.Abs(got[i]-want[i]) > tol {
			t.Fatalf("probabilities\n got %v\nwant %v", got, want)
		}
	}
}

// chiSquareCritical999 holds the 0.999 quantiles of the chi-square
// distribution for 1..10 degrees of freedom (standard tables, e.g.
// NIST/SEMATECH e-Handbook 1.3.6.7.4).
var chiSquareCritical999 = []float64{0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124, 27.877, 29.588}

// TestChiSquare draws N = 200000 tokens per case and runs Pearson's
// chi-square goodness-of-fit test against hand-computed probabilities.
//
// Why this critical value: with every expected count >= 2000 (all kept
// probabilities >= 0.01) the statistic is chi-square distributed with
// k-1 degrees of freedom to high accuracy, and the 0.999 quantile gives a
// 0.1% chance that a correct sampler fails. The seed is fixed, so the test
// is deterministic: a pass stays a pass. At N = 200000 a 5% relative error
// in a 0.1-probability token adds about 50 to the statistic, well beyond any
// critical value in the table. Removed tokens must never be drawn at all.
func TestChiSquare(t *testing.T) {
	base := logw(1, 2, 3, 4) // softmax at T = 1 is 0.1, 0.2, 0.3, 0.4
	cases := []struct {
		name   string
		p      Params
		logits []float32
		mask   []bool
		want   []float64
	}{
		{"T=1", Params{Temperature: 1}, base, nil, []float64{0.1, 0.2, 0.3, 0.4}},
		// logits/T: T = 0.5 squares the weights, T = 2 takes square roots.
		{"T=0.5", Params{Temperature: 0.5}, base, nil, normalize(1, 4, 9, 16)},
		{"T=2", Params{Temperature: 2}, base, nil, normalize(1, math.Sqrt2, math.Sqrt(3), 2)},
		// runners.py nucleus: ascending cumsum 0.1, 0.3, 0.6, 1.0.
		// top_p 0.5: first cumsum >= 0.5 is 0.6 (token 2) → keep tokens 2, 3.
		{"top_p=0.5", Params{Temperature: 1, TopP: 0.5}, base, nil, normalize(0, 0, 3, 4)},
		// top_p 0.75: first cumsum >= 0.25 is 0.3 (token 1) → keep 1, 2, 3.
		{"top_p=0.75", Params{Temperature: 1, TopP: 0.75}, base, nil, normalize(0, 2, 3, 4)},
		// Temperature first (runners.py 112): at T = 0.5 the probabilities
		// are 1,4,9,16 /30; ascending cumsum 1/30, 5/30, 14/30, 1; top_p
		// 0.75 → first cumsum >= 0.25 is 14/30 (token 2) → keep 2, 3,
		// where at T = 1 the same top_p keeps 1, 2, 3 (case above).
		{"T=0.5,top_p=0.75", Params{Temperature: 0.5, TopP: 0.75}, base, nil, normalize(0, 0, 9, 16)},
		{"top_k=2", Params{Temperature: 1, TopK: 2}, base, nil, normalize(0, 0, 3, 4)},
		{"top_k=3", Params{Temperature: 1, TopK: 3}, base, nil, normalize(0, 2, 3, 4)},
		// min-p 0.6: keep p >= 0.24 → tokens 2, 3.
		{"min_p=0.6", Params{Temperature: 1, MinP: 0.6}, base, nil, normalize(0, 0, 3, 4)},
		// min-p 0.4: keep p >= 0.16 → tokens 1, 2, 3.
		{"min_p=0.4", Params{Temperature: 1, MinP: 0.4}, base, nil, normalize(0, 2, 3, 4)},
		{"mask", Params{Temperature: 1}, base, []bool{true, true, true, false}, normalize(1, 2, 3, 0)},
		{"ties", Params{Temperature: 1}, []float32{0, 0, 0, 0, 0}, nil, normalize(1, 1, 1, 1, 1)},
		{"-Inf", Params{Temperature: 1}, []float32{float32(math.Log(3)), float32(math.Inf(-1)), 0}, nil, normalize(3, 0, 1)},
		{"chain", Params{Temperature: 1, TopK: 7, TopP: 0.9, MinP: 0.1}, logw(1, 2, 3, 4, 5, 6, 7, 8),
			// top-k 7 drops token 0 (z = 35); nucleus 0.9: ascending cumsum
			// 2,5,9,14,20,27,35 /35 ≥ 0.1 first at 5/35 (token 2); min-p
			// 0.1 keeps p >= 0.8/35: all of 2..7.
			nil, normalize(0, 0, 3, 4, 5, 6, 7, 8)},
	}
	const N = 200000
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Seed = 12345
			s := mustNew(t, len(tc.logits), tc.p)
			if err := s.SetMask(tc.mask); err != nil {
				t.Fatal(err)
			}
			counts := make([]int, len(tc.logits))
			for range N {
				r, err := s.Sample(tc.logits, nil)
				if err != nil {
					t.Fatal(err)
				}
				counts[r.Token]++
				if math.Abs(float64(r.Prob)-tc.want[r.Token]) > 1e-6 {
					t.Fatalf("token %d: Prob %v, want %v", r.Token, r.Prob, tc.want[r.Token])
				}
			}
			stat, k := 0.0, 0
			for i, c := range counts {
				if tc.want[i] == 0 {
					if c != 0 {
						t.Fatalf("removed token %d drawn %d times", i, c)
					}
					continue
				}
				e := N * tc.want[i]
				stat += (float64(c) - e) * (float64(c) - e) / e
				k++
			}
			if crit := chiSquareCritical999[k-1]; stat > crit {
				t.Errorf("chi-square %.2f > %.3f (df %d): counts %v, want probs %v", stat, crit, k-1, counts, tc.want)
			}
		})
	}
}

// TestNucleusExactBoundary checks the threshold rule on weights that are
// exact in binary, so "cumulative probability equals 1 - top_p" really
// happens: the token at the boundary is the threshold and is kept
// (runners.py 89: cumsum >= 1 - top_p).
func TestNucleusExactBoundary(t *testing.T) {
	// Tokens by probability: 0.5, 0.25, 0.125, 0.125 (ids 0..3, distinct
	// logits). Ascending cumsum: 0.125, 0.25, 0.5, 1.
	x := []float64{4, 3, 2, 1}
	w := []float64{0.5, 0.25, 0.125, 0.125}
	for _, tc := range []struct {
		topP float64
		keep int
	}{
		{0.25, 1},  // 1-top_p = 0.75: first cumsum >= 0.75 is token 0
		{0.5, 2},   // 0.5: cumsum hits 0.5 exactly at token 1 → keep 0, 1
		{0.625, 2}, // 0.375: first >= is 0.5 (token 1)
		{0.75, 3},  // 0.25: exactly at token 2
		{0.875, 4}, // 0.125: exactly at token 3 → everything
		{0.1, 1},
	} {
		s := mustNew(t, 4, Params{Temperature: 1})
		copy(s.x, x)
		copy(s.w, w)
		cand := []int32{3, 1, 0, 2}
		kept, mass := s.selectNucleus(cand, tc.topP)
		got := slices.Sorted(slices.Values(cand[:kept]))
		ref := refTopP(x, w, []int{0, 1, 2, 3}, tc.topP)
		want := []int32{0, 1, 2, 3}[:tc.keep]
		if !slices.Equal(got, want) || len(ref) != tc.keep {
			t.Errorf("top_p %v: kept %v (reference %v), want %v", tc.topP, got, ref, want)
		}
		wantMass := 0.0
		for _, c := range want {
			wantMass += w[c]
		}
		if mass != wantMass {
			t.Errorf("top_p %v: mass %v, want %v", tc.topP, mass, wantMass)
		}
	}
}

// TestNucleusEdges covers the public path: top_p straddling each cumulative
// boundary by one float32 step, ties at the threshold, top_p = 1 and tiny
// top_p.
func TestNucleusEdges(t *testing.T) {
	logits := logw(1, 2, 3, 4)
	// Mass of the k most probable tokens, computed as the sampler does.
	x := make([]float64, 4)
	for i, l := range logits {
		x[i] = float64(l)
	}
	probs := softmax(x...)
	for k := 1; k <= 3; k++ {
		m := 0.0
		for i := 3; i > 3-k; i-- {
			m += probs[i]
		}
		f := float32(m)
		up, down := math.Nextafter32(f, 2), math.Nextafter32(f, 0)
		if float64(up) <= m || float64(down) >= m {
			up, down = math.Nextafter32(up, 2), math.Nextafter32(down, 0)
		}
		for _, tc := range []struct {
			topP float32
			keep int
		}{{up, k + 1}, {down, k}} {
			s := mustNew(t, 4, Params{Temperature: 1, TopP: tc.topP})
			d := distribution(t, s, logits, nil)
			kept := 0
			for _, p := range d {
				if p > 0 {
					kept++
				}
			}
			if kept != tc.keep || d[3] == 0 {
				t.Errorf("top mass %v, top_p %v: kept %d tokens (%v), want %d", m, tc.topP, kept, d, tc.keep)
			}
		}
	}

	// Ties at the threshold: p(token 0) ≈ 0.447 < top_p, so the crossing
	// token is one of the three tied at logit 1; all three are kept, the
	// lower token 4 is not.
	tied := []float32{2, 1, 1, 1, 0}
	s := mustNew(t, 5, Params{Temperature: 1, TopP: 0.45})
	d := distribution(t, s, tied, nil)
	assertProbs(t, d, softmax(2, 1, 1, 1, math.Inf(-1)), 1e-12)

	// top_p = 1 keeps everything, even a token with probability ~e^-100.
	wide := []float32{0, -100, 5, -30}
	s = mustNew(t, 4, Params{Temperature: 1, TopP: 1})
	assertProbs(t, distribution(t, s, wide, nil), softmax(0, -100, 5, -30), 1e-15)
	// top_p = 0 is "off" too.
	s = mustNew(t, 4, Params{Temperature: 1})
	assertProbs(t, distribution(t, s, wide, nil), softmax(0, -100, 5, -30), 1e-15)

	// Tiny top_p keeps only the maximum and its ties.
	for _, tp := range []float32{1e-30, math.SmallestNonzeroFloat32, 0.01} {
		s = mustNew(t, 5, Params{Temperature: 1, TopP: tp})
		assertProbs(t, distribution(t, s, []float32{3, 5, 5, 1, 4.9}, nil), []float64{0, 0.5, 0.5, 0, 0}, 0)
	}
}

// TestTemperature checks that the final distribution is softmax(logits/T).
func TestTemperature(t *testing.T) {
	logits := []float32{1.5, -0.25, 3, 0, 2}
	for _, temp := range []float32{0.01, 0.3, 1, 1.7, 10} {
		s := mustNew(t, 5, Params{Temperature: temp})
		x := make([]float64, 5)
		for i, l := range logits {
			x[i] = float64(l) / float64(temp)
		}
		want := softmax(x...)
		assertProbs(t, distribution(t, s, logits, nil), want, 1e-12)
		// Higher temperature flattens: the top token's probability falls.
		if temp > 1 && want[2] >= softmax(1.5, -0.25, 3, 0, 2)[2] {
			t.Errorf("T=%v did not flatten the distribution", temp)
		}
	}
}

func TestTopKTies(t *testing.T) {
	logits := []float32{1, 3, 3, 2, 0}
	for _, tc := range []struct {
		k    int
		want []float64
	}{
		{1, softmax(math.Inf(-1), 3, 3, math.Inf(-1), math.Inf(-1))}, // ties with the 1st kept
		{2, softmax(math.Inf(-1), 3, 3, math.Inf(-1), math.Inf(-1))},
		{3, softmax(math.Inf(-1), 3, 3, 2, math.Inf(-1))},
		{4, softmax(1, 3, 3, 2, math.Inf(-1))},
		{5, softmax(1, 3, 3, 2, 0)},
		{100, softmax(1, 3, 3, 2, 0)},
	} {
		s := mustNew(t, 5, Params{Temperature: 1, TopK: tc.k})
		assertProbs(t, distribution(t, s, logits, nil), tc.want, 1e-12)
	}
}

func TestMinP(t *testing.T) {
	logits := logw(1, 2, 4, 8) // p_max = 8/15
	for _, tc := range []struct {
		minP float32
		want []float64
	}{
		{0.1, normalize(1, 2, 4, 8)},
		{0.2, normalize(0, 2, 4, 8)},
		{0.3, normalize(0, 0, 4, 8)},
		{0.9, normalize(0, 0, 0, 8)},
		{1, normalize(0, 0, 0, 8)},
	} {
		s := mustNew(t, 4, Params{Temperature: 1, MinP: tc.minP})
		assertProbs(t, distribution(t, s, logits, nil), tc.want, 1e-6)
	}
	// min-p is measured after temperature: at T = 0.5 the weights square
	// (1, 4, 16, 64), so min-p 0.2 keeps only tokens 2 and 3.
	s := mustNew(t, 4, Params{Temperature: 0.5, MinP: 0.2})
	assertProbs(t, distribution(t, s, logits, nil), normalize(0, 0, 16, 64), 1e-6)
}

func TestPenalties(t *testing.T) {
	logits := []float32{2, -1, 0.5, 0, 1}
	// Token counts in [0 1 1 3]: 0×1, 1×2, 3×1.
	hist := []int{4, 4, 4, 0, 1, 1, 3}
	for _, tc := range []struct {
		name string
		p    Params
		hist []int
		adj  []float64 // hand-adjusted logits before temperature
	}{
		// Positive logit divided, non-positive multiplied (0·2 stays 0).
		{"repeat", Params{RepeatPenalty: 2, RepeatLastN: 4}, hist, []float64{1, -2, 0.5, 0, 1}},
		{"repeat<1", Params{RepeatPenalty: 0.5, RepeatLastN: 4}, hist, []float64{4, -0.5, 0.5, 0, 1}},
		{"presence", Params{PresencePenalty: 0.5, RepeatLastN: 4}, hist, []float64{1.5, -1.5, 0.5, -0.5, 1}},
		{"frequency", Params{FrequencyPenalty: 0.25, RepeatLastN: 4}, hist, []float64{1.75, -1.5, 0.5, -0.25, 1}},
		// All three: 2/2-0.25-0.5, -1·2-0.5-0.5, 0·2-0.25-0.5.
		{"all", Params{RepeatPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25, RepeatLastN: 4}, hist,
			[]float64{0.25, -3, 0.5, -0.75, 1}},
		// Whole history: token 4 occurs 3 times: 1/2 - 0.75 - 0.5.
		{"whole", Params{RepeatPenalty: 2, PresencePenalty: 0.5, FrequencyPenalty: 0.25, RepeatLastN: -1}, hist,
			[]float64{0.25, -3, 0.5, -0.75, -0.75}},
		// Default window (64) covers all 7 tokens.
		{"default", Params{FrequencyPenalty: 1}, hist, []float64{1, -3, 0.5, -1, -2}},
		// Window of 1: only token 3.
		{"last1", Params{FrequencyPenalty: 1, RepeatLastN: 1}, hist, []float64{2, -1, 0.5, -1, 1}},
		{"empty history", Params{FrequencyPenalty: 1}, nil, []float64{2, -1, 0.5, 0, 1}},
		// Negative presence (OpenAI allows it) encourages repetition.
		{"negative presence", Params{PresencePenalty: -1, RepeatLastN: 1}, hist, []float64{2, -1, 0.5, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, temp := range []float32{1, 2} {
				p := tc.p
				p.Temperature = temp
				s := mustNew(t, 5, p)
				x := make([]float64, 5)
				for i, v := range tc.adj {
					x[i] = v / float64(temp) // penalties come before temperature
				}
				assertProbs(t, distribution(t, s, logits, tc.hist), softmax(x...), 1e-7)
			}
			// Greedy also applies penalties.
			p := tc.p
			s := mustNew(t, 5, p)
			r, err := s.Sample(logits, tc.hist)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for i, v := range tc.adj {
				if v > tc.adj[want] {
					want = i
				}
			}
			if r.Token != want {
				t.Errorf("greedy chose %d, want %d", r.Token, want)
			}
		})
	}
	// The per-token counts are cleared after each call: repeating the call
	// gives the same distribution.
	s := mustNew(t, 5, Params{Temperature: 1, FrequencyPenalty: 1})
	a := distribution(t, s, logits, hist)
	b := distribution(t, s, logits, hist)
	assertProbs(t, b, a, 0)
}

func TestGreedy(t *testing.T) {
	logits := []float32{1, 7, 3, 7, 7, -2}
	// Filters and the RNG are ignored; ties go to the lowest id.
	s := mustNew(t, 6, Params{TopK: 1, TopP: 0.1, MinP: 0.5, Seed: 9, TopLogprobs: 3})
	for range 5 {
		r, err := s.Sample(logits, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Token != 1 || r.Prob != 1 || r.Logprob != 0 || len(r.Top) != 1 || r.Top[0] != (TokenProb{1, 1, 0}) {
			t.Fatalf("greedy result %+v", r)
		}
	}
	// The mask still applies.
	if err := s.SetMask([]bool{true, false, true, true, true, true}); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Sample(logits, nil); r.Token != 3 {
		t.Errorf("masked greedy chose %d, want 3", r.Token)
	}
	// TopLogprobs = 0 reports nothing.
	s = mustNew(t, 6, Params{})
	if r, _ := s.Sample(logits, nil); r.Token != 1 || r.Top != nil {
		t.Errorf("greedy result %+v", r)
	}
}

func TestTopLogprobs(t *testing.T) {
	logits := []float32{0, 2, 1, 2, -1, 3, 0.5, -3, 1.5, 2.5}
	x := make([]float64, len(logits))
	for i, l := range logits {
		x[i] = float64(l)
	}
	want := softmax(x...)
	for _, n := range []int{1, 3, 8} {
		s := mustNew(t, len(logits), Params{Temperature: 1, TopLogprobs: n})
		r, err := s.Sample(logits, nil)
		if err != nil {
			t.Fatal(err)
		}
		order := []int{5, 9, 1, 3, 8, 2, 6, 0} // descending, ties by id
		if len(r.Top) != n {
			t.Fatalf("len(Top) = %d, want %d", len(r.Top), n)
		}
		for i, e := range r.Top {
			if e.Token != order[i] || math.Abs(float64(e.Prob)-want[e.Token]) > 1e-7 ||
				math.Abs(float64(e.Logprob)-math.Log(want[e.Token])) > 1e-6 {
				t.Errorf("Top[%d] = %+v, want token %d prob %v", i, e, order[i], want[order[i]])
			}
		}
		if math.Abs(float64(r.Logprob)-math.Log(float64(r.Prob))) > 1e-6 {
			t.Errorf("Logprob %v vs log(Prob) %v", r.Logprob, math.Log(float64(r.Prob)))
		}
	}
	// Fewer survivors than requested: Top is shorter, and reports the
	// filtered distribution.
	s := mustNew(t, len(logits), Params{Temperature: 1, TopK: 2, TopLogprobs: 8})
	r, _ := s.Sample(logits, nil)
	p := softmax(3, 2.5)
	if len(r.Top) != 2 || r.Top[0].Token != 5 || r.Top[1].Token != 9 ||
		math.Abs(float64(r.Top[0].Prob)-p[0]) > 1e-7 || math.Abs(float64(r.Top[1].Prob)-p[1]) > 1e-7 {
		t.Errorf("Top = %+v, want tokens 5, 9 with %v", r.Top, p)
	}
	// A logprob far below float32's smallest probability stays finite.
	s = mustNew(t, 2, Params{Temperature: 1, TopLogprobs: 2})
	r, _ = s.Sample([]float32{0, -200}, nil)
	if r.Top[1].Prob != 0 || math.Abs(float64(r.Top[1].Logprob)+200) > 1e-3 {
		t.Errorf("tail entry %+v, want prob 0 and logprob -200", r.Top[1])
	}
}

func TestSeed(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, 1000)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64())
	}
	run := func(s *Sampler) []int {
		out := make([]int, 500)
		for i := range out {
			r, err := s.Sample(logits, out[:i])
			if err != nil {
				t.Fatal(err)
			}
			out[i] = r.Token
		}
		return out
	}
	p := Params{Temperature: 1, TopP: 0.95, RepeatPenalty: 1.1, Seed: 42}
	a := run(mustNew(t, 1000, p))
	b := run(mustNew(t, 1000, p))
	if !slices.Equal(a, b) {
		t.Error("same seed gave different tokens")
	}
	p.Seed = 43
	s := mustNew(t, 1000, p)
	if c := run(s); slices.Equal(a, c) {
		t.Error("different seeds gave the same 500 tokens")
	}
	// Reset reseeds.
	p.Seed = 42
	if err := s.Reset(p); err != nil {
		t.Fatal(err)
	}
	if c := run(s); !slices.Equal(a, c) {
		t.Error("Reset to the same seed did not reproduce the tokens")
	}
}

func TestInvalidParams(t *testing.T) {
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	for _, p := range []Params{
		{Temperature: -0.1},
		{Temperature: nan},
		{Temperature: inf},
		{Temperature: 1, TopP: -0.5},
		{Temperature: 1, TopP: 1.01},
		{Temperature: 1, TopP: nan},
		{Temperature: 1, TopK: -1},
		{Temperature: 1, MinP: -0.1},
		{Temperature: 1, MinP: 1.5},
		{Temperature: 1, MinP: nan},
		{Temperature: 1, RepeatPenalty: -1},
		{Temperature: 1, RepeatPenalty: inf},
		{Temperature: 1, RepeatLastN: -2},
		{Temperature: 1, PresencePenalty: nan},
		{Temperature: 1, FrequencyPenalty: -inf},
		{Temperature: 1, TopLogprobs: 9},
		{Temperature: 1, TopLogprobs: -1},
	} {
		if _, err := New(10, p); err == nil {
			t.Errorf("New accepted %+v", p)
		} else if s := mustNew(t, 10, Params{}); s.Reset(p) == nil {
			t.Errorf("Reset accepted %+v", p)
		}
	}
	for _, v := range []int{0, -1} {
		if _, err := New(v, Params{}); err == nil {
			t.Errorf("New accepted vocabulary %d", v)
		}
	}
	// Boundary values that are valid.
	for _, p := range []Params{{}, {Temperature: 1, TopP: 1, MinP: 1, TopLogprobs: 8, RepeatLastN: -1, RepeatPenalty: 0}} {
		if _, err := New(10, p); err != nil {
			t.Errorf("New rejected %+v: %v", p, err)
		}
	}
}

// TestInvalidInputs: bad logits, history and masks give errors, never
// panics, and leave the sampler usable.
func TestInvalidInputs(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	ninf := float32(math.Inf(-1))
	for _, temp := range []float32{0, 1} {
		p := Params{Temperature: temp, FrequencyPenalty: 1, Seed: 1}
		for _, tc := range []struct {
			name    string
			logits  []float32
			hist    []int
			mask    []bool
			invalid bool // wraps ErrInvalidLogits
		}{
			{"NaN", []float32{0, nan, 1}, []int{0, 2}, nil, true},
			{"+Inf", []float32{0, 1, inf}, nil, nil, true},
			{"all -Inf", []float32{ninf, ninf, ninf}, nil, nil, true},
			{"all masked", []float32{0, 1, 2}, nil, []bool{false, false, false}, true},
			{"masked and -Inf", []float32{0, ninf, 2}, nil, []bool{false, true, false}, true},
			{"short", []float32{0, 1}, nil, nil, false},
			{"history high", []float32{0, 1, 2}, []int{0, 3}, nil, false},
			{"history negative", []float32{0, 1, 2}, []int{0, 1, -1}, nil, false},
		} {
			s := mustNew(t, 3, p)
			if err := s.SetMask(tc.mask); err != nil {
				t.Fatal(err)
			}
			_, err := s.Sample(tc.logits, tc.hist)
			if err == nil || errors.Is(err, ErrInvalidLogits) != tc.invalid {
				t.Errorf("T=%v %s: err = %v", temp, tc.name, err)
			}
			// Still usable, and no stale penalty counts.
			if err := s.SetMask(nil); err != nil {
				t.Fatal(err)
			}
			d := distribution(t, s, []float32{0, 0.5, 1}, []int{1})
			fresh := distribution(t, mustNew(t, 3, p), []float32{0, 0.5, 1}, []int{1})
			assertProbs(t, d, fresh, 0)
		}
	}
	// The smallest temperature and largest logits stay finite in float64.
	s := mustNew(t, 2, Params{Temperature: math.SmallestNonzeroFloat32, RepeatPenalty: math.SmallestNonzeroFloat32})
	if r, err := s.Sample([]float32{-3e38, 3e38}, []int{0}); err != nil || r.Token != 1 || r.Prob != 1 {
		t.Errorf("extreme temperature: %+v, %v", r, err)
	}
	// -Inf logits are allowed and never drawn.
	s = mustNew(t, 3, Params{Temperature: 1})
	for range 1000 {
		r, err := s.Sample([]float32{ninf, 0, ninf}, nil)
		if err != nil || r.Token != 1 || r.Prob != 1 {
			t.Fatalf("got %+v, %v", r, err)
		}
	}
	// Masks of the wrong length are refused.
	if err := s.SetMask(make([]bool, 2)); err == nil {
		t.Error("SetMask accepted a short mask")
	}
	// History is not read when no penalty is active.
	if _, err := s.Sample([]float32{0, 1, 2}, []int{-5, 99}); err != nil {
		t.Errorf("unpenalised sample read history: %v", err)
	}
}

func TestMaskIsCopied(t *testing.T) {
	s := mustNew(t, 3, Params{Temperature: 1})
	m := []bool{false, true, false}
	if err := s.SetMask(m); err != nil {
		t.Fatal(err)
	}
	m[0], m[1] = true, false // must not affect the sampler
	for range 100 {
		if r, _ := s.Sample([]float32{5, 0, 5}, nil); r.Token != 1 {
			t.Fatalf("masked token %d drawn", r.Token)
		}
	}
	_ = s.SetMask(nil)
	seen := map[int]bool{}
	for range 100 {
		r, _ := s.Sample([]float32{5, 0, 5}, nil)
		seen[r.Token] = true
	}
	if !seen[0] || !seen[2] {
		t.Errorf("mask not lifted: saw %v", seen)
	}
}

func TestInputsUnmodified(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, 300)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	hist := []int{1, 2, 3, 2, 1, 299}
	l0, h0 := slices.Clone(logits), slices.Clone(hist)
	s := mustNew(t, 300, Params{Temperature: 0.7, TopK: 50, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.3,
		PresencePenalty: 0.2, FrequencyPenalty: 0.1, TopLogprobs: 8})
	for range 10 {
		if _, err := s.Sample(logits, hist); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(logits, l0) || !slices.Equal(hist, h0) {
		t.Error("Sample modified its inputs")
	}
}

// randomCase builds random logits with ties, -Inf entries and a mask, and
// random parameters covering every filter.
func randomCase(rng *rand.Rand) (Params, []float32, []int, []bool) {
	vocab := 1 + rng.IntN(3000)
	if rng.IntN(4) == 0 {
		vocab = 1 + rng.IntN(12)
	}
	logits := make([]float32, vocab)
	scale := []float64{0.1, 1, 3, 20}[rng.IntN(4)]
	quant := rng.IntN(3) == 0 // coarse grid: many ties
	for i := range logits {
		v := rng.NormFloat64() * scale
		if quant {
			v = math.Round(v * 2)
		}
		logits[i] = float32(v)
		if rng.IntN(50) == 0 {
			logits[i] = float32(math.Inf(-1))
		}
	}
	var mask []bool
	if rng.IntN(3) == 0 {
		mask = make([]bool, vocab)
		for i := range mask {
			mask[i] = rng.IntN(4) != 0
		}
	}
	hist := make([]int, rng.IntN(100))
	for i := range hist {
		hist[i] = rng.IntN(vocab)
	}
	p := Params{Temperature: []float32{0, 0.05, 0.7, 1, 1.5}[rng.IntN(5)]}
	if rng.IntN(2) == 0 {
		p.TopP = []float32{1e-6, 0.1, 0.5, 0.9, 0.95, 0.999, 1}[rng.IntN(7)]
	}
	if rng.IntN(3) == 0 {
		p.TopK = 1 + rng.IntN(vocab+5)
	}
	if rng.IntN(3) == 0 {
		p.MinP = []float32{0.001, 0.05, 0.3}[rng.IntN(3)]
	}
	if rng.IntN(3) == 0 {
		p.RepeatPenalty = []float32{0.8, 1.1, 1.5}[rng.IntN(3)]
		p.PresencePenalty = float32(rng.Float64())
		p.FrequencyPenalty = float32(rng.Float64() - 0.3)
		p.RepeatLastN = []int{-1, 0, 5, 64}[rng.IntN(4)]
	}
	p.TopLogprobs = rng.IntN(9)
	p.Seed = rng.Uint64()
	return p, logits, hist, mask
}

// TestMatchesReference compares the fast path with the sort-everything
// reference on random inputs, with normal quickselect and with the heapsort
// fallback forced on every step.
func TestMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	iters := 1500
	if testing.Short() {
		iters = 200
	}
	for it := range iters {
		p, logits, hist, mask := randomCase(rng)
		ref := reference(p, mask, logits, hist)
		for _, v := range selectVariants {
			s := mustNew(t, len(logits), p)
			v.apply(s)
			if err := s.SetMask(mask); err != nil {
				t.Fatal(err)
			}
			desc := fmt.Sprintf("case %d (vocab %d, %+v, %s)", it, len(logits), p, v.name)
			r, err := s.Sample(logits, hist)
			if ref.err {
				if err == nil {
					t.Fatalf("%s: no error, reference fails", desc)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", desc, err)
			}
			if p.Temperature == 0 {
				if r.Token != ref.greedy {
					t.Fatalf("%s: greedy %d, reference %d", desc, r.Token, ref.greedy)
				}
				continue
			}
			if ref.probs[r.Token] == 0 {
				t.Fatalf("%s: drew removed token %d", desc, r.Token)
			}
			if d := math.Abs(float64(r.Prob) - ref.probs[r.Token]); d > 1e-6*ref.probs[r.Token]+1e-30 {
				t.Fatalf("%s: Prob %v, reference %v", desc, r.Prob, ref.probs[r.Token])
			}
			got, kept := distributionKept(t, mustNewLike(t, s, mask), logits, hist)
			for i := range got {
				if kept[i] != ref.kept[i] || math.Abs(got[i]-ref.probs[i]) > 1e-12 {
					t.Fatalf("%s: token %d kept %v prob %v, reference %v %v", desc, i, kept[i], got[i], ref.kept[i], ref.probs[i])
				}
			}
			// Top: the most probable kept reference tokens, ties by id.
			order := make([]int, 0, len(got))
			for i, k := range ref.kept {
				if k {
					order = append(order, i)
				}
			}
			x := refAdjusted(p, mask, logits, hist)
			slices.SortStableFunc(order, func(a, b int) int {
				if x[a] != x[b] {
					if x[a] > x[b] {
						return -1
					}
					return 1
				}
				return a - b
			})
			if n := min(p.TopLogprobs, len(order)); len(r.Top) != n {
				t.Fatalf("%s: len(Top) %d, want %d", desc, len(r.Top), n)
			}
			for i, e := range r.Top {
				if e.Token != order[i] || math.Abs(float64(e.Prob)-ref.probs[e.Token]) > 1e-6 {
					t.Fatalf("%s: Top[%d] = %+v, reference token %d prob %v", desc, i, e, order[i], ref.probs[order[i]])
				}
			}
		}
	}
}

// selectVariants switch the selection paths: the top-k heap or quickselect,
// and quickselect with the heapsort fallback forced at the first or second
// level.
var selectVariants = []struct {
	name  string
	apply func(*Sampler)
}{
	{"default", func(*Sampler) {}},
	{"quickselect", func(s *Sampler) { s.kheap = nil }},
	{"fallback at depth 1", func(s *Sampler) { s.kheap, s.depthLimit = nil, 1 }},
	{"fallback at depth 2", func(s *Sampler) { s.depthLimit = 2 }},
}

// TestMatchesReferenceLargeVocab runs the comparison on a Grok-sized
// vocabulary with language-model-like logits, where the top-p pre-filter
// and the heap do most of the work.
func TestMatchesReferenceLargeVocab(t *testing.T) {
	const vocab = 131072
	logits := benchLogits(vocab)
	hist := make([]int, 300)
	for i := range hist {
		hist[i] = (i * 7919) % vocab
	}
	for _, cfg := range allocConfigs {
		for _, temp := range []float32{0.3, 1, 3} {
			p := cfg.p
			if p.Temperature != 0 {
				p.Temperature = temp
			}
			ref := reference(p, nil, logits, hist)
			for _, v := range selectVariants[:2] {
				s := mustNew(t, vocab, p)
				v.apply(s)
				got, kept := distributionKept(t, s, logits, hist)
				if p.Temperature == 0 {
					if !kept[ref.greedy] {
						t.Fatalf("%s: greedy differs from reference %d", cfg.name, ref.greedy)
					}
					continue
				}
				nk := 0
				for i := range got {
					if kept[i] != ref.kept[i] || math.Abs(got[i]-ref.probs[i]) > 1e-12 {
						t.Fatalf("%s T=%v %s: token %d kept %v prob %v, reference %v %v",
							cfg.name, temp, v.name, i, kept[i], got[i], ref.kept[i], ref.probs[i])
					}
					if kept[i] {
						nk++
					}
				}
				t.Logf("%s T=%v %s: %d tokens kept", cfg.name, temp, v.name, nk)
			}
		}
	}
}

// mustNewLike returns a fresh sampler with s's parameters, selection paths
// and mask.
func mustNewLike(t *testing.T, s *Sampler, mask []bool) *Sampler {
	c := mustNew(t, s.vocab, s.p)
	c.depthLimit, c.kheap = s.depthLimit, s.kheap
	if err := c.SetMask(mask); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHeapSortDesc(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		n := rng.IntN(50)
		x := make([]float64, n)
		c := make([]int32, n)
		for i := range x {
			x[i] = float64(rng.IntN(8))
			c[i] = int32(i)
		}
		rng.Shuffle(n, func(i, j int) { c[i], c[j] = c[j], c[i] })
		heapSortDesc(x, c)
		for i := 1; i < n; i++ {
			if !before(x, c[i-1], c[i]) {
				t.Fatalf("not sorted: %v by %v", c, x)
			}
		}
	}
}

// benchLogits returns logits shaped like a language model's: most of the
// vocabulary far below a handful of plausible tokens.
func benchLogits(vocab int) []float32 {
	rng := rand.New(rand.NewPCG(11, 13))
	l := make([]float32, vocab)
	for i := range l {
		l[i] = float32(rng.NormFloat64() * 2.5)
	}
	for range 20 {
		l[rng.IntN(vocab)] += 12
	}
	return l
}

var allocConfigs = []struct {
	name string
	p    Params
}{
	{"greedy", Params{}},
	{"temperature", Params{Temperature: 1, TopLogprobs: 8}},
	{"runners", Params{Temperature: 0.7, TopP: 0.95, TopLogprobs: 8}}, // run.py-like settings
	{"top_k40_top_p0.95_min_p0.05", Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, TopLogprobs: 8}},
	{"penalties", Params{Temperature: 0.8, TopP: 0.9, RepeatPenalty: 1.1, PresencePenalty: 0.5,
		FrequencyPenalty: 0.2, RepeatLastN: 64, TopLogprobs: 8}},
}

func TestZeroAllocs(t *testing.T) {
	const vocab = 4096
	logits := benchLogits(vocab)
	hist := make([]int, 100)
	for i := range hist {
		hist[i] = (i * 37) % vocab
	}
	mask := make([]bool, vocab)
	for i := range mask {
		mask[i] = i%7 != 0
	}
	for _, cfg := range allocConfigs {
		for _, v := range selectVariants {
			s := mustNew(t, vocab, cfg.p)
			v.apply(s)
			if err := s.SetMask(mask); err != nil {
				t.Fatal(err)
			}
			if a := testing.AllocsPerRun(50, func() {
				if _, err := s.Sample(logits, hist); err != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("%s (%s): %v allocations per Sample", cfg.name, v.name, a)
			}
		}
	}
}

func BenchmarkSample(b *testing.B) {
	const vocab = 131072
	logits := benchLogits(vocab)
	hist := make([]int, 256)
	for i := range hist {
		hist[i] = (i * 7919) % vocab
	}
	for _, cfg := range allocConfigs {
		b.Run(cfg.name, func(b *testing.B) {
			s := mustNew(b, vocab, cfg.p)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Sample(logits, hist); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

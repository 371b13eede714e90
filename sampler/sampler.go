// Package sampler turns a vector of logits into the next token the way
// xai-org/grok-1's runners.py does (sample_token, runners.py 100-133), plus
// the controls users of llama.cpp and OpenAI-style servers expect: top-k,
// min-p, repetition, presence and frequency penalties, greedy decoding, a
// token mask and a seeded RNG.
//
// # Order of operations
//
// runners.py fixes the relative order of temperature, mask and nucleus
// filter; where it is silent (it has no penalties, top-k or min-p) the chain
// follows llama.cpp's common sampler chain with temperature moved first, as
// runners.py applies it:
//
//  1. penalties (repeat, then frequency and presence, as llama.cpp's
//     penalties sampler) on the raw logits of tokens in the history window;
//  2. temperature: logits / Temperature (runners.py 112: temperature is
//     applied before anything else looks at the distribution, so it changes
//     the nucleus and min-p, but not the top-k set);
//  3. the token mask (runners.py 114, see SetMask);
//  4. top-k;
//  5. the nucleus filter with runners.py's exact threshold rule (top_p_filter,
//     runners.py 84-97);
//  6. min-p;
//  7. a categorical draw from the softmax of what is left (runners.py 118).
//
// With Temperature == 0 the sampler is greedy: steps 1 and 3 still apply,
// then the highest logit wins (lowest token id on ties) and the RNG is not
// used.
//
// Line numbers cite runners.py at xai-org/grok-1 commit 7050ed2, as
// docs/semantics.md §6 ("semantics §6") does.
//
// # Removed tokens
//
// runners.py does not delete masked or filtered tokens: it sets their logits
// to -1e10 (runners.py 114 and 96), which gives them probability exactly zero
// as long as some kept logit is above about -1e10 + 100. This package removes
// them from the distribution instead, which is the same distribution in
// every realistic case and guarantees that a masked or filtered token is
// never drawn and never listed in Result.Top.
//
// # Arithmetic
//
// Logits are converted to float64 before anything else, so penalties,
// temperature, softmax and cumulative sums are computed in float64. Grok-1's
// JAX code works in float32; results agree with it except within float32
// rounding of a decision boundary, which no implementation can reproduce bit
// for bit (XLA's sort and cumsum order are unspecified). Likewise the RNG is
// math/rand/v2's PCG, not JAX's threefry: seeded runs are reproducible
// within this package, not token-for-token equal to runners.py's.
package sampler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// MaxTopLogprobs is the most entries Result.Top can hold. It is runners.py's
// TOP_K (runners.py 47): the runner reports the 8 most probable tokens of the
// filtered distribution with every sample.
const MaxTopLogprobs = 8

// DefaultRepeatLastN is the penalty window used when Params.RepeatLastN is 0;
// it is llama.cpp's default (common_params_sampling.penalty_last_n = 64).
const DefaultRepeatLastN = 64

// ErrInvalidLogits is wrapped by the errors Sample returns when the logits
// cannot define a distribution: a NaN or +Inf entry, or no finite entry left
// to choose from.
var ErrInvalidLogits = errors.New("invalid logits")

// Params configures a Sampler. The zero value of every field except
// Temperature means "off"; the zero Params is greedy decoding.
type Params struct {
	// Temperature divides the logits before any filter (runners.py 112).
	// 0 selects greedy decoding: argmax, lowest token id on ties. Must be
	// finite and not negative.
	Temperature float32

	// TopP is the nucleus probability of runners.py's top_p_filter. The
	// logits are sorted ascending and soft-maxed; the threshold is the logit
	// at the first sorted position whose cumulative probability is at least
	// 1 - TopP, and every logit at or above it is kept (ties included), so
	// the nucleus is the smallest run of most-probable tokens whose mass
	// exceeds TopP, plus the token that crosses it, plus anything tied with
	// that token. With TopK set, the probabilities are those of the top-k
	// survivors, renormalised. 0 or 1 turns the filter off (at 1 runners.py
	// keeps every token as well). Must lie in [0, 1].
	TopP float32

	// TopK keeps the TopK highest logits; tokens tied with the TopK-th are
	// kept too, following runners.py's tie rule, so more than TopK tokens
	// may survive. 0 turns it off. Must not be negative.
	TopK int

	// MinP keeps the tokens whose probability is at least MinP times the
	// probability of the most likely token (llama.cpp's min-p), measured
	// after temperature. 0 turns it off. Must lie in [0, 1].
	MinP float32

	// RepeatPenalty is llama.cpp's repetition penalty: for every token that
	// occurs in the window, a positive logit is divided by it and a
	// non-positive logit multiplied by it. 0 and 1 turn it off. Must be
	// finite and not negative.
	RepeatPenalty float32

	// RepeatLastN is the window of history all three penalties look at: the
	// last RepeatLastN tokens. 0 means DefaultRepeatLastN (unlike llama.cpp,
	// where 0 disables the penalties: here the zero penalty values do that),
	// -1 means the whole history.
	RepeatLastN int

	// PresencePenalty and FrequencyPenalty follow OpenAI's definition:
	// logit -= PresencePenalty·[count > 0] + FrequencyPenalty·count, where
	// count is the number of times the token occurs in the window. 0 turns
	// each off. Must be finite.
	PresencePenalty, FrequencyPenalty float32

	// Seed seeds the sampler's random number generator: two samplers with
	// the same Params (Seed included) given the same sequence of logits,
	// histories and masks return the same tokens.
	Seed uint64

	// TopLogprobs is how many of the most probable tokens of the final
	// distribution Result.Top reports, at most MaxTopLogprobs.
	TopLogprobs int
}

// Validate reports whether p is usable, describing the first bad field.
func (p Params) Validate() error {
	finite := func(f float32) bool { return !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) }
	switch {
	case !finite(p.Temperature) || p.Temperature < 0:
		return fmt.Errorf("sampler: temperature %v must be finite and >= 0", p.Temperature)
	case !(p.TopP >= 0 && p.TopP <= 1): // also rejects NaN
		return fmt.Errorf("sampler: top_p %v must lie in (0, 1] (or be 0 for off)", p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("sampler: top_k %d must be >= 0 (0 for off)", p.TopK)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("sampler: min_p %v must lie in [0, 1]", p.MinP)
	case !finite(p.RepeatPenalty) || p.RepeatPenalty < 0:
		return fmt.Errorf("sampler: repeat penalty %v must be finite and >= 0 (0 or 1 for off)", p.RepeatPenalty)
	case p.RepeatLastN < -1:
		return fmt.Errorf("sampler: repeat_last_n %d must be >= -1 (-1 for the whole history)", p.RepeatLastN)
	case !finite(p.PresencePenalty):
		return fmt.Errorf("sampler: presence penalty %v must be finite", p.PresencePenalty)
	case !finite(p.FrequencyPenalty):
		return fmt.Errorf("sampler: frequency penalty %v must be finite", p.FrequencyPenalty)
	case p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs:
		return fmt.Errorf("sampler: top_logprobs %d must lie in [0, %d]", p.TopLogprobs, MaxTopLogprobs)
	}
	return nil
}

// TokenProb is one entry of Result.Top.
type TokenProb struct {
	Token   int
	Prob    float32 // probability in the final distribution
	Logprob float32 // natural log of Prob, computed without underflow
}

// Result is the outcome of one Sample call.
type Result struct {
	// Token is the sampled token id.
	Token int
	// Prob and Logprob are the probability of Token in the distribution it
	// was drawn from (after every filter), as runners.py's token_prob
	// (runners.py 120-122). Greedy decoding draws from a point mass, so it
	// reports 1 and 0.
	Prob, Logprob float32
	// Top lists the len(Top) ≤ Params.TopLogprobs most probable tokens of
	// that distribution, most probable first, lower id first on ties; it
	// has fewer entries when fewer tokens survive the filters (runners.py
	// pads its top-8 with zero-probability tokens instead). It points into
	// storage owned by the Sampler and is overwritten by the next Sample.
	Top []TokenProb
}

// Sampler draws tokens from logit vectors of a fixed vocabulary size. It
// owns its RNG and every buffer Sample needs, so Sample does not allocate.
// A Sampler is not safe for concurrent use.
type Sampler struct {
	vocab int
	p     Params
	rng   *rand.Rand
	pcg   *rand.PCG

	allowed []bool // nil: every token allowed

	x      []float64 // penalised, scaled logits by token id
	w      []float64 // exp(x - max) by token id, valid for candidates
	idx    []int32   // candidate token ids, rearranged by the filters
	counts []int32   // per-token occurrences in the penalty window; all zero between calls
	kheap  []float64 // top-k heap, min(vocab, maxHeapK) long
	top    [MaxTopLogprobs]TokenProb

	depthLimit int // test hook: overrides the quickselect depth limit when > 0
}

// New returns a Sampler for logit vectors of length vocab.
func New(vocab int, p Params) (*Sampler, error) {
	if vocab <= 0 || vocab > math.MaxInt32 {
		return nil, fmt.Errorf("sampler: vocabulary size %d must lie in [1, %d]", vocab, math.MaxInt32)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s := &Sampler{
		vocab:  vocab,
		p:      p,
		pcg:    rand.NewPCG(p.Seed, p.Seed^pcgStream),
		x:      make([]float64, vocab),
		w:      make([]float64, vocab),
		idx:    make([]int32, vocab),
		counts: make([]int32, vocab),
		kheap:  make([]float64, min(vocab, maxHeapK)),
	}
	s.rng = rand.New(s.pcg)
	return s, nil
}

// pcgStream decorrelates PCG's two seed words, so that Seed alone picks the
// stream.
const pcgStream = 0x9e3779b97f4a7c15

// Reset replaces the sampler's parameters and reseeds its RNG from p.Seed,
// keeping its buffers and its mask, so a sampler can serve request after
// request.
func (s *Sampler) Reset(p Params) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s.p = p
	s.pcg.Seed(p.Seed, p.Seed^pcgStream)
	return nil
}

// Params returns the sampler's current parameters.
func (s *Sampler) Params() Params { return s.p }

// Vocab returns the vocabulary size the sampler was made for.
func (s *Sampler) Vocab() int { return s.vocab }

// SetMask restricts sampling to the tokens whose entry in allowed is true,
// as runners.py's SampleSettings.mask does (runners.py 114); it copies
// allowed, and a nil allowed lifts the restriction. len(allowed) must equal
// the vocabulary size.
//
// runners.py sets disallowed logits to -1e10 after temperature, which gives
// them probability zero unless every allowed logit is itself below about
// -1e10; this sampler removes them outright instead, so a disallowed token is
// never returned (Sample fails if no allowed token has a finite logit). The
// mask stays in force until the next SetMask.
func (s *Sampler) SetMask(allowed []bool) error {
	if allowed == nil {
		s.allowed = nil
		return nil
	}
	if len(allowed) != s.vocab {
		return fmt.Errorf("sampler: mask has %d entries, vocabulary has %d", len(allowed), s.vocab)
	}
	if s.allowed == nil {
		s.allowed = make([]bool, s.vocab)
	}
	copy(s.allowed, allowed)
	return nil
}

// Sample draws the next token from logits (one entry per vocabulary token)
// given the token history the penalties look at (the caller chooses whether
// it includes the prompt; it is read only when a penalty is active). It does
// not modify logits or history and does not allocate.
//
// NaN or +Inf logits are an error (wrapping ErrInvalidLogits): the softmax
// is undefined. -Inf logits mean probability zero; the token is never
// chosen. History entries outside [0, vocab) are an error when a penalty is
// active.
func (s *Sampler) Sample(logits []float32, history []int) (Result, error) {
	if len(logits) != s.vocab {
		return Result{}, fmt.Errorf("sampler: %d logits, vocabulary has %d", len(logits), s.vocab)
	}
	n, imax, err := s.prepare(logits, history)
	if err != nil {
		return Result{}, err
	}
	if s.p.Temperature == 0 {
		return s.greedy(imax), nil
	}
	return s.sample(n, s.x[imax]), nil
}

// penalised reports whether any penalty is active.
func (p *Params) penalised() bool {
	return (p.RepeatPenalty != 0 && p.RepeatPenalty != 1) || p.PresencePenalty != 0 || p.FrequencyPenalty != 0
}

// window returns the part of history the penalties look at.
func (p *Params) window(history []int) []int {
	n := p.RepeatLastN
	if n == 0 {
		n = DefaultRepeatLastN
	}
	if n < 0 || n > len(history) {
		return history
	}
	return history[len(history)-n:]
}

// prepare fills s.x with the penalised, scaled logits, and s.idx[:n] with the
// candidates: the allowed tokens with a finite result, in id order. It
// returns n and the lowest-id candidate with the largest logit.
func (s *Sampler) prepare(logits []float32, history []int) (n int, imax int32, err error) {
	p := &s.p
	var win []int
	pen := p.penalised()
	if pen {
		win = p.window(history)
		for i, t := range win {
			if t < 0 || t >= s.vocab {
				s.clearCounts(win[:i])
				return 0, 0, fmt.Errorf("sampler: history token %d out of range [0, %d)", t, s.vocab)
			}
			s.counts[t]++
		}
	}
	// runners.py 112: logits / temperature. In float64 this cannot
	// overflow: |float32| / smallest float32 is about 2e83, and the
	// penalties add at most a few orders of magnitude.
	temp := float64(p.Temperature)
	if temp == 0 {
		temp = 1 // greedy: scaling cannot change the argmax
	}

	x, idx := s.x[:s.vocab], s.idx[:s.vocab]
	xmax, imax := math.Inf(-1), int32(-1)
	bad := -1
	if !pen && s.allowed == nil {
		// The common case, without per-token branches beyond the checks.
		for i, l := range logits {
			v := float64(l)
			if v != v || v > math.MaxFloat64 {
				bad = i
				break
			}
			v /= temp
			x[i] = v
			if v == math.Inf(-1) {
				continue
			}
			idx[n] = int32(i)
			n++
			if v > xmax {
				xmax, imax = v, int32(i)
			}
		}
	} else {
		rep := float64(p.RepeatPenalty)
		if rep == 0 {
			rep = 1
		}
		pres, freq := float64(p.PresencePenalty), float64(p.FrequencyPenalty)
		counts, allowed := s.counts[:s.vocab], s.allowed
		for i, l := range logits {
			v := float64(l)
			if v != v || v > math.MaxFloat64 {
				bad = i
				break
			}
			if c := counts[i]; c > 0 {
				// llama.cpp's penalties sampler: the repeat penalty pushes
				// towards "less likely" whatever the sign, then OpenAI's
				// frequency and presence terms are subtracted.
				if v <= 0 {
					v *= rep
				} else {
					v /= rep
				}
				v -= float64(c)*freq + pres
			}
			v /= temp
			x[i] = v
			if v == math.Inf(-1) || (allowed != nil && !allowed[i]) {
				continue
			}
			idx[n] = int32(i)
			n++
			if v > xmax {
				xmax, imax = v, int32(i)
			}
		}
	}
	s.clearCounts(win)
	if bad >= 0 {
		return 0, 0, fmt.Errorf("sampler: logit %d is %v: %w", bad, logits[bad], ErrInvalidLogits)
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("sampler: no allowed token has a finite logit: %w", ErrInvalidLogits)
	}
	return n, imax, nil
}

func (s *Sampler) clearCounts(win []int) {
	for _, t := range win {
		s.counts[t] = 0
	}
}

// greedy returns best, the lowest-id candidate with the largest logit, as a
// draw from a point mass.
func (s *Sampler) greedy(best int32) Result {
	r := Result{Token: int(best), Prob: 1, Logprob: 0}
	if s.p.TopLogprobs > 0 {
		s.top[0] = TokenProb{Token: int(best), Prob: 1, Logprob: 0}
		r.Top = s.top[:1]
	}
	return r
}

// sample runs the filters over the n candidates in s.idx and draws a token.
func (s *Sampler) sample(n int, xmax float64) Result {
	p := &s.p
	x, w := s.x, s.w
	cand, z := s.filter(n, xmax)

	// Categorical draw (runners.py 118, jax.random.categorical): inverse CDF
	// over the survivors in their current order. jax.random.categorical
	// draws by Gumbel-max instead; the distribution is the same, the bits
	// are not. Zero-weight candidates (exp underflow) are skipped so they
	// can never be returned.
	u := s.rng.Float64() * z
	tok := int32(-1)
	acc := 0.0
	for _, c := range cand {
		if w[c] == 0 {
			continue
		}
		acc += w[c]
		tok = c
		if acc > u {
			break
		}
	}
	// tok is the last positive-weight candidate if rounding left acc <= u;
	// the maximum has weight 1, so one always exists.

	logz := math.Log(z)
	r := Result{
		Token:   int(tok),
		Prob:    float32(w[tok] / z),
		Logprob: float32(x[tok] - xmax - logz),
	}
	if p.TopLogprobs > 0 {
		r.Top = s.topList(cand, xmax, z, logz)
	}
	return r
}

// filter applies top-k, the nucleus and min-p to the n candidates in s.idx,
// fills s.w for the survivors and returns them with their total weight.
func (s *Sampler) filter(n int, xmax float64) (cand []int32, z float64) {
	p := &s.p
	x, w := s.x, s.w
	cand = s.idx[:n]

	// Top-k works on logits alone, so it runs before any exp is taken and
	// the exps below are limited to its survivors.
	if p.TopK > 0 && p.TopK < len(cand) {
		cand = cand[:s.selectTopK(cand, p.TopK)]
	}

	// Unnormalised probabilities relative to the maximum: w = exp(x - max),
	// so the best candidate has weight exactly 1 and min-p is w >= MinP.
	for _, c := range cand {
		e := math.Exp(x[c] - xmax)
		w[c] = e
		z += e
	}

	if p.TopP > 0 && p.TopP < 1 && len(cand) > 1 {
		// A token with weight w has at least z - n·w of mass on tokens with
		// larger logits, so if w < (1-top_p)·z/n that mass exceeds top_p·z,
		// the nucleus stops above it and it cannot be kept. Dropping those
		// first leaves the selection a few hundred tokens of a typical
		// language-model distribution instead of the vocabulary. The factor
		// 1/2 keeps the bound safe from rounding in z.
		topP := float64(p.TopP)
		if cut := 0.5 * (1 - topP) * z / float64(len(cand)); cut > 0 {
			k := 0
			for _, c := range cand {
				if w[c] >= cut {
					cand[k] = c
					k++
				}
			}
			cand = cand[:k]
		}
		var kept int
		kept, z = s.selectNucleus(cand, topP*z)
		cand = cand[:kept]
	}

	if p.MinP > 0 && len(cand) > 1 {
		minp := float64(p.MinP)
		k := 0
		z = 0
		for _, c := range cand {
			if w[c] >= minp {
				cand[k] = c
				k++
				z += w[c]
			}
		}
		cand = cand[:k]
	}
	return cand, z
}

// topList fills s.top with the p.TopLogprobs most probable candidates, by
// logit descending and id ascending, with a small insertion sort: the list
// is at most MaxTopLogprobs long and most candidates fail the first
// comparison.
func (s *Sampler) topList(cand []int32, xmax, z, logz float64) []TokenProb {
	var ids [MaxTopLogprobs]int32
	k, m := 0, s.p.TopLogprobs
	x := s.x
	for _, c := range cand {
		if k == m && !before(x, c, ids[k-1]) {
			continue
		}
		j := k
		if k < m {
			k++
		} else {
			j = m - 1
		}
		for j > 0 && before(x, c, ids[j-1]) {
			ids[j] = ids[j-1]
			j--
		}
		ids[j] = c
	}
	for i, c := range ids[:k] {
		s.top[i] = TokenProb{Token: int(c), Prob: float32(s.w[c] / z), Logprob: float32(x[c] - xmax - logz)}
	}
	return s.top[:k]
}

// before reports whether candidate a ranks ahead of b: higher logit, then
// lower id.
func before(x []float64, a, b int32) bool {
	return x[a] > x[b] || (x[a] == x[b] && a < b)
}

package sampler

import "math/bits"

// The filters find their threshold without sorting the whole vocabulary.
// Top-k up to maxHeapK uses a k-element heap. The nucleus (and larger top-k)
// use quickselect: a three-way partition of the candidates around a pivot
// logit into [greater | equal | less], then a descent into the one part that
// holds the threshold. Expected cost is linear in the number of candidates,
// ties cost nothing extra (they all land in the "equal" part), and a depth
// limit falls back to heapsort, so the worst case is O(n log n).
//
// Every step keeps this invariant: all candidates in cand[:lo] have larger
// logits than any in cand[lo:hi], and all in cand[hi:] have smaller ones. So
// when the threshold t is found, the kept set {x >= t} is a prefix of cand.

// partition rearranges c (a sub-slice of candidates) into those with logit
// greater than v, equal to v and less than v, in that order, and returns the
// ends of the first two parts. When w is not nil it also returns the weight
// of the first two parts.
func partition(x, w []float64, c []int32, v float64) (gt, eq int, wgt, weq float64) {
	lt, i, hi := 0, 0, len(c)
	for i < hi {
		ci := c[i]
		xi := x[ci]
		switch {
		case xi > v:
			if w != nil {
				wgt += w[ci]
			}
			c[i], c[lt] = c[lt], ci
			lt++
			i++
		case xi < v:
			hi--
			c[i], c[hi] = c[hi], ci
		default:
			if w != nil {
				weq += w[ci]
			}
			i++
		}
	}
	return lt, hi, wgt, weq
}

// pivot returns the median of the first, middle and last logits of c.
func pivot(x []float64, c []int32) float64 {
	a, b, d := x[c[0]], x[c[len(c)/2]], x[c[len(c)-1]]
	if a > b {
		a, b = b, a
	}
	if b > d {
		b = d
	}
	if a > b {
		return a
	}
	return b
}

func (s *Sampler) maxDepth(n int) int {
	if s.depthLimit > 0 {
		return s.depthLimit
	}
	return 2 * bits.Len(uint(n))
}

// maxHeapK is the largest top-k served by a k-element heap; larger k use
// quickselect. The heap makes one pass that, on logits in id order, almost
// always stops at a single comparison per token.
const maxHeapK = 1024

// selectTopK rearranges cand so that the candidates whose logit is at least
// the k-th largest come first, and returns how many there are (k or more,
// when there are ties at the k-th logit). It requires 0 < k < len(cand).
func (s *Sampler) selectTopK(cand []int32, k int) int {
	x := s.x
	if k <= len(s.kheap) {
		// Min-heap of the k largest logits seen so far (a multiset, so its
		// minimum ends as the k-th largest counting duplicates).
		h := s.kheap[:k]
		for i, c := range cand[:k] {
			h[i] = x[c]
		}
		for i := k/2 - 1; i >= 0; i-- {
			siftMin(h, i)
		}
		for _, c := range cand[k:] {
			if v := x[c]; v > h[0] {
				h[0] = v
				siftMin(h, 0)
			}
		}
		t, j := h[0], 0
		for _, c := range cand {
			if x[c] >= t {
				cand[j] = c
				j++
			}
		}
		return j
	}
	lo, hi := 0, len(cand)
	for depth := s.maxDepth(len(cand)); ; depth-- {
		c := cand[lo:hi]
		if depth == 0 {
			// Too many bad pivots: sort what is left and read the k-th.
			heapSortDesc(x, c)
			j := k - lo
			t := x[c[j-1]]
			for j < len(c) && x[c[j]] == t {
				j++
			}
			return lo + j
		}
		gt, eq, _, _ := partition(x, nil, c, pivot(x, c))
		switch {
		case lo+gt >= k: // the k-th largest is strictly above the pivot
			hi = lo + gt
		case lo+eq >= k: // it is the pivot: keep everything down to its ties
			return lo + eq
		default:
			lo += eq
		}
	}
}

// selectNucleus applies runners.py's top_p_filter (runners.py 84-97) to cand,
// whose weights s.w sum to z, with target = top_p·z. It rearranges cand so
// that the kept candidates come first and returns how many there are and
// their total weight.
//
// runners.py sorts ascending and takes as threshold the logit at the first
// index i with cumsum(p)[i] >= 1 - top_p. Since cumsum(p)[i] = 1 - (mass of
// the tokens after i), that is the first token, walking down from the most
// probable, whose inclusion makes the mass of the tokens walked exceed top_p
// (if none does, the least probable token, which keeps everything); every
// logit >= the threshold is kept, so the threshold's ties are kept whatever
// order the sort left them in. Walking from the top lets the search stop at
// the nucleus without ordering the tail. In float32 JAX can also miss every
// index when rounding leaves the final cumsum below 1 - top_p; argmax of an
// all-false vector is 0 and runners.py then keeps every token. This
// implementation does not reproduce that rounding artefact: for tiny top_p
// it keeps the most probable token and its ties, as exact arithmetic does.
func (s *Sampler) selectNucleus(cand []int32, target float64) (kept int, mass float64) {
	x, w := s.x, s.w
	lo, hi := 0, len(cand)
	acc := 0.0 // weight of cand[:lo], always <= target
	for depth := s.maxDepth(len(cand)); ; depth-- {
		c := cand[lo:hi]
		if depth == 0 {
			heapSortDesc(x, c)
			for i := 0; i < len(c); {
				j, g := i+1, w[c[i]]
				for j < len(c) && x[c[j]] == x[c[i]] {
					g += w[c[j]]
					j++
				}
				if acc+g > target {
					return lo + j, acc + g
				}
				acc += g
				i = j
			}
			return hi, acc
		}
		gt, eq, wgt, weq := partition(x, w, c, pivot(x, c))
		switch {
		case acc+wgt > target: // the crossing token is above the pivot
			hi = lo + gt
		case acc+wgt+weq > target: // the pivot's tie group crosses
			return lo + eq, acc + wgt + weq
		case eq == len(c): // nothing below: the smallest logit is the threshold
			return hi, acc + wgt + weq
		default:
			acc += wgt + weq
			lo += eq
		}
	}
}

// heapSortDesc sorts c by logit descending, then id ascending, in place and
// without allocating.
func heapSortDesc(x []float64, c []int32) {
	// A min-heap on the (logit desc, id asc) order puts the last element in
	// the root; popping it to the end repeatedly leaves c in order.
	less := func(a, b int32) bool { return before(x, b, a) } // a comes after b
	sift := func(root, n int) {
		for {
			child := 2*root + 1
			if child >= n {
				return
			}
			if child+1 < n && less(c[child+1], c[child]) {
				child++
			}
			if !less(c[child], c[root]) {
				return
			}
			c[root], c[child] = c[child], c[root]
			root = child
		}
	}
	for i := len(c)/2 - 1; i >= 0; i-- {
		sift(i, len(c))
	}
	for end := len(c) - 1; end > 0; end-- {
		c[0], c[end] = c[end], c[0]
		sift(0, end)
	}
}

// siftMin restores the min-heap property of h below i.
func siftMin(h []float64, i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1] < h[c] {
			c++
		}
		if h[i] <= h[c] {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

package tensor

import (
	"encoding/binary"
	"math"
	"slices"
	"sync"
)

// The 3-bit i-quants, IQ3_XXS and IQ3_S, as ggml's quantize_iq3_xxs and
// quantize_iq3_s write them without an importance matrix (weights x²). Each
// group of four magnitudes is a point of a codebook (256 points for IQ3_XXS,
// 512 for IQ3_S); a search over trial scales rounds the group to the
// nearest lattice point and, where that point is not in the codebook, takes
// the best of its precomputed codebook neighbours. ggml aborts where that
// search finds no neighbour with a finite error (values not finite, or so
// large that the weighted squared errors overflow), so these quantisers
// report failure instead of writing a block.

// iq3Codebook is ggml's iq3_data entry for one grid size (iq3xs_init_impl).
type iq3Codebook struct {
	// grid holds each codebook point's four lattice values 2l+1, l in 0…7.
	grid [][4]int8
	// kmap maps a lattice point (three bits per value, first value
	// lowest) to its codebook index, or, for one not in the codebook, to
	// -(o+1) where neighbours[o] counts the candidate indices that follow.
	kmap [4096]int32
	// neighbours lists, per off-grid lattice point, the codebook points at
	// the nearest nwant squared distances, nearest first, then by index.
	neighbours []uint16
}

var (
	iq3xxsBookOnce, iq3sBookOnce sync.Once
	iq3xxsBook, iq3sBook         *iq3Codebook
)

// iq3XXSCodebook returns the 256-point codebook, built on first use.
func iq3XXSCodebook() *iq3Codebook {
	iq3xxsBookOnce.Do(func() {
		// iq3xxs_grid stores the decoded magnitudes 4, 12, …, 52, 62: the
		// lattice value l is the rank among them.
		levels := [8]byte{4, 12, 20, 28, 36, 44, 52, 62}
		iq3xxsBook = newIQ3Codebook(iq3xxsGrid[:], func(b byte) int { return slices.Index(levels[:], b) }, 2)
	})
	return iq3xxsBook
}

// iq3SCodebook returns the 512-point codebook, built on first use.
func iq3SCodebook() *iq3Codebook {
	iq3sBookOnce.Do(func() {
		// iq3s_grid stores the magnitudes 2l+1 themselves.
		iq3sBook = newIQ3Codebook(iq3sGrid[:], func(b byte) int { return int(b-1) / 2 }, 3)
	})
	return iq3sBook
}

// newIQ3Codebook derives the quantiser's tables from a decoder codebook
// (level maps its bytes to lattice values), keeping for each lattice point
// off the codebook the points at its nwant smallest distances, as
// iq3xs_init_impl does.
func newIQ3Codebook(dec []uint32, level func(byte) int, nwant int) *iq3Codebook {
	c := &iq3Codebook{grid: make([][4]int8, len(dec))}
	for i := range c.kmap {
		c.kmap[i] = -1
	}
	for k, g := range dec {
		u := 0
		for i := 0; i < 4; i++ {
			l := level(byte(g >> (8 * i)))
			c.grid[k][i] = int8(2*l + 1)
			u |= l << (3 * i)
		}
		c.kmap[u] = int32(k)
	}
	type cand struct{ d2, j int }
	dist := make([]cand, len(dec))
	for u := range c.kmap {
		if c.kmap[u] >= 0 {
			continue
		}
		var pos [4]int
		for k := 0; k < 4; k++ {
			pos[k] = 2*(u>>(3*k)&7) + 1
		}
		for j, g := range c.grid {
			d2 := 0
			for k := 0; k < 4; k++ {
				d := int(g[k]) - pos[k]
				d2 += d * d
			}
			dist[j] = cand{d2, j}
		}
		// ggml's qsort orders by distance then index: a total order, so
		// any sort gives its sequence.
		slices.SortFunc(dist, func(a, b cand) int {
			if a.d2 != b.d2 {
				return a.d2 - b.d2
			}
			return a.j - b.j
		})
		start := len(c.neighbours)
		c.kmap[u] = -int32(start + 1)
		c.neighbours = append(c.neighbours, 0)
		d2, nhave := dist[0].d2, 1
		for _, e := range dist {
			if e.d2 > d2 {
				if nhave == nwant {
					break
				}
				d2 = e.d2
				nhave++
			}
			c.neighbours = append(c.neighbours, uint16(e.j))
		}
		c.neighbours[start] = uint16(len(c.neighbours) - start - 1)
	}
	return c
}

// bestNeighbour is iq3_find_best_neighbour: of the candidates listed at
// neighbours[o], the codebook point nearest x/scale in the weighted squared
// error, the first of ties; it sets L to its lattice values. ok is false
// where no candidate's error is below FLT_MAX (ggml asserts there).
func (c *iq3Codebook) bestNeighbour(o int, xval, weight []float32, scale float32, L []int8) (index int, ok bool) {
	n := int(c.neighbours[o])
	best := float32(math.MaxFloat32)
	index = -1
	for _, j := range c.neighbours[o+1 : o+1+n] {
		pg := &c.grid[j]
		var d2 float32
		for i := 0; i < 4; i++ {
			diff := float32(scale*float32(pg[i])) - xval[i]
			d2 += float32(weight[i] * diff * diff)
		}
		if d2 < best {
			best, index = d2, int(j)
		}
	}
	if index < 0 {
		return -1, false
	}
	for i := 0; i < 4; i++ {
		L[i] = (c.grid[index][i] - 1) / 2
	}
	return index, true
}

// maxf is C's MAX(a, b), a > b ? a : b, NaN included.
func maxf(a, b float32) float32 {
	if a > b {
		return a
	}
	return b
}

// iq3Level is nearest_int(0.5*(id*x-1)) clamped to the lattice values 0…7.
func iq3Level(id, x float32) int8 {
	l := nearestInt(float32(0.5 * (float32(id*x) - 1)))
	return int8(max(0, min(7, l)))
}

// iq3Pack is the lattice point of four values: three bits each, first
// lowest.
func iq3Pack(L []int8) int {
	return int(L[0]) | int(L[1])<<3 | int(L[2])<<6 | int(L[3])<<9
}

// group is the per-32 search of quantize_row_iq3_xxs_impl and
// quantize_row_iq3_s_impl: trial scales (15+0.2·is)/vmax for is in
// [-ntry, ntry], each group of four rounded to the lattice and moved to a
// codebook neighbour where off the codebook, the least-squares scale of the
// best trial kept; then, if some group of the best trial was off the
// codebook, the groups (all, or only those when onlyOff) are rounded again
// at that scale and the scale refitted. It leaves the lattice values in L
// and returns the scale; ok is false where ggml would abort.
func (c *iq3Codebook) group(xval, weight, waux []float32, vmax float32, ntry int, onGridInit, onlyOff bool, L []int8) (scale float32, ok bool) {
	var Laux [32]int8
	var onGrid, onGridAux [8]bool
	for k := range onGrid {
		onGrid[k] = onGridInit
	}
	var best float32
	scale = vmax / 15
	for is := -ntry; is <= ntry; is++ {
		id := (15 + float32(float32(is)*0.2)) / vmax
		thisScale := 1 / id
		for k := 0; k < 8; k++ {
			for i := 0; i < 4; i++ {
				Laux[4*k+i] = iq3Level(id, xval[4*k+i])
			}
			onGridAux[k] = true
			if gi := c.kmap[iq3Pack(Laux[4*k:])]; gi < 0 {
				onGridAux[k] = false
				if _, ok := c.bestNeighbour(int(-gi-1), xval[4*k:], waux[4*k:], thisScale, Laux[4*k:]); !ok {
					return 0, false
				}
			}
		}
		var sumqx, sumq2 float32
		for i := 0; i < 32; i++ {
			w, q := weight[i], float32(2*int(Laux[i])+1)
			sumqx += float32(w * xval[i] * q)
			sumq2 += float32(w * q * q)
		}
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			scale = sumqx / sumq2
			best = scale * sumqx
			copy(L, Laux[:])
			onGrid = onGridAux
		}
	}
	off := false
	for _, g := range onGrid {
		off = off || !g
	}
	if !off || !(scale > 0) {
		return scale, true
	}
	id := 1 / scale
	for k := 0; k < 8; k++ {
		if onlyOff && onGrid[k] {
			continue
		}
		var l [4]int8
		for i := 0; i < 4; i++ {
			l[i] = iq3Level(id, xval[4*k+i])
		}
		gi := int(c.kmap[iq3Pack(l[:])])
		if gi < 0 {
			var ok bool
			if gi, ok = c.bestNeighbour(-gi-1, xval[4*k:], waux[4*k:], scale, L[4*k:]); !ok {
				return 0, false
			}
		}
		for i := 0; i < 4; i++ {
			L[4*k+i] = (c.grid[gi][i] - 1) / 2
		}
	}
	var sumqx, sumq2 float32
	for i := 0; i < 32; i++ {
		w, q := weight[i], float32(2*int(L[i])+1)
		sumqx += float32(w * xval[i] * q)
		sumq2 += float32(w * q * q)
	}
	if sumq2 > 0 {
		scale = sumqx / sumq2
	}
	return scale, true
}

// indices returns the codebook indices of the eight groups of four in L;
// ok is false if one is off the codebook (ggml aborts there).
func (c *iq3Codebook) indices(L []int8) (gi [8]int, ok bool) {
	for k := range gi {
		g := c.kmap[iq3Pack(L[4*k:])]
		if g < 0 {
			return gi, false
		}
		gi[k] = int(g)
	}
	return gi, true
}

// iq3Prepare fills the weights x², their square roots and the magnitudes
// of one group of 32.
func iq3Prepare(xb, weight, waux, xval []float32) {
	for i := 0; i < 32; i++ {
		weight[i] = xb[i] * xb[i]
		waux[i] = sqrtf(weight[i])
		xval[i] = xb[i]
		if !(xb[i] >= 0) {
			xval[i] = -xb[i]
		}
	}
}

// maxChain is the largest of x as C's MAX chain from x[0] finds it (a NaN
// is kept only until the next comparison).
func maxChain(x []float32) float32 {
	m := x[0]
	for _, v := range x[1:] {
		m = maxf(m, v)
	}
	return m
}

// quantIQ3_XXS is quantize_row_iq3_xxs_impl(256) without weights for one
// super-block: 64 bytes of codebook indices, then per 32 values a word of
// four 7-bit sign groups (an even number of flips each, the least weighted
// value flipped back) under a 4-bit scale relative to d, the largest group
// scale over 31.
func quantIQ3_XXS(x []float32, y []byte) bool {
	book := iq3XXSCodebook()
	var weight, waux, xval [32]float32
	var scales [8]float32
	var L [32]int8
	q3 := y[2:98]
	var maxScale float32
	for ib := 0; ib < 8; ib++ {
		xb := x[32*ib : 32*ib+32]
		iq3Prepare(xb, weight[:], waux[:], xval[:])
		var blockSigns [4]uint32
		for k := 0; k < 4; k++ {
			var s uint32
			nflip := 0
			for i := 0; i < 8; i++ {
				if !(xb[8*k+i] >= 0) {
					s |= 1 << i
					nflip++
				}
			}
			if nflip%2 != 0 {
				imin, vmin := 0, float32(weight[8*k]*xb[8*k]*xb[8*k])
				for i := 1; i < 8; i++ {
					if a := float32(weight[8*k+i] * xb[8*k+i] * xb[8*k+i]); a < vmin {
						vmin, imin = a, i
					}
				}
				xval[8*k+imin] = -xval[8*k+imin]
				s ^= 1 << imin
			}
			blockSigns[k] = s & 127
		}
		// ggml takes the maximum after the flip back (whose value is negative).
		m := maxChain(xval[:])
		if m < 1e-8 { // GROUP_MAX_EPS_IQ3_XXS
			scales[ib] = 0
			continue
		}
		L := L[:]
		clear(L)
		scale, ok := book.group(xval[:], weight[:], waux[:], m, 15, true, true, L)
		if !ok {
			return false
		}
		if scale < 0 {
			scale = -scale
			for k := range blockSigns {
				blockSigns[k] = ^blockSigns[k] & 127
			}
		}
		gi, ok := book.indices(L)
		if !ok || !(scale >= 0) {
			return false
		}
		for k, g := range gi {
			q3[8*ib+k] = byte(g)
		}
		binary.LittleEndian.PutUint32(q3[64+4*ib:], blockSigns[0]|blockSigns[1]<<7|blockSigns[2]<<14|blockSigns[3]<<21)
		scales[ib] = scale
		maxScale = maxf(maxScale, scale)
	}
	if maxScale == 0 {
		clear(y)
		return true
	}
	d := maxScale / 31
	putHalf(y, 0, d*1.0125)
	id := 1 / d
	for ib := 0; ib < 8; ib++ {
		l := max(0, min(15, nearestInt(float32(0.5*(float32(id*scales[ib])-1)))))
		sw := binary.LittleEndian.Uint32(q3[64+4*ib:])
		binary.LittleEndian.PutUint32(q3[64+4*ib:], sw|uint32(l)<<28)
	}
	return true
}

// quantIQ3_S is quantize_row_iq3_s_impl(32) without weights for one
// super-block: d, 64 bytes of low index bits, 8 bytes of index tops, 32
// bytes of signs, and 4-bit scales (2s+1)·d, d the largest group scale
// over 31. Like ggml, it advances through the index and sign bytes only for
// groups that are not all zero, so the groups after an all-zero one land a
// group early.
func quantIQ3_S(x []float32, y []byte) bool {
	book := iq3SCodebook()
	var weight, waux, xval [32]float32
	var scales [8]float32
	var L [32]int8
	qs, qh, signs, ysc := y[2:66], y[66:74], y[74:106], y[106:110]
	var maxScale float32
	for ib := 0; ib < 8; ib++ {
		xb := x[32*ib : 32*ib+32]
		iq3Prepare(xb, weight[:], waux[:], xval[:])
		m := maxChain(xval[:])
		var blockSigns [4]byte
		for k := 0; k < 4; k++ {
			for i := 0; i < 8; i++ {
				if !(xb[8*k+i] >= 0) {
					blockSigns[k] |= 1 << i
				}
			}
		}
		if m == 0 {
			scales[ib] = 0
			continue
		}
		L := L[:]
		clear(L)
		scale, ok := book.group(xval[:], weight[:], waux[:], m, 9, false, false, L)
		if !ok {
			return false
		}
		if scale < 0 {
			scale = -scale
			for k := range blockSigns {
				blockSigns[k] = ^blockSigns[k]
			}
		}
		gi, ok := book.indices(L)
		if !ok {
			return false
		}
		for k, g := range gi {
			qs[k] = byte(g)
			qh[ib] |= byte(g>>8) << k
		}
		qs = qs[8:]
		copy(signs, blockSigns[:])
		signs = signs[4:]
		if !(scale >= 0) {
			return false
		}
		scales[ib] = scale
		maxScale = maxf(maxScale, scale)
	}
	if maxScale == 0 {
		return true
	}
	d := maxScale / 31
	putHalf(y, 0, d*1.033)
	id := 1 / d
	for ib := 0; ib < 8; ib += 2 {
		l1 := max(0, min(15, nearestInt(float32(0.5*(float32(id*scales[ib])-1)))))
		l2 := max(0, min(15, nearestInt(float32(0.5*(float32(id*scales[ib+1])-1)))))
		ysc[ib/2] = byte(l1 | l2<<4)
	}
	return true
}

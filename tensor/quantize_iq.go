package tensor

import "encoding/binary"

// The i-quants ggml quantises without an importance matrix: IQ4_NL and
// IQ4_XS (ggml_quantize_chunk's quantize_iq4_nl and quantize_iq4_xs with no
// weights, both quantize_row_iq4_nl_impl with ntry = 7). The others need an
// importance matrix in llama-quantize and are not written.

// bestIndexInt8 is ggml's best_index_int8: the index of the level of val
// nearest x, the upper one of a tie.
func bestIndexInt8(val []int8, x float32) int {
	n := len(val)
	if x <= float32(val[0]) {
		return 0
	}
	if x >= float32(val[n-1]) {
		return n - 1
	}
	ml, mu := 0, n-1
	for mu-ml > 1 {
		mav := (ml + mu) / 2
		if x < float32(val[mav]) {
			mu = mav
		} else {
			ml = mav
		}
	}
	if x-float32(val[mu-1]) < float32(val[mu])-x {
		return mu - 1
	}
	return mu
}

// iq4Fit is the per-32 part of quantize_row_iq4_nl_impl without weights:
// x² weights, a start at max/-127 and 15 trial scales around it, keeping
// the least-squares scale of the best. It leaves the levels of the first
// trial in L and returns the scale (0 for an all-zero group).
func iq4Fit(xb []float32, L []uint8, ntry int) float32 {
	values := kvaluesIQ4NL[:]
	var weight [32]float32
	for j := range weight {
		weight[j] = xb[j] * xb[j]
	}
	var amax, maxv float32
	for j := 0; j < 32; j++ {
		if ax := fabsf(xb[j]); ax > amax {
			amax, maxv = ax, xb[j]
		}
	}
	if amax < groupMaxEps {
		return 0
	}
	d := -maxv / float32(values[0])
	id := 1 / d
	var sumqx, sumq2 float32
	for j := 0; j < 32; j++ {
		l := bestIndexInt8(values, float32(id*xb[j]))
		L[j] = uint8(l)
		q, w := float32(values[l]), weight[j]
		sumqx += float32(w * q * xb[j])
		sumq2 += float32(w * q * q)
	}
	d = 0
	if sumq2 > 0 {
		d = sumqx / sumq2
	}
	best := d * sumqx
	for itry := -ntry; itry <= ntry; itry++ {
		id = float32(itry+int(values[0])) / maxv
		sumqx, sumq2 = 0, 0
		for j := 0; j < 32; j++ {
			l := bestIndexInt8(values, float32(id*xb[j]))
			q, w := float32(values[l]), weight[j]
			sumqx += float32(w * q * xb[j])
			sumq2 += float32(w * q * q)
		}
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

// packIQ4 stores the levels of n elements as IQ4 nibbles: element j and
// j+16 of each 32 share byte j.
func packIQ4(q []byte, L []uint8, n int) {
	for i := 0; i < n/32; i++ {
		for j := 0; j < 16; j++ {
			q[16*i+j] = L[32*i+j] | L[32*i+16+j]<<4
		}
	}
}

// quantIQ4_NL is quantize_iq4_nl without weights for one block of 32.
func quantIQ4_NL(x []float32, y []byte) {
	var L [32]uint8
	s := iq4Fit(x, L[:], 7)
	putHalf(y, 0, s)
	var id float32
	if s != 0 {
		id = 1 / s
	}
	for j := 0; j < 32; j++ {
		L[j] = uint8(bestIndexInt8(kvaluesIQ4NL[:], float32(id*x[j])))
	}
	packIQ4(y[2:18], L[:], 32)
}

// quantIQ4_XS is quantize_iq4_xs without weights for one super-block: eight
// groups fitted as IQ4_NL, their scales stored as 6 bits against the
// largest in magnitude, the levels recomputed from the stored scales.
func quantIQ4_XS(x []float32, y []byte) {
	var L [QK_K]uint8
	var scales [QK_K / 32]float32
	var maxScale, amaxScale float32
	for ib := 0; ib < QK_K/32; ib++ {
		scales[ib] = iq4Fit(x[32*ib:], L[32*ib:], 7)
		if a := fabsf(scales[ib]); a > amaxScale {
			amaxScale, maxScale = a, scales[ib]
		}
	}
	d := -maxScale / 32
	putHalf(y, 0, d)
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var sh uint16
	sl := y[4:8]
	for ib := 0; ib < QK_K/32; ib++ {
		l := max(-32, min(31, nearestInt(float32(id*scales[ib]))))
		dl := d * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		for j := 0; j < 32; j++ {
			L[32*ib+j] = uint8(bestIndexInt8(kvaluesIQ4NL[:], float32(idl*x[32*ib+j])))
		}
		l += 32
		if ib%2 == 0 {
			sl[ib/2] = uint8(l) & 0xf
		} else {
			sl[ib/2] |= (uint8(l) & 0xf) << 4
		}
		sh |= uint16(l>>4) << (2 * (ib % 8))
	}
	binary.LittleEndian.PutUint16(y[2:], sh)
	packIQ4(y[8:136], L[:], QK_K)
}

package tensor

import "math"

// The K-quant quantisers, after ggml-quants.c's quantize_row_q*_K_ref and
// their helpers. Variable names follow the C so the two read side by side.

// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose largest magnitude is
// below it quantises to zeros.
const groupMaxEps = 1e-15

// nearestInt is ggml's nearest_int: adding 1.5*2^23 leaves round-to-nearest-
// even of fval in the low mantissa bits. Outside ±2^22 (where ggml asserts)
// it still returns what the C computes, bit for bit.
func nearestInt(fval float32) int {
	val := fval + 12582912
	i := int32(math.Float32bits(val))
	return int(i&0x007fffff - 0x00400000)
}

// sqrtf is C's sqrtf; sqrt rounded from float64 is correctly rounded in
// float32.
func sqrtf(f float32) float32 { return float32(math.Sqrt(float64(f))) }

// signedMax returns the element of largest magnitude (the first of ties)
// and that magnitude: where make_qx_quants and make_q3_quants start.
func signedMax(x []float32) (maxv, amax float32) {
	for _, v := range x {
		if ax := fabsf(v); ax > amax {
			amax, maxv = ax, v
		}
	}
	return maxv, amax
}

// makeQXQuants is make_qx_quants with no importance weights: the symmetric
// search over 19 scales near -nmax/max that maximises sumlx²/suml2 under the
// weighting chosen by rmseType. L receives values in [0, 2*nmax).
func makeQXQuants(n, nmax int, x []float32, L []int8, rmseType int) float32 {
	maxv, amax := signedMax(x[:n])
	if amax < groupMaxEps {
		clear(L[:n])
		return 0
	}
	iscale := float32(-nmax) / maxv
	if rmseType == 0 {
		for i := 0; i < n; i++ {
			l := nearestInt(float32(iscale * x[i]))
			L[i] = int8(nmax + max(-nmax, min(nmax-1, l)))
		}
		return 1 / iscale
	}
	returnEarly := false
	if rmseType < 0 {
		rmseType, returnEarly = -rmseType, true
	}
	weight := func(v float32) float32 {
		switch rmseType {
		case 1:
			return v * v
		case 2:
			return 1
		case 3:
			return fabsf(v)
		}
		return sqrtf(fabsf(v))
	}
	var sumlx, suml2 float32
	for i := 0; i < n; i++ {
		l := nearestInt(float32(iscale * x[i]))
		l = max(-nmax, min(nmax-1, l))
		L[i] = int8(l + nmax)
		w := weight(x[i])
		sumlx += float32(w * x[i] * float32(l))
		suml2 += float32(w * float32(l) * float32(l))
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	if returnEarly {
		if suml2 > 0 {
			return 0.5 * (scale + 1/iscale)
		}
		return 1 / iscale
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(float32(nmax) + float32(0.1*float32(is))) / maxv
		sumlx, suml2 = 0, 0
		for i := 0; i < n; i++ {
			l := nearestInt(float32(iscale * x[i]))
			l = max(-nmax, min(nmax-1, l))
			w := weight(x[i])
			sumlx += float32(w * x[i] * float32(l))
			suml2 += float32(w * float32(l) * float32(l))
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i := 0; i < n; i++ {
				l := nearestInt(float32(iscale * x[i]))
				L[i] = int8(nmax + max(-nmax, min(nmax-1, l)))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQ3Quants is make_q3_quants with do_rmse: start from -nmax/max, then
// up to five passes moving single elements to the level that improves the
// x²-weighted fit. L receives values in [0, 2*nmax).
func makeQ3Quants(n, nmax int, x []float32, L []int8) float32 {
	maxv, amax := signedMax(x[:n])
	if amax < groupMaxEps {
		clear(L[:n])
		return 0
	}
	iscale := float32(-nmax) / maxv
	var sumlx, suml2 float32
	for i := 0; i < n; i++ {
		l := nearestInt(float32(iscale * x[i]))
		l = max(-nmax, min(nmax-1, l))
		L[i] = int8(l)
		w := float32(x[i] * x[i])
		sumlx += float32(w * x[i] * float32(l))
		suml2 += float32(w * float32(l) * float32(l))
	}
	for itry := 0; itry < 5; itry++ {
		changed := 0
		for i := 0; i < n; i++ {
			w := float32(x[i] * x[i])
			li := float32(L[i])
			slx := sumlx - float32(w*x[i]*li)
			if slx > 0 {
				sl2 := suml2 - float32(w*li*li)
				newL := nearestInt(x[i] * sl2 / slx)
				newL = max(-nmax, min(nmax-1, newL))
				if newL != int(L[i]) {
					fl := float32(newL)
					slx += float32(w * x[i] * fl)
					sl2 += float32(w * fl * fl)
					if sl2 > 0 && float32(slx*slx*suml2) > float32(sumlx*sumlx*sl2) {
						L[i], sumlx, suml2 = int8(newL), slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := 0; i < n; i++ {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// makeQKX2Quants is make_qkx2_quants: an asymmetric fit x ≈ scale*L - min
// with L in [0, nmax], searching nstep+1 scales from (nmax+rmin)/(max-min)
// in steps of rdelta for the least weighted error (absolute with useMad,
// squared without). It returns scale and the (non-negative) min.
func makeQKX2Quants(n, nmax int, x, weights []float32, L, Laux []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, theMin float32) {
	minv, maxv := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < minv {
			minv = x[i]
		}
		if x[i] > maxv {
			maxv = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if minv > 0 {
		minv = 0
	}
	if maxv == minv {
		for i := 0; i < n; i++ {
			L[i] = 0
		}
		return 0, -minv
	}
	errOf := func(diff float32) float32 {
		if useMad {
			return fabsf(diff)
		}
		return diff * diff
	}
	iscale := float32(nmax) / (maxv - minv)
	scale = 1 / iscale
	var bestError float32
	for i := 0; i < n; i++ {
		l := nearestInt(float32(iscale * (x[i] - minv)))
		L[i] = uint8(max(0, min(nmax, l)))
		diff := float32(scale*float32(L[i])) + minv - x[i]
		bestError += float32(weights[i] * errOf(diff))
	}
	if nstep < 1 {
		return scale, -minv
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + float32(nmax)) / (maxv - minv)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			l := nearestInt(float32(iscale * (x[i] - minv)))
			l = max(0, min(nmax, l))
			Laux[i] = uint8(l)
			w, fl := weights[i], float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(w * fl * fl)
			sumXL += float32(w * fl * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curError float32
			for i := 0; i < n; i++ {
				diff := float32(thisScale*float32(Laux[i])) + thisMin - x[i]
				curError += float32(weights[i] * errOf(diff))
			}
			if curError < bestError {
				copy(L[:n], Laux[:n])
				bestError, scale, minv = curError, thisScale, thisMin
			}
		}
	}
	return scale, -minv
}

// quantQ2_K is quantize_row_q2_K_ref: 16 groups of 16 fitted with
// make_qkx2_quants (|x| weights, absolute error), their scales and mins
// quantised to 4 bits against the largest of each, the 2-bit quants
// recomputed from the stored scales.
func quantQ2_K(x []float32, y []byte) {
	var L [QK_K]uint8
	var Laux [16]uint8
	var weights [16]float32
	var mins, scales [QK_K / 16]float32
	const q4scale = 15
	sc := y[0:16]
	var maxScale, maxMin float32
	for j := 0; j < QK_K/16; j++ {
		for l := 0; l < 16; l++ {
			weights[l] = fabsf(x[16*j+l])
		}
		scales[j], mins[j] = makeQKX2Quants(16, 3, x[16*j:], weights[:], L[16*j:], Laux[:], -0.5, 0.1, 15, true)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	if maxScale > 0 {
		iscale := q4scale / maxScale
		for j := 0; j < QK_K/16; j++ {
			sc[j] = byte(nearestInt(float32(iscale * scales[j])))
		}
		putHalf(y, 80, maxScale/q4scale)
	} else {
		clear(sc)
		putHalf(y, 80, 0)
	}
	if maxMin > 0 {
		iscale := q4scale / maxMin
		for j := 0; j < QK_K/16; j++ {
			l := nearestInt(float32(iscale * mins[j]))
			sc[j] |= byte(l << 4)
		}
		putHalf(y, 82, maxMin/q4scale)
	} else {
		putHalf(y, 82, 0)
	}
	d0, dmin0 := half(y, 80), half(y, 82)
	for j := 0; j < QK_K/16; j++ {
		d := d0 * float32(sc[j]&0xf)
		if d == 0 {
			continue
		}
		dm := float32(dmin0 * float32(sc[j]>>4))
		for ii := 0; ii < 16; ii++ {
			l := nearestInt((x[16*j+ii] + dm) / d)
			L[16*j+ii] = uint8(max(0, min(3, l)))
		}
	}
	qs := y[16:80]
	for j := 0; j < QK_K; j += 128 {
		for l := 0; l < 32; l++ {
			qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
		}
	}
}

// quantQ3_K is quantize_row_q3_K_ref: 16 groups of 16 fitted with
// make_q3_quants, their scales quantised to 6 bits against the largest in
// magnitude, the 3-bit quants recomputed from the stored scales.
func quantQ3_K(x []float32, y []byte) {
	var L [QK_K]int8
	var scales [QK_K / 16]float32
	hmask, qs, ysc := y[0:32], y[32:96], y[96:108]
	var maxScale, amax float32
	for j := 0; j < QK_K/16; j++ {
		scales[j] = makeQ3Quants(16, 4, x[16*j:], L[16*j:])
		if s := fabsf(scales[j]); s > amax {
			amax, maxScale = s, scales[j]
		}
	}
	clear(ysc)
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := 0; j < QK_K/16; j++ {
			l := int8(nearestInt(float32(iscale * scales[j])))
			l = int8(max(-32, min(31, int(l))) + 32)
			if j < 8 {
				ysc[j] = byte(l) & 0xf
			} else {
				ysc[j-8] |= (byte(l) & 0xf) << 4
			}
			l >>= 4
			ysc[j%4+8] |= byte(l) << (2 * (j / 4))
		}
		putHalf(y, 108, 1/iscale)
	} else {
		putHalf(y, 108, 0)
	}
	d0 := half(y, 108)
	for j := 0; j < QK_K/16; j++ {
		var s byte
		if j < 8 {
			s = ysc[j] & 0xf
		} else {
			s = ysc[j-8] >> 4
		}
		sc := int8(s|(ysc[8+j%4]>>(2*(j/4))&3)<<4) - 32
		d := d0 * float32(sc)
		if d == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max(-4, min(3, l)) + 4)
		}
	}
	m, hm := 0, byte(1)
	for j := 0; j < QK_K; j++ {
		if L[j] > 3 {
			hmask[m] |= hm
			L[j] -= 4
		}
		if m++; m == QK_K/8 {
			m, hm = 0, hm<<1
		}
	}
	for j := 0; j < QK_K; j += 128 {
		for l := 0; l < 32; l++ {
			qs[j/4+l] = byte(L[j+l]) | byte(L[j+l+32])<<2 | byte(L[j+l+64])<<4 | byte(L[j+l+96])<<6
		}
	}
}

// fitK8 fits the eight groups of 32 of a Q4_K or Q5_K super-block with
// make_qkx2_quants under weights av_x + |x| (av_x the group's RMS), then
// packs the 6-bit scales and mins as both types store them and returns the
// levels recomputed from those stored values (ggml's shared code).
func fitK8(x []float32, y []byte, L *[QK_K]uint8, nmax int, rmin float32, nstep int) {
	var Laux [32]uint8
	var weights [32]float32
	var mins, scales [QK_K / 32]float32
	var maxScale, maxMin float32
	for j := 0; j < QK_K/32; j++ {
		var sumX2 float32
		for l := 0; l < 32; l++ {
			sumX2 += float32(x[32*j+l] * x[32*j+l])
		}
		avX := sqrtf(sumX2 / 32)
		for l := 0; l < 32; l++ {
			weights[l] = avX + fabsf(x[32*j+l])
		}
		scales[j], mins[j] = makeQKX2Quants(32, nmax, x[32*j:], weights[:], L[32*j:], Laux[:], rmin, 0.1, nstep, false)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	ysc := y[4:16]
	for j := 0; j < QK_K/32; j++ {
		ls := min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm := min(63, uint8(nearestInt(float32(invMin*mins[j]))))
		if j < 4 {
			ysc[j] = ls
			ysc[j+4] = lm
		} else {
			ysc[j+4] = ls&0xf | (lm&0xf)<<4
			ysc[j-4] |= ls >> 4 << 6
			ysc[j] |= lm >> 4 << 6
		}
	}
	putHalf(y, 0, maxScale/63)
	putHalf(y, 2, maxMin/63)
	d0, dmin0 := half(y, 0), half(y, 2)
	for j := 0; j < QK_K/32; j++ {
		sc, m := scaleMinK4(j, ysc)
		d := d0 * float32(sc)
		if d == 0 {
			continue
		}
		dm := float32(dmin0 * float32(m))
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / d)
			L[32*j+ii] = uint8(max(0, min(nmax, l)))
		}
	}
}

// quantQ4_K is quantize_row_q4_K_ref.
func quantQ4_K(x []float32, y []byte) {
	var L [QK_K]uint8
	fitK8(x, y, &L, 15, -1, 20)
	q := y[16:144]
	for j := 0; j < QK_K; j += 64 {
		for l := 0; l < 32; l++ {
			q[l] = L[j+l] | L[j+l+32]<<4
		}
		q = q[32:]
	}
}

// quantQ5_K is quantize_row_q5_K_ref.
func quantQ5_K(x []float32, y []byte) {
	var L [QK_K]uint8
	fitK8(x, y, &L, 31, -0.5, 15)
	qh, ql := y[16:48], y[48:176]
	m1, m2 := byte(1), byte(2)
	for n := 0; n < QK_K; n += 64 {
		for j := 0; j < 32; j++ {
			l1, l2 := L[n+j], L[n+j+32]
			if l1 > 15 {
				l1 -= 16
				qh[j] |= m1
			}
			if l2 > 15 {
				l2 -= 16
				qh[j] |= m2
			}
			ql[j] = l1 | l2<<4
		}
		m1, m2 = m1<<2, m2<<2
		ql = ql[32:]
	}
}

// quantQ6_K is quantize_row_q6_K_ref: 16 groups of 16 fitted with
// make_qx_quants (x² weights), their scales quantised to int8 against the
// largest in magnitude, the 6-bit quants recomputed from the stored scales.
func quantQ6_K(x []float32, y []byte) {
	var L [QK_K]int8
	var scales [QK_K / 16]float32
	var maxScale, maxAbsScale float32
	for ib := 0; ib < QK_K/16; ib++ {
		scale := makeQXQuants(16, 32, x[16*ib:], L[16*ib:], 1)
		scales[ib] = scale
		if a := fabsf(scale); a > maxAbsScale {
			maxAbsScale, maxScale = a, scale
		}
	}
	if maxAbsScale < groupMaxEps {
		clear(y[:210]) // the block stays zero, d = +0
		return
	}
	ysc := y[192:208]
	iscale := -128 / maxScale
	putHalf(y, 208, 1/iscale)
	for ib := 0; ib < QK_K/16; ib++ {
		ysc[ib] = byte(int8(min(127, nearestInt(float32(iscale*scales[ib])))))
	}
	d0 := half(y, 208)
	for j := 0; j < QK_K/16; j++ {
		d := d0 * float32(int8(ysc[j]))
		if d == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max(-32, min(31, l)) + 32)
		}
	}
	ql, qh := y[0:128], y[128:192]
	for j := 0; j < QK_K; j += 128 {
		for l := 0; l < 32; l++ {
			q1 := byte(L[j+l]) & 0xf
			q2 := byte(L[j+l+32]) & 0xf
			q3 := byte(L[j+l+64]) & 0xf
			q4 := byte(L[j+l+96]) & 0xf
			ql[l] = q1 | q3<<4
			ql[l+32] = q2 | q4<<4
			qh[l] = byte(L[j+l])>>4 | byte(L[j+l+32])>>4<<2 | byte(L[j+l+64])>>4<<4 | byte(L[j+l+96])>>4<<6
		}
		ql, qh = ql[64:], qh[32:]
	}
}

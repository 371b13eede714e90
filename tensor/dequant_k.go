package tensor

import "encoding/binary"

// The K-quants: super-blocks of QK_K = 256 elements split into 16 or 8
// sub-blocks, each with a small integer scale (and for Q2_K, Q4_K and Q5_K a
// small integer min) that multiplies the super-block's fp16 d (and dmin).

// dequantQ2_K decodes block_q2_K: 16 bytes of 4-bit scale|min<<4, 64 bytes
// of 2-bit quants, d, dmin. Sub-block k of 16 elements is
// x = (d*scale)*q - dmin*min.
func dequantQ2_K(src []byte, dst []float32) {
	b, y := (*[84]byte)(src), (*[QK_K]float32)(dst)
	sc := b[0:16]
	d, dmin := half(b[:], 80), half(b[:], 82)
	out, is := 0, 0
	for n := 0; n < 2; n++ {
		q := b[16+32*n : 16+32*n+32]
		for shift := 0; shift < 8; shift += 2 {
			for sub := 0; sub < 2; sub++ {
				s := sc[is]
				is++
				dl, ml := d*float32(s&0x0f), float32(dmin*float32(s>>4))
				for _, v := range q[16*sub : 16*sub+16] {
					y[out] = float32(dl*float32(v>>shift&3)) - ml
					out++
				}
			}
		}
	}
}

// dequantQ3_K decodes block_q3_K: 32 bytes of high bits, 64 bytes of low 2
// bits, 12 bytes packing 16 6-bit scales, d. x = (d*(scale-32)) * q where
// q = low - 4 unless the high bit is set.
func dequantQ3_K(src []byte, dst []float32) {
	b, y := (*[110]byte)(src), (*[QK_K]float32)(dst)
	hm := b[0:32]
	d := half(b[:], 108)

	// Unpack the scales as ggml does, in four little-endian words: the low
	// nibbles come from bytes 0-7, the top two bits from bytes 8-11.
	const m1, m2 = 0x03030303, 0x0f0f0f0f
	a0 := binary.LittleEndian.Uint32(b[96:])
	a1 := binary.LittleEndian.Uint32(b[100:])
	tmp := binary.LittleEndian.Uint32(b[104:])
	var scales [16]byte
	binary.LittleEndian.PutUint32(scales[0:], a0&m2|(tmp>>0&m1)<<4)
	binary.LittleEndian.PutUint32(scales[4:], a1&m2|(tmp>>2&m1)<<4)
	binary.LittleEndian.PutUint32(scales[8:], a0>>4&m2|(tmp>>4&m1)<<4)
	binary.LittleEndian.PutUint32(scales[12:], a1>>4&m2|(tmp>>6&m1)<<4)

	out, is := 0, 0
	mask := byte(1)
	for n := 0; n < 2; n++ {
		q := b[32+32*n : 32+32*n+32]
		for shift := 0; shift < 8; shift += 2 {
			for sub := 0; sub < 2; sub++ {
				dl := d * float32(int(scales[is])-32)
				is++
				for l := 16 * sub; l < 16*sub+16; l++ {
					v := int(q[l] >> shift & 3)
					if hm[l]&mask == 0 {
						v -= 4
					}
					y[out] = dl * float32(v)
					out++
				}
			}
			mask <<= 1
		}
	}
}

// scaleMinK4 unpacks the j-th 6-bit scale and min of Q4_K and Q5_K from their
// 12 packed bytes (ggml's get_scale_min_k4).
func scaleMinK4(j int, q []byte) (sc, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0x0f | q[j-4]>>6<<4, q[j+4]>>4 | q[j]>>6<<4
}

// dequantQ4_K decodes block_q4_K: d, dmin, 12 bytes of scales and mins, 128
// bytes of nibbles. Sub-block k of 32 elements is x = (d*sc)*q - dmin*m.
func dequantQ4_K(src []byte, dst []float32) {
	b, y := (*[144]byte)(src), (*[QK_K]float32)(dst)
	d, dmin := half(b[:], 0), half(b[:], 2)
	scales := b[4:16]
	out := 0
	for j := 0; j < 4; j++ {
		q := b[16+32*j : 16+32*j+32]
		sc, m := scaleMinK4(2*j, scales)
		d1, m1 := d*float32(sc), float32(dmin*float32(m))
		sc, m = scaleMinK4(2*j+1, scales)
		d2, m2 := d*float32(sc), float32(dmin*float32(m))
		for _, v := range q {
			y[out] = float32(d1*float32(v&0x0f)) - m1
			out++
		}
		for _, v := range q {
			y[out] = float32(d2*float32(v>>4)) - m2
			out++
		}
	}
}

// dequantQ5_K decodes block_q5_K: d, dmin, 12 bytes of scales and mins, 32
// bytes of fifth bits, 128 bytes of nibbles; x = (d*sc)*q - dmin*m.
func dequantQ5_K(src []byte, dst []float32) {
	b, y := (*[176]byte)(src), (*[QK_K]float32)(dst)
	d, dmin := half(b[:], 0), half(b[:], 2)
	scales := b[4:16]
	qh := b[16:48]
	out := 0
	u1, u2 := byte(1), byte(2)
	for j := 0; j < 4; j++ {
		ql := b[48+32*j : 48+32*j+32]
		sc, m := scaleMinK4(2*j, scales)
		d1, m1 := d*float32(sc), float32(dmin*float32(m))
		sc, m = scaleMinK4(2*j+1, scales)
		d2, m2 := d*float32(sc), float32(dmin*float32(m))
		for l, v := range ql {
			q := int(v & 0x0f)
			if qh[l]&u1 != 0 {
				q += 16
			}
			y[out] = float32(d1*float32(q)) - m1
			out++
		}
		for l, v := range ql {
			q := int(v >> 4)
			if qh[l]&u2 != 0 {
				q += 16
			}
			y[out] = float32(d2*float32(q)) - m2
			out++
		}
		u1 <<= 2
		u2 <<= 2
	}
}

// dequantQ6_K decodes block_q6_K: 128 bytes of low nibbles, 64 bytes of
// high 2-bit pairs, 16 int8 scales, d; x = (d*scale) * (q-32).
func dequantQ6_K(src []byte, dst []float32) {
	b, y := (*[210]byte)(src), (*[QK_K]float32)(dst)
	d := half(b[:], 208)
	for n := 0; n < 2; n++ {
		ql := b[64*n : 64*n+64]
		qh := b[128+32*n : 128+32*n+32]
		sc := b[192+8*n : 192+8*n+8]
		yy := y[128*n : 128*n+128]
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int(ql[l]&0x0f|(qh[l]>>0&3)<<4) - 32
			q2 := int(ql[l+32]&0x0f|(qh[l]>>2&3)<<4) - 32
			q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
			q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
			yy[l] = d * float32(int8(sc[is])) * float32(q1)
			yy[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
			yy[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
			yy[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
		}
	}
}

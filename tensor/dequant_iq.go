package tensor

import "encoding/binary"

// The i-quants: super-blocks of QK_K = 256 elements whose groups of 8 (or 4)
// elements are indices into fixed codebooks (iquant_tables.go, generated from
// ggml-common.h), with separately stored signs and small per-32 scales.
// IQ4_NL and IQ4_XS instead map each nibble through 16 non-linear levels.

// dequantIQ2_XXS decodes block_iq2_xxs: d, then per 32 elements two words:
// four 8-bit grid indices, and four 7-bit sign groups above a 4-bit scale.
func dequantIQ2_XXS(src []byte, dst []float32) {
	b, y := (*[66]byte)(src), (*[QK_K]float32)(dst)
	d := half(b[:], 0)
	for ib := 0; ib < 8; ib++ {
		idx := b[2+8*ib : 2+8*ib+4]
		aux := binary.LittleEndian.Uint32(b[2+8*ib+4:])
		db := d * (0.5 + float32(aux>>28)) * 0.25
		for l := 0; l < 4; l++ {
			grid := iq2xxsGrid[idx[l]]
			s := ksignsIQ2XS[aux>>(7*l)&127]
			yy := y[32*ib+8*l : 32*ib+8*l+8]
			for j := range yy {
				yy[j] = db * float32(byte(grid>>(8*j))) * signs[s>>j&1]
			}
		}
	}
}

// dequantIQ2_XS decodes block_iq2_xs: d, 32 words of a 9-bit grid index
// under 7 sign bits, then 8 bytes of two 4-bit scales.
func dequantIQ2_XS(src []byte, dst []float32) {
	b, y := (*[74]byte)(src), (*[QK_K]float32)(dst)
	d := half(b[:], 0)
	for ib := 0; ib < 8; ib++ {
		sc := b[66+ib]
		db := [2]float32{
			d * (0.5 + float32(sc&0x0f)) * 0.25,
			d * (0.5 + float32(sc>>4)) * 0.25,
		}
		for l := 0; l < 4; l++ {
			q := binary.LittleEndian.Uint16(b[2+2*(4*ib+l):])
			grid := iq2xsGrid[q&511]
			s := ksignsIQ2XS[q>>9]
			dl := db[l/2]
			yy := y[32*ib+8*l : 32*ib+8*l+8]
			for j := range yy {
				yy[j] = dl * float32(byte(grid>>(8*j))) * signs[s>>j&1]
			}
		}
	}
}

// dequantIQ2_S decodes block_iq2_s: d, 32 bytes of low grid-index bits, 32
// bytes of signs, 8 bytes of 2-bit index tops, 8 bytes of two 4-bit scales.
func dequantIQ2_S(src []byte, dst []float32) {
	b, y := (*[82]byte)(src), (*[QK_K]float32)(dst)
	d := half(b[:], 0)
	qs, sg, qh, scales := b[2:34], b[34:66], b[66:74], b[74:82]
	for ib := 0; ib < 8; ib++ {
		db := [2]float32{
			d * (0.5 + float32(scales[ib]&0x0f)) * 0.25,
			d * (0.5 + float32(scales[ib]>>4)) * 0.25,
		}
		for l := 0; l < 4; l++ {
			dl := db[l/2]
			grid := iq2sGrid[int(qs[4*ib+l])|int(qh[ib])<<(8-2*l)&0x300]
			s := sg[4*ib+l]
			yy := y[32*ib+8*l : 32*ib+8*l+8]
			for j := range yy {
				yy[j] = dl * float32(byte(grid>>(8*j))) * signs[s>>j&1]
			}
		}
	}
}

// dequantIQ3_XXS decodes block_iq3_xxs: d, 64 bytes of grid indices (two per
// 8 elements), then per 32 elements a word of four 7-bit sign groups under a
// 4-bit scale.
func dequantIQ3_XXS(src []byte, dst []float32) {
	b, y := (*[98]byte)(src), (*[QK_K]float32)(dst)
	d := half(b[:], 0)
	for ib := 0; ib < 8; ib++ {
		qs := b[2+8*ib : 2+8*ib+8]
		aux := binary.LittleEndian.Uint32(b[66+4*ib:])
		db := d * (0.5 + float32(aux>>28)) * 0.5
		for l := 0; l < 4; l++ {
			s := ksignsIQ2XS[aux>>(7*l)&127]
			g1, g2 := iq3xxsGrid[qs[2*l]], iq3xxsGrid[qs[2*l+1]]
			yy := y[32*ib+8*l : 32*ib+8*l+8]
			for j := 0; j < 4; j++ {
				yy[j] = db * float32(byte(g1>>(8*j))) * signs[s>>j&1]
				yy[j+4] = db * float32(byte(g2>>(8*j))) * signs[s>>(j+4)&1]
			}
		}
	}
}

// dequantIQ3_S decodes block_iq3_s: d, 64 bytes of low grid-index bits, 8
// bytes of index tops, 32 bytes of signs, 4 bytes of two 4-bit scales (one
// per 32 elements); the scale is 1+2*s.
func dequantIQ3_S(src []byte, dst []float32) {
	b, y := (*[110]byte)(src), (*[QK_K]float32)(dst)
	d := half(b[:], 0)
	qs, qh, sg, scales := b[2:66], b[66:74], b[74:106], b[106:110]
	for ib := 0; ib < 8; ib++ {
		sc := scales[ib/2] >> (4 * (ib % 2)) & 0x0f
		db := d * float32(1+2*int(sc))
		h := int(qh[ib])
		for l := 0; l < 4; l++ {
			g1 := iq3sGrid[int(qs[8*ib+2*l])|h<<(8-2*l)&256]
			g2 := iq3sGrid[int(qs[8*ib+2*l+1])|h<<(7-2*l)&256]
			s := sg[4*ib+l]
			yy := y[32*ib+8*l : 32*ib+8*l+8]
			for j := 0; j < 4; j++ {
				yy[j] = db * float32(byte(g1>>(8*j))) * signs[s>>j&1]
				yy[j+4] = db * float32(byte(g2>>(8*j))) * signs[s>>(j+4)&1]
			}
		}
	}
}

// iq1Delta is ggml's IQ1S_DELTA (also IQ1M_DELTA): the shift of the ternary
// grid values, its sign chosen per group.
const iq1Delta = 0.125

// dequantIQ1_S decodes block_iq1_s: d, 32 bytes of low grid-index bits, then
// per 32 elements a word of four 3-bit index tops, a 3-bit scale and a delta
// sign; x = (d*(2*s+1)) * (g + delta).
func dequantIQ1_S(src []byte, dst []float32) {
	b, y := (*[50]byte)(src), (*[QK_K]float32)(dst)
	d := half(b[:], 0)
	for ib := 0; ib < 8; ib++ {
		qh := binary.LittleEndian.Uint16(b[34+2*ib:])
		dl := d * float32(2*int(qh>>12&7)+1)
		delta := float32(iq1Delta)
		if qh&0x8000 != 0 {
			delta = -iq1Delta
		}
		for l := 0; l < 4; l++ {
			grid := iq1sGrid[int(b[2+4*ib+l])|int(qh>>(3*l)&7)<<8]
			yy := y[32*ib+8*l : 32*ib+8*l+8]
			for j := range yy {
				yy[j] = dl * (float32(int8(grid>>(8*j))) + delta)
			}
		}
	}
}

// dequantIQ1_M decodes block_iq1_m: 32 bytes of low grid-index bits, 16
// bytes of 3-bit index tops with delta signs, and 8 bytes of 3-bit scales
// whose top nibbles together hold the fp16 super-block scale.
func dequantIQ1_M(src []byte, dst []float32) {
	b, y := (*[56]byte)(src), (*[QK_K]float32)(dst)
	var sc [4]uint16
	for k := range sc {
		sc[k] = binary.LittleEndian.Uint16(b[48+2*k:])
	}
	d := HalfToFloat(sc[0]>>12 | sc[1]>>8&0x00f0 | sc[2]>>4&0x0f00 | sc[3]&0xf000)
	for ib := 0; ib < 8; ib++ {
		s := sc[ib/2] >> (6 * (ib % 2))
		dl := [2]float32{
			d * float32(2*int(s&7)+1),
			d * float32(2*int(s>>3&7)+1),
		}
		qs, qh := b[4*ib:4*ib+4], b[32+2*ib:32+2*ib+2]
		for l := 0; l < 4; l++ {
			h := qh[l/2] >> (4 * (l % 2)) // this group's 3 index bits and delta sign
			delta := float32(iq1Delta)
			if h&0x08 != 0 {
				delta = -iq1Delta
			}
			grid := iq1sGrid[int(qs[l])|int(h&7)<<8]
			dll := dl[l/2]
			yy := y[32*ib+8*l : 32*ib+8*l+8]
			for j := range yy {
				yy[j] = dll * (float32(int8(grid>>(8*j))) + delta)
			}
		}
	}
}

// dequantIQ4_NL decodes block_iq4_nl: d, 16 bytes of nibbles indexing the
// non-linear levels; x = d*level.
func dequantIQ4_NL(src []byte, dst []float32) {
	b, y := (*[18]byte)(src), (*[32]float32)(dst)
	d := half(b[:], 0)
	qs := b[2:18]
	for j := 0; j < 16; j++ {
		y[j] = d * float32(kvaluesIQ4NL[qs[j]&0x0f])
		y[j+16] = d * float32(kvaluesIQ4NL[qs[j]>>4])
	}
}

// dequantIQ4_XS decodes block_iq4_xs: d, the top 2 bits of eight 6-bit
// scales, their low nibbles, then 128 bytes of level nibbles;
// x = (d*(scale-32)) * level.
func dequantIQ4_XS(src []byte, dst []float32) {
	b, y := (*[136]byte)(src), (*[QK_K]float32)(dst)
	d := half(b[:], 0)
	sh := binary.LittleEndian.Uint16(b[2:])
	sl := b[4:8]
	for ib := 0; ib < 8; ib++ {
		ls := int(sl[ib/2]>>(4*(ib%2))&0x0f) | int(sh>>(2*ib)&3)<<4
		dl := d * float32(ls-32)
		qs := b[8+16*ib : 8+16*ib+16]
		yy := y[32*ib : 32*ib+32]
		for j := 0; j < 16; j++ {
			yy[j] = dl * float32(kvaluesIQ4NL[qs[j]&0x0f])
			yy[j+16] = dl * float32(kvaluesIQ4NL[qs[j]>>4])
		}
	}
}

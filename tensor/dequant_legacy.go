package tensor

import "encoding/binary"

// The legacy ggml quants: blocks of 32 elements, one fp16 scale d (and for
// the _1 types an fp16 offset m), 4 or 5 bits per element. Elements j and
// j+16 share the low and high nibble of byte j.

// dequantQ8_0 decodes block_q8_0: d, then 32 int8; x = q*d.
func dequantQ8_0(src []byte, dst []float32) {
	b, y := (*[34]byte)(src), (*[32]float32)(dst)
	d := half(b[:], 0)
	for j := 0; j < 32; j++ {
		y[j] = float32(int8(b[2+j])) * d
	}
}

// dequantQ4_0 decodes block_q4_0: d, 16 bytes of nibbles; x = (q-8)*d.
func dequantQ4_0(src []byte, dst []float32) {
	b, y := (*[18]byte)(src), (*[32]float32)(dst)
	d := half(b[:], 0)
	qs := b[2:18]
	for j := 0; j < 16; j++ {
		y[j] = float32(int(qs[j]&0x0f)-8) * d
		y[j+16] = float32(int(qs[j]>>4)-8) * d
	}
}

// dequantQ4_1 decodes block_q4_1: d, m, 16 bytes of nibbles; x = q*d + m.
func dequantQ4_1(src []byte, dst []float32) {
	b, y := (*[20]byte)(src), (*[32]float32)(dst)
	d, m := half(b[:], 0), half(b[:], 2)
	qs := b[4:20]
	for j := 0; j < 16; j++ {
		y[j] = float32(float32(qs[j]&0x0f)*d) + m
		y[j+16] = float32(float32(qs[j]>>4)*d) + m
	}
}

// dequantQ5_0 decodes block_q5_0: d, 32 fifth bits, 16 bytes of nibbles;
// x = (q-16)*d.
func dequantQ5_0(src []byte, dst []float32) {
	b, y := (*[22]byte)(src), (*[32]float32)(dst)
	d := half(b[:], 0)
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	for j := 0; j < 16; j++ {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float32(int(qs[j]&0x0f|h0)-16) * d
		y[j+16] = float32(int(qs[j]>>4|h1)-16) * d
	}
}

// dequantQ5_1 decodes block_q5_1: d, m, 32 fifth bits, 16 bytes of nibbles;
// x = q*d + m.
func dequantQ5_1(src []byte, dst []float32) {
	b, y := (*[24]byte)(src), (*[32]float32)(dst)
	d, m := half(b[:], 0), half(b[:], 2)
	qh := binary.LittleEndian.Uint32(b[4:])
	qs := b[8:24]
	for j := 0; j < 16; j++ {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float32(float32(qs[j]&0x0f|h0)*d) + m
		y[j+16] = float32(float32(qs[j]>>4|h1)*d) + m
	}
}

package main

import (
	"bytes"
	"testing"
)

// The expected bytes are GNU as 2.40's encodings of "{vex} vpdpbusd" with
// the same operands (AT&T order: src2, src1, dst).
func TestVEXVPDPBUSD(t *testing.T) {
	for _, c := range []struct {
		dst, src1, src2 int
		want            []byte
	}{
		{8, 3, 7, []byte{0xc4, 0x62, 0x65, 0x50, 0xc7}},
		{3, 5, 7, []byte{0xc4, 0xe2, 0x55, 0x50, 0xdf}},
		{5, 2, 4, []byte{0xc4, 0xe2, 0x6d, 0x50, 0xec}},
		{10, 5, 9, []byte{0xc4, 0x42, 0x55, 0x50, 0xd1}},
		{10, 7, 9, []byte{0xc4, 0x42, 0x45, 0x50, 0xd1}},
	} {
		if got := vexVPDPBUSD(c.dst, c.src1, c.src2); !bytes.Equal(got, c.want) {
			t.Errorf("VPDPBUSD Y%d, Y%d, Y%d: % x, want % x", c.src2, c.src1, c.dst, got, c.want)
		}
	}
}

package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// avo encodes VPDPBUSD only in its AVX-512 (EVEX) form, which faults on
// CPUs that have AVX-VNNI but not AVX-512, and Go's assembler has no other
// form either. The AVX-VNNI kernels therefore use VPDPBUSD on registers
// only, and once avo has allocated them this rewrites each such line of
// those kernels into the bytes of the VEX form (VEX.256.66.0F38.W0 50 /r),
// which can name Y0-Y15 only: a kernel that got a higher register fails
// the generation rather than the program.

var (
	textLine  = regexp.MustCompile(`^TEXT ·(\w+)\(SB\)`)
	vpdpbusd  = regexp.MustCompile(`^(\s*)VPDPBUSD\s+Y(\d+), Y(\d+), Y(\d+)\s*$`)
	requireLn = regexp.MustCompile(`^// Requires: .*$`)
)

// vexVPDPBUSD returns the bytes of VPDPBUSD dst, src1, src2 in Intel's
// operand order (Go's: src2, src1, dst): dst += Σ u8(src1)·s8(src2) over
// each lane's four byte pairs. dst is ModRM.reg, src1 VEX.vvvv, src2
// ModRM.rm.
func vexVPDPBUSD(dst, src1, src2 int) []byte {
	r, b := 1-dst>>3, 1-src2>>3 // VEX stores R and B inverted
	return []byte{
		0xC4,
		byte(r<<7 | 1<<6 | b<<5 | 0x02),          // X̄ = 1; map 0F38
		byte(0<<7 | (^src1&15)<<3 | 1<<2 | 0x01), // W0, vvvv inverted, L = 256, pp = 66
		0x50,
		byte(0xC0 | (dst&7)<<3 | src2&7),
	}
}

// rewriteVEXVNNI rewrites the VPDPBUSD lines of the AVX-VNNI kernels in
// the generated assembly file, and their "Requires" comments.
func rewriteVEXVNNI(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	fn := ""
	count := 0
	for i, l := range lines {
		if m := textLine.FindStringSubmatch(l); m != nil {
			fn = m[1]
			if strings.HasSuffix(fn, "_"+avxvnni.name) && i > 0 && requireLn.MatchString(lines[i-1]) {
				lines[i-1] = "// Requires: AVX, AVX2, AVX_VNNI, FMA"
			}
			continue
		}
		if !strings.HasSuffix(fn, "_"+avxvnni.name) || !strings.Contains(l, "VPDPBUSD") {
			continue
		}
		m := vpdpbusd.FindStringSubmatch(l)
		if m == nil {
			return fmt.Errorf("%s: %q is not VPDPBUSD on three Y registers", fn, strings.TrimSpace(l))
		}
		src2, _ := strconv.Atoi(m[2])
		src1, _ := strconv.Atoi(m[3])
		dst, _ := strconv.Atoi(m[4])
		if max(src2, src1, dst) > 15 {
			return fmt.Errorf("%s: %q names a register VEX cannot encode", fn, strings.TrimSpace(l))
		}
		var parts []string
		for _, x := range vexVPDPBUSD(dst, src1, src2) {
			parts = append(parts, fmt.Sprintf("BYTE $0x%02x", x))
		}
		lines[i] = fmt.Sprintf("%s%s // VPDPBUSD Y%d, Y%d, Y%d (AVX-VNNI)", m[1], strings.Join(parts, "; "), src2, src1, dst)
		count++
	}
	if count == 0 {
		return fmt.Errorf("%s: no AVX-VNNI VPDPBUSD to rewrite", path)
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}

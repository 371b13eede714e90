//go:build amd64 && !noasm

package kernels

import "golang.org/x/sys/cpu"

// The kernels count their spans themselves (sumSpan, generated); this fails
// to compile unless that is the drivers' grid.
var _ = [1]struct{}{}[sumSpan-dotSpan]

// The feature tests come from golang.org/x/sys/cpu, which also checks that
// the operating system saves the ymm/zmm and opmask state (XCR0): cpuid
// alone is not enough. F16C, which x/sys/cpu does not report, is read from
// cpuid leaf 1; it needs no OS state beyond AVX's. AMX is never used (it
// faults on the VMs this runs on even where cpuid advertises it).
func init() {
	_, _, ecx1, _ := cpuid(1, 0)
	f16c := ecx1&(1<<29) != 0
	x := &cpu.X86
	if !(x.HasAVX && x.HasAVX2 && x.HasFMA && f16c) {
		return
	}
	avx2 := &kernelSet{name: "AVX2", dot: &dotAVX2, int8: &intAVX2, inout: &inoutAVX2, quant: quantAVX2, vec: &vecAVX2, dequant: &dequantAVX2, fused: &fusedAVX2, fmaPeak: fmaPeakAVX2, lanes: 8, prefetch: prefetchLines}
	levels = append(levels, avx2)
	if x.HasAVXVNNI {
		// AVX-VNNI (VEX VPDPBUSD on ymm) for the int8 products of CPUs
		// without AVX-512; listed wherever it exists so that tests cover it.
		v := *avx2
		v.name, v.int8 = "AVX2VNNI", &intAVXVNNI
		levels = append(levels, &v)
	}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512DQ {
		// Without VNNI the int8 products use the AVX2 kernels. Where VNNI
		// exists that combination is still listed (before the best set) so
		// that tests cover it.
		s := &kernelSet{name: "AVX512", dot: &dotAVX512, int8: &intAVX2, inout: &inoutAVX512, quant: quantAVX512, vec: &vecAVX512, dequant: &dequantAVX512, fused: &fusedAVX512, fmaPeak: fmaPeakAVX512, lanes: 16, prefetch: prefetchLines}
		levels = append(levels, s)
		if x.HasAVX512VNNI {
			v := *s
			v.name, v.int8, v.fast, v.widen, v.quant16, v.quantS16 = "AVX512VNNI", &intVNNI, &fastVNNI, &widenVNNI, quant16VNNI, quantS16VNNI
			v.intPeak, v.widenCB = intPeakVNNI, &widenCBVNNI
			v.store, v.storeScaled = fastStoreVNNI, fastStoreScaledVNNI
			// The same with the block decoders tuned for Zen's two
			// shuffle pipes (AVX-512 with VNNI: Zen 4 and 5), listed
			// everywhere so that tests cover it, best only on AMD.
			z := v
			z.name, z.dequant, z.fused = "AVX512VNNI-Zen", &dequantAVX512Zen, &fusedAVX512Zen
			if amd() {
				levels = append(levels, &v, &z)
			} else {
				levels = append(levels, &z, &v)
			}
		}
	}
	active = levels[len(levels)-1]
	fusedPastN = l1dBytes() < 48<<10
	q8TwoPass = !amd()
}

// amd reports whether cpuid's vendor is AuthenticAMD.
func amd() bool {
	_, b, c, d := cpuid(0, 0)
	return b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163 // "Auth" "enti" "cAMD"
}

// l1dBytes is the size of one core's L1 data cache from cpuid (AMD's leaf
// 0x80000005, else the deterministic cache parameters of leaf 4), or 0
// where neither says.
func l1dBytes() int {
	if max, _, _, _ := cpuid(0x80000000, 0); max >= 0x80000005 {
		if _, _, c, _ := cpuid(0x80000005, 0); c>>24 != 0 {
			return int(c>>24) << 10
		}
	}
	if max, _, _, _ := cpuid(0, 0); max >= 4 {
		for sub := uint32(0); sub < 8; sub++ {
			a, b, c, _ := cpuid(4, sub)
			switch a & 31 {
			case 0:
				return 0
			case 1: // data
				if (a>>5)&7 == 1 {
					return int((b>>22+1)*((b>>12)&0x3ff+1)*(b&0xfff+1)) * int(c+1)
				}
			}
		}
	}
	return 0
}

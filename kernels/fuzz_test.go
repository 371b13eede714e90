package kernels

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// Fuzz targets (go test -fuzz FuzzDot / FuzzQ8Dot ./kernels/): every SIMD
// level against the reference on arbitrary inputs.

func floatsFrom(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func FuzzDot(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64}, uint16(0))
	f.Add(make([]byte, 8*37), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, off uint16) {
		v := floatsFrom(data)
		n := len(v) / 2
		a, b := v[:n], v[n:2*n]
		if k := int(off) % (n + 1); k > 0 { // unaligned starts
			a, b = a[k:], b[:n-k]
		}
		var exact, abs float64
		for i := range a {
			p := float64(a[i]) * float64(b[i])
			exact += p
			abs += math.Abs(p)
		}
		if math.IsNaN(abs) || math.IsInf(abs, 0) || abs > math.MaxFloat32/2 {
			return // overflow: float32 results are Inf or NaN in any order
		}
		for i := range levels {
			restore := useLevel(i)
			got := Dot(a, b)
			restore()
			// Relative rounding of every sum, plus absolute 2^-149 of every
			// product and sum that is subnormal.
			if d := math.Abs(float64(got) - exact); !(d <= float64(len(a)+1)*(0x1p-24*abs+0x1p-149)) {
				t.Fatalf("%s: Dot = %g, exact %g (Σ|ab| = %g)", levelName(i), got, exact, abs)
			}
		}
	})
}

func FuzzQ8Dot(f *testing.F) {
	seed := make([]byte, 0, 3*68+4*64)
	for i := 0; i < cap(seed); i++ {
		seed = append(seed, byte(i*37))
	}
	f.Add(seed, uint8(2), uint8(3))
	f.Add(make([]byte, 200), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, rows, ntok uint8) {
		R := 1 + int(rows)%5
		n := 1 + int(ntok)%7
		// Weights: R rows of nb blocks; the rest of data is activations.
		nb := len(data) / (R*34 + n*128)
		if nb == 0 {
			return
		}
		w := data[:R*nb*34]
		x := floatsFrom(data[R*nb*34:])[:n*nb*32]
		for b := 0; b < R*nb; b++ {
			d := tensor.HalfToFloat(binary.LittleEndian.Uint16(w[b*34:]))
			if math.IsNaN(float64(d)) || math.IsInf(float64(d), 0) {
				return
			}
		}
		for _, v := range x {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || math.Abs(float64(v)) > 1e30 {
				return
			}
		}
		m := Mat{Type: tensor.Q8_0, Out: R, In: nb * 32, Data: w}
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		defer setExactQuant(false)()
		want := make([]float32, n*R)
		matMulQuantRef(want, x, n, &m, 0, R)
		bound, blocks := quantBound(&m, x, n)
		for i := 1; i < len(levels); i++ {
			restore := useLevel(i)
			got := make([]float32, n*R)
			MatMul(got, x, n, &m)
			restore()
			for j := range got {
				// The rounding bound of TestQuantizedMatMul, plus what a
				// subnormal scale product dw·dx (< 2^-126) can lose:
				// 2^-149 times the largest block sum 32·127·128.
				tol := float64(blocks+24)*0x1p-23*bound[j] + float64(blocks)*32*127*128*0x1p-149
				if math.IsInf(bound[j], 0) {
					continue // products beyond float32: Inf in either order
				}
				if d := math.Abs(float64(got[j] - want[j])); !(d <= tol) && !(d == 0) {
					t.Fatalf("%s: y[%d] = %g, reference %g ± %g", levelName(i), j, got[j], want[j], tol)
				}
			}
		}
	})
}

// FuzzBlockDecoders: every level's dequantiser of every block type decodes
// arbitrary bytes (any fp16 scale: subnormal, infinite, NaN) to
// DequantizeRow's bits, and its fused decode kernel multiplies them with
// the bits of the two-pass path (go test -fuzz FuzzBlockDecoders ./kernels/).
func FuzzBlockDecoders(f *testing.F) {
	seed := make([]byte, 3*210)
	for i := range seed {
		seed[i] = byte(i*151 + 7)
	}
	for k := range dqTypes {
		f.Add(seed, uint8(k))
	}
	f.Add(make([]byte, 300), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		dt := dqTypes[int(kind)%len(dqTypes)].dt
		nb := min(len(data)/dt.BlockBytes(), 8)
		if nb == 0 {
			return
		}
		src := data[:nb*dt.BlockBytes()]
		in := nb * dt.BlockSize()
		x := make([]float32, in)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		for i := range levels {
			restore := useLevel(i)
			ks := active
			if ks != nil && ks.dequant != nil && ks.dequant[dqKind(dt)] != 0 {
				checkDequant(t, ks, dt, src)
			}
			if ff := ks.fusedFamily(dt); ff != nil {
				m := Mat{Type: dt, Out: 1, In: in, Data: src}
				var fused, two [1]float32
				ks.dequantMatMul(fused[:], x, 1, &m, 0, 1)
				noFused = true
				ks.dequantMatMul(two[:], x, 1, &m, 0, 1)
				noFused = false
				if !sameBits(fused[0], two[0]) {
					restore()
					t.Fatalf("%s %v: fused %g, two-pass %g", levelName(i), dt, fused[0], two[0])
				}
			}
			restore()
		}
	})
}

// FuzzFastWidening: the fast precision's widening kernels (and the codebook
// types' decode and division) write widenRef's bytes and scales for
// arbitrary weight bytes (go test -fuzz FuzzFastWidening ./kernels/).
func FuzzFastWidening(f *testing.F) {
	types := fastBlockTypes
	seed := make([]byte, 2*210)
	for i := range seed {
		seed[i] = byte(i*97 + 3)
	}
	for k := range types {
		f.Add(seed, uint8(k))
	}
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		ks := active
		if ks == nil || ks.fast == nil {
			t.Skip("no fast kernels on this machine")
		}
		dt := types[int(kind)%len(types)]
		rows := 2
		rb := dt.BlockBytes()
		if len(data) < rows*rb {
			return
		}
		nb := dt.BlockSize() / 32 // one block of the type a row
		ws, ds := make([]byte, rows*nb*64), make([]float32, 4*rows*nb)
		widenRef(ws, ds, data, rb, dt, rows, nb)
		gw, gd := make([]byte, len(ws)), make([]float32, len(ds))
		if codebookFactor(dt) > 0 {
			ks.widenDecoded(gw, gd, make([]float32, rows*nb*32), data, rb, dt, rows, nb)
		} else {
			ks.widen[fastKind(dt)].call(&gw[0], &gd[0], &data[0], rb, rows, nb)
		}
		for i := range ws {
			if gw[i] != ws[i] {
				t.Fatalf("%v: widened byte %d = %#x, want %#x", dt, i, gw[i], ws[i])
			}
		}
		for i := range ds {
			if !sameBits(gd[i], ds[i]) {
				t.Fatalf("%v: scale %d = %g, want %g", dt, i, gd[i], ds[i])
			}
		}
	})
}

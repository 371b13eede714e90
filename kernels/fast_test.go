package kernels

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// fma32Exact rounds a·b+c once to float32 through big.Float.
func fma32Exact(a, b, c float32) float32 {
	p := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	p.Mul(p, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	p.Add(p, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := p.Float32()
	return f
}

func TestFMA32RoundsOnce(t *testing.T) {
	// 1+2^-24 is halfway between 1 and 1+2^-23 in float32; with a tiny
	// product below it, rounding the float64 sum again would give 1.
	cases := [][3]float32{
		{0x1p-30, 0x1p-30, 1 + 0x1p-23},
		{1 + 0x1p-23, 1 + 0x1p-23, -1},
		{0x1p-12 + 0x1p-35, 0x1p-12, 1},
		{-(0x1p-12 + 0x1p-35), 0x1p-12, -1},
		{3, 5, 7},
		{0, 0, 0},
	}
	// a·b = 2^-24 - 2^-60: the float64 sum with 1+2^-23 is the float32
	// midpoint 1+2^-23+2^-24 (a tie that rounds to even, up), while the
	// exact sum is below it.
	cases = append(cases, [3]float32{0x1p-12 * (1 + 0x1p-18), 0x1p-12 * (1 - 0x1p-18), 1 + 0x1p-23})
	cases = append(cases, [3]float32{-0x1p-12 * (1 + 0x1p-18), 0x1p-12 * (1 - 0x1p-18), -1 - 0x1p-23})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		a := float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
		b := float32(rng.NormFloat64())
		c := float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(40)-20)))
		cases = append(cases, [3]float32{a, b, c})
	}
	for _, c := range cases {
		got, want := fma32(c[0], c[1], c[2]), fma32Exact(c[0], c[1], c[2])
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", c[0], c[1], c[2], got, want)
		}
	}
}

// fastMats are the shapes the fast tests run: rows that are and are not
// whole tiles, several spans, I8 with several shards.
func fastMats(t *testing.T, rng *rand.Rand) []testMat {
	var ms []testMat
	for _, s := range []struct {
		dt              tensor.DType
		out, in, shards int
	}{
		{tensor.Q8_0, 9, 64, 1},
		{tensor.Q8_0, 16, 2048 + 96, 1},
		{tensor.Q8_0, 5, 4096 + 32, 1},
		{tensor.I8, 7, 512, 2},         // shards of one scale group (fastFor)
		{tensor.I8, 12, 4096 + 512, 2}, // of 9
		{tensor.I8, 4, 96, 1},
	} {
		ms = append(ms, newTestMat(rng, s.dt, false, s.out, s.in, s.shards, 1))
	}
	for _, dt := range fastBlockTypes[1:] {
		for _, sz := range [][2]int{{9, 256}, {16, 2048 + 256}} {
			ms = append(ms, blockTestMat(t, rng, dt, sz[0], sz[1]))
		}
	}
	return ms
}

// fastBlockTypes are the block types the fast product widens (Q8_0 first).
var fastBlockTypes = []tensor.DType{tensor.Q8_0, tensor.Q4_0, tensor.IQ4_NL, tensor.Q4_K, tensor.Q5_K, tensor.Q4_1, tensor.Q5_0,
	tensor.Q5_1, tensor.Q6_K, tensor.IQ4_XS, tensor.Q3_K, tensor.Q2_K, tensor.IQ3_S, tensor.IQ3_XXS, tensor.IQ2_XXS,
	tensor.IQ2_XS, tensor.IQ2_S, tensor.IQ1_S, tensor.IQ1_M}

// blockTestMat is a random matrix of a block type (random block bytes with
// finite values) with its values decoded by tensor.DecodeRow.
func blockTestMat(t *testing.T, rng *rand.Rand, dt tensor.DType, out, in int) testMat {
	m := randBlockMat(t, rng, dt, out, in)
	deq := make([]float64, out*in)
	rb, _ := dt.RowBytes(in)
	row := make([]float32, in)
	for r := 0; r < out; r++ {
		if err := tensor.DecodeRow(row, dt, m.Data[r*rb:(r+1)*rb]); err != nil {
			panic(err)
		}
		for c, v := range row {
			deq[r*in+c] = float64(v)
		}
	}
	return testMat{m, deq}
}

// TestWidenRefMatchesDecodeRow: the widened integers times the block
// scale are tensor.DecodeRow's values, bit for bit, for every fast type
// (so the nibble order and the IQ4_NL levels are ggml's), and the widening
// kernels write widenRef's bytes.
func TestWidenRefMatchesDecodeRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, tm := range fastMats(t, rng) {
		m := &tm.m
		nb := m.In / 32
		rb, _ := m.Type.RowBytes(m.In)
		ws, ds := make([]byte, m.Out*nb*64), make([]float32, 4*m.Out*nb)
		widenRef(ws, ds, m.Data, rb, m.Type, m.Out, nb)
		if codebookFactor(m.Type) > 0 {
			checkWidenedDecoded(t, m, tm.deq, ws, ds)
			continue
		}
		for r := 0; r < m.Out; r++ {
			for k := 0; k < m.In; k++ {
				q := int16(uint16(ws[(r*nb+k/32)*64+2*(k%32)]) | uint16(ws[(r*nb+k/32)*64+2*(k%32)+1])<<8)
				v := float64(float32(q) * ds[r*nb+k/32])
				if m.Type == tensor.Q6_K { // (d·sc)·q, a scale per 16
					v = float64(ds[2*(r*nb+k/32)+k%32/16] * float32(q))
				}
				if m.Type == tensor.Q2_K { // (d·sc)·q - dmin·m, both per 16
					i := 2*(r*nb+k/32) + k%32/16
					v = float64(float32(ds[i]*float32(q)) + ds[2*m.Out*nb+i])
				}
				if hasMins(m.Type) && m.Type != tensor.Q2_K { // (d·sc)·q - dmin·m, d·q + m
					v = float64(float32(float32(q)*ds[r*nb+k/32]) + ds[m.Out*nb+r*nb+k/32])
				}
				if m.Type == tensor.I8 {
					v = float64(q) // the shard scales are the caller's
				}
				want := tm.deq[r*m.In+k]
				if m.Type == tensor.I8 {
					want = float64(int8(m.Data[r*rb+k]))
				}
				if v != want {
					t.Fatalf("%v row %d element %d: %g·%g = %g, want %g", m.Type, r, k, float64(q), ds[r*nb+k/32], v, want)
				}
			}
		}
		if active == nil || active.widen == nil {
			continue
		}
		gw, gd := make([]byte, len(ws)), make([]float32, len(ds))
		active.widen[fastKind(m.Type)].call(&gw[0], &gd[0], &m.Data[0], rb, m.Out, nb)
		for i := range ws {
			if gw[i] != ws[i] {
				t.Fatalf("%v: widened byte %d = %#x, want %#x", m.Type, i, gw[i], ws[i])
			}
		}
		for i := range ds {
			if !sameBits(gd[i], ds[i]) {
				t.Fatalf("%v: scale %d = %g, want %g", m.Type, i, gd[i], ds[i])
			}
		}
	}
}

// checkWidenedDecoded checks the widening of a codebook i-quant matrix:
// each block's integers, at most fastWeightMax, times its scale are its
// decoded weights deq exactly, and the level's kernels write the same
// bytes.
func checkWidenedDecoded(t *testing.T, m *Mat, deq []float64, ws []byte, ds []float32) {
	t.Helper()
	nb := m.In / 32
	for r := 0; r < m.Out; r++ {
		for k := 0; k < m.In; k++ {
			o, d := (r*nb+k/32)*64+2*(k%32), ds[r*nb+k/32]
			q := int16(uint16(ws[o]) | uint16(ws[o+1])<<8)
			if v := float32(q) * d; q > fastWeightMax || q < -fastWeightMax || float64(v) != deq[r*m.In+k] {
				t.Fatalf("%v row %d element %d: %d·%g = %g, want %g", m.Type, r, k, q, d, v, deq[r*m.In+k])
			}
		}
	}
	if active == nil || active.quantS16 == 0 {
		return
	}
	rb, _ := m.Type.RowBytes(m.In)
	gw, gd := make([]byte, len(ws)), make([]float32, len(ds))
	active.widenDecoded(gw, gd, make([]float32, m.Out*m.In), m.Data, rb, m.Type, m.Out, nb)
	for i := range ws {
		if gw[i] != ws[i] {
			t.Fatalf("%v: widened byte %d = %#x, want %#x", m.Type, i, gw[i], ws[i])
		}
	}
	for i := 0; i < m.Out*nb; i++ {
		if !sameBits(gd[i], ds[i]) {
			t.Fatalf("%v: scale %d = %g, want %g", m.Type, i, gd[i], ds[i])
		}
	}
}

// TestFastKernelsEqualReference: the fast product with the assembly has
// the bits of its pure-Go twin (fastTileRef), for every tile shape, every
// token count up to several vector groups, and any split of the rows.
func TestFastKernelsEqualReference(t *testing.T) {
	if active == nil || active.fast == nil {
		t.Skip("no fast kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tm := range fastMats(t, rng) {
		m := &tm.m
		for _, n := range []int{1, 2, 8, 9, 15, 16, 17, 24, 33, 40, 48, 70} { // last groups of 1..8 tokens take the ymm kernels
			t.Run(fmt.Sprintf("%v_%dx%d_n%d", m.Type, m.Out, m.In, n), func(t *testing.T) {
				x := randInputs(rng, n, m.In)
				want := make([]float32, n*m.Out)
				matMulFastRef(want, x, n, m, 0, m.Out)
				got := make([]float32, n*m.Out)
				MatMulRowsP(got, x, n, m, 0, m.Out, Fast)
				checkSameBits(t, got, want)
				// Any split of the rows: the same bits.
				clear(got)
				mid := rng.IntN(m.Out + 1)
				MatMulRowsP(got, x, n, m, 0, mid, Fast)
				MatMulRowsP(got, x, n, m, mid, m.Out, Fast)
				checkSameBits(t, got, want)
				// Quantised once, multiplied by ranges of tokens and rows.
				clear(got)
				var q FastActs
				q.Prepare(n, m.In)
				tm := rng.IntN(n + 1)
				q.QuantizeRows(x, tm, n)
				q.QuantizeRows(x, 0, tm)
				for _, tr := range [][2]int{{0, tm}, {tm, n}} {
					MatMulRowsFast(got, &q, tr[0], tr[1], m, 0, mid)
					MatMulRowsFast(got, &q, tr[0], tr[1], m, mid, m.Out)
				}
				q.Release()
				checkSameBits(t, got, want)
				// A slice along the inputs (rows Stride apart) has the
				// bits of the same matrix copied out packed.
				if m.In > 256 && m.Type != tensor.I8 {
					sl, err := m.SliceIn(256, m.In)
					if err != nil {
						t.Fatal(err)
					}
					packed := sl
					packed.Stride = 0
					rb, _ := sl.Type.RowBytes(sl.In)
					packed.Data = nil
					for r := 0; r < sl.Out; r++ {
						packed.Data = append(packed.Data, sl.Data[r*sl.Stride:r*sl.Stride+rb]...)
					}
					xs := x[:0:0]
					for i := 0; i < n; i++ {
						xs = append(xs, x[i*m.In+256:(i+1)*m.In]...)
					}
					g2, w2 := make([]float32, n*sl.Out), make([]float32, n*sl.Out)
					MatMulRowsP(g2, xs, n, &sl, 0, sl.Out, Fast)
					MatMulRowsP(w2, xs, n, &packed, 0, sl.Out, Fast)
					checkSameBits(t, g2, w2)
				}
			})
		}
	}
}

// groupAmax is the max |x| of the activation scale group of element k of
// a token's x (fastScaleBlocks blocks of 32 from x's start).
func groupAmax(x []float32, k int) float64 {
	const g = 32 * fastScaleBlocks
	var a float64
	for _, v := range x[k/g*g : min(len(x), (k/g+1)*g)] {
		a = max(a, math.Abs(float64(v)))
	}
	return a
}

// TestFastSuperBlockBound: Q2_K's and Q3_K's kernels sum a super-block's
// 256 products in int32; at the largest widened weights (45 and 128) and
// quants (32767), all of one sign, the sums still fit, and the fast product
// is the exact one up to float32 rounding.
func TestFastSuperBlockBound(t *testing.T) {
	const out, in, n = 4, 512, 3
	for _, c := range []struct {
		dt  tensor.DType
		blk func(b []byte) // one super-block of the largest widened weights
	}{
		{tensor.Q2_K, func(b []byte) { // scale 15, min 0, quants 3, d 1, dmin 0
			for i := range b[:80] {
				b[i] = 0xff
				if i < 16 {
					b[i] = 0x0f
				}
			}
			b[80], b[81] = 0x00, 0x3c
		}},
		{tensor.Q3_K, func(b []byte) { // scales 0 (-32), quants -4, d 1
			b[108], b[109] = 0x00, 0x3c
		}},
	} {
		rb, _ := c.dt.RowBytes(in)
		m := Mat{Type: c.dt, Out: out, In: in, Data: make([]byte, out*rb)}
		for o := 0; o < len(m.Data); o += c.dt.BlockBytes() {
			c.blk(m.Data[o : o+c.dt.BlockBytes()])
		}
		row := make([]float32, in)
		if err := tensor.DecodeRow(row, c.dt, m.Data[:rb]); err != nil {
			t.Fatal(err)
		}
		x := make([]float32, n*in)
		for i := range x {
			x[i] = 1
		}
		want := 0.0
		for _, w := range row {
			want += float64(w)
		}
		if want != 45*in && want != 128*in {
			t.Fatalf("%v: a row sums to %g: not the largest widened weights", c.dt, want)
		}
		got := make([]float32, n*out)
		MatMulRowsP(got, x, n, &m, 0, out, Fast)
		for i, g := range got {
			if math.Abs(float64(g)-want) > 1e-5*want {
				t.Fatalf("%v: out %d = %g, want %g", c.dt, i, g, want)
			}
		}
	}
}

// TestFastForScaleGrid: an I8 matrix of several shards takes the fast
// path only if its shards are whole scale groups of the activations.
func TestFastForScaleGrid(t *testing.T) {
	for _, c := range []struct {
		in, shards int
		want       bool
	}{{512, 2, true}, {128, 2, false}, {96, 1, true}, {768 * 8, 8, true}, {4096 + 64, 2, false}} {
		m := Mat{Type: tensor.I8, Out: 4, In: c.in, Shards: c.shards}
		if got := fastFor(&m); got != c.want {
			t.Errorf("I8 %d inputs in %d shards: fastFor %v, want %v", c.in, c.shards, got, c.want)
		}
	}
}

func checkSameBits(t *testing.T, got, want []float32) {
	t.Helper()
	for i := range want {
		if !sameBits(got[i], want[i]) {
			t.Fatalf("element %d: %g (%08x), want %g (%08x)", i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// TestFastTokenAloneEqualsInBatch: a token's fast outputs have the same
// bits alone and at any place of a ragged batch, in Go and in assembly.
func TestFastTokenAloneEqualsInBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tm := range fastMats(t, rng) {
		m := &tm.m
		const n = 150 // past one token group (fastTokenGroup)
		x := randInputs(rng, n, m.In)
		for _, impl := range []struct {
			name string
			f    func(dst, x []float32, n int)
		}{
			{"Go", func(dst, x []float32, n int) { matMulFastRef(dst, x, n, m, 0, m.Out) }},
			{"active", func(dst, x []float32, n int) { MatMulRowsP(dst, x, n, m, 0, m.Out, Fast) }},
		} {
			t.Run(fmt.Sprintf("%s_%v_%dx%d", impl.name, m.Type, m.Out, m.In), func(t *testing.T) {
				batch := make([]float32, n*m.Out)
				impl.f(batch, x, n)
				for _, tok := range []int{0, 15, 16, 36, 127, 128, 149} {
					alone := make([]float32, m.Out)
					impl.f(alone, x[tok*m.In:(tok+1)*m.In], 1)
					checkSameBits(t, alone, batch[tok*m.Out:(tok+1)*m.Out])
				}
				// Ragged sub-batches starting at token 5, one across a
				// token group's end.
				for _, k := range []int{20, 140} {
					sub := make([]float32, k*m.Out)
					impl.f(sub, x[5*m.In:(5+k)*m.In], k)
					checkSameBits(t, sub, batch[5*m.Out:(5+k)*m.Out])
				}
			})
		}
	}
}

// TestFastNearExact: the fast product is the exact one up to the 16-bit
// rounding of the activations (d/2 a term, d the block's scale), and
// types without integer weights give the exact path's bits.
func TestFastNearExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	forLevels(t, func(t *testing.T) {
		for _, tm := range fastMats(t, rng) {
			m := &tm.m
			n := 20
			x := randInputs(rng, n, m.In)
			got := make([]float32, n*m.Out)
			MatMulRowsP(got, x, n, m, 0, m.Out, Fast)
			amax := make([]float64, m.In)
			for i := 0; i < n; i++ {
				xi := x[i*m.In : (i+1)*m.In]
				for k := range amax {
					if k%(32*fastScaleBlocks) == 0 {
						amax[k] = groupAmax(xi, k)
					} else {
						amax[k] = amax[k-1]
					}
				}
				for o := 0; o < m.Out; o++ {
					// The quantised activations are within d/2 of x (d
					// = the scale group's max|x|/32767), plus float32
					// sums.
					var s, abs, qerr float64
					for k := 0; k < m.In; k++ {
						p := tm.deq[o*m.In+k] * float64(x[i*m.In+k])
						s += p
						abs += math.Abs(p)
						qerr += math.Abs(tm.deq[o*m.In+k]) * amax[k] / 32767 / 2
					}
					if d := math.Abs(float64(got[i*m.Out+o]) - s); d > qerr+abs*float64(m.In)*0x1p-23 {
						t.Fatalf("%v: out[%d][%d] = %g, want %g (bound %g)", m.Type, i, o, got[i*m.Out+o], s, qerr)
					}
				}
			}
		}
		for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			tm := newTestMat(rng, dt, false, 8, 256, 1, 0)
			x := randInputs(rng, 3, 256)
			got, want := make([]float32, 3*8), make([]float32, 3*8)
			MatMulRowsP(got, x, 3, &tm.m, 0, 8, Fast)
			MatMulRows(want, x, 3, &tm.m, 0, 8)
			checkSameBits(t, got, want)
		}
	})
}

// TestFastStoreKernel: the transposing kernels store (or add, times the
// rows' scales) exactly what fastScatter does, for every row count of a
// block, token ranges that start and end inside a group, and the outputs
// around the block left alone.
func TestFastStoreKernel(t *testing.T) {
	if active == nil || active.store == 0 {
		t.Skip("no fast kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(21, 22))
	const n, Out = 50, 77
	tiles := make([]float32, 4*fastRows*fastLanes)
	sc := make([]float32, Out)
	base := make([]float32, n*Out)
	for _, scaled := range []bool{false, true} {
		for _, tr := range [][2]int{{0, 50}, {0, 1}, {5, 6}, {3, 37}, {16, 32}, {17, 48}, {47, 50}} {
			for rows := 1; rows <= fastRows; rows++ {
				for i := range tiles {
					tiles[i] = float32(rng.NormFloat64())
				}
				for i := range base {
					base[i] = float32(rng.NormFloat64())
				}
				for i := range sc {
					sc[i] = float32(rng.NormFloat64())
				}
				var s []float32
				if scaled {
					s = sc
				}
				p0 := rng.IntN(Out - rows + 1)
				want, got := slices.Clone(base), slices.Clone(base)
				fastScatter(want, tiles, tr[0], tr[1], Out, p0, p0+rows, s)
				active.scatter(got, tiles, tr[0], tr[1], Out, p0, p0+rows, s)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("scaled %v, tokens %v, rows [%d,%d): output %d (token %d, row %d) = %v, want %v", scaled, tr, p0, p0+rows, i, i/Out, i%Out, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestQuantize16Kernel: the SIMD quantiser lays out exactly the bytes of
// quantizeGroup16, including halfway quotients, all-zero, tiny, infinite,
// NaN and huge groups (and blocks of each kind mixed in a group), a
// partial last group, in every lane.
func TestQuantize16Kernel(t *testing.T) {
	if active == nil || active.quant16 == 0 {
		t.Skip("no fast kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	const n, nb = 19, 61
	x := make([]float32, n*nb*32+1)[1:] // unaligned
	for b := 0; b < n*nb; b++ {
		c := b % 9
		if b%nb < 32 {
			c = b / fastScaleBlocks % 9 // a group of one kind
		}
		fillQuantCase(rng, x[b*32:(b+1)*32], c, 32767)
	}
	var want, got FastActs
	want.Prepare(n, nb*32)
	got.Prepare(n, nb*32)
	want.a.quantize(x, nb*32, 0, n, 0)
	got.QuantizeRows(x, 0, n)
	for i := range want.a.buf {
		if want.a.buf[i] != got.a.buf[i] {
			off := i % fastBlock
			t.Fatalf("byte %d (group %d, block %d, offset %d): %#x, want %#x", i, i/want.a.stride(), i%want.a.stride()/fastBlock, off, got.a.buf[i], want.a.buf[i])
		}
	}
	want.Release()
	got.Release()
}

// TestWidenCodebookScales: the codebook i-quants' widening kernels write
// the Go twin's integers and scales for super-blocks whose d is zero,
// infinite or NaN too (all-zero integers), beside ordinary ones.
func TestWidenCodebookScales(t *testing.T) {
	if active == nil || active.widenCB == nil {
		t.Skip("no fast kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(19, 20))
	for _, dt := range fastBlockTypes {
		if codebookFactor(dt) == 0 {
			continue
		}
		const rows, in = 4, 1024
		m := randBlockMat(t, rng, dt, rows, in)
		bb := dt.BlockBytes()
		for i, h := range []uint16{0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x7bff} {
			b := m.Data[(2*i+1)*bb:]
			if dt == tensor.IQ1_M {
				for j := 0; j < 4; j++ {
					b[49+2*j] = b[49+2*j]&0x0f | byte(h>>(4*j)&0xf)<<4
				}
			} else {
				b[0], b[1] = byte(h), byte(h>>8)
			}
		}
		nb := in / 32
		rb, _ := dt.RowBytes(in)
		ws, gw := make([]byte, rows*nb*64), make([]byte, rows*nb*64)
		ds, gd := make([]float32, rows*nb), make([]float32, rows*nb)
		(*kernelSet)(nil).widenDecoded(ws, ds, make([]float32, rows*in), m.Data, rb, dt, rows, nb)
		active.widenDecoded(gw, gd, make([]float32, rows*in), m.Data, rb, dt, rows, nb)
		for i := range ws {
			if gw[i] != ws[i] {
				t.Fatalf("%v: widened byte %d (block %d) = %#x, want %#x", dt, i, i/64, gw[i], ws[i])
			}
		}
		for i := range ds {
			if !sameBits(gd[i], ds[i]) {
				t.Fatalf("%v: scale %d = %g, want %g", dt, i, gd[i], ds[i])
			}
		}
	}
}

// TestQuantizeScaledKernel: the SIMD division of weight blocks by their
// scales writes quantizeScaled's quants: exact multiples, quotients that
// round (halfway ones to even), and zero, infinite and NaN scales.
func TestQuantizeScaledKernel(t *testing.T) {
	if active == nil || active.quantS16 == 0 {
		t.Skip("no fast kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(17, 18))
	const nb = 60
	x := make([]float32, nb*32+1)[1:] // unaligned
	ds := make([]float32, nb)
	for b := range nb {
		d := float32(math.Ldexp(1+rng.Float64(), rng.IntN(40)-20))
		for j := 0; j < 32; j++ {
			x[32*b+j] = d * float32(rng.IntN(4095)-2047)
			if b%6 == 1 {
				x[32*b+j] = d * (float32(rng.IntN(200)-100) + 0.5) // halfway
			}
		}
		switch b % 6 {
		case 2:
			d = 0
		case 3:
			d = float32(math.Inf(1 - 2*rng.IntN(2)))
		case 4:
			d = float32(math.NaN())
		case 5:
			d *= 1.3 // quotients that round
		}
		ds[b] = d
	}
	got := make([]byte, nb*64)
	active.quantS16.call(&x[0], nb, &got[0], &ds[0])
	var q [32]int16
	for b := range nb {
		quantizeScaled(q[:], x[32*b:32*(b+1)], ds[b])
		for j, v := range q {
			if g := int16(uint16(got[64*b+2*j]) | uint16(got[64*b+2*j+1])<<8); g != v {
				t.Fatalf("block %d (case %d) element %d: %d, want %d (x %g, d %g)", b, b%6, j, g, v, x[32*b+j], ds[b])
			}
		}
	}
}

// fillQuantCase fills a block of 32 for the quantisers' tests: random
// values of a random magnitude, then by c: 1 halfway quotients (amax qmax,
// the quantiser's largest quant, values k+0.5), 2 zero, 3 tiny, 4 one
// infinity, 5 one NaN, 6 one MaxFloat32; other c leave it random.
func fillQuantCase(rng *rand.Rand, blk []float32, c, qmax int) {
	scale := math.Pow(10, float64(rng.IntN(20)-10))
	for j := range blk {
		blk[j] = float32(rng.NormFloat64() * scale)
	}
	switch c {
	case 1:
		blk[0] = float32(qmax)
		for j := 1; j < 32; j++ {
			blk[j] = float32(rng.IntN(2*qmax)-qmax) + 0.5
		}
	case 2:
		clear(blk)
	case 3:
		for j := range blk {
			blk[j] *= 1e-37
		}
	case 4:
		blk[rng.IntN(32)] = float32(math.Inf(1 - 2*rng.IntN(2)))
	case 5:
		blk[rng.IntN(32)] = float32(math.NaN())
	case 6:
		blk[rng.IntN(32)] = math.MaxFloat32
	}
}

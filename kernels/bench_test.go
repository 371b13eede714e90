package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/grok-go/grok/tensor"
)

// Benchmarks, single-threaded, every level in one run:
//
//	go test -run XXX -bench 'GEMV|GEMM' -benchtime 20x ./kernels/
//
// GEMV (decode, one token) reports the weight bytes streamed per second;
// the matrices rotate through more memory than any last-level cache, so
// this is the memory-bound figure. GEMM (prefill, 128 tokens) reports
// GFLOP/s (2·n·Out·In per product).

func benchLevels(b *testing.B, f func(b *testing.B)) {
	for i := range levels {
		b.Run(levelName(i), func(b *testing.B) {
			defer useLevel(i)()
			f(b)
		})
	}
}

type benchCase struct {
	name   string
	dt     tensor.DType
	inOut  bool
	shards int
	exact  bool // ExactQuant
}

var benchCases = []benchCase{
	{name: "F32", dt: tensor.F32},
	{name: "F16", dt: tensor.F16},
	{name: "BF16", dt: tensor.BF16},
	{name: "Q8_0", dt: tensor.Q8_0},
	{name: "Q8_0exact", dt: tensor.Q8_0, exact: true},
	{name: "I8", dt: tensor.I8, shards: 8},
	{name: "I8inout", dt: tensor.I8, inOut: true, shards: 8},
	{name: "F32inout", dt: tensor.F32, inOut: true},
}

// benchMats returns enough copies of one random out×in matrix to cover
// total bytes, each copy in its own memory.
func benchMats(c benchCase, out, in, total int) []Mat {
	rng := rand.New(rand.NewPCG(1, 1))
	tm := newTestMat(rng, c.dt, c.inOut, out, in, max(c.shards, 1), 0)
	if c.shards == 0 {
		tm.m.Shards = 0
	}
	mats := []Mat{tm.m}
	for len(mats)*len(tm.m.Data) < total {
		m := tm.m
		m.Data = append([]byte(nil), m.Data...)
		mats = append(mats, m)
	}
	return mats
}

func BenchmarkGEMV(b *testing.B) {
	const out, in = 4096, 4096
	for _, c := range benchCases {
		mats := benchMats(c, out, in, 512<<20)
		x := randInputs(rand.New(rand.NewPCG(2, 2)), 1, in)
		dst := make([]float32, out)
		b.Run(c.name, func(b *testing.B) {
			defer setExactQuant(c.exact)()
			benchLevels(b, func(b *testing.B) {
				b.SetBytes(int64(len(mats[0].Data)))
				for i := 0; b.Loop(); i++ {
					MatMul(dst, x, 1, &mats[i%len(mats)])
				}
			})
		})
	}
}

func BenchmarkGEMM(b *testing.B) {
	// The medium model's expert up-projection: emb 1536 → ffn 4096.
	const n, out, in = 128, 4096, 1536
	for _, c := range benchCases {
		mats := benchMats(c, out, in, 0)
		x := randInputs(rand.New(rand.NewPCG(2, 2)), n, in)
		dst := make([]float32, n*out)
		b.Run(c.name, func(b *testing.B) {
			defer setExactQuant(c.exact)()
			benchLevels(b, func(b *testing.B) {
				start := time.Now()
				for b.Loop() {
					MatMul(dst, x, n, &mats[0])
				}
				b.ReportMetric(2*n*out*in*float64(b.N)/time.Since(start).Seconds()/1e9, "GFLOP/s")
			})
		})
	}
}

// BenchmarkGEMVSmallBatch covers decode with a few sequences (n = 2..8).
func BenchmarkGEMVBatch(b *testing.B) {
	const out, in = 4096, 4096
	for _, c := range benchCases[:4] {
		mats := benchMats(c, out, in, 512<<20)
		for _, n := range []int{2, 4, 8} {
			x := randInputs(rand.New(rand.NewPCG(2, 2)), n, in)
			dst := make([]float32, n*out)
			b.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(b *testing.B) {
				benchLevels(b, func(b *testing.B) {
					b.SetBytes(int64(len(mats[0].Data)))
					for i := 0; b.Loop(); i++ {
						MatMul(dst, x, n, &mats[i%len(mats)])
					}
				})
			})
		}
	}
}

// BenchmarkStreamRead is the roofline for GEMV: one core reading 512 MiB
// once (Dot of a vector with itself: the second operand hits L1).
func BenchmarkStreamRead(b *testing.B) {
	a := make([]float32, 128<<20)
	for i := range a {
		a[i] = 1
	}
	benchLevels(b, func(b *testing.B) {
		if levels[len(levels)-1] != active {
			b.Skip("roofline: best level only")
		}
		b.SetBytes(int64(4 * len(a)))
		for b.Loop() {
			Dot(a, a)
		}
	})
}

// BenchmarkVec covers the vector functions over one attention row of 4096
// scores (a long context) at every level, in bytes of the row per second.
func BenchmarkVec(b *testing.B) {
	x := randInputs(rand.New(rand.NewPCG(3, 3)), 1, 4096)
	y := randInputs(rand.New(rand.NewPCG(4, 4)), 1, 4096)
	buf := make([]float32, len(x))
	for _, f := range []struct {
		name string
		run  func()
	}{
		{"Softcap", func() { Softcap(buf, 0.088, 30) }},
		{"Softmax", func() { Softmax(buf) }},
		{"GeluMul", func() { GeluMul(buf, buf, y) }},
		{"Axpy", func() { Axpy(buf, 0.5, y) }},
	} {
		b.Run(f.name, func(b *testing.B) {
			benchLevels(b, func(b *testing.B) {
				b.SetBytes(int64(4 * len(x)))
				for b.Loop() {
					copy(buf, x)
					f.run()
				}
			})
		})
	}
}

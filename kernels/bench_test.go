package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

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

// benchBlocks returns nb random blocks of dt with moderate fp16 scales
// (random ones are sometimes NaN or Inf, and the products' speed should not
// depend on it).
func benchBlocks(rng *rand.Rand, dt tensor.DType, nb int) []byte {
	bb := dt.BlockBytes()
	src := make([]byte, nb*bb)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	for _, c := range dqTypes {
		if c.dt != dt {
			continue
		}
		for b := 0; b < nb; b++ {
			for _, o := range c.scales {
				h := uint16(0x1000 + rng.IntN(0x2000))
				src[b*bb+o], src[b*bb+o+1] = byte(h), byte(h>>8)
			}
		}
	}
	return src
}

// BenchmarkDequant decodes spans of dotSpan elements, as dequantMatMul
// does, from 32 rows that stay in L2, one thread, in weight bytes per
// second:
//
//	go test -run XXX -bench Dequant ./kernels/
func BenchmarkDequant(b *testing.B) {
	for _, c := range dqTypes {
		const rows = 32
		nb := dotSpan / c.dt.BlockSize()
		rb := nb * c.dt.BlockBytes()
		src := benchBlocks(rand.New(rand.NewPCG(1, 2)), c.dt, rows*nb)
		dst := make([]float32, dotSpan)
		b.Run(c.dt.String(), func(b *testing.B) {
			benchLevels(b, func(b *testing.B) {
				b.SetBytes(int64(rb))
				for i := 0; b.Loop(); i++ {
					r := i % rows
					active.decodeBlocks(dst, c.dt, src[r*rb:(r+1)*rb])
				}
			})
		})
	}
}

// BenchmarkGEMVDecode is a decode step's products at the medium model's
// shapes (4096×1536 up, 1536×4096 down), one token, the rows split over
// two goroutines, in weight bytes per second; the matrices rotate through
// 256 MiB. "read" is two goroutines reading the same bytes (Dot), the
// roofline of the same run:
//
//	go test -run XXX -bench GEMVDecode -benchtime 200x ./kernels/
func BenchmarkGEMVDecode(b *testing.B) {
	types := []tensor.DType{tensor.Q4_K, tensor.Q6_K, tensor.Q5_K, tensor.Q4_0, tensor.Q2_K, tensor.Q3_K,
		tensor.Q5_0, tensor.Q4_1, tensor.Q5_1, tensor.IQ4_XS, tensor.IQ4_NL, tensor.Q8_0,
		tensor.IQ3_S, tensor.IQ3_XXS, tensor.IQ2_XXS, tensor.IQ2_XS, tensor.IQ2_S, tensor.IQ1_S, tensor.IQ1_M}
	for _, shape := range []struct{ out, in int }{{4096, 1536}, {1536, 4096}, {2048, 6144}, {512, 32768}} {
		for _, dt := range types {
			name := fmt.Sprintf("%dx%d/%v", shape.out, shape.in, dt)
			rb, _ := dt.RowBytes(shape.in)
			one := benchBlocks(rand.New(rand.NewPCG(3, 4)), dt, shape.out*rb/dt.BlockBytes())
			var mats []Mat
			for len(mats)*len(one) < 256<<20 {
				mats = append(mats, Mat{Type: dt, Out: shape.out, In: shape.in, Data: append([]byte(nil), one...)})
			}
			x := randInputs(rand.New(rand.NewPCG(2, 2)), 1, shape.in)
			dst := make([]float32, shape.out)
			two := func(f func(half int)) {
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { defer wg.Done(); f(1) }()
				f(0)
				wg.Wait()
			}
			b.Run(name+"/read", func(b *testing.B) {
				b.SetBytes(int64(len(one)))
				for i := 0; b.Loop(); i++ {
					d := mats[i%len(mats)].Data
					v := unsafe.Slice((*float32)(unsafe.Pointer(&d[0])), len(d)/4)
					two(func(h int) { Dot(v[h*len(v)/2:(h+1)*len(v)/2], v[:len(v)/2]) })
				}
			})
			b.Run(name, func(b *testing.B) {
				benchLevels(b, func(b *testing.B) {
					b.SetBytes(int64(len(one)))
					for i := 0; b.Loop(); i++ {
						m := &mats[i%len(mats)]
						two(func(h int) { MatMulRows(dst, x, 1, m, h*shape.out/2, (h+1)*shape.out/2) })
					}
				})
			})
			mats = nil
		}
	}
}

// BenchmarkDecodeL2 is a one-token product of 64 rows of 2048 elements
// that stay in L2, one thread, in weight bytes per second: the kernels'
// compute bound, fused and two-pass, without the memory stream, at every
// level:
//
//	go test -run XXX -bench DecodeL2 ./kernels/
func BenchmarkDecodeL2(b *testing.B) {
	const out, in = 64, dotSpan
	for _, c := range dqTypes {
		rb, _ := c.dt.RowBytes(in)
		m := Mat{Type: c.dt, Out: out, In: in, Data: benchBlocks(rand.New(rand.NewPCG(5, 6)), c.dt, out*rb/c.dt.BlockBytes())}
		x := randInputs(rand.New(rand.NewPCG(2, 2)), 1, in)
		dst := make([]float32, out)
		for _, fused := range []bool{true, false} {
			b.Run(fmt.Sprintf("%v/fused=%v", c.dt, fused), func(b *testing.B) {
				benchLevels(b, func(b *testing.B) {
					defer func(v bool) { noFused = v }(noFused)
					noFused = !fused
					b.SetBytes(int64(len(m.Data)))
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					c0 := threadCPU()
					for b.Loop() {
						MatMul(dst, x, 1, &m)
					}
					// The thread's CPU time too: a shared machine's wall
					// time says little about a loop in L2.
					b.ReportMetric(float64(len(m.Data))*float64(b.N)/(threadCPU()-c0).Seconds()/1e9, "GB/s-cpu")
				})
			})
		}
	}
}

// BenchmarkGEMMPrecision compares Exact and Fast prefill products on the
// active kernels: the medium model's expert (n 128, 4096×1536), a
// real-shape expert's share of a 64-token prompt (n 16, 32768 rows cut to
// 2048 × 6144), and of a 256-token one with its weights read from memory
// (n 64, copies of the matrix filling 512 MiB, one after another).
func BenchmarkGEMMPrecision(b *testing.B) {
	for _, s := range []struct {
		name       string
		n, out, in int
		total      int
	}{{"medium", 128, 4096, 1536, 0}, {"grok1", 16, 2048, 6144, 0}, {"grok1-memory", 64, 2048, 6144, 512 << 20}} {
		for _, c := range []benchCase{{name: "Q8_0", dt: tensor.Q8_0}, {name: "I8", dt: tensor.I8, shards: 1}} {
			mats := benchMats(c, s.out, s.in, s.total)
			x := randInputs(rand.New(rand.NewPCG(2, 2)), s.n, s.in)
			dst := make([]float32, s.n*s.out)
			for _, p := range []Precision{Exact, Fast} {
				b.Run(s.name+"/"+c.name+"/"+p.String(), func(b *testing.B) {
					start := time.Now()
					for i := 0; b.Loop(); i++ {
						MatMulRowsP(dst, x, s.n, &mats[i%len(mats)], 0, s.out, p)
					}
					b.ReportMetric(2*float64(s.n*s.out*s.in)*float64(b.N)/time.Since(start).Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

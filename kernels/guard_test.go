//go:build linux

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"

	"github.com/grok-go/grok/tensor"
)

// guarded returns a copy of b that ends exactly where an inaccessible page
// begins, and the function that unmaps it. A kernel that loads a byte past
// the end faults (the test process dies), as it would past the end of a
// mapped model file. Prefetches past the end do not fault, and may happen.
func guarded(t *testing.T, b []byte) ([]byte, func()) {
	t.Helper()
	page := syscall.Getpagesize()
	pages := (len(b)+page-1)/page + 1
	m, err := syscall.Mmap(-1, 0, pages*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	if err := syscall.Mprotect(m[(pages-1)*page:], syscall.PROT_NONE); err != nil {
		t.Fatalf("mprotect: %v", err)
	}
	g := m[(pages-1)*page-len(b) : (pages-1)*page]
	copy(g, b)
	return g, func() { syscall.Munmap(m) }
}

// Every kernel level reads a matrix's weights, and a token's activations,
// without touching a byte past their ends: the decode kernels load the next
// step's weights ahead of the arithmetic, and must stop at the last step.
// The weights end at a guard page, and so does x; the products still equal
// their definition.
func TestKernelsStayInBounds(t *testing.T) {
	cases := []struct {
		dt      tensor.DType
		inOut   bool
		out, in int
		shards  int
	}{
		{dt: tensor.F32, out: 9, in: 64},
		{dt: tensor.F32, out: 13, in: 1000},
		{dt: tensor.F16, out: 9, in: 64},
		{dt: tensor.F16, out: 7, in: 1030},
		{dt: tensor.BF16, out: 5, in: 96},
		{dt: tensor.Q8_0, out: 9, in: 64},
		{dt: tensor.Q8_0, out: 6, in: 32 * 37},
		{dt: tensor.I8, out: 8, in: 256, shards: 2},
		{dt: tensor.I8, inOut: true, out: 100, in: 600, shards: 1},
		{dt: tensor.F16, inOut: true, out: 70, in: 300},
	}
	for _, exact := range []bool{true, false} {
		restore := setExactQuant(exact)
		forLevels(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 7))
			for _, c := range cases {
				for _, n := range []int{1, 2, 3, 13} { // 13: past every T, so a prefill's full tiles (pre) run too
					t.Run(fmt.Sprintf("exact=%v/%v-inOut=%v-%dx%d-n=%d", exact, c.dt, c.inOut, c.out, c.in, n), func(t *testing.T) {
						tm := newTestMat(rng, c.dt, c.inOut, c.out, c.in, max(c.shards, 1), 0)
						data, free := guarded(t, tm.m.Data)
						defer free()
						tm.m.Data = data
						xs := randInputs(rng, n, c.in)
						xb, freeX := guarded(t, unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 4*len(xs)))
						defer freeX()
						x := unsafe.Slice((*float32)(unsafe.Pointer(&xb[0])), len(xs))
						got := make([]float32, n*c.out)
						MatMul(got, x, n, &tm.m)
						if exact || !(c.dt == tensor.Q8_0 || c.dt == tensor.I8 && !c.inOut) {
							checkDefinition(t, tm, x, got, n)
						}
					})
				}
			}
		})
		restore()
	}
}

// The dequantisers read no byte past the last block they are given, and
// neither does a product of a matrix of their types whose data ends at a
// guard page.
func TestDequantKernelsStayInBounds(t *testing.T) {
	forLevels(t, func(t *testing.T) {
		ks := active
		rng := rand.New(rand.NewPCG(9, 9))
		for _, c := range dqTypes {
			if ks != nil {
				for nb := 1; nb <= 3; nb++ {
					src, free := guarded(t, randDQBlocks(rng, c.dt, c.scales, nb))
					checkDequant(t, ks, c.dt, src)
					free()
				}
			}
			in := 2 * max(c.dt.BlockSize(), 32)
			m := randBlockMat(t, rng, c.dt, 5, in)
			ref := f32OfDecoded(t, &m)
			data, free := guarded(t, m.Data)
			m.Data = data
			x := randInputs(rng, 1, in)
			got, want := make([]float32, 5), make([]float32, 5)
			MatMul(got, x, 1, &m)
			MatMul(want, x, 1, &ref)
			free()
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v: element %d is %g, the F32 matrix gives %g", c.dt, i, got[i], want[i])
				}
			}
		}
	})
}

// The fused kernels read no byte past a matrix's last block, nor past the
// activations of the last token, for every n they serve: both end at a
// guard page.
func TestFusedKernelsStayInBounds(t *testing.T) {
	defer func(v bool) { fusedPastN = v }(fusedPastN)
	fusedPastN = true // past N too, whatever this CPU's L1
	forLevels(t, func(t *testing.T) {
		ks := active
		if ks == nil {
			t.Skip("no fused kernels in pure Go")
		}
		rng := rand.New(rand.NewPCG(10, 10))
		for _, c := range dqTypes {
			fam := ks.fusedFamily(c.dt)
			if fam == nil {
				continue
			}
			in := 3 * max(c.dt.BlockSize(), 32)
			// A whole tile last (its last row's end at the guard), and
			// a tile then a single row.
			for _, out := range []int{fam.R, fam.R + 1} {
				m := randBlockMat(t, rng, c.dt, out, in)
				ref := f32OfDecoded(t, &m)
				data, free := guarded(t, m.Data)
				m.Data = data
				ns := []int{}
				for n := 1; n <= fam.T; n++ {
					ns = append(ns, n)
				}
				if fam.tab != nil {
					ns = append(ns, fam.N+1) // the kernels that read tables (fusedTables)
				}
				for _, n := range ns {
					xs := randInputs(rng, n, in)
					xb, freeX := guarded(t, unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 4*len(xs)))
					x := unsafe.Slice((*float32)(unsafe.Pointer(&xb[0])), len(xs))
					got, want := make([]float32, out*n), make([]float32, out*n)
					ks.dequantMatMul(got, x, n, &m, 0, out)
					MatMul(want, x, n, &ref)
					freeX()
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %d rows n=%d: element %d is %g, the F32 matrix gives %g", c.dt, out, n, i, got[i], want[i])
						}
					}
				}
				free()
			}
		}
	})
}

// The fast precision's widening and quantising kernels read no byte past
// a matrix's last block, nor past the activations of the last token: both
// end at a guard page, and the products keep their twin's bits.
func TestFastKernelsStayInBounds(t *testing.T) {
	if active == nil || active.fast == nil {
		t.Skip("no fast kernels on this machine")
	}
	rng := rand.New(rand.NewPCG(12, 12))
	for _, tm := range fastMats(t, rng) {
		m := tm.m
		data, free := guarded(t, m.Data)
		m.Data = data
		for _, n := range []int{1, 17} {
			xs := randInputs(rng, n, m.In)
			xb, freeX := guarded(t, unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 4*len(xs)))
			x := unsafe.Slice((*float32)(unsafe.Pointer(&xb[0])), len(xs))
			got, want := make([]float32, n*m.Out), make([]float32, n*m.Out)
			MatMulRowsP(got, x, n, &m, 0, m.Out, Fast)
			matMulFastRef(want, x, n, &m, 0, m.Out)
			freeX()
			checkSameBits(t, got, want)
		}
		free()
	}
}

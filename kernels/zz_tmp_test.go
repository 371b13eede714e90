package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

func BenchmarkInOutSplit(b *testing.B) {
	for _, sh := range [][2]int{{4096, 1536}, {1536, 4096}} {
		out, in := sh[0], sh[1]
		c := benchCases[6] // I8inout, 8 shards
		mats := benchMats(c, out, in, 1024<<20)
		x := randInputs(rand.New(rand.NewPCG(2, 2)), 1, in)
		dst := make([]float32, out)
		for _, q := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("%dx%d/cols%d", out, in, q), func(b *testing.B) {
				b.SetBytes(int64(len(mats[0].Data)))
				var wg sync.WaitGroup
				for i := 0; b.Loop(); i++ {
					m := &mats[i%len(mats)]
					wg.Add(2)
					for h := 0; h < 2; h++ {
						go func(h int) {
							defer wg.Done()
							for j := 0; j < q; j++ {
								r := h*q + j
								MatMulRows(dst, x, 1, m, r*out/(2*q)/16*16, (r+1)*out/(2*q)/16*16)
							}
						}(h)
					}
					wg.Wait()
				}
			})
		}
	}
}

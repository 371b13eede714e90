package kernels

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

func BenchmarkGEMV2(b *testing.B) {
	for _, c := range []benchCase{benchCases[0], benchCases[1]} {
		for _, sh := range [][2]int{{4096, 1536}, {1536, 4096}} {
			out, in := sh[0], sh[1]
			mats := benchMats(c, out, in, 1024<<20)
			x := randInputs(rand.New(rand.NewPCG(2, 2)), 1, in)
			dst := make([]float32, out)
			for _, th := range []int{2} {
				b.Run(fmt.Sprintf("%s/%dx%d/th%d", c.name, out, in, th), func(b *testing.B) {
					b.SetBytes(int64(len(mats[0].Data)))
					var wg sync.WaitGroup
					for i := 0; b.Loop(); i++ {
						m := &mats[i%len(mats)]
						wg.Add(th)
						for h := 0; h < th; h++ {
							go func(h int) {
								MatMulRows(dst, x, 1, m, h*out/th/16*16, (h+1)*out/th/16*16)
								wg.Done()
							}(h)
						}
						wg.Wait()
					}
				})
			}
		}
	}
}

package comm

import (
	"strconv"
	"sync"
	"testing"
)

// BenchmarkLocalAllReduceSum times one AllReduceSum on a 2-rank
// in-process group: of 16 floats (the barriers alone), and of one token's
// row of Grok-1 (6144 floats) and Grok-2 (8192).
func BenchmarkLocalAllReduceSum(b *testing.B) {
	for _, n := range []int{16, 6144, 8192} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			cs, _ := NewLocal(2)
			var wg sync.WaitGroup
			bufs := [][]float32{make([]float32, n), make([]float32, n)}
			b.ResetTimer()
			for r := range cs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N; i++ {
						if err := cs[r].AllReduceSum(bufs[r]); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkLocalAllGather times the logits' gather of a 2-rank group for
// Grok-1's vocabulary (65536 floats a rank).
func BenchmarkLocalAllGather(b *testing.B) {
	cs, _ := NewLocal(2)
	const n = 65536
	var wg sync.WaitGroup
	for r := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, dst := make([]float32, n), make([]float32, 2*n)
			for i := 0; i < b.N; i++ {
				if err := cs[r].AllGather(dst, src); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

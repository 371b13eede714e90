package comm

import (
	"strconv"
	"sync"
	"testing"
)

// BenchmarkLocalAllReduceSum times one AllReduceSum of a Grok-1 row (6144
// floats) on a 2-rank in-process group: the in-process collective latency.
func BenchmarkLocalAllReduceSum(b *testing.B) {
	for _, n := range []int{16, 6144} {
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

package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// What attention reads back from the pages is exactly the stored row
// decoded: tensor.EncodeRow's rounding to the cache type, then
// tensor.DecodeRow. attendGroup is float32 attention over what it reads,
// so attention over any cache type is float32 attention over the
// dequantised stored values.
func TestKVGatherDecodesStoredRows(t *testing.T) {
	c := Config{NumLayers: 2, NumKVHeads: 3, KeySize: 64, SequenceLen: 70}
	rng := rand.New(rand.NewPCG(9, 9))
	for _, ty := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0} {
		m, err := NewPagedKVMemory(&c, KVOptions{Slots: 2, KType: ty, VType: ty})
		if err != nil {
			t.Fatal(err)
		}
		const n = 53
		for s := 0; s < 2; s++ {
			m.prepare(s, n)
		}
		want := map[[4]int][]float32{} // layer, slot, head, row|kind<<16
		for l := 0; l < 2; l++ {
			for s := 0; s < 2; s++ {
				for h := 0; h < 3; h++ {
					for r := 0; r < n; r++ {
						k, v := make([]float32, 64), make([]float32, 64)
						for i := range k {
							k[i], v[i] = float32(rng.NormFloat64()*3), float32(rng.NormFloat64())
						}
						m.write(l, s, h, r, k, v)
						for kind, x := range [][]float32{k, v} {
							b, _ := tensor.EncodeRow(nil, ty, x)
							d := make([]float32, 64)
							if err := tensor.DecodeRow(d, ty, b); err != nil {
								t.Fatal(err)
							}
							want[[4]int{l, s, h, r | kind<<16}] = d
						}
					}
				}
			}
		}
		km, vm, ok := make([]float32, n*64), make([]float32, n*64), make([]bool, n)
		for l := 0; l < 2; l++ {
			for s := 0; s < 2; s++ {
				for h := 0; h < 3; h++ {
					m.gather(l, s, h, n, km, vm, ok)
					for r := 0; r < n; r++ {
						for i := 0; i < 64; i++ {
							wk, wv := want[[4]int{l, s, h, r}][i], want[[4]int{l, s, h, r | 1<<16}][i]
							if math.Float32bits(km[r*64+i]) != math.Float32bits(wk) || math.Float32bits(vm[r*64+i]) != math.Float32bits(wv) {
								t.Fatalf("%v: layer %d slot %d head %d row %d [%d]: read %g, %g; stored %g, %g", ty, l, s, h, r, i, km[r*64+i], vm[r*64+i], wk, wv)
							}
						}
					}
				}
			}
		}
	}
}

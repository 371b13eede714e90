package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grok-go/grok/kernels"
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

// Scores computed from the keys in their pages (pageScores, for the types
// directKeys allows) are the bits of the float32 product over the decoded
// keys, at every kernel level: decoding steps may take either path.
func TestKVDirectScoresEqualGathered(t *testing.T) {
	defer kernels.SetVariant(kernels.Variant())
	rng := rand.New(rand.NewPCG(11, 11))
	for _, level := range kernels.Variants() {
		if err := kernels.SetVariant(level); err != nil {
			t.Fatal(err)
		}
		for _, ty := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
			for _, K := range []int{32, 128} {
				c := Config{NumLayers: 1, NumKVHeads: 2, KeySize: K, SequenceLen: 64}
				m, err := NewPagedKVMemory(&c, KVOptions{Slots: 1, KType: ty, VType: ty})
				if err != nil {
					t.Fatal(err)
				}
				if !m.directKeys() {
					t.Fatalf("%v keys are not direct", ty)
				}
				const n = 37
				m.prepare(0, n)
				for h := 0; h < 2; h++ {
					for r := 0; r < n; r++ {
						k := make([]float32, K)
						for i := range k {
							k[i] = float32(rng.NormFloat64() * 2)
						}
						m.write(0, 0, h, r, k, k)
					}
				}
				km, vm, ok := make([]float32, n*K), make([]float32, n*K), make([]bool, n)
				for _, G := range []int{1, 4, 6} {
					for _, rows := range []int{1, 16, 17, n} {
						q := make([]float32, G*K)
						for i := range q {
							q[i] = float32(rng.NormFloat64())
						}
						direct, want := make([]float32, G*rows), make([]float32, G*rows)
						m.pageScores(0, 0, 1, rows, q, G, direct, make([]float32, G*PageRows))
						m.gather(0, 0, 1, rows, km, vm, ok)
						keys := kernels.F32Mat(km[:rows*K], rows, K, false)
						kernels.MatMulRows(want, q, G, &keys, 0, rows)
						for i := range want {
							if math.Float32bits(direct[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s %v K=%d G=%d rows=%d: score %d is %g from the pages, %g decoded", level, ty, K, G, rows, i, direct[i], want[i])
							}
						}
					}
				}
			}
		}
	}
	m, _ := NewPagedKVMemory(&Config{NumLayers: 1, NumKVHeads: 1, KeySize: 32, SequenceLen: 16}, KVOptions{Slots: 1, KType: tensor.Q8_0})
	if m.directKeys() {
		t.Error("q8_0 keys are direct, but their kernels round otherwise")
	}
}

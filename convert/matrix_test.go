package convert

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// rows reads every element type in both layouts, including int8 with
// per-shard scales and experts, as the canonical [out, in] rows.
func TestMatrixRows(t *testing.T) {
	const E, out, in, S = 2, 5, 64, 2
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.I8, tensor.Q8_0} {
		for _, inOut := range []bool{false, true} {
			if typ == tensor.Q8_0 && inOut {
				continue
			}
			// want[e][o][i]: the canonical values.
			want := make([]float32, E*out*in)
			scales := make([]float32, E*S*out)
			for i := range scales {
				scales[i] = tensor.BF16ToFloat(tensor.FloatToBF16(float32(rng.Float64()) + 0.01))
			}
			q := make([]int8, len(want))
			for i := range want {
				if typ == tensor.I8 {
					e, o, r := i/(out*in), (i/in)%out, i%in
					q[i] = int8(rng.IntN(255) - 127)
					want[i] = float32(q[i]) * scales[(e*S+r/(in/S))*out+o]
				} else {
					want[i] = float32(rng.NormFloat64())
				}
			}
			if typ != tensor.I8 { // the values the type can hold
				enc, _ := tensor.EncodeRow(nil, typ, want)
				tensor.DecodeRow(want, typ, enc)
			}
			// The stored layout.
			stored := want
			shape := []int{E, out, in}
			if inOut {
				stored = make([]float32, len(want))
				for e := 0; e < E; e++ {
					for o := 0; o < out; o++ {
						for r := 0; r < in; r++ {
							stored[(e*in+r)*out+o] = want[(e*out+o)*in+r]
						}
					}
				}
				shape = []int{E, in, out}
			}
			src := &tensor.Tensor{Name: "w", Type: typ, Shape: shape, Transposed: inOut}
			if typ == tensor.I8 {
				for i := range stored {
					idx := i
					if inOut {
						e, r, o := i/(in*out), (i/out)%in, i%out
						idx = (e*out+o)*in + r
					}
					src.Data = append(src.Data, byte(q[idx]))
				}
				sd, _ := tensor.EncodeRow(nil, tensor.BF16, scales)
				src.Scales = &tensor.Tensor{Name: "s", Type: tensor.BF16, Shape: []int{E, S, out}, Data: sd}
			} else {
				src.Data, _ = tensor.EncodeRow(nil, typ, stored)
			}
			ms, err := matricesOf(src, E, out, in)
			if err != nil {
				t.Fatalf("%v inOut=%v: %v", typ, inOut, err)
			}
			for e, m := range ms {
				if err := m.loadScales(); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, 3*in)
				raw := make([]byte, 3*in*4)
				if err := m.rows(got, raw, 2, 3); err != nil {
					t.Fatal(err)
				}
				if w := want[(e*out+2)*in : (e*out+5)*in]; !slices.Equal(got, w) {
					t.Errorf("%v inOut=%v expert %d: rows 2..4 differ", typ, inOut, e)
				}
				if typ == tensor.I8 {
					if ok, why := m.exactQ8(); !ok {
						t.Fatalf("exactQ8: %s", why)
					}
					blocks := m.q8Rows(nil, raw, 0, out)
					dec := make([]float32, out*in)
					tensor.DecodeRow(dec, tensor.Q8_0, blocks)
					if !slices.Equal(dec, want[e*out*in:(e+1)*out*in]) {
						t.Errorf("inOut=%v expert %d: Q8_0 blocks do not hold the int8 × scale values", inOut, e)
					}
				}
			}
		}
	}
}

func TestMatricesOfErrors(t *testing.T) {
	f32 := func(shape ...int) *tensor.Tensor {
		n, _ := tensor.Elements(shape)
		return &tensor.Tensor{Name: "w", Type: tensor.F32, Shape: shape, Data: make([]byte, 4*n)}
	}
	i8 := &tensor.Tensor{Name: "q", Type: tensor.I8, Shape: []int{64, 4}, Data: make([]byte, 256), Transposed: true}
	for _, tc := range []struct {
		t       *tensor.Tensor
		count   int
		out, in int
	}{
		{f32(4, 64), 1, 64, 4},    // transposed shape without Transposed
		{f32(2, 4, 64), 3, 4, 64}, // wrong expert count
		{&tensor.Tensor{Name: "short", Type: tensor.F32, Shape: []int{4, 64}, Data: make([]byte, 8)}, 1, 4, 64},
		{i8, 1, 4, 64}, // int8 without scales
		{&tensor.Tensor{Name: "q8t", Type: tensor.Q8_0, Shape: []int{64, 32}, Data: make([]byte, 64*34), Transposed: true}, 1, 32, 64},
	} {
		if _, err := matricesOf(tc.t, tc.count, tc.out, tc.in); err == nil {
			t.Errorf("%s %v: accepted", tc.t.Name, tc.t.Shape)
		}
	}
	i8.Scales = &tensor.Tensor{Name: "s", Type: tensor.BF16, Shape: []int{3, 4}, Data: make([]byte, 24)}
	if _, err := matricesOf(i8, 1, 4, 64); err == nil {
		t.Error("3 scale shards of 64 rows accepted")
	}
}

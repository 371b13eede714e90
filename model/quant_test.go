package model_test

import (
	"github.com/grok-go/grok/internal/testmodel"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// convert re-encodes every matrix of src (2-D and 3-D tensors other than the
// router) with enc, leaving norms and the router in F32 as llama.cpp does.
func convert(t *testing.T, src testmodel.Source, enc func(name string, w *tensor.Tensor) *tensor.Tensor) testmodel.Source {
	t.Helper()
	out := testmodel.Source{}
	for k, v := range src {
		if len(v.Shape) >= 2 && !contains(k, "ffn_gate_inp") {
			out[k] = enc(k, v)
		} else {
			out[k] = v
		}
	}
	return out
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func reencode(dt tensor.DType) func(string, *tensor.Tensor) *tensor.Tensor {
	return func(name string, w *tensor.Tensor) *tensor.Tensor {
		f, _ := w.Float32s()
		data, err := tensor.EncodeRow(nil, dt, f)
		if err != nil {
			panic(err)
		}
		return &tensor.Tensor{Name: name, Type: dt, Shape: w.Shape, Data: data}
	}
}

// Q8_0, F16 and BF16 weights give logits close to F32's: the error is the
// weights' rounding, nothing more.
func TestLowPrecisionCloseToF32(t *testing.T) {
	c := testmodel.SmallConfig()
	src := testmodel.Random(c, 21)
	toks := []int{7, 8, 9, 10, 11, 12, 13, 14}
	want, _ := testmodel.FullLogits(mustModel(t, c, src), toks)
	for _, tc := range []struct {
		dt  tensor.DType
		tol float64
	}{{tensor.F16, 0.02}, {tensor.BF16, 0.2}, {tensor.Q8_0, 0.2}} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			got, err := testmodel.FullLogits(mustModel(t, c, convert(t, src, reencode(tc.dt))), toks)
			if err != nil {
				t.Fatal(err)
			}
			d := testmodel.MaxAbsDiff(got, want)
			if d > tc.tol || d == 0 {
				t.Errorf("%v vs F32: max |Δ| = %g (want 0 < Δ ≤ %g)", tc.dt, d, tc.tol)
			}
		})
	}
}

// quantize8bit makes xAI's QuantizedWeight8bit from a [.., out, in] F32
// tensor: int8 weight in Haiku's [in, out] layout with per-shard,
// per-output-column bf16 scales; it also returns the exactly dequantised
// matrix in the same transposed layout, as F32.
func quantize8bit(rng *rand.Rand, name string, w *tensor.Tensor, shards int) (q, deq *tensor.Tensor) {
	f, _ := w.Float32s()
	sh := w.Shape
	E, out, in := 1, sh[len(sh)-2], sh[len(sh)-1]
	if len(sh) == 3 {
		E = sh[0]
	}
	if in%shards != 0 {
		shards = 1
	}
	blk := in / shards
	i8 := make([]byte, E*in*out)
	sc := make([]uint16, E*shards*out)
	dq := make([]float32, E*in*out)
	for e := 0; e < E; e++ {
		for s := 0; s < shards; s++ {
			for o := 0; o < out; o++ {
				// Per-channel scale as a quantiser picks it (the block's
				// largest magnitude maps to ±127), jittered so that scales
				// differ between shards and columns.
				var amax float64
				for r := s * blk; r < (s+1)*blk; r++ {
					amax = max(amax, math.Abs(float64(f[(e*out+o)*in+r])))
				}
				if amax == 0 {
					amax = 1
				}
				scale := tensor.FloatToBF16(float32(amax / 127 * (1 + 0.1*rng.Float64())))
				sc[(e*shards+s)*out+o] = scale
				sf := tensor.BF16ToFloat(scale)
				for r := s * blk; r < (s+1)*blk; r++ {
					v := math.Round(float64(f[(e*out+o)*in+r] / sf))
					qi := int8(max(-127, min(127, v)))
					i8[(e*in+r)*out+o] = byte(qi)
					dq[(e*in+r)*out+o] = float32(qi) * sf
				}
			}
		}
	}
	tshape := []int{in, out}
	sshape := []int{shards, out}
	if len(sh) == 3 {
		tshape = []int{E, in, out}
		sshape = []int{E, shards, out}
	}
	scBytes := make([]byte, 0, 2*len(sc))
	for _, v := range sc {
		scBytes = append(scBytes, byte(v), byte(v>>8))
	}
	q = &tensor.Tensor{Name: name, Type: tensor.I8, Shape: tshape, Data: i8, Transposed: true,
		Scales: &tensor.Tensor{Name: name + ".scales", Type: tensor.BF16, Shape: sshape, Data: scBytes}}
	deq = testmodel.F32(name, tshape, dq)
	deq.Transposed = true
	return q, deq
}

// The QuantizedWeight8bit path (int8 kept as is, scales applied per shard
// inside the matmul) equals running the dequantised F32 matrix.
// xaiInt8Pair quantises src's projections as xAI's checkpoint stores them:
// int8 in the [in, out] layout with per-channel scales, 4 scale shards on
// the row-parallel layers (attention output, expert linear_1). It returns
// the int8 source and its exact dequantised float32 twin.
func xaiInt8Pair(src testmodel.Source) (qs, ds testmodel.Source) {
	rng := rand.New(rand.NewPCG(1, 1))
	qs, ds = testmodel.Source{}, testmodel.Source{}
	for _, k := range slices.Sorted(maps.Keys(src)) { // one model per seed
		v := src[k]
		qs[k], ds[k] = v, v
		if len(v.Shape) >= 2 && k != "token_embd.weight" && !contains(k, "ffn_gate_inp") {
			shards := 1
			if contains(k, "attn_output") || contains(k, "ffn_down") {
				shards = 4 // row-parallel: per-shard scales
			}
			qs[k], ds[k] = quantize8bit(rng, k, v, shards)
		}
	}
	return qs, ds
}

func xaiInt8(src testmodel.Source) testmodel.Source {
	qs, _ := xaiInt8Pair(src)
	return qs
}

func TestQuantizedWeight8bitEqualsDequantised(t *testing.T) {
	c := testmodel.SmallConfig()
	src := testmodel.Random(c, 23)
	qs, ds := xaiInt8Pair(src)
	toks := []int{5, 4, 3, 2, 1, 60, 61}
	got, err := testmodel.FullLogits(mustModel(t, c, qs), toks)
	if err != nil {
		t.Fatal(err)
	}
	want, err := testmodel.FullLogits(mustModel(t, c, ds), toks)
	if err != nil {
		t.Fatal(err)
	}
	if d := testmodel.MaxAbsDiff(got, want); d > 1e-4 {
		t.Errorf("int8 vs dequantised: max |Δ| = %g", d)
	}
	// And the transposed F32 layout equals the original layout's model on
	// the same (dequantised) values.
	plain := testmodel.Source{}
	for k, v := range ds {
		plain[k] = v
		if v.Transposed {
			f, _ := v.Float32s()
			sh := v.Shape
			r, cc := sh[len(sh)-2], sh[len(sh)-1]
			E := len(f) / (r * cc)
			tr := make([]float32, len(f))
			for e := 0; e < E; e++ {
				for i := 0; i < r; i++ {
					for j := 0; j < cc; j++ {
						tr[e*r*cc+j*r+i] = f[e*r*cc+i*cc+j]
					}
				}
			}
			ns := append([]int(nil), sh...)
			ns[len(ns)-2], ns[len(ns)-1] = cc, r
			plain[k] = testmodel.F32(k, ns, tr)
		}
	}
	want2, _ := testmodel.FullLogits(mustModel(t, c, plain), toks)
	if d := testmodel.MaxAbsDiff(want, want2); d > 1e-4 {
		t.Errorf("[in,out] vs [out,in] layout: max |Δ| = %g", d)
	}
}

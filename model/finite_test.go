package model_test

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// poison returns a copy of src whose tensor name (or, with scales, its
// Scales) has the bytes at byte offset off replaced by b.
func poison(src testmodel.Source, name string, scales bool, off int, b ...byte) testmodel.Source {
	out := testmodel.Source{}
	for k, v := range src {
		out[k] = v
	}
	t := *src[name]
	target := &t
	if scales {
		s := *t.Scales
		t.Scales = &s
		target = &s
	}
	target.Data = append([]byte(nil), target.Data...)
	copy(target.Data[off:], b)
	out[name] = &t
	return out
}

func f32Bytes(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }

func bf16Bytes(v float32) []byte {
	return binary.LittleEndian.AppendUint16(nil, tensor.FloatToBF16(v))
}

// A NaN or infinity in a norm, the router, the embedding or an int8 scale
// makes every logit NaN; New refuses it naming the tensor and the first bad
// index. One in a big matrix loads (scanning it is `inspect --check`'s job)
// and CheckFinite finds it.
func TestNewRefusesNonFinite(t *testing.T) {
	c := testmodel.SmallConfig()
	f32 := testmodel.Random(c, 3)
	q8 := convert(t, f32, reencode(tensor.Q8_0))
	xai := xaiInt8(f32)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, tc := range []struct {
		name string
		src  testmodel.Source
		want string // "" : New succeeds
		// the tensor CheckFinite must flag, and what it says
		tensor, check string
	}{
		{"NaN in a norm", poison(f32, "blk.1.ffn_norm.weight", false, 4*5, f32Bytes(nan)...),
			`tensor "blk.1.ffn_norm.weight": element 5 is NaN`, "", ""},
		{"NaN in the final norm", poison(f32, "output_norm.weight", false, 0, f32Bytes(nan)...),
			`tensor "output_norm.weight": element 0 is NaN`, "", ""},
		{"Inf in a router", poison(f32, "blk.0.ffn_gate_inp.weight", false, 4*7, f32Bytes(inf)...),
			`tensor "blk.0.ffn_gate_inp.weight": element 7 is +Inf`, "", ""},
		{"NaN in a Q8_0 block scale of the embedding", poison(q8, "token_embd.weight", false, 3*tensor.Q8BlockBytes, 0x00, 0x7e),
			`tensor "token_embd.weight": the scale of the Q8_0 block starting at element 96 is NaN`, "", ""},
		{"-Inf in the F32 embedding", poison(f32, "token_embd.weight", false, 4*100, f32Bytes(float32(math.Inf(-1)))...),
			`tensor "token_embd.weight": element 100 is -Inf`, "", ""},
		{"Inf in an xAI int8 scale", poison(xai, "blk.1.attn_q.weight", true, 2*9, bf16Bytes(inf)...),
			`tensor "blk.1.attn_q.weight": scales element 9 is +Inf`, "", ""},
		{"NaN in an expert scale", poison(xai, "blk.0.ffn_down_exps.weight", true, 2*33, bf16Bytes(nan)...),
			`tensor "blk.0.ffn_down_exps.weight": scales element 33 is NaN`, "", ""},
		{"NaN in a big F32 matrix", poison(f32, "blk.0.ffn_up_exps.weight", false, 4*1234, f32Bytes(nan)...),
			"", "blk.0.ffn_up_exps.weight", `tensor "blk.0.ffn_up_exps.weight": element 1234 is NaN`},
		{"NaN in a big Q8_0 matrix's block scale", poison(q8, "blk.1.attn_k.weight", false, 2*tensor.Q8BlockBytes, 0x00, 0x7e),
			"", "blk.1.attn_k.weight", `the scale of the Q8_0 block starting at element 64 is NaN`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := model.New(c, tc.src)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				err := model.CheckFinite(tc.src[tc.tensor])
				var nf *model.NonFiniteError
				if !errors.As(err, &nf) || nf.Tensor != tc.tensor || !strings.Contains(err.Error(), tc.check) {
					t.Errorf("CheckFinite = %v, want it to mention %q", err, tc.check)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	// Every bad small tensor is named at once.
	src := poison(poison(f32, "blk.0.attn_norm.weight", false, 0, f32Bytes(nan)...), "blk.1.ffn_gate_inp.weight", false, 4, f32Bytes(inf)...)
	_, err := model.New(c, src)
	if err == nil || !strings.Contains(err.Error(), `"blk.0.attn_norm.weight"`) || !strings.Contains(err.Error(), `"blk.1.ffn_gate_inp.weight"`) {
		t.Errorf("two bad tensors: err = %v, want both named", err)
	}
}

// CheckFinite reads every type the engine computes with, and passes finite
// values, including the largest finite ones of each type.
func TestCheckFinite(t *testing.T) {
	le := binary.LittleEndian
	raw := func(dt tensor.DType, shape []int, data []byte) *tensor.Tensor {
		return &tensor.Tensor{Name: "w", Type: dt, Shape: shape, Data: data}
	}
	q8 := func(scale uint16) []byte {
		b := make([]byte, 2*tensor.Q8BlockBytes)
		le.PutUint16(b[tensor.Q8BlockBytes:], scale)
		for i := 2; i < tensor.Q8BlockBytes; i++ {
			b[i] = 0x80 // int8 -128: a quant is never non-finite
		}
		return b
	}
	i8 := func(scales ...uint16) *tensor.Tensor {
		sc := make([]byte, 0, 2*len(scales))
		for _, s := range scales {
			sc = le.AppendUint16(sc, s)
		}
		t := raw(tensor.I8, []int{2, len(scales)}, make([]byte, 2*len(scales)))
		t.Transposed = true
		t.Scales = raw(tensor.BF16, []int{1, len(scales)}, sc)
		return t
	}
	// long returns n 16-bit values, all v except at index bad (if ≥ 0).
	long := func(n int, v, at uint16, bad int) []byte {
		b := make([]byte, 0, 2*n)
		for i := 0; i < n; i++ {
			x := v
			if i == bad {
				x = at
			}
			b = le.AppendUint16(b, x)
		}
		return b
	}
	// kblocks returns two zero blocks of bb bytes with the fp16 at offset
	// off set to v in block at (both blocks if at < 0).
	kblocks := func(bb, off int, v uint16, at int) []byte {
		b := make([]byte, 2*bb)
		for k := 0; k < 2; k++ {
			if at < 0 || k == at {
				le.PutUint16(b[k*bb+off:], v)
			}
		}
		return b
	}
	for _, tc := range []struct {
		name string
		t    *tensor.Tensor
		want string // "" : finite
	}{
		{"BF16 long, max", raw(tensor.BF16, []int{21}, long(21, 0xff7f, 0x7f7f, 13)), ""},
		{"BF16 long, NaN at 13", raw(tensor.BF16, []int{21}, long(21, 0xff7f, 0x7fc0, 13)), "element 13 is NaN"},
		{"BF16 long, Inf in the tail", raw(tensor.BF16, []int{21}, long(21, 0x3f80, 0x7f80, 20)), "element 20 is +Inf"},
		{"F16 long, max", raw(tensor.F16, []int{21}, long(21, 0xfbff, 0x7bff, 3)), ""},
		{"F16 long, -Inf at 3", raw(tensor.F16, []int{21}, long(21, 0x3c00, 0xfc00, 3)), "element 3 is -Inf"},
		{"F32 max", raw(tensor.F32, []int{2}, append(f32Bytes(math.MaxFloat32), f32Bytes(-math.MaxFloat32)...)), ""},
		{"F32 NaN", raw(tensor.F32, []int{2}, append(f32Bytes(1), 0x01, 0x00, 0xc0, 0xff)), "element 1 is NaN"},
		{"F16 max", raw(tensor.F16, []int{2}, []byte{0xff, 0x7b, 0xff, 0xfb}), ""},
		{"F16 -Inf", raw(tensor.F16, []int{2}, []byte{0x00, 0x3c, 0x00, 0xfc}), "element 1 is -Inf"},
		{"BF16 max", raw(tensor.BF16, []int{2}, []byte{0x7f, 0x7f, 0x7f, 0xff}), ""},
		{"BF16 NaN", raw(tensor.BF16, []int{2}, []byte{0xc1, 0x7f, 0, 0}), "element 0 is NaN"},
		{"Q8_0 finite", raw(tensor.Q8_0, []int{64}, q8(0x7bff)), ""},
		{"Q8_0 Inf scale", raw(tensor.Q8_0, []int{64}, q8(0x7c00)), "the scale of the Q8_0 block starting at element 32 is +Inf"},
		{"Q4_K finite", raw(tensor.Q4_K, []int{512}, kblocks(144, 0, 0x7bff, -1)), ""},
		{"Q4_K Inf d in block 1", raw(tensor.Q4_K, []int{512}, kblocks(144, 0, 0x7c00, 1)), "element 256 is NaN"},
		{"Q6_K NaN d (last bytes) in block 0", raw(tensor.Q6_K, []int{512}, kblocks(210, 208, 0x7e00, 0)), "element 0 is NaN"},
		{"I8 finite scales", i8(0x3f80, 0x7f7f), ""},
		{"I8 -Inf scale", i8(0x3f80, 0xff80), "scales element 1 is -Inf"},
		{"I8 without scales", raw(tensor.I8, []int{2}, []byte{0x80, 0x7f}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := model.CheckFinite(tc.t)
			if tc.want == "" {
				if err != nil {
					t.Errorf("CheckFinite: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `tensor "w"`) {
				t.Errorf("CheckFinite = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	if err := model.CheckFinite(raw(tensor.F32, []int{3}, make([]byte, 8))); err == nil || errors.As(err, new(*model.NonFiniteError)) {
		t.Errorf("short data: %v, want a size error", err)
	}
}

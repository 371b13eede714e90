package convert

import (
	"fmt"
	"strings"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// The expectations below are read off llama.cpp's src/llama-quant.cpp
// (llama_tensor_get_type_impl and tensor_type_fallback at commit de3ff815):
// each case is a run of tensors in llama-quantize's order, because the
// attn_v and ffn_* counters carry from one tensor to the next.

type ruleStep struct {
	name string
	ne0  int64
	want tensor.DType
}

// grokLayers lists, for layers ls of a grok MoE model with rows of ne0, the
// steps with the types wantOf gives per tensor kind and layer.
func grokLayers(ne0 int64, ls []int, wantOf func(kind string, l int) tensor.DType) []ruleStep {
	var s []ruleStep
	for _, l := range ls {
		for _, k := range []string{"attn_k", "attn_output", "attn_q", "attn_v", "ffn_down_exps", "ffn_gate_exps", "ffn_up_exps"} {
			s = append(s, ruleStep{fmt.Sprintf("blk.%d.%s.weight", l, k), ne0, wantOf(k, l)})
		}
	}
	return s
}

func TestQuantTypeRules(t *testing.T) {
	const (
		Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, F16 = tensor.Q4_0, tensor.Q4_1, tensor.Q5_0, tensor.Q5_1, tensor.Q8_0, tensor.F16
		Q2_K, Q3_K, Q4_K, Q5_K, Q6_K      = tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K
	)
	grok1 := modelParams{nLayer: 64, nExpert: 8, nGQA: 6} // grok-1: 48 heads, 8 kv heads
	dense := modelParams{nLayer: 16, nGQA: 1}
	gqa4 := modelParams{nLayer: 16, nGQA: 4}
	all := []int{0, 1, 7, 8, 9, 10, 11, 54, 55, 56, 63}
	head := func(ne0 int64, out, embd tensor.DType) []ruleStep {
		return []ruleStep{{"output.weight", ne0, out}, {"token_embd.weight", ne0, embd}}
	}
	cat := func(a ...[]ruleStep) []ruleStep {
		var s []ruleStep
		for _, x := range a {
			s = append(s, x...)
		}
		return s
	}
	// Grok-1 (8 experts): attn_k and attn_v are always Q8_0.
	grok := func(ft Ftype, bulk tensor.DType, down func(l int) tensor.DType, out tensor.DType) []ruleStep {
		return cat(head(6144, Q6_K, bulk), grokLayers(6144, all, func(k string, l int) tensor.DType {
			switch k {
			case "attn_k", "attn_v":
				return Q8_0
			case "attn_output":
				return out
			case "ffn_down_exps":
				return down(l)
			}
			return bulk
		}))
	}
	same := func(t tensor.DType) func(int) tensor.DType { return func(int) tensor.DType { return t } }
	moreBits := func(hi, lo tensor.DType) func(int) tensor.DType {
		return func(l int) tensor.DType {
			if l < 8 || l >= 56 || (l-8)%3 == 2 {
				return hi
			}
			return lo
		}
	}
	for _, c := range []struct {
		name  string
		ft    Ftype
		p     modelParams
		steps []ruleStep
	}{
		{"grok Q4_0", FtypeQ4_0, grok1, grok(FtypeQ4_0, Q4_0, same(Q4_0), Q4_0)},
		{"grok Q4_1", FtypeQ4_1, grok1, grok(FtypeQ4_1, Q4_1, same(Q4_1), Q4_1)},
		{"grok Q5_0", FtypeQ5_0, grok1, grok(FtypeQ5_0, Q5_0, same(Q5_0), Q5_0)},
		{"grok Q5_1", FtypeQ5_1, grok1, grok(FtypeQ5_1, Q5_1, same(Q5_1), Q5_1)},
		{"grok Q2_K", FtypeQ2_K, grok1, grok(FtypeQ2_K, Q2_K, same(Q3_K), Q5_K)},
		{"grok Q3_K_S", FtypeQ3_K_S, grok1, grok(FtypeQ3_K_S, Q3_K, same(Q3_K), Q5_K)},
		{"grok Q3_K_M", FtypeQ3_K_M, grok1, grok(FtypeQ3_K_M, Q3_K, func(l int) tensor.DType {
			if l < 4 {
				return Q5_K
			}
			return Q4_K
		}, Q5_K)},
		{"grok Q3_K_L", FtypeQ3_K_L, grok1, grok(FtypeQ3_K_L, Q3_K, same(Q5_K), Q3_K)},
		{"grok Q4_K_S", FtypeQ4_K_S, grok1, grok(FtypeQ4_K_S, Q4_K, func(l int) tensor.DType {
			if l < 8 {
				return Q5_K
			}
			return Q4_K
		}, Q5_K)},
		{"grok Q4_K_M", FtypeQ4_K_M, grok1, grok(FtypeQ4_K_M, Q4_K, moreBits(Q6_K, Q4_K), Q5_K)},
		{"grok Q5_K_S", FtypeQ5_K_S, grok1, grok(FtypeQ5_K_S, Q5_K, same(Q5_K), Q5_K)},
		{"grok Q5_K_M", FtypeQ5_K_M, grok1, grok(FtypeQ5_K_M, Q5_K, moreBits(Q6_K, Q5_K), Q5_K)},
		{"grok Q6_K", FtypeQ6_K, grok1, grok(FtypeQ6_K, Q6_K, same(Q6_K), Q6_K)},
		{"grok IQ4_NL", FtypeIQ4_NL, grok1, grok(FtypeIQ4_NL, tensor.IQ4_NL, func(l int) tensor.DType {
			if l < 8 {
				return Q5_K
			}
			return tensor.IQ4_NL
		}, Q5_K)},
		{"grok IQ4_XS", FtypeIQ4_XS, grok1, grok(FtypeIQ4_XS, tensor.IQ4_XS, func(l int) tensor.DType {
			if l < 8 {
				return Q5_K
			}
			return tensor.IQ4_XS
		}, Q5_K)},
		{"GQA 4 IQ4_XS, fallback", FtypeIQ4_XS, gqa4, []ruleStep{
			{"blk.0.attn_v.weight", 256, Q5_K}, {"blk.0.attn_output.weight", 256, tensor.IQ4_XS},
			{"blk.0.attn_q.weight", 128, tensor.IQ4_NL}, {"blk.0.attn_k.weight", 48, F16},
		}},
		{"dense IQ4_NL", FtypeIQ4_NL, dense, []ruleStep{{"blk.0.attn_v.weight", 256, tensor.IQ4_NL}}},
		{"grok Q8_0", FtypeQ8_0, grok1, cat(head(6144, Q8_0, Q8_0), grokLayers(6144, all, func(string, int) tensor.DType { return Q8_0 }))},
		{"F16 has no mixture", FtypeF16, grok1, cat(head(6144, F16, F16), grokLayers(100, []int{0}, func(string, int) tensor.DType { return F16 }))},

		// Tied embeddings: token_embd takes output's rule (Q6_K, or Q8_0
		// when its rows do not fit the bulk type's blocks).
		{"tied Q4_0", FtypeQ4_0, grok1, []ruleStep{{"token_embd.weight", 6144, Q6_K}}},
		{"tied Q4_K_M, 32-column rows", FtypeQ4_K_M, grok1, []ruleStep{{"token_embd.weight", 96, Q8_0}}},
		{"untied Q4_K, 32-column rows", FtypeQ4_K_M, grok1, []ruleStep{{"output.weight", 96, Q8_0}, {"token_embd.weight", 96, Q5_0}}},

		// Fallbacks for rows that are not whole super-blocks.
		{"fallbacks", FtypeQ4_K_M, grok1, []ruleStep{
			{"output.weight", 128, Q8_0},
			{"blk.0.attn_q.weight", 128, Q5_0},
			{"blk.0.ffn_down_exps.weight", 128, Q8_0}, // Q6_K → Q8_0
			{"blk.0.ffn_up_exps.weight", 48, F16},     // Q4_K → Q5_0 → F16
			{"blk.8.ffn_down_exps.weight", 128, Q5_0},
		}},
		{"Q2_K and Q5_K fallbacks", FtypeQ2_K, grok1, []ruleStep{
			{"blk.0.attn_q.weight", 64, Q4_0}, {"blk.0.attn_output.weight", 64, Q5_1}, {"blk.0.ffn_down_exps.weight", 64, Q4_0},
		}},
		{"Q4_0 fallback to F16", FtypeQ4_0, grok1, []ruleStep{{"blk.0.attn_q.weight", 48, F16}}},

		// Dense models: the attn_v counter and GQA rules.
		{"dense Q2_K", FtypeQ2_K, dense, []ruleStep{
			{"blk.0.attn_k.weight", 256, Q2_K}, {"blk.0.attn_output.weight", 256, Q3_K}, {"blk.0.attn_v.weight", 256, Q3_K},
			{"blk.0.ffn_down.weight", 256, Q3_K},
		}},
		{"GQA 4 Q2_K", FtypeQ2_K, gqa4, []ruleStep{{"blk.0.attn_v.weight", 256, Q4_K}}},
		{"dense Q3_K_M", FtypeQ3_K_M, dense, []ruleStep{
			{"blk.0.attn_output.weight", 256, Q4_K},
			{"blk.0.attn_v.weight", 256, Q5_K}, {"blk.0.ffn_down.weight", 256, Q5_K},
			{"blk.1.attn_v.weight", 256, Q5_K}, {"blk.1.ffn_down.weight", 256, Q4_K},
			{"blk.2.attn_v.weight", 256, Q4_K},
		}},
		{"dense Q3_K_L", FtypeQ3_K_L, dense, []ruleStep{
			{"blk.0.attn_output.weight", 256, Q5_K}, {"blk.0.attn_v.weight", 256, Q5_K}, {"blk.0.ffn_down.weight", 256, Q5_K},
		}},
		{"dense Q4_K_S", FtypeQ4_K_S, dense, func() []ruleStep {
			var s []ruleStep
			for l := 0; l < 6; l++ {
				v, d := Q4_K, Q4_K
				if l < 4 {
					v = Q5_K
				}
				if l < 2 {
					d = Q5_K
				}
				s = append(s, ruleStep{fmt.Sprintf("blk.%d.attn_v.weight", l), 256, v}, ruleStep{fmt.Sprintf("blk.%d.ffn_down.weight", l), 256, d})
			}
			return s
		}()},
		// use_more_bits over the 16 attn_v and ffn_down of a 16-layer
		// model: layers 0, 1, 4, 7, 10, 13, 14, 15.
		{"dense Q4_K_M", FtypeQ4_K_M, dense, func() []ruleStep {
			s := []ruleStep{{"output.weight", 256, Q6_K}}
			for l := 0; l < 16; l++ {
				x := Q4_K
				switch l {
				case 0, 1, 4, 7, 10, 13, 14, 15:
					x = Q6_K
				}
				s = append(s, ruleStep{fmt.Sprintf("blk.%d.attn_v.weight", l), 256, x}, ruleStep{fmt.Sprintf("blk.%d.ffn_down.weight", l), 256, x})
			}
			return s
		}()},
		{"falcon Q4_K_M", FtypeQ4_K_M, modelParams{falcon: true, nLayer: 32}, []ruleStep{
			{"output.weight", 256, Q8_0}, {"blk.0.ffn_down.weight", 256, Q6_K}, {"blk.1.ffn_down.weight", 256, Q6_K},
			{"blk.2.ffn_down.weight", 256, Q5_K}, {"blk.3.ffn_down.weight", 256, Q5_K}, {"blk.4.ffn_down.weight", 256, Q4_K},
			{"blk.5.ffn_down.weight", 256, Q4_K}, {"blk.6.ffn_down.weight", 256, Q5_K},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			names := make([]string, len(c.steps))
			for i, s := range c.steps {
				names[i] = s.name
			}
			tc := newTypeChooser(c.ft, c.p, names)
			for _, s := range c.steps {
				got, _, err := tc.choose(s.name, s.ne0)
				if err != nil || got != s.want {
					t.Errorf("%s [%d]: %v, %v; want %v", s.name, s.ne0, got, err, s.want)
				}
			}
		})
	}
}

// The i-quant ftypes' rules (llama_tensor_get_type_impl without an
// importance matrix), and tensor_requires_imatrix: the steps whose type is
// an i-quant below IQ3_S (or Q2_K in a Q2_K_S file), token_embd and output
// excepted, must be refused, naming the tensor and the type.
func TestQuantTypeRulesIQ(t *testing.T) {
	const (
		Q8_0, F16                    = tensor.Q8_0, tensor.F16
		Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = tensor.Q2_K, tensor.Q3_K, tensor.Q4_K, tensor.Q5_K, tensor.Q6_K
		IQ3_S, IQ3_XXS, IQ2_S        = tensor.IQ3_S, tensor.IQ3_XXS, tensor.IQ2_S
		IQ2_XXS, IQ4_NL              = tensor.IQ2_XXS, tensor.IQ4_NL
	)
	grok1 := modelParams{nLayer: 64, nExpert: 8, nGQA: 6}
	dense := modelParams{nLayer: 16, nGQA: 1}
	gqa4 := modelParams{nLayer: 16, nGQA: 4}
	all := []int{0, 1, 7, 8, 9, 10, 11, 54, 55, 56, 63}
	head := func(out, embd tensor.DType) []ruleStep {
		return []ruleStep{{"output.weight", 6144, out}, {"token_embd.weight", 6144, embd}}
	}
	// grok gives a grok-1 run: output, token_embd, then the layers, with
	// attn_k and attn_v Q8_0 (eight experts) and attn_output Q5_K.
	grok := func(out, embd tensor.DType, of func(kind string, l int) tensor.DType) []ruleStep {
		return append(head(out, embd), grokLayers(6144, all, func(k string, l int) tensor.DType {
			switch k {
			case "attn_k", "attn_v":
				return Q8_0
			case "attn_output":
				return Q5_K
			}
			return of(k, l)
		})...)
	}
	for _, c := range []struct {
		name  string
		ft    Ftype
		p     modelParams
		steps []ruleStep
	}{
		{"grok IQ3_S", FtypeIQ3_S, grok1, grok(Q6_K, IQ3_S, func(string, int) tensor.DType { return IQ3_S })},
		{"grok IQ3_M", FtypeIQ3_M, grok1, grok(Q6_K, IQ3_S, func(k string, l int) tensor.DType {
			if k == "ffn_down_exps" && useMoreBits(l, 64) {
				return Q4_K
			}
			return IQ3_S
		})},
		{"grok IQ3_XXS", FtypeIQ3_XXS, grok1, grok(Q5_K, IQ3_S, func(k string, l int) tensor.DType {
			switch k {
			case "attn_q":
				return IQ2_S
			case "ffn_down_exps":
				if l < 8 {
					return Q4_K
				}
				return Q3_K
			}
			return IQ3_XXS
		})},
		{"grok IQ3_XS", FtypeIQ3_XS, grok1, grok(Q6_K, IQ3_S, func(k string, l int) tensor.DType {
			switch {
			case k == "attn_q", (k == "ffn_gate_exps" || k == "ffn_up_exps") && l >= 8 && l < 56:
				return IQ3_XXS
			}
			return IQ3_S
		})},
		{"dense IQ3_XXS", FtypeIQ3_XXS, dense, []ruleStep{
			{"blk.0.attn_k.weight", 256, IQ2_S}, {"blk.0.attn_output.weight", 256, IQ3_S}, {"blk.0.attn_v.weight", 256, IQ3_S},
			{"blk.0.ffn_down.weight", 256, Q4_K}, {"blk.1.ffn_down.weight", 256, Q4_K}, {"blk.2.ffn_down.weight", 256, Q3_K},
			{"blk.2.attn_q.weight", 128, IQ4_NL}, // IQ2_S falls back, and IQ4_NL needs no importance matrix
		}},
		{"GQA 4 IQ3_XXS", FtypeIQ3_XXS, gqa4, []ruleStep{{"blk.0.attn_v.weight", 256, Q4_K}}},
		{"GQA 4 IQ3_S", FtypeIQ3_S, gqa4, []ruleStep{{"blk.0.attn_v.weight", 256, Q4_K}}},
		{"dense IQ3_S", FtypeIQ3_S, dense, []ruleStep{{"blk.0.attn_v.weight", 256, IQ3_S}, {"blk.0.attn_output.weight", 256, IQ3_S}}},
		{"dense IQ3_M", FtypeIQ3_M, dense, []ruleStep{
			{"blk.0.attn_v.weight", 256, Q4_K}, {"blk.0.attn_output.weight", 256, Q4_K},
			{"blk.0.ffn_down.weight", 256, Q4_K}, {"blk.1.ffn_down.weight", 256, Q4_K}, {"blk.2.ffn_down.weight", 256, IQ3_S},
			{"blk.4.ffn_down.weight", 256, IQ3_S}, // use_more_bits counts only with eight experts
		}},
		{"tied IQ3_XXS", FtypeIQ3_XXS, grok1, []ruleStep{{"token_embd.weight", 6144, Q5_K}}},
		{"tied IQ3_M", FtypeIQ3_M, grok1, []ruleStep{{"token_embd.weight", 6144, Q6_K}}},
		{"IQ3_S fallbacks", FtypeIQ3_S, grok1, []ruleStep{
			{"blk.0.attn_q.weight", 128, IQ4_NL}, {"blk.0.attn_q.weight", 48, F16},
		}},
		{"dense IQ2_XXS", FtypeIQ2_XXS, dense, []ruleStep{
			{"output.weight", 256, Q5_K}, {"token_embd.weight", 256, Q2_K},
			{"blk.0.attn_v.weight", 256, Q2_K}, {"blk.0.attn_output.weight", 256, IQ2_XXS}, {"blk.0.attn_q.weight", 256, IQ2_XXS},
			{"blk.0.ffn_down.weight", 256, Q2_K}, {"blk.1.ffn_down.weight", 256, Q2_K}, {"blk.2.ffn_down.weight", 256, IQ2_XXS},
		}},
		{"dense IQ2_M", FtypeIQ2_M, dense, []ruleStep{
			{"output.weight", 256, Q5_K}, {"token_embd.weight", 256, IQ3_S}, {"blk.0.attn_v.weight", 256, IQ3_S},
			{"blk.0.attn_output.weight", 256, IQ3_S}, {"blk.0.ffn_down.weight", 256, IQ3_S}, {"blk.0.ffn_up.weight", 256, IQ2_S},
		}},
		{"dense IQ1_S", FtypeIQ1_S, dense, []ruleStep{{"blk.0.attn_output.weight", 256, IQ2_XXS}}},
		{"grok IQ2_S", FtypeIQ2_S, grok1, []ruleStep{
			{"output.weight", 6144, Q5_K}, {"blk.0.attn_k.weight", 6144, Q4_K}, {"blk.0.attn_output.weight", 6144, Q5_K},
			{"blk.0.attn_v.weight", 6144, Q4_K}, {"blk.0.ffn_gate_exps.weight", 6144, tensor.IQ2_XS},
		}},
		{"dense Q2_K_S", FtypeQ2_K_S, dense, []ruleStep{
			{"output.weight", 256, Q6_K}, {"token_embd.weight", 256, Q2_K}, // exempt by name
			{"blk.0.attn_v.weight", 256, Q2_K}, {"blk.0.ffn_down.weight", 256, Q4_K}, {"blk.1.ffn_down.weight", 256, Q4_K},
			{"blk.2.ffn_down.weight", 256, Q2_K},
		}},
		{"GQA 4 Q2_K_S", FtypeQ2_K_S, gqa4, []ruleStep{{"blk.0.attn_v.weight", 256, Q4_K}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			names := make([]string, len(c.steps))
			for i, s := range c.steps {
				names[i] = s.name
			}
			tc := newTypeChooser(c.ft, c.p, names)
			for _, s := range c.steps {
				got, _, err := tc.choose(s.name, s.ne0)
				exempt := s.name == "output.weight" || s.name == "token_embd.weight"
				refuse := !exempt && (s.want == Q2_K && c.ft == FtypeQ2_K_S || s.want == IQ3_XXS || s.want == IQ2_S ||
					s.want == IQ2_XXS || s.want == tensor.IQ2_XS || s.want == tensor.IQ1_S || s.want == tensor.IQ1_M)
				msg := fmt.Sprintf("tensor %s type %v,", s.name, s.want)
				if got != s.want || refuse != (err != nil) || (err != nil && !strings.Contains(err.Error(), "needs an importance matrix") || err != nil && !strings.Contains(err.Error(), msg)) {
					t.Errorf("%s [%d]: %v, %v; want %v (refused: %v)", s.name, s.ne0, got, err, s.want, refuse)
				}
			}
		})
	}
}

// With experts, llama-quantize takes the ffn layer from the name and
// refuses one it cannot find or that is out of range.
func TestQuantTypeRuleErrors(t *testing.T) {
	p := modelParams{nLayer: 4, nExpert: 8}
	for _, c := range []struct{ name, want string }{
		{"blk.4.ffn_down_exps.weight", "bad layer 4"},
		{"blk.-1.ffn_up_exps.weight", "bad layer -1"},
		{"extra.ffn_gate_exps.weight", "failed to determine layer"},
	} {
		tc := newTypeChooser(FtypeQ4_K_M, p, []string{c.name})
		if _, _, err := tc.choose(c.name, 256); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// The 1- and 2-bit i-quants count ffn_down without reading names.
	tc0 := newTypeChooser(FtypeIQ2_XXS, modelParams{nLayer: 16, nExpert: 8}, []string{"extra.ffn_down_exps.weight"})
	if got, _, err := tc0.choose("extra.ffn_down_exps.weight", 256); err != nil || got != tensor.Q2_K {
		t.Errorf("IQ2_XXS unnamed ffn_down: %v, %v", got, err)
	}
	// Without experts the running counter is the layer: no name needed.
	tc := newTypeChooser(FtypeQ4_K_M, modelParams{nLayer: 16}, []string{"extra.ffn_down.weight"})
	if got, _, err := tc.choose("extra.ffn_down.weight", 256); err != nil || got != tensor.Q6_K {
		t.Errorf("dense unnamed ffn_down: %v, %v", got, err)
	}
}

package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/model"
)

// precisionFlag is --precision exact|fast: the arithmetic of prefill's
// weight products (model.LanguageModel.Precision). Decode is always exact.
type precisionFlag struct{ p kernels.Precision }

const precisionHelp = "prefill arithmetic: exact (float32 activations) or fast (activations quantised to int16, integer products with VNNI, for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K–Q6_K, IQ3_S, IQ3_XXS, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M and [out, in] int8 weights on AVX-512 VNNI CPUs; F32, F16 and BF16 exact); decode, the last layer's feed-forward and the unembedding are always exact"

func (f *precisionFlag) String() string { return f.p.String() }

func (f *precisionFlag) Set(s string) error {
	p, ok := kernels.ParsePrecision(s)
	if !ok {
		return fmt.Errorf("want exact or fast, not %q", s)
	}
	f.p = p
	return nil
}

// precisionNote says what a prefill at p runs on lm's weights: "exact", or
// "fast" with the weight types that multiply in int8 on this machine and
// those that stay exact.
func precisionNote(p kernels.Precision, lm *model.LanguageModel) string {
	if p != kernels.Fast {
		return "exact"
	}
	fast, exact := fastSplit(lm)
	list := func(s map[string]bool) string {
		var l []string
		for k := range s {
			l = append(l, k)
		}
		sort.Strings(l)
		if len(l) == 0 {
			return "none"
		}
		return strings.Join(l, ", ")
	}
	if len(fast) == 0 {
		return fmt.Sprintf("fast requested, ran exact (no integer products for %s on %s kernels)", list(exact), kernels.Variant())
	}
	return fmt.Sprintf("fast (int16 activations × %s weights in integers; exact for %s; %s kernels)", list(fast), list(exact), kernels.Variant())
}

// fastSplit returns the weight types of lm's products that multiply in
// integers under kernels.Fast on this machine, and those that stay exact.
func fastSplit(lm *model.LanguageModel) (fast, exact map[string]bool) {
	fast, exact = map[string]bool{}, map[string]bool{}
	for _, m := range lm.Mats() {
		if kernels.FastTypes(m.Type) && !m.Transposed {
			fast[m.Type.String()] = true
		} else {
			exact[m.Type.String()] = true
		}
	}
	return fast, exact
}

package testmodel

import (
	"fmt"
	"math"

	"github.com/grok-go/grok/model"
)

// Ref64 computes the logits of tokens (one sequence, one full pass from an
// empty memory) in float64, T rows of VocabSize, position-major.
//
// It is an independent reference for tests: written from
// shared/design/grok1-semantics.md §3 with plain loops, sharing nothing with
// the model package's arithmetic or the kernels. The weights may be of any
// type: each tensor is decoded with tensor.Tensor.Float32s and widened, so a
// quantised file is compared with the exact maths of its own dequantised
// weights. Where model.py leaves something open it follows the engine:
// keys whose token is ≤ pad_token are masked (model.py 1225), and a query
// whose every visible key is masked gets a zero attention output (see
// model/attention.go).
//
// Grok-2's features (shared/design/grok2-semantics.md §2-§4, SGLang's
// grok.py) follow the config's fields: a dense MLP beside the experts
// (DenseFFNSize, output (mlp + moe)/√2), the router soft-cap, the attention
// temperature log2(p)/log2(L) after the attention soft-cap, the final logit
// soft-cap and a required untied output.weight.
func Ref64(c model.Config, src model.TensorSource, tokens []int) ([]float64, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	w, err := loadRef(&c, src)
	if err != nil {
		return nil, err
	}
	D, V, T := c.EmbSize, c.VocabSize, len(tokens)
	for _, tok := range tokens {
		if tok < 0 || tok >= V {
			return nil, fmt.Errorf("ref64: token %d outside the vocabulary", tok)
		}
	}
	eps := float64(c.RMSEps)

	// Embedding × embedding_multiplier_scale (model.py 1228-1237).
	h := make([][]float64, T)
	for t, tok := range tokens {
		h[t] = make([]float64, D)
		for j := range h[t] {
			h[t][j] = w.embed[tok*D+j] * float64(c.EmbeddingMultiplierScale)
		}
	}
	keyOK := make([]bool, T)
	for t, tok := range tokens {
		keyOK[t] = tok > c.PadToken
	}
	for l := range w.layers {
		L := &w.layers[l]
		// h += rms_norm_1(attn(rms_norm(h)))
		a := refAttention(&c, L, refNorm(h, L.norm, eps), keyOK)
		for t := range h {
			add(h[t], refNormRow(a[t], L.norm1, eps))
		}
		// h += rms_norm_3(moe(rms_norm_2(h)))
		x := refNorm(h, L.norm2, eps)
		for t := range h {
			add(h[t], refNormRow(refFFN(&c, L, x[t]), L.norm3, eps))
		}
	}
	hf := refNorm(h, w.final, eps)
	out := make([]float64, T*V)
	fcap := float64(c.FinalLogitCap)
	for t := range hf {
		for v := 0; v < V; v++ {
			y := dot(hf[t], w.unembed[v*D:(v+1)*D]) * float64(c.OutputMultiplierScale)
			if fcap != 0 {
				y = fcap * math.Tanh(y/fcap)
			}
			out[t*V+v] = y
		}
	}
	return out, nil
}

// refLayer holds one decoder layer's weights in float64, matrices [out][in]
// row-major.
type refLayer struct {
	norm, norm1, norm2, norm3 []float64
	q, k, v, o                []float64
	router                    []float64   // [E][D]
	gate, up, down            [][]float64 // per expert: [F][D], [F][D], [D][F]
	// Grok-2's dense MLP beside the experts ([Fd][D], [Fd][D], [D][Fd]),
	// nil without one.
	dgate, dup, ddown []float64
}

type refWeights struct {
	embed, unembed, final []float64
	layers                []refLayer
}

func loadRef(c *model.Config, src model.TensorSource) (*refWeights, error) {
	D, K, F, E := c.EmbSize, c.KeySize, c.FFNSize, c.NumExperts
	w := &refWeights{}
	var err error
	if w.embed, err = refTensor(src, "token_embd.weight", c.VocabSize, D); err != nil {
		return nil, err
	}
	w.unembed = w.embed
	if _, ok := src.Lookup("output.weight"); ok || c.UntiedOutput {
		if w.unembed, err = refTensor(src, "output.weight", c.VocabSize, D); err != nil {
			return nil, err
		}
	}
	if w.final, err = refTensor(src, "output_norm.weight", D); err != nil {
		return nil, err
	}
	for l := 0; l < c.NumLayers; l++ {
		n := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", l, s) }
		var L refLayer
		post := n("layer_output_norm")
		if _, ok := src.Lookup(post); !ok {
			post = n("post_ffw_norm")
		}
		for _, p := range []struct {
			dst   *[]float64
			name  string
			shape []int
		}{
			{&L.norm, n("attn_norm"), []int{D}},
			{&L.norm1, n("attn_output_norm"), []int{D}},
			{&L.norm2, n("ffn_norm"), []int{D}},
			{&L.norm3, post, []int{D}},
			{&L.q, n("attn_q"), []int{c.NumQHeads * K, D}},
			{&L.k, n("attn_k"), []int{c.NumKVHeads * K, D}},
			{&L.v, n("attn_v"), []int{c.NumKVHeads * K, D}},
			{&L.o, n("attn_output"), []int{D, c.NumQHeads * K}},
		} {
			if *p.dst, err = refTensor(src, p.name, p.shape...); err != nil {
				return nil, err
			}
		}
		if E <= 1 {
			L.gate, L.up, L.down = make([][]float64, 1), make([][]float64, 1), make([][]float64, 1)
			if L.gate[0], err = refTensor(src, n("ffn_gate"), F, D); err != nil {
				return nil, err
			}
			if L.up[0], err = refTensor(src, n("ffn_up"), F, D); err != nil {
				return nil, err
			}
			if L.down[0], err = refTensor(src, n("ffn_down"), D, F); err != nil {
				return nil, err
			}
		} else {
			if L.router, err = refTensor(src, n("ffn_gate_inp"), E, D); err != nil {
				return nil, err
			}
			if L.gate, err = refExperts(src, l, "gate", E, F, D); err != nil {
				return nil, err
			}
			if L.up, err = refExperts(src, l, "up", E, F, D); err != nil {
				return nil, err
			}
			if L.down, err = refExperts(src, l, "down", E, D, F); err != nil {
				return nil, err
			}
			if Fd := c.DenseFFNSize; Fd > 0 {
				if L.dgate, err = refTensor(src, n("ffn_gate"), Fd, D); err != nil {
					return nil, err
				}
				if L.dup, err = refTensor(src, n("ffn_up"), Fd, D); err != nil {
					return nil, err
				}
				if L.ddown, err = refTensor(src, n("ffn_down"), D, Fd); err != nil {
					return nil, err
				}
			}
		}
		w.layers = append(w.layers, L)
	}
	return w, nil
}

// refTensor decodes a tensor to float64 in numpy order with shape want;
// a Transposed tensor (last two axes stored [in, out]) is transposed back.
func refTensor(src model.TensorSource, name string, want ...int) ([]float64, error) {
	t, ok := src.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("ref64: missing tensor %q", name)
	}
	shape := append([]int(nil), t.Shape...)
	n := len(shape)
	if t.Transposed && n >= 2 {
		shape[n-2], shape[n-1] = shape[n-1], shape[n-2]
	}
	if len(want) == 2 && n == 3 && shape[0] == 1 {
		shape = shape[1:]
	}
	if fmt.Sprint(shape) != fmt.Sprint(want) {
		return nil, fmt.Errorf("ref64: tensor %q has shape %v, want %v", name, shape, want)
	}
	v, err := t.Float32s()
	if err != nil {
		return nil, fmt.Errorf("ref64: %w", err)
	}
	out := make([]float64, len(v))
	if !t.Transposed || n < 2 {
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, nil
	}
	R, C := t.Shape[n-2], t.Shape[n-1] // stored [in, out]
	for m := 0; m < len(v)/(R*C); m++ {
		for r := 0; r < R; r++ {
			for col := 0; col < C; col++ {
				out[m*R*C+col*R+r] = float64(v[m*R*C+r*C+col])
			}
		}
	}
	return out, nil
}

// refExperts reads E expert matrices [out][in], merged
// (blk.N.ffn_X_exps.weight) or one per expert (blk.N.ffn_X.E.weight).
func refExperts(src model.TensorSource, l int, kind string, E, out, in int) ([][]float64, error) {
	ms := make([][]float64, E)
	merged := fmt.Sprintf("blk.%d.ffn_%s_exps.weight", l, kind)
	if _, ok := src.Lookup(merged); ok {
		all, err := refTensor(src, merged, E, out, in)
		if err != nil {
			return nil, err
		}
		for e := range ms {
			ms[e] = all[e*out*in : (e+1)*out*in]
		}
		return ms, nil
	}
	for e := range ms {
		var err error
		if ms[e], err = refTensor(src, fmt.Sprintf("blk.%d.ffn_%s.%d.weight", l, kind, e), out, in); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

// refAttention is model.py's MultiHeadAttention (720-891) for one sequence
// from position 0: x is already normed.
func refAttention(c *model.Config, L *refLayer, x [][]float64, keyOK []bool) [][]float64 {
	K, Hq, Hkv := c.KeySize, c.NumQHeads, c.NumKVHeads
	G := Hq / Hkv
	T := len(x)
	q := make([][]float64, T)
	k := make([][]float64, T)
	v := make([][]float64, T)
	for t := range x {
		q[t] = matVec(L.q, x[t], Hq*K)
		k[t] = matVec(L.k, x[t], Hkv*K)
		v[t] = matVec(L.v, x[t], Hkv*K)
		for hd := 0; hd < Hq; hd++ {
			refRope(q[t][hd*K:(hd+1)*K], t, c.RopeBase)
		}
		for hd := 0; hd < Hkv; hd++ {
			refRope(k[t][hd*K:(hd+1)*K], t, c.RopeBase)
		}
	}
	mult, capv := float64(c.AttnOutputMultiplier), float64(c.AttnLogitCap)
	out := make([][]float64, T)
	s := make([]float64, T)
	for t := range x {
		// Grok-2's attention temperature for the query at position t.
		temp := 1.0
		if L := c.AttnTemperatureLen; L > 0 && t > L {
			temp = math.Log2(float64(t)) / math.Log2(float64(L))
		}
		o := make([]float64, Hq*K)
		for hd := 0; hd < Hq; hd++ {
			kv := hd / G // query head h reads kv head h / G
			qh := q[t][hd*K : (hd+1)*K]
			best := math.Inf(-1)
			for j := 0; j <= t; j++ {
				if !keyOK[j] {
					continue
				}
				sc := dot(qh, k[j][kv*K:(kv+1)*K]) * mult // no 1/√K
				if capv != 0 {
					sc = capv * math.Tanh(sc/capv)
				}
				sc *= temp
				s[j] = sc
				best = max(best, sc)
			}
			if math.IsInf(best, -1) {
				continue // every visible key is a pad: zero output
			}
			var sum float64
			for j := 0; j <= t; j++ {
				if keyOK[j] {
					s[j] = math.Exp(s[j] - best)
					sum += s[j]
				}
			}
			oh := o[hd*K : (hd+1)*K]
			for j := 0; j <= t; j++ {
				if !keyOK[j] {
					continue
				}
				p := s[j] / sum
				vj := v[j][kv*K : (kv+1)*K]
				for i := range oh {
					oh[i] += p * vj[i]
				}
			}
		}
		out[t] = matVec(L.o, o, c.EmbSize)
	}
	return out
}

// refRope rotates one head vector NeoX style: feature i pairs with i+K/2,
// inv_freq_j = 1/base^(2j/K). It is float64 here, as in the numpy reference
// that made the golden logits; model.py (and the engine) round it to fp32,
// which moves grok-tiny's len64 logits by ~4e-6.
func refRope(x []float64, pos int, base float32) {
	K := len(x)
	h := K / 2
	for j := 0; j < h; j++ {
		invFreq := 1 / math.Pow(float64(base), float64(2*j)/float64(K))
		theta := float64(pos) * invFreq
		cs, sn := math.Cos(theta), math.Sin(theta)
		a, b := x[j], x[j+h]
		x[j] = a*cs - b*sn
		x[j+h] = b*cs + a*sn
	}
}

// refFFN is the MoE (router softmax, top-k gates used as they are, NOT
// renormalised) or, with num_experts ≤ 1, the dense block, for one row.
// Grok-2 soft-caps the router logits and adds a dense MLP on the same row:
// (mlp + moe)/√2.
func refFFN(c *model.Config, L *refLayer, x []float64) []float64 {
	D, F := c.EmbSize, c.FFNSize
	mlp := func(gate, up, down []float64, F int) []float64 {
		g := matVec(gate, x, F)
		u := matVec(up, x, F)
		for i := range g {
			g[i] = gelu(g[i]) * u[i]
		}
		return matVec(down, g, D)
	}
	expert := func(e int) []float64 { return mlp(L.gate[e], L.up[e], L.down[e], F) }
	if c.NumExperts <= 1 {
		return expert(0)
	}
	E := c.NumExperts
	p := matVec(L.router, x, E)
	if rc := float64(c.RouterLogitCap); rc != 0 {
		for e := range p {
			p[e] = rc * math.Tanh(p[e]/rc)
		}
	}
	best := math.Inf(-1)
	for _, r := range p {
		best = max(best, r)
	}
	var sum float64
	for e := range p {
		p[e] = math.Exp(p[e] - best)
		sum += p[e]
	}
	for e := range p {
		p[e] /= sum
	}
	out := make([]float64, D)
	used := make([]bool, E)
	for j := 0; j < c.NumSelectedExperts; j++ {
		sel := -1
		for e := 0; e < E; e++ {
			if !used[e] && (sel < 0 || p[e] > p[sel]) { // ties: lower index
				sel = e
			}
		}
		used[sel] = true
		y := expert(sel)
		for i := range out {
			out[i] += p[sel] * y[i]
		}
	}
	if c.DenseFFNSize > 0 {
		y := mlp(L.dgate, L.dup, L.ddown, c.DenseFFNSize)
		for i := range out {
			out[i] = (out[i] + y[i]) / math.Sqrt2
		}
	}
	return out
}

// gelu is jax.nn.gelu's default tanh approximation.
func gelu(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func refNorm(h [][]float64, scale []float64, eps float64) [][]float64 {
	out := make([][]float64, len(h))
	for t := range h {
		out[t] = refNormRow(h[t], scale, eps)
	}
	return out
}

// refNormRow is RMSNorm: x / sqrt(mean(x²) + eps) · scale (scale as is).
func refNormRow(x, scale []float64, eps float64) []float64 {
	var ms float64
	for _, v := range x {
		ms += v * v
	}
	r := 1 / math.Sqrt(ms/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * r * scale[i]
	}
	return out
}

// matVec is W·x for W [out][len(x)] row-major.
func matVec(w, x []float64, out int) []float64 {
	y := make([]float64, out)
	n := len(x)
	for o := range y {
		y[o] = dot(w[o*n:(o+1)*n], x)
	}
	return y
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func add(dst, x []float64) {
	for i := range dst {
		dst[i] += x[i]
	}
}

// DequantizedF32 returns an F32 copy of every tensor of src named in names:
// the model of a quantised file's dequantised weights, for comparisons that
// must isolate the arithmetic from the quantisation.
func DequantizedF32(src model.TensorSource, names []string) (Source, error) {
	out := Source{}
	for _, name := range names {
		t, ok := src.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("testmodel: missing tensor %q", name)
		}
		v, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("testmodel: %w", err)
		}
		f := F32(name, t.Shape, v)
		f.Transposed = t.Transposed
		out[name] = f
	}
	return out, nil
}

// Compare64 returns max |got[i] - want[i]| (+Inf on a length mismatch or
// NaN) and the fraction of rows of width V whose argmax agrees.
func Compare64(got []float32, want []float64, V int) (maxAbs, argmaxAgree float64) {
	if len(got) != len(want) || V <= 0 || len(want)%V != 0 {
		return math.Inf(1), 0
	}
	rows, agree := len(want)/V, 0
	for r := 0; r < rows; r++ {
		g, w := got[r*V:(r+1)*V], want[r*V:(r+1)*V]
		bg, bw := 0, 0
		for i := range w {
			d := math.Abs(float64(g[i]) - w[i])
			if math.IsNaN(d) {
				d = math.Inf(1)
			}
			maxAbs = max(maxAbs, d)
			if g[i] > g[bg] {
				bg = i
			}
			if w[i] > w[bw] {
				bw = i
			}
		}
		if bg == bw {
			agree++
		}
	}
	return maxAbs, float64(agree) / float64(rows)
}

package model

import (
	"math"

	"github.com/grok-go/grok/kernels"
)

// RotaryEmbedding is model.py's RotaryEmbedding (635-691) with rotate_half
// (627-632): NeoX pairing of feature i with i+K/2, base 10000, position =
// the sequence's memory step + index in the call (semantics §3). With Yarn
// set it is llama.cpp's YaRN instead (semantics §G3).
type RotaryEmbedding struct {
	KeySize int
	Base    float32
	Yarn    YarnScaling
}

// Tables fills cos and sin (KeySize/2 each) with the rotation of position
// pos.
func (r *RotaryEmbedding) Tables(cos, sin []float32, pos int) {
	if !r.Yarn.On() {
		kernels.RopeTables(cos, sin, pos, r.Base, r.KeySize)
		return
	}
	r.yarnTables(cos, sin, pos)
}

// yarnTables is ggml's rope_yarn (ggml-cpu ops.cpp, with
// ggml_rope_yarn_corr_dims): pair j rotates by a mix of the extrapolated
// angle θ = pos·base^(-2j/K) and the interpolated θ/s, ramping from
// extrapolation below the correction dim low to interpolation above high,
// and cos and sin are scaled by mscale. It is computed in float64 and
// rounded once (ggml accumulates the frequencies in float32, which loses
// precision at Grok-2's base).
func (r *RotaryEmbedding) yarnTables(cos, sin []float32, pos int) {
	y, K, base := r.Yarn, float64(r.KeySize), float64(r.Base)
	s, ext := float64(y.Factor), float64(y.ExtFactor)
	low, high := yarnCorrDims(r.KeySize, y.OrigContext, base, float64(y.BetaFast), float64(y.BetaSlow))
	mscale := float64(y.AttnFactor)
	if ext != 0 {
		mscale *= 1 + 0.1*math.Log(s)
	}
	for j := range cos {
		extrap := float64(pos) * math.Pow(base, -2*float64(j)/K)
		theta := extrap / s
		if ext != 0 {
			ramp := 1 - min(1, max(0, (float64(j)-low)/max(0.001, high-low)))
			mix := ramp * ext
			theta = theta*(1-mix) + extrap*mix
		}
		cos[j] = float32(math.Cos(theta) * mscale)
		sin[j] = float32(math.Sin(theta) * mscale)
	}
}

// yarnCorrDims is ggml_rope_yarn_corr_dims: the pair indices at which
// wavelengths make betaFast and betaSlow rotations over the original
// context, floored and ceiled, clamped to [0, K-1].
func yarnCorrDims(K, origCtx int, base, betaFast, betaSlow float64) (low, high float64) {
	dim := func(rot float64) float64 {
		return float64(K) * math.Log(float64(origCtx)/(rot*2*math.Pi)) / (2 * math.Log(base))
	}
	return max(0, math.Floor(dim(betaFast))), min(float64(K-1), math.Ceil(dim(betaSlow)))
}

// Apply rotates heads consecutive head vectors of x (each KeySize long) for
// position pos. cos and sin are scratch of KeySize/2 each.
func (r *RotaryEmbedding) Apply(x []float32, heads, pos int, cos, sin []float32) {
	r.Tables(cos, sin, pos)
	for h := 0; h < heads; h++ {
		kernels.Rope(x[h*r.KeySize:(h+1)*r.KeySize], cos, sin)
	}
}

// ropeTableTask computes each row's RoPE table (cos and sin of its
// position's angles) once per forward call, one row per index. Every
// layer's ropeTask reads them: the layers' RotaryEmbeddings are equal (one
// config), so computing the tables per layer, as model.py does, would
// repeat the same work L times.
type ropeTableTask struct {
	ws  *workspace
	rot *RotaryEmbedding
}

func (t *ropeTableTask) Run(_, lo, hi int) {
	ws, h := t.ws, t.rot.KeySize/2
	for r := lo; r < hi; r++ {
		s := ws.seqs[ws.rowSeq[r]]
		t.rot.Tables(ws.cos[r*h:(r+1)*h], ws.sin[r*h:(r+1)*h], s.start+r-s.row)
	}
}

// ropeTask rotates the new q and k rows and writes k and v into the memory,
// one token per index.
type ropeTask struct {
	a       *MultiHeadAttention
	ws      *workspace
	mem     *KVMemory
	layer   int
	q, k, v []float32
}

func (t *ropeTask) Run(_, lo, hi int) {
	a, ws := t.a, t.ws
	K, Hq, Hkv := a.KeySize, a.NumQHeads, a.NumKVHeads
	qd, kd := Hq*K, Hkv*K
	for r := lo; r < hi; r++ {
		s := ws.seqs[ws.rowSeq[r]]
		pos := s.start + r - s.row
		// RoPE on q and k before the cache write (model.py 801-844); the
		// row's table serves the token's q and k heads.
		cos, sin := ws.cos[r*K/2:(r+1)*K/2], ws.sin[r*K/2:(r+1)*K/2]
		for h := 0; h < Hq; h++ {
			kernels.Rope(t.q[r*qd+h*K:r*qd+(h+1)*K], cos, sin)
		}
		for h := 0; h < Hkv; h++ {
			kernels.Rope(t.k[r*kd+h*K:r*kd+(h+1)*K], cos, sin)
			t.mem.write(t.layer, s.slot, h, pos, t.k[r*kd+h*K:r*kd+(h+1)*K], t.v[r*kd+h*K:r*kd+(h+1)*K])
		}
	}
}

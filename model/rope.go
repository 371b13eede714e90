package model

import "github.com/grok-go/grok/kernels"

// RotaryEmbedding is model.py's RotaryEmbedding (635-691) with rotate_half
// (627-632): NeoX pairing of feature i with i+K/2, base 10000, position =
// the sequence's memory step + index in the call (semantics §3).
type RotaryEmbedding struct {
	KeySize int
	Base    float32
}

// Tables fills cos and sin (KeySize/2 each) with the rotation of position
// pos.
func (r *RotaryEmbedding) Tables(cos, sin []float32, pos int) {
	kernels.RopeTables(cos, sin, pos, r.Base, r.KeySize)
}

// Apply rotates heads consecutive head vectors of x (each KeySize long) for
// position pos. cos and sin are scratch of KeySize/2 each.
func (r *RotaryEmbedding) Apply(x []float32, heads, pos int, cos, sin []float32) {
	r.Tables(cos, sin, pos)
	for h := 0; h < heads; h++ {
		kernels.Rope(x[h*r.KeySize:(h+1)*r.KeySize], cos, sin)
	}
}

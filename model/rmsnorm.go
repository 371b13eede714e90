package model

import (
	"fmt"

	"github.com/grok-go/grok/kernels"
)

// RMSNorm is model.py's RMSNorm (581-624): computed in fp32,
// y = x / sqrt(mean(x²) + eps) · scale, with the learned scale used as is.
type RMSNorm struct {
	Scale []float32
	Eps   float32
}

// Forward normalises n rows of width len(Scale) from x into dst (dst may be x).
func (r *RMSNorm) Forward(dst, x []float32, n int) {
	d := len(r.Scale)
	for i := 0; i < n; i++ {
		kernels.RMSNorm(dst[i*d:(i+1)*d], x[i*d:(i+1)*d], r.Scale, r.Eps)
	}
}

func loadRMSNorm(src TensorSource, name string, d int, eps float32) (RMSNorm, error) {
	t, err := need(src, name)
	if err != nil {
		return RMSNorm{}, err
	}
	if len(t.Shape) != 1 || t.Shape[0] != d {
		return RMSNorm{}, fmt.Errorf("model: tensor %q has shape %v, want [%d]", name, t.Shape, d)
	}
	s, err := t.Float32s()
	if err != nil {
		return RMSNorm{}, fmt.Errorf("model: %w", err)
	}
	return RMSNorm{Scale: s, Eps: eps}, nil
}

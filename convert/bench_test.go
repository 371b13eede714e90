package convert

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/grok-go/grok/loader"
)

// BenchmarkConvert converts the model at $GROK_BENCH_MODEL to each type
// (skipped without it); MB/s counts the source's tensor bytes:
//
//	GROK_BENCH_MODEL=model.gguf go test -bench Convert -run - ./convert/
func BenchmarkConvert(b *testing.B) {
	src := os.Getenv("GROK_BENCH_MODEL")
	if src == "" {
		b.Skip("set GROK_BENCH_MODEL to a model to convert")
	}
	for _, typ := range []Type{Keep, F32, F16, BF16, Q8_0} {
		b.Run(typ.String(), func(b *testing.B) {
			m, err := loader.Open(src, loader.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			var in int64
			for _, t := range m.Tensors() {
				in += t.Bytes
			}
			b.SetBytes(in)
			dst := filepath.Join(b.TempDir(), "out.gguf")
			for b.Loop() {
				if _, err := Convert(context.Background(), m, dst, Options{Type: typ}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

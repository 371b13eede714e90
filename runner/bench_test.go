package runner

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/sampler"
)

// BenchmarkEngine measures the engine alone (no HTTP) on the demo model:
// one iteration runs `batch` requests of 32 tokens together (sampled at
// temperature 0.8, as the server's throughput test does), and the
// reported tok/s is their aggregate decoding speed. Set against the server's
// figures (server/README.md) it shows what HTTP and streaming cost.
//
//	go test ./runner -run '^$' -bench Engine -benchtime 5x
func BenchmarkEngine(b *testing.B) {
	m, err := loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
	if err != nil {
		b.Fatal(err)
	}
	prompt := m.Tokenizer.Encode("And God said")
	for _, batch := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			e, err := New(m.LanguageModel, m.Tokenizer, Options{Slots: batch})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			var tokens int
			var elapsed time.Duration
			for b.Loop() {
				start := time.Now()
				streams := make([]*Stream, batch)
				for i := range streams {
					req := Request{Prompt: prompt, MaxTokens: 32, IgnoreEOS: true,
						Sampling: sampler.Params{Temperature: 0.8, Seed: uint64(i)}}
					if streams[i], err = e.Submit(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
				for _, s := range streams {
					_, ev := collect(b, s)
					tokens += ev.Usage.CompletionTokens
				}
				elapsed += time.Since(start)
			}
			st := e.Stats()
			b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tok/s")
			b.ReportMetric(float64(st.ForwardTime.Milliseconds())/float64(st.Steps), "ms/step")
		})
	}
}

package runner

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/sampler"
)

// BenchmarkEngine measures the engine alone (no HTTP) on the demo model,
// or on the model file named by $GROK_BENCH_MODEL (e.g. the "medium" model
// of bench/README.md, fed a random 16-token prompt): one iteration runs
// `batch` requests of 32 tokens together (sampled at temperature 0.8, as
// the server's throughput test does), and the reported tok/s is their
// aggregate decoding speed. Set against the server's figures
// (server/README.md) it shows what HTTP and streaming cost.
//
//	go test ./runner -run '^$' -bench Engine -benchtime 5x
func BenchmarkEngine(b *testing.B) {
	var m *loader.Model
	var err error
	var prompt []int
	if path := os.Getenv("GROK_BENCH_MODEL"); path != "" {
		m, err = loader.Open(path, loader.Options{})
		rng := rand.New(rand.NewPCG(1, 1))
		for range 16 {
			if m != nil {
				prompt = append(prompt, 1+rng.IntN(m.LanguageModel.Config.VocabSize-1))
			}
		}
	} else {
		m, err = loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
		if err == nil {
			prompt = m.Tokenizer.Encode("And God said")
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	// Warm-up, untimed: 16 sequences route to (nearly) every expert, so
	// the mapped weights are paged in before the first timed batch.
	run := func(e *Engine, batch int) (tokens int) {
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
		return tokens
	}
	if e, err := New(m.LanguageModel, m.Tokenizer, Options{Slots: 16}); err == nil {
		run(e, 16)
		e.Close()
	}
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
				tokens += run(e, batch)
				elapsed += time.Since(start)
			}
			st := e.Stats()
			b.ReportMetric(float64(tokens)/elapsed.Seconds(), "tok/s")
			b.ReportMetric(float64(st.ForwardTime.Milliseconds())/float64(st.Steps), "ms/step")
		})
	}
}

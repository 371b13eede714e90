package model_test

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// longContextModel has Grok-1's attention shape (48 q : 8 kv heads × 128)
// and small other parts, on a pool of GOMAXPROCS threads.
func longContextModel(b *testing.B) *model.LanguageModel {
	c := testmodel.SmallConfig()
	c.VocabSize, c.EmbSize, c.KeySize, c.NumQHeads, c.NumKVHeads, c.NumLayers = 256, 512, 128, 48, 8, 1
	c.FFNSize, c.NumExperts, c.NumSelectedExperts = 256, 8, 2
	c.SequenceLen = 8192
	lm, err := model.New(c, testmodel.Random(c, 1))
	if err != nil {
		b.Fatal(err)
	}
	p := parallel.New(runtime.GOMAXPROCS(0))
	b.Cleanup(p.Close)
	lm.Pool = p
	return lm
}

// BenchmarkLongContextDecode times one decode step of a model with Grok-1's
// attention shape (48 q : 8 kv heads × 128) and small other parts, after
// prompts of several lengths: the step's growth with the context is its
// attention.
func BenchmarkLongContextDecode(b *testing.B) {
	lm := longContextModel(b)
	c := lm.Config
	for _, kt := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, ctx := range []int{128, 4096, 8176} {
			b.Run(kt.String()+"/"+strconv.Itoa(ctx), func(b *testing.B) {
				mem, err := model.NewPagedKVMemory(&c, model.KVOptions{Slots: 1, SeqLen: 8192, KType: kt, VType: kt})
				if err != nil {
					b.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, 1))
				for mem.Step(0) < ctx {
					n := min(512, ctx-mem.Step(0))
					if _, err := lm.Forward(mem, []model.Input{{Tokens: randTokens(rng, n, c.VocabSize, false)}}); err != nil {
						b.Fatal(err)
					}
				}
				in := []model.Input{{Tokens: []int{1}}}
				b.ResetTimer()
				c0 := cpuTime()
				for b.Loop() {
					mem.Truncate(0, ctx)
					if _, err := lm.Forward(mem, in); err != nil {
						b.Fatal(err)
					}
				}
				// CPU time as well: wall time on a shared machine says little.
				b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// cpuTime is the process's user and system time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLongContextPrefill times a prompt of several lengths, in the
// runner's chunks of 512, on BenchmarkLongContextDecode's model: past the
// first chunk the growth is attention's.
func BenchmarkLongContextPrefill(b *testing.B) {
	lm := longContextModel(b)
	c := lm.Config
	for _, kt := range []tensor.DType{tensor.F32, tensor.F16} {
		for _, n := range []int{512, 4096} {
			b.Run(kt.String()+"/"+strconv.Itoa(n), func(b *testing.B) {
				mem, err := model.NewPagedKVMemory(&c, model.KVOptions{Slots: 1, SeqLen: 8192, KType: kt, VType: kt})
				if err != nil {
					b.Fatal(err)
				}
				toks := randTokens(rand.New(rand.NewPCG(1, 1)), n, c.VocabSize, false)
				c0 := cpuTime()
				for b.Loop() {
					mem.Reset(0)
					for s := 0; s < n; s += 512 {
						if _, err := lm.Forward(mem, []model.Input{{Tokens: toks[s:min(s+512, n)]}}); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tok/s")
				b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N*n), "cpu-µs/tok")
			})
		}
	}
}

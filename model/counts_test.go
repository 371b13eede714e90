package model_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/model"
)

// New sizes nothing by num_layers before the layers load: a count far above
// what the source holds fails at the first missing layer, having allocated
// only for the layers that exist.
func TestNewLayerCountBacksAllocation(t *testing.T) {
	src := fixtures.Random(fixtures.SmallConfig(), 1, fixtures.ModerateGains)
	for _, n := range []int{3, 10_000_000, 1<<31 - 1} {
		cfg := src.Config
		cfg.NumLayers = n
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		_, err := model.New(cfg, src)
		runtime.ReadMemStats(&b)
		if err == nil || !strings.Contains(err.Error(), "stop after layer 1") {
			t.Errorf("num_layers %d: err = %v, want it to say the weights stop after layer 1", n, err)
		}
		if alloc := b.TotalAlloc - a.TotalAlloc; alloc > 1<<20 {
			t.Errorf("num_layers %d: New allocated %d bytes before refusing", n, alloc)
		}
	}
}

package kernels

import (
	"testing"
	"time"

	"github.com/grok-go/grok/tensor"
)

// TestFMAPeakCounts checks the FLOP count of every level and that the loop
// returns (no count for a loop that runs no iterations), and the same of
// IntPeak, which counts only where the fast precision has integer products.
func TestFMAPeakCounts(t *testing.T) {
	for i := range levels {
		restore := useLevel(i)
		lanes := 1
		if levels[i] != nil {
			lanes = levels[i].lanes
		}
		if got, want := FMAPeak(1000), float64(1000*peakChains*lanes*2); got != want {
			t.Errorf("level %s: FMAPeak(1000) = %v FLOP, want %v", levelName(i), got, want)
		}
		if got := FMAPeak(0); got != 0 {
			t.Errorf("level %s: FMAPeak(0) = %v, want 0", levelName(i), got)
		}
		var want float64 // integer products only with VNNI (FastTypes)
		if FastTypes(tensor.Q8_0) {
			want = 1000 * peakChains * 32 * 2
		}
		if got := IntPeak(1000); got != want {
			t.Errorf("level %s: IntPeak(1000) = %v operations, want %v", levelName(i), got, want)
		}
		if got := IntPeak(0); got != 0 {
			t.Errorf("level %s: IntPeak(0) = %v, want 0", levelName(i), got)
		}
		restore()
	}
}

// BenchmarkFMAPeak is the one-thread float32 FMA peak that BenchmarkGEMM's
// GFLOP/s compare with.
func BenchmarkFMAPeak(b *testing.B) {
	benchLevels(b, func(b *testing.B) {
		var flops float64
		start := time.Now()
		for b.Loop() {
			flops += FMAPeak(1 << 16)
		}
		b.ReportMetric(flops/time.Since(start).Seconds()/1e9, "GFLOP/s")
	})
}

// BenchmarkIntPeak is the one-thread int16 VPDPWSSD peak that the fast
// precision's GEMMs compare with (2 operations an int16 product).
func BenchmarkIntPeak(b *testing.B) {
	if IntPeak(1) == 0 {
		b.Skip("no AVX-512 VNNI")
	}
	var ops float64
	start := time.Now()
	for b.Loop() {
		ops += IntPeak(1 << 16)
	}
	b.ReportMetric(ops/time.Since(start).Seconds()/1e9, "GOP/s")
}

package kernels

import (
	"testing"
	"time"
)

// TestFMAPeakCounts checks the FLOP count of every level and that the loop
// returns (no count for a loop that runs no iterations).
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

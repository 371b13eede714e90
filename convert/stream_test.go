package convert

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/grok-go/grok/formats/safetensors"
	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
)

// lookupOnly hides a source's Split: the conversion then reads each expert
// joined in memory by the source, as it did before it streamed the slices.
type lookupOnly struct{ model.TensorSource }

// writeTP writes a random Grok-2 model c as xai-org/grok-2's Hugging Face
// release (experts split 8 ways) into a new folder.
func writeTP(t *testing.T, c model.Config, seed uint64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "hf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := fixtures.Random(c, seed, fixtures.ModerateGains)
	if err := fixtures.WriteGrok2Safetensors(dir, m, fixtures.Grok2Options{DType: "BF16", TP: 8}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// convertHF converts the release at dir, streaming the experts' slices
// (the source opened as grok convert opens it) or, with joined, from the
// experts joined in memory; it returns the file's bytes and the bytes the
// source copied to join slices.
func convertHF(t *testing.T, dir string, typ Type, joined bool) ([]byte, int64) {
	t.Helper()
	m, err := loader.Open(dir, loader.Options{WeightsOnly: !joined})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st := m.Source.(*safetensors.Model)
	if joined {
		m.Source = lookupOnly{m.Source}
	}
	dst := filepath.Join(t.TempDir(), "out.gguf")
	if _, err := Convert(context.Background(), m, dst, Options{Type: typ, Name: "g2"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	return b, st.AssembledBytes()
}

// grok2Wide is a Grok-2 fixture whose experts are large next to a
// conversion's working memory when blockElems is small: 8 experts of
// 2048×256 in one layer, 25 MB in bf16, input sizes whole K-quant blocks.
func grok2Wide() model.Config {
	c := fixtures.Grok2SmallConfig()
	c.EmbSize, c.NumLayers, c.FFNSize, c.NumExperts, c.DenseFFNSize = 256, 1, 2048, 8, 256
	return c
}

// Converting xai-org/grok-2's layout streams the experts' tensor-parallel
// slices: the file is byte for byte the one converted from the experts
// joined in memory, for the plain types and a K-quant mixture, and nothing
// is joined.
func TestConvertTPStreamsSameBytes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     model.Config
		types []Type
	}{
		{"small", fixtures.Grok2SmallConfig(), []Type{Keep, F32, F16, BF16, Q8_0}},
		{"wide", grok2Wide(), []Type{Keep, F16, Q8_0, Q4_K_M, Q6_K}},
	} {
		dir := writeTP(t, tc.c, 5)
		for _, typ := range tc.types {
			t.Run(tc.name+"/"+typ.String(), func(t *testing.T) {
				if raceEnabled && tc.name == "wide" && typ > Q8_0 {
					t.Skip("slow under the race detector")
				}
				want, joinedBytes := convertHF(t, dir, typ, true)
				if joinedBytes == 0 {
					t.Fatal("the joined conversion joined nothing: the fixture has no split experts")
				}
				got, n := convertHF(t, dir, typ, false)
				if n != 0 {
					t.Errorf("the streamed conversion joined %d bytes in memory", n)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("streamed file differs from the joined one (%d vs %d bytes)", len(got), len(want))
				}
			})
		}
	}
}

// A conversion's memory does not grow with the experts: opening the
// release as grok convert does and converting it allocates a fraction of
// the experts' size, where joining them allocates all of it.
func TestConvertTPMemoryBound(t *testing.T) {
	defer func(n int) { blockElems = n }(blockElems)
	blockElems = 1 << 16 // 256 KB of float32 rows
	c := grok2Wide()
	expertBytes := int64(c.NumLayers * c.NumExperts * 3 * c.FFNSize * c.EmbSize * 2)
	dir := writeTP(t, c, 6)
	for _, typ := range []Type{Keep, F16, BF16, Q8_0, Q4_K_M} {
		t.Run(typ.String(), func(t *testing.T) {
			if raceEnabled && typ > Q8_0 {
				t.Skip("slow under the race detector")
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m, err := loader.Open(dir, loader.Options{WeightsOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "out.gguf")
			_, err = Convert(context.Background(), m, dst, Options{Type: typ, Name: "g2"})
			m.Close()
			if err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			alloc := int64(after.TotalAlloc - before.TotalAlloc)
			t.Logf("%v: %d bytes allocated; experts %d bytes", typ, alloc, expertBytes)
			if alloc > expertBytes/4 {
				t.Errorf("open and convert allocated %d bytes, more than a quarter of the experts' %d", alloc, expertBytes)
			}
		})
	}
}

package loader

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/model"
)

// forwardLen7 returns the logits of every position of the len7 prompt.
func forwardLen7(t *testing.T, m *Model) []float32 {
	t.Helper()
	mem, err := model.NewKVMemory(&m.Config, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Forward(mem, []model.Input{{Tokens: testmodel.ReadTokens(t, goldenDir)["len7"], AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ggufCopy returns a Writer that writes f again, tensor for tensor.
func ggufCopy(t *testing.T, f *gguf.File) *gguf.Writer {
	t.Helper()
	w := gguf.NewWriter()
	for _, kv := range f.Metadata {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensorOf(f, ti); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// TestSplitModelsLogits: the golden model as gguf-split shards and as byte
// parts cut at awkward places gives, through Open under every name a user
// may give, logits bit-identical to the single file's.
func TestSplitModelsLogits(t *testing.T) {
	single := openGolden(t, "grok-tiny.gguf")
	want := forwardLen7(t, single)
	data, err := os.ReadFile(filepath.Join(goldenDir, "grok-tiny.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mkdir := func(name string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	by8, err := ggufCopy(t, f).WriteSplit(filepath.Join(mkdir("by8"), "grok-tiny"), 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	bySize, err := ggufCopy(t, f).WriteSplit(filepath.Join(mkdir("bysize"), "grok-tiny"), 0, 600<<10)
	if err != nil {
		t.Fatal(err)
	}

	// Parts: one cut inside the header, one inside the largest tensor, one at
	// a tensor's end, one a byte after another tensor's start.
	big := f.Tensors[0]
	for _, ti := range f.Tensors {
		if ti.Size > big.Size {
			big = ti
		}
	}
	last := f.Tensors[len(f.Tensors)-1]
	cuts := []int64{f.DataOffset / 2, f.DataOffset + big.Offset + big.Size/3, f.DataOffset + big.Offset + big.Size, f.DataOffset + last.Offset + 1}
	slices.Sort(cuts)
	partsDir := mkdir("parts")
	bounds := append(append([]int64{0}, cuts...), int64(len(data)))
	var parts []string
	for i := 0; i+1 < len(bounds); i++ {
		p := filepath.Join(partsDir, fmt.Sprintf("grok-tiny.Q4_K_M.gguf.part%dof%d", i+1, len(bounds)-1))
		if err := os.WriteFile(p, data[bounds[i]:bounds[i+1]], 0o644); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}

	for _, tc := range []struct {
		name, path string
		files      int
	}{
		{"first shard", by8[0], len(by8)},
		{"middle shard", by8[len(by8)/2], len(by8)},
		{"prefix", strings.TrimSuffix(by8[0], "-00001-of-"+fmt.Sprintf("%05d", len(by8))+".gguf"), len(by8)},
		{"prefix.gguf", filepath.Join(filepath.Dir(bySize[0]), "grok-tiny.gguf"), len(bySize)},
		{"size-split last shard", bySize[len(bySize)-1], len(bySize)},
		{"part 1", parts[0], len(parts)},
		{"part 3", parts[2], len(parts)},
		{"parts' whole name", filepath.Join(partsDir, "grok-tiny.Q4_K_M.gguf"), len(parts)},
		{"llama-gguf-split output", "../testdata/grok-tiny-split/grok-tiny-00002-of-00004.gguf", 4},
		{"llama-gguf-split prefix", "../testdata/grok-tiny-split/grok-tiny", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Open(tc.path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Tokenizer == nil || m.Tokenizer.VocabSize() != single.Tokenizer.VocabSize() {
				t.Error("the embedded tokenizer was not loaded")
			}
			if n := len(m.GGUF.Shards()) + len(m.GGUF.Parts()); n != tc.files {
				t.Errorf("%d files, want %d", n, tc.files)
			}
			got := forwardLen7(t, m)
			if len(got) != len(want) {
				t.Fatalf("%d logits, want %d", len(got), len(want))
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("logit %d is %v, the single file's %v", i, got[i], want[i])
				}
			}
			if m.GGUF.Parts() != nil {
				t.Logf("%d parts, %d bytes assembled", len(parts), m.GGUF.AssembledBytes())
				if m.GGUF.AssembledBytes() != big.Size+last.Size {
					t.Errorf("assembled %d bytes, want %d (%s and %s)", m.GGUF.AssembledBytes(), big.Size+last.Size, big.Name, last.Name)
				}
			}
		})
	}
}

// TestOpenSplitErrors: a broken set is refused through Open with the
// package's message, and a plain missing file still says so.
func TestOpenSplitErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.gguf.part2of3")
	if err := os.WriteFile(p, []byte("tail bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{p, "2 of the 3 parts are missing"},
		{filepath.Join(dir, "m.gguf"), "2 of the 3 parts are missing"},
		{filepath.Join(dir, "absent"), "no such file"},
	} {
		_, err := Open(tc.path, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s) = %v, want it to mention %q", tc.path, err, tc.want)
		}
	}
}

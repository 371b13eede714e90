package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// FuzzParts cuts a file into parts at fuzzed offsets and checks that
// assembleParts never panics and agrees with Parse on the whole: it accepts
// exactly what Parse accepts, with the same tensors byte for byte, and
// copies exactly the tensors some cut falls inside.
func FuzzParts(f *testing.F) {
	for _, s := range seedFiles(f) {
		f.Add(s, []byte{})
		f.Add(s, []byte{3, 0, 40, 0})
		f.Add(s, []byte{byte(len(s) / 2), byte(len(s) / 512), 0xff, 0xff})
	}
	f.Fuzz(func(t *testing.T, data, cutBytes []byte) {
		var cuts []int
		for i := 0; i+1 < len(cutBytes) && len(cuts) < 8; i += 2 {
			cuts = append(cuts, int(binary.LittleEndian.Uint16(cutBytes[i:]))%(len(data)+1))
		}
		slices.Sort(cuts)
		bounds := append(append([]int{0}, cuts...), len(data))
		var paths []string
		var datas [][]byte
		for i := 0; i+1 < len(bounds); i++ {
			paths = append(paths, fmt.Sprintf("m.gguf.part%dof%d", i+1, len(bounds)-1))
			datas = append(datas, data[bounds[i]:bounds[i+1]:bounds[i+1]])
		}
		whole, werr := Parse(data)
		got, err := assembleParts(paths, datas)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			if werr == nil {
				t.Fatalf("parts refused (%v), but the whole file parses", err)
			}
			return
		}
		if werr != nil {
			t.Fatalf("parts accepted, but the whole file does not parse: %v", werr)
		}
		if len(got.Tensors) != len(whole.Tensors) || len(got.Metadata) != len(whole.Metadata) || got.DataOffset != whole.DataOffset {
			t.Fatal("parts and the whole file differ")
		}
		for _, ti := range whole.Tensors {
			a, _ := whole.TensorBytes(ti.Name)
			b, ok := got.TensorBytes(ti.Name)
			if !ok || !bytes.Equal(a, b) {
				t.Fatalf("tensor %q differs", ti.Name)
			}
		}
		if want := straddling(whole, cuts); got.AssembledBytes() != want {
			t.Fatalf("assembled %d bytes, want %d", got.AssembledBytes(), want)
		}
	})
}

// splitSeeds returns shard sets written as llama-gguf-split writes them.
func splitSeeds(t testing.TB) [][][]byte {
	w := NewWriter()
	must(t, w.AddKV("general.architecture", "grok"))
	must(t, w.AddTensor("a", tensor.F32, []int{3}, f32bytes(1, 2, 3)))
	must(t, w.AddTensor("b", tensor.F16, []int{2, 4}, make([]byte, 16)))
	must(t, w.AddTensor("c", tensor.I8, []int{32}, bytes.Repeat([]byte{0x81}, 32)))
	var sets [][][]byte
	for _, n := range []int{1, 2} {
		shards, err := w.Split(n, 0)
		must(t, err)
		var set [][]byte
		for _, s := range shards {
			set = append(set, write(t, s))
		}
		sets = append(sets, set)
	}
	return sets
}

// FuzzShards feeds assembleShards up to three fuzzed shards (seeded with
// real gguf-split output, so that mutations reach the split.* values) and
// checks that it never panics and that what it accepts is a consistent set.
func FuzzShards(f *testing.F) {
	for _, set := range splitSeeds(f) {
		for len(set) < 3 {
			set = append(set, nil)
		}
		f.Add(set[0], set[1], set[2])
	}
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		var files []*File
		var paths []string
		for i, d := range [][]byte{a, b, c} {
			if len(d) == 0 {
				break
			}
			g, err := Parse(d)
			if err != nil {
				return
			}
			files = append(files, g)
			paths = append(paths, fmt.Sprintf("m-%05d-of-00003.gguf", i+1))
		}
		if len(files) == 0 {
			return
		}
		got, err := assembleShards(paths, files)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
		}
		want, _ := got.Int(SplitTensorsCountKey)
		if int64(len(got.Tensors)) != want {
			t.Fatalf("%d tensors, split.tensors.count %d", len(got.Tensors), want)
		}
		var n int
		for i, g := range files {
			if no, _ := g.Uint(SplitNoKey); no != uint64(i) {
				t.Fatalf("shard %d has split.no %d", i, no)
			}
			if cnt, _ := g.Uint(SplitCountKey); cnt != uint64(len(files)) {
				t.Fatalf("shard %d has split.count %d of %d", i, cnt, len(files))
			}
			for _, ti := range g.Tensors {
				x, _ := g.TensorBytes(ti.Name)
				y, ok := got.TensorBytes(ti.Name)
				if !ok || !bytes.Equal(x, y) || got.Tensors[n].Name != ti.Name {
					t.Fatalf("tensor %q differs from its shard's", ti.Name)
				}
				n++
			}
		}
	})
}

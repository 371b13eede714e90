package gguf

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tiny returns the bytes of the F32 grok-tiny fixture and its parse.
func tiny(t testing.TB) ([]byte, *File) {
	t.Helper()
	data, err := os.ReadFile(tinyF32)
	must(t, err)
	f, err := Parse(data)
	must(t, err)
	return data, f
}

// copyWriter returns a Writer that writes f again: same metadata with the
// stored types, same tensors in the same order.
func copyWriter(t testing.TB, f *File) *Writer {
	t.Helper()
	w := NewWriter()
	for _, kv := range f.Metadata {
		must(t, w.AddKV(kv.Key, kv.Value))
	}
	for _, ti := range f.Tensors {
		must(t, w.AddTensorOf(f, ti))
	}
	return w
}

// sameTensors checks that got holds exactly want's tensors, byte for byte.
func sameTensors(t *testing.T, got, want *File) {
	t.Helper()
	if len(got.Tensors) != len(want.Tensors) {
		t.Fatalf("%d tensors, want %d", len(got.Tensors), len(want.Tensors))
	}
	for i, ti := range want.Tensors {
		g := got.Tensors[i]
		if g.Name != ti.Name || g.Type != ti.Type || !reflect.DeepEqual(g.Dims, ti.Dims) || g.Size != ti.Size {
			t.Fatalf("tensor %d is %+v, want %+v", i, g, ti)
		}
		a, _ := want.TensorBytes(ti.Name)
		b, ok := got.TensorBytes(ti.Name)
		if !ok || !bytes.Equal(a, b) {
			t.Fatalf("tensor %q: bytes differ", ti.Name)
		}
		if _, err := got.Tensor(ti.Name); err != nil {
			t.Fatalf("tensor %q: %v", ti.Name, err)
		}
	}
}

func TestWriteSplit(t *testing.T) {
	_, orig := tiny(t)
	for _, tc := range []struct {
		name       string
		maxTensors int
		maxBytes   int64
		shards     int
	}{
		{"8 tensors", 8, 0, (len(orig.Tensors) + 7) / 8},
		{"1 tensor", 1, 0, len(orig.Tensors)},
		{"all in one", 1000, 0, 1},
		{"512 KiB", 0, 512 << 10, 0},
		{"1 byte", 0, 1, len(orig.Tensors)}, // every tensor alone, none empty
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := filepath.Join(t.TempDir(), "grok-tiny")
			paths, err := copyWriter(t, orig).WriteSplit(prefix, tc.maxTensors, tc.maxBytes)
			must(t, err)
			if tc.shards != 0 && len(paths) != tc.shards {
				t.Fatalf("%d shards, want %d", len(paths), tc.shards)
			}
			for i, p := range paths {
				if want := fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i+1, len(paths)); p != want {
					t.Fatalf("shard %d is %s, want %s", i, p, want)
				}
				g, err := Open(p)
				must(t, err)
				// The keys and types llama-gguf-split writes, after the
				// original metadata in the first shard and alone elsewhere.
				keys := g.Metadata
				if i == 0 {
					if !reflect.DeepEqual(keys[:len(orig.Metadata)], orig.Metadata) {
						t.Error("the first shard's metadata does not start with the original's")
					}
					keys = keys[len(orig.Metadata):]
				}
				want := []KV{
					{SplitNoKey, Value{Type: TypeUint16, Data: uint16(i)}},
					{SplitTensorsCountKey, Value{Type: TypeInt32, Data: int32(len(orig.Tensors))}},
					{SplitCountKey, Value{Type: TypeUint16, Data: uint16(len(paths))}},
				}
				if !reflect.DeepEqual(keys, want) {
					t.Errorf("shard %d: keys %v, want %v", i, keys, want)
				}
				if len(g.Tensors) == 0 {
					t.Errorf("shard %d has no tensors", i)
				}
				if tc.maxTensors > 0 && len(g.Tensors) > tc.maxTensors {
					t.Errorf("shard %d has %d tensors, more than %d", i, len(g.Tensors), tc.maxTensors)
				}
				g.Close()
			}
			for _, open := range []string{paths[0], paths[len(paths)-1], prefix} {
				f, err := OpenModel(open)
				if err != nil {
					t.Fatalf("OpenModel(%s): %v", open, err)
				}
				sameTensors(t, f, orig)
				if len(paths) > 1 && !reflect.DeepEqual(f.Shards(), paths) {
					t.Errorf("Shards() = %v, want %v", f.Shards(), paths)
				}
				if f.AssembledBytes() != 0 || f.Parts() != nil {
					t.Error("shards were copied or taken for parts")
				}
				if a, _ := f.String("general.architecture"); a != "grok" {
					t.Errorf("general.architecture %q", a)
				}
				must(t, f.Close())
				if _, ok := f.TensorBytes(orig.Tensors[0].Name); ok {
					t.Error("TensorBytes works after Close")
				}
			}
		})
	}
}

func TestSplitRefusesBadLimits(t *testing.T) {
	_, orig := tiny(t)
	for _, lim := range [][2]int64{{0, 0}, {8, 1 << 20}, {-1, 0}} {
		if _, err := copyWriter(t, orig).Split(int(lim[0]), lim[1]); err == nil {
			t.Errorf("Split(%d, %d) succeeded", lim[0], lim[1])
		}
	}
	// A model loaded from shards keeps their split.* keys; splitting it again
	// must not duplicate them.
	w := copyWriter(t, orig)
	must(t, w.AddKV(SplitCountKey, uint16(9)))
	shards, err := w.Split(8, 0)
	must(t, err)
	if n, _ := shards[0].kvs[len(shards[0].kvs)-1].Value.Uint(); n != uint64(len(shards)) {
		t.Errorf("split.count %d, want %d", n, len(shards))
	}
}

// setKV replaces (or, for a nil value, removes) a metadata key of w.
func setKV(t *testing.T, w *Writer, key string, value any) {
	t.Helper()
	for i, kv := range w.kvs {
		if kv.Key == key {
			if value == nil {
				w.kvs = append(w.kvs[:i], w.kvs[i+1:]...)
				delete(w.keys, key)
				return
			}
			v, err := toValue(value)
			must(t, err)
			w.kvs[i].Value = v
			return
		}
	}
	must(t, w.AddKV(key, value))
}

func TestOpenModelShardErrors(t *testing.T) {
	_, orig := tiny(t)
	const n = 4 // shards of the set every case starts from
	for _, tc := range []struct {
		name   string
		shards func(t *testing.T, s []*Writer) // changes the shards before they are written
		files  func(t *testing.T, paths []string) string
		want   string // in the error
	}{
		{name: "shard 3 missing", files: func(t *testing.T, p []string) string {
			must(t, os.Remove(p[2]))
			return p[0]
		}, want: "1 of the 4 shards are missing: shard 3 (grok-tiny-00003-of-00004.gguf)"},
		{name: "all but the first missing", files: func(t *testing.T, p []string) string {
			for _, q := range p[1:] {
				must(t, os.Remove(q))
			}
			return p[0]
		}, want: "3 of the 4 shards are missing"},
		{name: "first missing, prefix", files: func(t *testing.T, p []string) string {
			must(t, os.Remove(p[0]))
			return strings.TrimSuffix(p[0], "-00001-of-00004.gguf")
		}, want: "no such file"},
		{name: "first missing, later shard", files: func(t *testing.T, p []string) string {
			must(t, os.Remove(p[0]))
			return p[1]
		}, want: "shard 1 (grok-tiny-00001-of-00004.gguf)"},
		{name: "duplicated split.no", shards: func(t *testing.T, s []*Writer) {
			setKV(t, s[2], SplitNoKey, uint16(1))
		}, want: "grok-tiny-00003-of-00004.gguf: split.no 1 is also that of"},
		{name: "mismatched split.no", shards: func(t *testing.T, s []*Writer) {
			setKV(t, s[2], SplitNoKey, uint16(3))
		}, want: "grok-tiny-00003-of-00004.gguf: split.no is 3, but the file is shard 3 of 4"},
		{name: "no split.no", shards: func(t *testing.T, s []*Writer) {
			setKV(t, s[1], SplitNoKey, nil)
		}, want: "grok-tiny-00002-of-00004.gguf: no split.no key"},
		{name: "split.no of a wrong type", shards: func(t *testing.T, s []*Writer) {
			setKV(t, s[1], SplitNoKey, "1")
		}, want: "grok-tiny-00002-of-00004.gguf: split.no is"},
		{name: "split.no too large", shards: func(t *testing.T, s []*Writer) {
			setKV(t, s[1], SplitNoKey, uint32(1<<16+1))
		}, want: "want an unsigned 16-bit count"},
		{name: "split.count disagrees", shards: func(t *testing.T, s []*Writer) {
			setKV(t, s[3], SplitCountKey, uint16(5))
		}, want: "grok-tiny-00004-of-00004.gguf: split.count is 5, but the set has 4 shards"},
		{name: "split.tensors.count wrong", shards: func(t *testing.T, s []*Writer) {
			for _, w := range s {
				setKV(t, w, SplitTensorsCountKey, int32(len(orig.Tensors)+1))
			}
		}, want: fmt.Sprintf("split.tensors.count is %d, but the 4 shards hold %d tensors", len(orig.Tensors)+1, len(orig.Tensors))},
		{name: "split.tensors.count negative", shards: func(t *testing.T, s []*Writer) {
			setKV(t, s[0], SplitTensorsCountKey, int32(-1))
		}, want: "want a non-negative 32-bit count"},
		{name: "split.tensors.count disagrees", shards: func(t *testing.T, s []*Writer) {
			setKV(t, s[2], SplitTensorsCountKey, int32(3))
		}, want: "grok-tiny-00003-of-00004.gguf: split.tensors.count is 3, but"},
		{name: "tensor in two shards", shards: func(t *testing.T, s []*Writer) {
			s[3].tensors = append(s[3].tensors, s[1].tensors[0])
		}, want: fmt.Sprintf("tensor %q is in both", "")},
		{name: "shard not GGUF", files: func(t *testing.T, p []string) string {
			must(t, os.WriteFile(p[1], []byte("not a model at all"), 0o644))
			return p[0]
		}, want: "not a GGUF file) ("},
		{name: "shard truncated", files: func(t *testing.T, p []string) string {
			must(t, os.Truncate(p[3], 1000))
			return p[0]
		}, want: "grok-tiny-00004-of-00004.gguf"},
		{name: "shard renamed", files: func(t *testing.T, p []string) string {
			must(t, os.Rename(p[1], p[0]))
			return p[0]
		}, want: "should be named grok-tiny-00002-of-00004.gguf"},
		{name: "shard under another name", files: func(t *testing.T, p []string) string {
			q := filepath.Join(filepath.Dir(p[0]), "model.gguf")
			must(t, os.Rename(p[0], q))
			return q
		}, want: "the other shards cannot be found"},
		{name: "nothing there", files: func(t *testing.T, p []string) string {
			return filepath.Join(filepath.Dir(p[0]), "other")
		}, want: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shards, err := copyWriter(t, orig).Split((len(orig.Tensors)+n-1)/n, 0)
			must(t, err)
			if len(shards) != n {
				t.Fatalf("%d shards, want %d", len(shards), n)
			}
			if tc.shards != nil {
				tc.shards(t, shards)
			}
			prefix := filepath.Join(t.TempDir(), "grok-tiny")
			paths := make([]string, n)
			for i, s := range shards {
				paths[i] = ShardPath(prefix, i, n)
				must(t, s.WriteFile(paths[i]))
			}
			open := paths[0]
			if tc.files != nil {
				open = tc.files(t, paths)
			}
			f, err := OpenModel(open)
			if err == nil {
				f.Close()
				t.Fatalf("OpenModel(%s) succeeded", open)
			}
			want := tc.want
			if tc.name == "tensor in two shards" {
				want = fmt.Sprintf("tensor %q is in both %s and %s", shards[1].tensors[0].name, paths[1], paths[3])
			}
			t.Log(err)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q\nwant it to contain %q", err, want)
			}
		})
	}
}

// writeParts writes data cut at the offsets cuts as prefix.part1ofN … and
// returns their paths.
func writeParts(t *testing.T, prefix string, data []byte, cuts []int) []string {
	t.Helper()
	bounds := append(append([]int{0}, cuts...), len(data))
	n := len(bounds) - 1
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("%s.part%dof%d", prefix, i+1, n)
		must(t, os.WriteFile(paths[i], data[bounds[i]:bounds[i+1]], 0o644))
	}
	return paths
}

// straddling sums the sizes of the tensors of f that some cut falls inside.
func straddling(f *File, cuts []int) int64 {
	var n int64
	for _, ti := range f.Tensors {
		lo, hi := f.DataOffset+ti.Offset, f.DataOffset+ti.Offset+ti.Size
		for _, c := range cuts {
			if lo < int64(c) && int64(c) < hi {
				n += ti.Size
				break
			}
		}
	}
	return n
}

func TestOpenModelParts(t *testing.T) {
	data, orig := tiny(t)
	big := orig.Tensors[0] // token_embd, the largest tensor
	for _, ti := range orig.Tensors {
		if ti.Size > big.Size {
			big = ti
		}
	}
	mid := int(orig.DataOffset + big.Offset + big.Size/2 + 3)
	boundary := int(orig.DataOffset + big.Offset + big.Size) // a tensor's end
	hdr := int(orig.DataOffset)
	t.Logf("header %d bytes, largest tensor %s of %d bytes", hdr, big.Name, big.Size)
	for _, tc := range []struct {
		name string
		cuts []int
	}{
		{"one part", nil},
		{"in a tensor", []int{mid}},
		{"in the header, then in a tensor", []int{hdr / 3, mid}},
		{"header over four parts", []int{7, hdr / 2, hdr - 1, mid}},
		{"at the data section", []int{int(orig.DataOffset)}},
		{"at a tensor's end", []int{boundary}},
		{"every 300 KB", []int{300000, 600000, 900000, 1200000, 1500000, 1800000, 2100000, 2400000, 2700000, 3000000, 3300000, 3600000}},
		{"empty part", []int{mid, mid}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "grok-tiny.gguf")
			paths := writeParts(t, base, data, tc.cuts)
			wantAssembled := straddling(orig, tc.cuts)
			if tc.name == "in a tensor" && wantAssembled != big.Size {
				t.Fatalf("the cut does not fall inside %s", big.Name)
			}
			for _, open := range append([]string{base}, paths...) {
				f, err := OpenModel(open)
				if err != nil {
					t.Fatalf("OpenModel(%s): %v", open, err)
				}
				sameTensors(t, f, orig)
				if !reflect.DeepEqual(f.Metadata, orig.Metadata) || f.DataOffset != orig.DataOffset {
					t.Error("metadata differs from the whole file's")
				}
				if !reflect.DeepEqual(f.Parts(), paths) {
					t.Errorf("Parts() = %v, want %v", f.Parts(), paths)
				}
				if got := f.AssembledBytes(); got != wantAssembled {
					t.Errorf("AssembledBytes() = %d, want %d", got, wantAssembled)
				}
				must(t, f.Close())
			}
			t.Logf("%d parts, %d bytes assembled", len(paths), wantAssembled)
		})
	}
}

func TestOpenModelPartErrors(t *testing.T) {
	data, orig := tiny(t)
	mid := int(orig.DataOffset) + 100000
	cuts := []int{1000, mid, 2 * mid}
	for _, tc := range []struct {
		name  string
		files func(t *testing.T, p []string) string
		want  string
	}{
		{"part 3 missing", func(t *testing.T, p []string) string {
			must(t, os.Remove(p[2]))
			return p[0]
		}, "1 of the 4 parts are missing ([grok-tiny.gguf.part3of4])"},
		{"counts disagree", func(t *testing.T, p []string) string {
			must(t, os.Rename(p[2], strings.Replace(p[2], "part3of4", "part3of5", 1)))
			return p[0]
		}, "disagree on the number of parts (4 and 5)"},
		{"part past the count", func(t *testing.T, p []string) string {
			must(t, os.Rename(p[2], strings.Replace(p[2], "part3of4", "part5of4", 1)))
			return p[1]
		}, "there is no part 5 of 4"},
		{"part twice", func(t *testing.T, p []string) string {
			must(t, os.WriteFile(strings.Replace(p[2], "part3of4", "part03of04", 1), nil, 0o644))
			return p[0]
		}, "are both part 3 of 4"},
		{"last part short", func(t *testing.T, p []string) string {
			st, err := os.Stat(p[3])
			must(t, err)
			must(t, os.Truncate(p[3], st.Size()-100))
			return p[3]
		}, "lie past the end of the file"},
		{"last part empty", func(t *testing.T, p []string) string {
			must(t, os.Truncate(p[3], 0))
			return strings.TrimSuffix(p[0], ".part1of4")
		}, "is a part short or missing?"},
		{"first part not GGUF", func(t *testing.T, p []string) string {
			must(t, os.WriteFile(p[0], bytes.Repeat([]byte{'x'}, 1000), 0o644))
			return p[1]
		}, "not a GGUF file) ("},
		{"parts out of order", func(t *testing.T, p []string) string {
			a, err := os.ReadFile(p[1])
			must(t, err)
			b, err := os.ReadFile(p[0])
			must(t, err)
			must(t, os.WriteFile(p[0], a, 0o644))
			must(t, os.WriteFile(p[1], b, 0o644))
			return p[0]
		}, "grok-tiny.gguf.part1of4, the first of 4 parts"},
		{"a folder as a part", func(t *testing.T, p []string) string {
			must(t, os.Remove(p[1]))
			must(t, os.Mkdir(p[1], 0o755))
			return p[0]
		}, "grok-tiny.gguf.part2of4"},
		{"no parts", func(t *testing.T, p []string) string {
			return filepath.Join(filepath.Dir(p[0]), "other.gguf.part1of2")
		}, "no parts other.gguf.part1ofN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			paths := writeParts(t, filepath.Join(t.TempDir(), "grok-tiny.gguf"), data, cuts)
			open := tc.files(t, paths)
			f, err := OpenModel(open)
			if err == nil {
				f.Close()
				t.Fatalf("OpenModel(%s) succeeded", open)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestWriteSplitMatchesGGUFSplit: WriteSplit writes byte for byte what
// llama.cpp's llama-gguf-split --split-max-tensors 8 wrote for the fixture
// (testdata/grok-tiny-split/README.md), and OpenModel reads that set.
func TestWriteSplitMatchesGGUFSplit(t *testing.T) {
	_, orig := tiny(t)
	const dir = "../../testdata/grok-tiny-split"
	paths, err := copyWriter(t, orig).WriteSplit(filepath.Join(t.TempDir(), "grok-tiny"), 8, 0)
	must(t, err)
	if len(paths) != 4 {
		t.Fatalf("%d shards, want 4", len(paths))
	}
	for _, p := range paths {
		got, err := os.ReadFile(p)
		must(t, err)
		want, err := os.ReadFile(filepath.Join(dir, filepath.Base(p)))
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from llama-gguf-split's", filepath.Base(p))
		}
	}
	f, err := OpenModel(filepath.Join(dir, "grok-tiny"))
	must(t, err)
	defer f.Close()
	sameTensors(t, f, orig)
}

package safetensors

import (
	"bytes"
	"strings"
	"testing"
)

// Tensor-parallel shards without an index (xai-org/grok-2's layout): an
// expert's slices are joined, w1/w3 by rows and w2 by columns, in rank
// order; anything else found in several files is refused, naming it.
func TestTPShards(t *testing.T) {
	w1 := "model.layers.0.block_sparse_moe.experts.0.w1.weight"
	w2 := "model.layers.0.block_sparse_moe.experts.0.w2.weight"
	q := "model.layers.0.self_attn.q_proj.weight"
	// Rank r's slices: w1 [2, 3] F32, w2 [3, 2] F32.
	slice := func(r int, name string) stTensor {
		shape := []int{2, 3}
		if name == w2 {
			shape = []int{3, 2}
		}
		return stTensor{name, "F32", shape, fillBytes(24, 10*r+len(name))}
	}
	files := func(names []string, rankFiles []string) map[string][]byte {
		out := map[string][]byte{}
		for r, f := range rankFiles {
			var ts []stTensor
			for _, n := range names {
				ts = append(ts, slice(r, n))
			}
			out[f] = buildFile(ts)
		}
		return out
	}
	t.Run("joined", func(t *testing.T) {
		dir := t.TempDir()
		for f, b := range files([]string{w1, w2}, []string{"p-00000-TP-000.safetensors", "p-00000-TP-001.safetensors"}) {
			writeFile(t, dir, f, b)
		}
		m, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		// Split serves the slices as they are, copying nothing.
		for _, c := range []struct {
			canon, raw string
			axis       int
		}{{"blk.0.ffn_gate.0.weight", w1, 0}, {"blk.0.ffn_down.0.weight", w2, 1}} {
			parts, axis, ok, err := m.Split(c.canon)
			if !ok || err != nil || axis != c.axis || len(parts) != 2 {
				t.Fatalf("Split(%s) = %d parts, axis %d, %v, %v", c.canon, len(parts), axis, ok, err)
			}
			for r, p := range parts {
				if !bytes.Equal(p.Data, slice(r, c.raw).data) {
					t.Errorf("Split(%s) part %d: wrong bytes", c.canon, r)
				}
			}
		}
		if _, _, ok, _ := m.Split("blk.0.ffn_up.0.weight"); ok {
			t.Error("Split of a tensor the files lack: ok")
		}
		if n := m.AssembledBytes(); n != 0 {
			t.Errorf("AssembledBytes = %d before any tensor was looked up whole, want 0", n)
		}
		a, _ := m.Raw(w1)
		want := append(append([]byte(nil), slice(0, w1).data...), slice(1, w1).data...)
		if !bytes.Equal(a.Data, want) || a.Shape[0] != 4 || a.Shape[1] != 3 {
			t.Errorf("w1: shape %v, bytes joined wrongly", a.Shape)
		}
		b, _ := m.Raw(w2)
		var want2 []byte
		for row := range 3 {
			for r := range 2 {
				want2 = append(want2, slice(r, w2).data[row*8:(row+1)*8]...)
			}
		}
		if !bytes.Equal(b.Data, want2) || b.Shape[0] != 3 || b.Shape[1] != 4 {
			t.Errorf("w2: shape %v, bytes joined wrongly", b.Shape)
		}
		if m.AssembledBytes() != 96 {
			t.Errorf("AssembledBytes = %d, want 96", m.AssembledBytes())
		}
	})
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  string
	}{
		{"not TP files", files([]string{w1}, []string{"a.safetensors", "b.safetensors"}), "not the tensor-parallel shards"},
		{"rank missing", files([]string{w1}, []string{"p-TP-000.safetensors", "p-TP-002.safetensors"}), "not the tensor-parallel shards"},
		{"not an expert", files([]string{q}, []string{"p-TP-000.safetensors", "p-TP-001.safetensors"}), "only expert matrices"},
		{"shapes differ", map[string][]byte{
			"p-TP-000.safetensors": buildFile([]stTensor{slice(0, w1)}),
			"p-TP-001.safetensors": buildFile([]stTensor{{w1, "F32", []int{3, 2}, fillBytes(24, 1)}}),
		}, "cannot be joined"},
		{"dtypes differ", map[string][]byte{
			"p-TP-000.safetensors": buildFile([]stTensor{slice(0, w1)}),
			"p-TP-001.safetensors": buildFile([]stTensor{{w1, "BF16", []int{2, 3}, fillBytes(12, 1)}}),
		}, "cannot be joined"},
		{"empty folder", map[string][]byte{}, "nor any *.safetensors file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for f, b := range tc.files {
				writeFile(t, dir, f, b)
			}
			m, err := Open(dir)
			if err == nil {
				m.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

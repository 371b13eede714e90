package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// stTensor is a tensor for the test writer.
type stTensor struct {
	name, dtype string
	shape       []int
	data        []byte
}

// buildFile encodes tensors as a safetensors file the way the reference
// writer does: JSON header padded with spaces to a multiple of 8, data in
// the given order.
func buildFile(tensors []stTensor) []byte {
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, t := range tensors {
		hdr[t.name] = map[string]any{"dtype": t.dtype, "shape": t.shape, "data_offsets": []int{len(data), len(data) + len(t.data)}}
		data = append(data, t.data...)
	}
	h, _ := json.Marshal(hdr)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	return rawFile(string(h), data)
}

// rawFile is the 8-byte header length, the header and the data.
func rawFile(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(out, header...), data...)
}

// fillBytes returns n bytes with a pattern that depends on seed, so that tests
// can tell tensors apart by content.
func fillBytes(n int, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*13 + 1)
	}
	return b
}

// writeFile writes data to dir/name.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// tinyConfig is a config.json for the synthetic models: D 8, 2 heads of 4
// (1 kv head), 2 layers, 2 experts of F 12, vocab 10.
func tinyConfig(extra string) string {
	return `{"hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 2,
		"num_key_value_heads": 1, "vocab_size": 10, "num_experts": 2, "num_experts_per_tok": 1` + extra + `}`
}

// schemeTensors lists a full tiny model in one naming scheme (0 hpcai,
// 1 keyfan, 2 Mixtral-style) as canonical name → tensor with that scheme's
// name, built from nameTable's patterns.
func schemeTensors(scheme int) map[string]stTensor {
	cfg, err := ParseConfig([]byte(tinyConfig("")))
	if err != nil {
		panic(err)
	}
	out := make(map[string]stTensor)
	seed := 0
	for _, row := range nameTable {
		if row.canon == "output.weight" {
			continue
		}
		layers, experts := []int{-1}, []int{-1}
		if containsPlaceholder(row.canon, 'N') {
			layers = []int{0, 1}
		}
		if containsPlaceholder(row.canon, 'E') {
			experts = []int{0, 1}
		}
		for _, l := range layers {
			for _, e := range experts {
				vals := map[byte]int{'N': l, 'E': e}
				shape := row.shape(cfg)
				n := 1
				for _, d := range shape {
					n *= d
				}
				seed++
				dtype, size := "BF16", 2
				if len(shape) == 1 {
					dtype, size = "F32", 4
				}
				out[fillPattern(row.canon, vals)] = stTensor{fillPattern(row.sources[scheme], vals), dtype, shape, fillBytes(n*size, seed)}
			}
		}
	}
	return out
}

func containsPlaceholder(p string, k byte) bool {
	for i := 0; i+2 < len(p); i++ {
		if p[i] == '{' && p[i+1] == k && p[i+2] == '}' {
			return true
		}
	}
	return false
}

// fillPattern is an independent placeholder substitution for tests.
func fillPattern(p string, vals map[byte]int) string {
	out := ""
	for i := 0; i < len(p); i++ {
		if p[i] == '{' && i+2 < len(p) && p[i+2] == '}' {
			out += fmt.Sprint(vals[p[i+1]])
			i += 2
			continue
		}
		out += string(p[i])
	}
	return out
}

// sortedTensors returns the map's tensors sorted by name.
func sortedTensors(m map[string]stTensor) []stTensor {
	var ts []stTensor
	for _, t := range m {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	return ts
}

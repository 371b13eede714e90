package safetensors

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestHeaderHostile feeds parseHeader files whose headers lie.
func TestHeaderHostile(t *testing.T) {
	d8 := make([]byte, 8)
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "shorter than the 8-byte header length"},
		{"short file", []byte{1, 2, 3}, "shorter than the 8-byte header length"},
		{"header past the end", binary.LittleEndian.AppendUint64(nil, 100), "header length 100 exceeds the 0 bytes"},
		{"terabyte header", append(binary.LittleEndian.AppendUint64(nil, 1<<40), "{}"...), "exceeds the 104857600-byte limit"},
		{"max uint64 header", append(binary.LittleEndian.AppendUint64(nil, ^uint64(0)), "{}"...), "exceeds the 104857600-byte limit"},
		{"not JSON", rawFile("garbage!", nil), "not a JSON object"},
		{"JSON array", rawFile("[]", nil), "not a JSON object"},
		{"unterminated", rawFile(`{"a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}`, d8), "unterminated"},
		{"trailing garbage", rawFile(`{}  x`, nil), "unexpected data after"},
		{"second object", rawFile(`{}{}`, nil), "unexpected data after"},
		{"duplicate tensor", rawFile(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}`, d8), `duplicate entry "a"`},
		{"offsets past the data", rawFile(`{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}`, d8), "run past the 8 data bytes"},
		{"terabyte offsets", rawFile(`{"a": {"dtype": "F32", "shape": [262144, 1048576], "data_offsets": [0, 1099511627776]}}`, d8), "run past the 8 data bytes"},
		{"begin after end", rawFile(`{"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}}`, d8), "begin after end"},
		{"size differs from shape", rawFile(`{"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}`, d8), "F32 [3] needs 12 bytes, data_offsets [0, 8] give 8"},
		{"wrong dtype for size", rawFile(`{"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 8]}}`, d8), "BF16 [2] needs 4 bytes"},
		{"overlap", rawFile(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}`, d8), `"a" [0, 8] and "b" [4, 8] overlap`},
		{"identical ranges", rawFile(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}}`, d8), "overlap"},
		{"unknown dtype", rawFile(`{"a": {"dtype": "F128", "shape": [], "data_offsets": [0, 16]}}`, d8), `unknown dtype "F128"`},
		{"lower-case dtype", rawFile(`{"a": {"dtype": "f32", "shape": [], "data_offsets": [0, 4]}}`, d8), `unknown dtype "f32"`},
		{"fractional shape", rawFile(`{"a": {"dtype": "I8", "shape": [1.5], "data_offsets": [0, 1]}}`, d8), "1.5 is not a non-negative integer"},
		{"exponent shape", rawFile(`{"a": {"dtype": "I8", "shape": [1e0], "data_offsets": [0, 1]}}`, d8), "1e0 is not a non-negative integer"},
		{"negative shape", rawFile(`{"a": {"dtype": "I8", "shape": [-1], "data_offsets": [0, 1]}}`, d8), "-1 is not a non-negative integer"},
		{"string shape", rawFile(`{"a": {"dtype": "I8", "shape": ["1"], "data_offsets": [0, 1]}}`, d8), `"1" is not a non-negative integer`},
		{"huge shape", rawFile(`{"a": {"dtype": "I8", "shape": [99999999999999999999], "data_offsets": [0, 1]}}`, d8), "is not a non-negative integer"},
		{"shape product overflow", rawFile(`{"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}}`, d8), "is too large"},
		{"element size overflow", rawFile(`{"a": {"dtype": "F64", "shape": [2305843009213693952], "data_offsets": [0, 8]}}`, d8), "is too large"},
		{"negative offset", rawFile(`{"a": {"dtype": "I8", "shape": [1], "data_offsets": [-1, 0]}}`, d8), "-1 is not a non-negative integer"},
		{"rank 9", rawFile(`{"a": {"dtype": "I8", "shape": [1,1,1,1,1,1,1,1,1], "data_offsets": [0, 1]}}`, d8), "shape has 9 dimensions, more than the 8 this reader accepts"},
		{"shape not an array", rawFile(`{"a": {"dtype": "I8", "shape": 1, "data_offsets": [0, 1]}}`, d8), "shape is not an array"},
		{"one offset", rawFile(`{"a": {"dtype": "I8", "shape": [1], "data_offsets": [1]}}`, d8), "data_offsets has 1 values"},
		{"metadata not an object", rawFile(`{"__metadata__": [], "a": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}}`, d8), "__metadata__: not a JSON object"},
		{"two metadata", rawFile(`{"__metadata__": {}, "__metadata__": {}}`, d8), `duplicate entry "__metadata__"`},
		{"three offsets", rawFile(`{"a": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1, 2]}}`, d8), "data_offsets has 3 values"},
		{"missing dtype", rawFile(`{"a": {"shape": [1], "data_offsets": [0, 1]}}`, d8), "needs dtype, shape and data_offsets"},
		{"missing shape", rawFile(`{"a": {"dtype": "I8", "data_offsets": [0, 1]}}`, d8), "needs dtype, shape and data_offsets"},
		{"null entry", rawFile(`{"a": null}`, d8), "needs dtype, shape and data_offsets"},
		{"entry not an object", rawFile(`{"a": 5}`, d8), `tensor "a"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := parseHeader(tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseHeader: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A header is refused at a cost of a few times its size, however it is
// packed: a shape of 200 000 dimensions, data_offsets of as many values,
// 100 000 metadata entries, or many small tensors before a bad one.
func TestHeaderHostileAllocation(t *testing.T) {
	const n = 200_000
	var many strings.Builder
	many.WriteString("{")
	for i := 0; i < n/10; i++ {
		fmt.Fprintf(&many, `"%d":{"dtype":"I8","shape":[0],"data_offsets":[0,0]},`, i)
	}
	many.WriteString(`"z":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}`)
	var meta strings.Builder
	meta.WriteString(`{"__metadata__":{`)
	for i := 0; i < n/2; i++ {
		fmt.Fprintf(&meta, `"%d":"",`, i)
	}
	meta.WriteString(`"x":""}}`)
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"200k dimensions", rawFile(`{"a": {"dtype": "I8", "shape": [`+strings.Repeat("1,", n-1)+`1], "data_offsets": [0, 1]}}`, make([]byte, 8)), "shape has 200000 dimensions"},
		{"200k offsets", rawFile(`{"a": {"dtype": "I8", "shape": [1], "data_offsets": [`+strings.Repeat("0,", n-1)+`1]}}`, make([]byte, 8)), "data_offsets has 200000 values"},
		{"100k metadata entries", rawFile(meta.String(), nil), "more than 1024 entries"},
		{"20k tensors then a bad one", rawFile(many.String(), nil), `tensor "z": data_offsets [0, 1] run past`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&a)
			_, _, _, err := parseHeader(tc.file)
			runtime.ReadMemStats(&b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
			alloc := b.TotalAlloc - a.TotalAlloc
			t.Logf("%d-byte file: %d bytes allocated (%.1f×)", len(tc.file), alloc, float64(alloc)/float64(len(tc.file)))
			if limit := 8 * uint64(len(tc.file)); alloc > limit {
				t.Errorf("refusing a %d-byte file allocated %d bytes, more than %d", len(tc.file), alloc, limit)
			}
		})
	}
}

// TestHeaderValid checks what a good header yields, including the cases
// the format allows: metadata, zero-size tensors, scalars, padding.
func TestHeaderValid(t *testing.T) {
	file := rawFile(`{"__metadata__": {"format": "pt", "n": 3}, "b": {"dtype": "F32", "shape": [], "data_offsets": [4, 8]},
		"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}, "z": {"dtype": "F32", "shape": [0, 5], "data_offsets": [4, 4]}}   `, make([]byte, 8))
	entries, start, meta, err := parseHeader(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[0].Name != "a" || entries[1].Name != "b" || entries[2].Name != "z" || start != len(file)-8 {
		t.Errorf("entries %+v start %d", entries, start)
	}
	if meta["format"] != "pt" || len(meta) != 1 {
		t.Errorf("metadata %v", meta)
	}
}

// Shapes of up to MaxRank dimensions and arrays written with spaces decode
// as before.
func TestHeaderShapes(t *testing.T) {
	file := rawFile(`{"r8": {"dtype": "I8", "shape": [1, 1, 1, 1, 1, 1, 1, 2], "data_offsets": [0, 2]},
		"s": {"dtype": "I8", "shape": [ ], "data_offsets": [ 2 , 3 ]}, "__metadata__": {"n": 1, "a": {"b": [1]}, "s": "x\u00e9"}}`, make([]byte, 3))
	entries, _, meta, err := parseHeader(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || len(entries[0].Shape) != 8 || entries[0].Shape[7] != 2 || len(entries[1].Shape) != 0 || entries[1].Begin != 2 || entries[1].End != 3 {
		t.Errorf("entries %+v", entries)
	}
	if len(meta) != 1 || meta["s"] != "xé" {
		t.Errorf("metadata %v", meta)
	}
}

// TestTruncatedFile cuts real shards at many lengths: every prefix fails.
func TestTruncatedFile(t *testing.T) {
	data := readTestFile(t, filepath.Join(fixture, "model-00002-of-00002.safetensors"))
	if _, _, _, err := parseHeader(data); err != nil {
		t.Fatal(err)
	}
	// Every length up to the end of the header, then a spread of lengths
	// through the data (each tensor's end offset is checked the same way).
	for n := 0; n < len(data); n++ {
		if n > 4096 && n%997 != 0 {
			continue
		}
		if _, _, _, err := parseHeader(data[:n:n]); err == nil {
			t.Fatalf("prefix of %d bytes parsed", n)
		}
	}
	small := buildFile([]stTensor{{"a", "F32", []int{2}, fillBytes(8, 1)}, {"b", "I8", []int{3}, fillBytes(3, 2)}})
	for n := 0; n < len(small); n++ {
		if _, _, _, err := parseHeader(small[:n:n]); err == nil {
			t.Fatalf("prefix of %d bytes parsed", n)
		}
	}
}

// FuzzHeader checks that no file makes parseHeader panic, and that what it
// accepts is consistent: every tensor inside the data, sized as its shape
// says, none overlapping.
func FuzzHeader(f *testing.F) {
	f.Add(buildFile([]stTensor{{"a", "F32", []int{2}, fillBytes(8, 1)}, {"b", "BF16", []int{1, 3}, fillBytes(6, 2)}}))
	f.Add(rawFile(`{"__metadata__": {"format": "pt"}, "a": {"dtype": "I8", "shape": [], "data_offsets": [0, 1]}}`, []byte{1}))
	f.Add(rawFile(`{"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}}`, make([]byte, 8)))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<40))
	f.Fuzz(func(t *testing.T, file []byte) {
		entries, start, _, err := parseHeader(file)
		if err != nil {
			return
		}
		if start < 8 || start > len(file) {
			t.Fatalf("data start %d outside %d bytes", start, len(file))
		}
		used := make([]bool, len(file)-start)
		for _, e := range entries {
			if e.Begin < 0 || e.End < e.Begin || start+e.End > len(file) {
				t.Fatalf("entry %+v outside the data", e)
			}
			n, err := byteSize(dtypes[e.DType].size, e.Shape)
			if err != nil || n != uint64(e.End-e.Begin) {
				t.Fatalf("entry %+v: size %d, %v", e, n, err)
			}
			for i := e.Begin; i < e.End; i++ {
				if used[i] {
					t.Fatalf("entry %+v overlaps another", e)
				}
				used[i] = true
			}
		}
	})
}

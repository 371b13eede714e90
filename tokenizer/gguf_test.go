package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
)

// ggufVocab is the tokenizer part of a GGUF file's metadata.
type ggufVocab struct {
	model          string
	tokens         []string
	scores         []float32
	types          []int32
	bos, eos       int
	unk, pad       int
	addSpacePrefix bool
}

// readGGUFVocab is a minimal GGUF (v2/v3) metadata reader, enough to pull
// out the tokenizer.ggml.* keys for this test; the real reader lives in
// formats/gguf.
func readGGUFVocab(data []byte) (*ggufVocab, error) {
	r := &ggufReader{b: data}
	if string(r.bytes(4)) != "GGUF" {
		return nil, errors.New("not a GGUF file")
	}
	if v := r.u32(); v < 2 || v > 3 {
		return nil, fmt.Errorf("GGUF version %d", v)
	}
	r.u64() // tensor count
	nkv := r.u64()
	voc := &ggufVocab{bos: -1, eos: -1, unk: -1, pad: -1}
	for i := uint64(0); i < nkv && r.err == nil; i++ {
		key := r.str()
		typ := r.u32()
		switch key {
		case "tokenizer.ggml.model":
			voc.model, _ = r.value(typ).(string)
		case "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type":
			if typ != ggufArray {
				return nil, fmt.Errorf("%s is not an array", key)
			}
			et, n := r.u32(), r.u64()
			if n > uint64(len(r.b)) {
				return nil, errors.New("array too long")
			}
			for j := uint64(0); j < n && r.err == nil; j++ {
				switch v := r.value(et).(type) {
				case string:
					voc.tokens = append(voc.tokens, v)
				case float32:
					voc.scores = append(voc.scores, v)
				case int32:
					voc.types = append(voc.types, v)
				default:
					return nil, fmt.Errorf("%s: element type %d", key, et)
				}
			}
		case "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
			"tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id":
			v, ok := r.value(typ).(uint32)
			if !ok {
				return nil, fmt.Errorf("%s has type %d", key, typ)
			}
			switch {
			case strings.HasPrefix(key, "tokenizer.ggml.bos"):
				voc.bos = int(v)
			case strings.HasPrefix(key, "tokenizer.ggml.eos"):
				voc.eos = int(v)
			case strings.HasPrefix(key, "tokenizer.ggml.unk"):
				voc.unk = int(v)
			default:
				voc.pad = int(v)
			}
		case "tokenizer.ggml.add_space_prefix":
			voc.addSpacePrefix, _ = r.value(typ).(bool)
		default:
			r.value(typ)
		}
	}
	return voc, r.err
}

const (
	ggufUint8 = iota
	ggufInt8
	ggufUint16
	ggufInt16
	ggufUint32
	ggufInt32
	ggufFloat32
	ggufBool
	ggufString
	ggufArray
	ggufUint64
	ggufInt64
	ggufFloat64
)

type ggufReader struct {
	b   []byte
	err error
}

func (r *ggufReader) bytes(n uint64) []byte {
	if r.err != nil || n > uint64(len(r.b)) {
		if r.err == nil {
			r.err = errors.New("truncated GGUF")
		}
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *ggufReader) u32() uint32 {
	if b := r.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *ggufReader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *ggufReader) str() string { return string(r.bytes(r.u64())) }

// value reads one value of type typ; arrays are skipped (nil).
func (r *ggufReader) value(typ uint32) any {
	switch typ {
	case ggufUint8, ggufInt8, ggufBool:
		b := r.bytes(1)
		if typ == ggufBool {
			return len(b) == 1 && b[0] != 0
		}
		return nil
	case ggufUint16, ggufInt16:
		r.bytes(2)
	case ggufUint32:
		return r.u32()
	case ggufInt32:
		return int32(r.u32())
	case ggufFloat32:
		return math.Float32frombits(r.u32())
	case ggufString:
		return r.str()
	case ggufUint64, ggufInt64, ggufFloat64:
		r.u64()
	case ggufArray:
		et, n := r.u32(), r.u64()
		for i := uint64(0); i < n && r.err == nil; i++ {
			r.value(et)
		}
	default:
		r.err = fmt.Errorf("GGUF value type %d", typ)
	}
	return nil
}

// vocabFromProto returns the pieces of a model as GGUF arrays, as
// llama.cpp's converter writes them.
func vocabFromProto(t *testing.T, path string) (tokens []string, scores []float32, types []int32) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseModelProto(data)
	if err != nil {
		t.Fatal(err)
	}
	for i, ty := range m.types {
		tokens = append(tokens, m.vocab.piece(i))
		types = append(types, int32(ty))
	}
	return tokens, m.scores, types
}

// sameEncodings checks that a and b encode and decode texts alike.
func sameEncodings(t *testing.T, a, b *Tokenizer, texts []string) {
	t.Helper()
	if a.VocabSize() != b.VocabSize() || a.BOS() != b.BOS() || a.EOS() != b.EOS() || a.UNK() != b.UNK() || a.PAD() != b.PAD() {
		t.Fatalf("special ids differ: %d %d %d %d %d vs %d %d %d %d %d",
			a.VocabSize(), a.BOS(), a.EOS(), a.UNK(), a.PAD(), b.VocabSize(), b.BOS(), b.EOS(), b.UNK(), b.PAD())
	}
	for _, s := range texts {
		ia, ib := a.Encode(s), b.Encode(s)
		if !slices.Equal(ia, ib) {
			t.Fatalf("Encode(%q): %v vs %v", short(s), short2(ia), short2(ib))
		}
		da, _ := a.Decode(ia)
		db, _ := b.Decode(ib)
		if da != db {
			t.Fatalf("Decode: %q vs %q", short(da), short(db))
		}
	}
}

func caseTexts(t *testing.T) []string {
	var texts []string
	for _, c := range readJSONL[encodeCase](t, "testdata/grok1_cases.jsonl") {
		texts = append(texts, c.Text)
	}
	return append(texts, "In the beginning God created", "\xff\xfe bytes \xc3", "   ", "")
}

func TestGGUFVocabMatchesModelProto(t *testing.T) {
	for _, tc := range []struct {
		path               string
		bos, eos, unk, pad int
		wantVocab, wantBOS int
		wantEOS, wantUNK   int
		wantPAD            int
	}{
		{kjvModel, 1, 2, 3, 0, 4096, 1, 2, 3, 0},
		{grok1Model, 1, 2, 3, 0, 131072, 1, 2, 3, 0},
	} {
		proto, err := Load(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if proto.VocabSize() != tc.wantVocab || proto.BOS() != tc.wantBOS || proto.EOS() != tc.wantEOS ||
			proto.UNK() != tc.wantUNK || proto.PAD() != tc.wantPAD {
			t.Errorf("%s: vocab/bos/eos/unk/pad = %d %d %d %d %d", tc.path,
				proto.VocabSize(), proto.BOS(), proto.EOS(), proto.UNK(), proto.PAD())
		}
		tokens, scores, types := vocabFromProto(t, tc.path)
		gguf, err := FromGGUFVocab(tokens, scores, types, tc.bos, tc.eos, tc.unk, tc.pad, true)
		if err != nil {
			t.Fatal(err)
		}
		sameEncodings(t, proto, gguf, caseTexts(t))
	}
}

// TestGGUFFile reads the vocabulary of the grok-tiny-kjv GGUF from the
// shared model directory, when it is there.
func TestGGUFFile(t *testing.T) {
	var data []byte
	for _, p := range []string{
		"../../shared/models/grok-tiny-kjv/model-f16.gguf",
		"../shared/models/grok-tiny-kjv/model-f16.gguf",
	} {
		if b, err := os.ReadFile(p); err == nil {
			data = b
			break
		}
	}
	if data == nil {
		t.Skip("grok-tiny-kjv GGUF not found")
	}
	v, err := readGGUFVocab(data)
	if err != nil {
		t.Fatal(err)
	}
	if v.model != "llama" {
		t.Fatalf("tokenizer.ggml.model = %q", v.model)
	}
	gguf, err := FromGGUFVocab(v.tokens, v.scores, v.types, v.bos, v.eos, v.unk, v.pad, v.addSpacePrefix)
	if err != nil {
		t.Fatal(err)
	}
	proto, err := Load(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	sameEncodings(t, proto, gguf, caseTexts(t))
	for _, c := range kjvSamples {
		if got := gguf.Encode(c.text); !slices.Equal(got, c.ids) {
			t.Errorf("GGUF Encode(%q) = %v, want %v", c.text, got, c.ids)
		}
	}
}

func TestFromGGUFVocabErrors(t *testing.T) {
	tokens, scores, types := vocabFromProto(t, kjvModel)
	for _, tc := range []struct {
		name   string
		tokens []string
		scores []float32
		types  []int32
		unk    int
	}{
		{"empty", nil, nil, nil, 3},
		{"short scores", tokens, scores[:10], types, 3},
		{"short types", tokens, scores, types[:10], 3},
		{"bad type", tokens, scores, append(slices.Clone(types[:5]), append([]int32{9}, types[6:]...)...), 3},
		{"unk out of range", tokens, scores, types, len(tokens)},
		{"no unk no bytes", tokens[4+256:], scores[4+256:], types[4+256:], -1},
	} {
		if _, err := FromGGUFVocab(tc.tokens, tc.scores, tc.types, 1, 2, tc.unk, 0, true); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

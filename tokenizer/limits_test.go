package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// testPiece is one piece of a model built by protoModel.
type testPiece struct {
	s     string
	score float32
	typ   pieceType
}

// protoModel serializes a BPE ModelProto with the given pieces and an
// identity normalizer without dummy prefix or whitespace collapsing, so
// that texts encode as written. A zero typ writes no type field (NORMAL).
func protoModel(pieces []testPiece) []byte {
	var m []byte
	for _, p := range pieces {
		var b []byte
		if p.s != "" {
			b = protowire.AppendTag(b, fieldPiecePiece, protowire.BytesType)
			b = protowire.AppendString(b, p.s)
		}
		if p.score != 0 {
			b = protowire.AppendTag(b, fieldPieceScore, protowire.Fixed32Type)
			b = protowire.AppendFixed32(b, mathFloat32bits(p.score))
		}
		if p.typ != 0 && p.typ != typeNormal {
			b = protowire.AppendTag(b, fieldPieceType, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(p.typ))
		}
		m = protowire.AppendTag(m, fieldModelPieces, protowire.BytesType)
		m = protowire.AppendBytes(m, b)
	}
	var tr []byte
	tr = protowire.AppendTag(tr, fieldTrainerModelType, protowire.VarintType)
	tr = protowire.AppendVarint(tr, modelTypeBPE)
	m = protowire.AppendTag(m, fieldModelTrainerSpec, protowire.BytesType)
	m = protowire.AppendBytes(m, tr)
	var ns []byte
	ns = protowire.AppendTag(ns, fieldNormAddDummyPrefix, protowire.VarintType)
	ns = protowire.AppendVarint(ns, 0)
	ns = protowire.AppendTag(ns, fieldNormRemoveExtraWhitespaces, protowire.VarintType)
	ns = protowire.AppendVarint(ns, 0)
	m = protowire.AppendTag(m, fieldModelNormalizerSpec, protowire.BytesType)
	return protowire.AppendBytes(m, ns)
}

// ggufFromPieces is FromGGUFVocab on the pieces (the first is the unknown
// piece).
func ggufFromPieces(pieces []testPiece) (*Tokenizer, error) {
	tokens := make([]string, len(pieces))
	scores := make([]float32, len(pieces))
	types := make([]int32, len(pieces))
	for i, p := range pieces {
		tokens[i], scores[i], types[i] = p.s, p.score, int32(max(p.typ, typeNormal))
	}
	return FromGGUFVocab(tokens, scores, types, -1, -1, 0, -1, false)
}

// doublingPieces returns "a", "aa", "aaaa", ... up to n bytes, longer ones
// merging first, so that a run of n a's encodes as one piece.
func doublingPieces(n int) []testPiece {
	var ps []testPiece
	for k, score := 1, float32(0); k <= n; k, score = 2*k, score+1 {
		ps = append(ps, testPiece{s: strings.Repeat("a", k), score: score})
	}
	return ps
}

// TestPieceLength checks that a piece longer than maxPieceBytes is refused
// with a clear error on both load paths (a 1 MiB piece used to take
// seconds to load: building the encoder hashed every prefix of it), and
// that pieces of exactly maxPieceBytes load and encode correctly.
func TestPieceLength(t *testing.T) {
	unk := testPiece{s: "<unk>", typ: typeUnknown}
	for _, tc := range []struct {
		name   string
		pieces []testPiece
		ok     bool
	}{
		{"1 MiB piece", []testPiece{unk, {s: "a"}, {s: strings.Repeat("a", 1<<20)}}, false},
		{"one byte too long", []testPiece{unk, {s: strings.Repeat("ab", maxPieceBytes/2) + "c"}}, false},
		{"long user-defined piece", []testPiece{unk, {s: strings.Repeat("u", maxPieceBytes+1), typ: typeUserDefined}}, false},
		{"longest allowed", append([]testPiece{unk,
			{s: strings.Repeat("x", maxPieceBytes), typ: typeUserDefined},
			{s: "b" + strings.Repeat("a", maxPieceBytes-1), score: 100}},
			doublingPieces(maxPieceBytes)...), true},
	} {
		for _, path := range []string{"proto", "gguf"} {
			var tok *Tokenizer
			var err error
			if path == "proto" {
				tok, err = FromModelProto(protoModel(tc.pieces))
			} else {
				tok, err = ggufFromPieces(tc.pieces)
			}
			if !tc.ok {
				if err == nil || !strings.Contains(err.Error(), "bytes long, more than the 4096 allowed") {
					t.Errorf("%s (%s): err = %v, want a piece-length error", tc.name, path, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s (%s): %v", tc.name, path, err)
			}
			for _, text := range []string{
				strings.Repeat("a", maxPieceBytes),
				strings.Repeat("x", maxPieceBytes) + strings.Repeat("a", maxPieceBytes+3),
				strings.Repeat("a", 3*maxPieceBytes-5),
			} {
				got := tok.Encode(text)
				if want := naiveEncode(tok, text); !slices.Equal(got, want) {
					t.Errorf("%s (%s): Encode(%d bytes) = %v, naive %v", tc.name, path, len(text), got, want)
				}
				if dec, err := tok.Decode(got); err != nil || dec != text {
					t.Errorf("%s (%s): Decode(Encode(%d bytes)) = %d bytes, %v", tc.name, path, len(text), len(dec), err)
				}
			}
			// The full run of a's merges up to the longest piece.
			if got := tok.Encode(strings.Repeat("a", maxPieceBytes)); len(got) != 1 || tok.Piece(got[0]) != strings.Repeat("a", maxPieceBytes) {
				t.Errorf("%s (%s): Encode(a×%d) = %v, want the one piece", tc.name, path, maxPieceBytes, got)
			}
		}
	}
}

// TestPrefixLinks checks prefixLinks against a brute-force search and
// bounds its work by counting: it compares at most twice the keys' total
// bytes, where looking every prefix up would hash a quadratic number.
func TestPrefixLinks(t *testing.T) {
	rng := newTestRand(7)
	var chain []string // a, aa, ..., a×512: every piece prefixes the longer ones
	for k := 1; k <= 512; k++ {
		chain = append(chain, strings.Repeat("a", k))
	}
	random := make([]string, 0, 1000) // of the 9840 strings of 1 to 8 letters of "abc"
	seen := map[string]bool{}
	for len(random) < cap(random) {
		b := make([]byte, 1+rng.IntN(8))
		for i := range b {
			b[i] = "abc"[rng.IntN(3)]
		}
		if !seen[string(b)] {
			seen[string(b)] = true
			random = append(random, string(b))
		}
	}
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"chain", chain},
		{"random", random},
		{"one long", []string{strings.Repeat("ab", 2000), "a", "ab", "abab", "b"}},
	} {
		b := newVocabBuilder(len(tc.keys), 0)
		total := 0
		ids := make([]int32, len(tc.keys))
		for i, k := range tc.keys {
			b.addString(k)
			total += len(k)
			ids[i] = int32(i)
		}
		v := b.done()
		link, compared := prefixLinks(len(ids), ids, func(id int32) string { return v.piece(int(id)) })
		if compared > 2*total {
			t.Errorf("%s: compared %d bytes for keys of %d bytes", tc.name, compared, total)
		}
		for i, k := range tc.keys {
			want := int32(-1)
			for j, q := range tc.keys {
				if len(q) < len(k) && strings.HasPrefix(k, q) && (want < 0 || len(q) > len(tc.keys[want])) {
					want = int32(j)
				}
			}
			if link[i] != want {
				t.Fatalf("%s: link of %q = %d, want %d", tc.name, k, link[i], want)
			}
		}
	}
}

// TestPrefixMatcher checks matchPrefix against a scan of all symbols.
func TestPrefixMatcher(t *testing.T) {
	rng := newTestRand(3)
	for _, keys := range [][]string{
		{"a"},
		{"ab", "abc", "abcd", "b", "\xff", "\xff\x00"},
		{"<s>", "<sep>", "<|mask|>", "1", "12", "123"},
	} {
		checkMatcher(t, keys, rng)
	}
	for range 20 {
		var keys []string
		seen := map[string]bool{}
		for range 1 + rng.IntN(60) {
			b := make([]byte, 1+rng.IntN(5))
			for i := range b {
				b[i] = "ab\xe2"[rng.IntN(3)]
			}
			if !seen[string(b)] {
				seen[string(b)] = true
				keys = append(keys, string(b))
			}
		}
		checkMatcher(t, keys, rng)
	}
}

func checkMatcher(t *testing.T, keys []string, rng *rand.Rand) {
	t.Helper()
	ids := make([]int32, len(keys))
	for i := range ids {
		ids[i] = int32(i)
	}
	m := newPrefixMatcher(ids, func(i int) string { return keys[i] })
	if len(m.nodes) > 2*len(keys)+1 {
		t.Errorf("%d symbols make %d nodes", len(keys), len(m.nodes))
	}
	texts := append([]string{""}, keys...)
	for range 200 {
		b := make([]byte, rng.IntN(8))
		for i := range b {
			b[i] = "ab\xe2<s1|"[rng.IntN(7)]
		}
		texts = append(texts, string(b))
	}
	for _, text := range texts {
		wantN, wantID := 0, int32(-1)
		for i, k := range keys {
			if strings.HasPrefix(text, k) && len(k) > wantN {
				wantN, wantID = len(k), int32(i)
			}
		}
		n, id := matchPrefix(m, text)
		n2, id2 := matchPrefix(m, []byte(text))
		if n != wantN || id != wantID || n2 != n || id2 != id {
			t.Fatalf("keys %q: matchPrefix(%q) = %d, %d (bytes: %d, %d), want %d, %d", keys, text, n, id, n2, id2, wantN, wantID)
		}
	}
}

// hostileModels are model files that once made loading take far more
// memory than their size.
func hostileModels() []struct {
	name string
	data []byte
} {
	// 1.2M empty pieces: two bytes each.
	empty := make([]byte, 0, 2_400_000)
	for range 1_200_000 {
		empty = append(empty, 0x0a, 0x00)
	}
	// 20k user-defined pieces of 64 random letters: a byte trie of them
	// had a node per byte.
	rng := newTestRand(5)
	user := []testPiece{{s: "<unk>", typ: typeUnknown}}
	b := make([]byte, 64)
	for range 20_000 {
		for i := range b {
			b[i] = 'a' + byte(rng.IntN(26))
		}
		user = append(user, testPiece{s: string(b), typ: typeUserDefined})
	}
	// More pieces than maxVocabSize, one byte each.
	many := make([]byte, 0, 5*(maxVocabSize+1))
	for range maxVocabSize + 1 {
		many = append(many, 0x0a, 0x03, 0x0a, 0x01, 'a')
	}
	return []struct {
		name string
		data []byte
	}{
		{"1.2M empty pieces", empty},
		{"20k user-defined pieces", protoModel(user)},
		{"too many pieces", many},
	}
}

// TestHostileModelMemory bounds, by counting allocated bytes, what loading
// or refusing a hostile model costs: at most 8 times the file's size.
func TestHostileModelMemory(t *testing.T) {
	for _, tc := range hostileModels() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := FromModelProto(tc.data)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes, allocated %d (%.2fx), err %v", tc.name, len(tc.data), alloc, float64(alloc)/float64(len(tc.data)), err)
		if alloc > 8*uint64(len(tc.data)) {
			t.Errorf("%s: loading %d bytes allocated %d bytes, more than 8x", tc.name, len(tc.data), alloc)
		}
	}
}

// TestHostileModelErrors checks the errors the hostile models get.
func TestHostileModelErrors(t *testing.T) {
	want := map[string]string{
		"1.2M empty pieces":       "piece 0 is empty",
		"20k user-defined pieces": "",
		"too many pieces":         fmt.Sprintf("more than the %d allowed", maxVocabSize),
	}
	for _, tc := range hostileModels() {
		_, err := FromModelProto(tc.data)
		if w := want[tc.name]; (w == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), w)) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, w)
		}
	}
}

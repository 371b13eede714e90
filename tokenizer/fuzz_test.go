package tokenizer

import (
	"container/heap"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// naiveEncode is a direct transcription of SentencePiece's BPE encoding
// (bpe_model.cc Model::SampleEncode and sentencepiece_processor.cc
// PopulateSentencePieceText) working on strings, with none of the
// shortcuts of encode.go (merge ids, pair table, segmentation). The fuzz
// targets check Encode against it.
func naiveEncode(t *Tokenizer, text string) []int {
	norm := string(t.normalize(nil, text))
	type symbol struct {
		piece      string
		start      int
		prev, next int
		freeze     bool
	}
	var syms []symbol
	for i := 0; i < len(norm); {
		n := 0
		if t.user != nil {
			n, _ = matchPrefix(t.user, norm[i:])
		}
		freeze := n > 0
		if !freeze {
			n = charLenAt(norm, i)
		}
		syms = append(syms, symbol{norm[i : i+n], i, len(syms) - 1, len(syms) + 1, freeze})
		i += n
	}
	if len(syms) == 0 {
		return []int{}
	}
	syms[len(syms)-1].next = -1

	agenda := &naiveAgenda{}
	rev := map[string][2]string{}
	add := func(l, r int) {
		if l < 0 || r < 0 || syms[l].freeze || syms[r].freeze {
			return
		}
		piece := norm[syms[l].start : syms[l].start+len(syms[l].piece)+len(syms[r].piece)]
		id, ok := t.pieceIDs.get(&t.v, piece)
		if !ok {
			return
		}
		heap.Push(agenda, naivePair{l, r, t.scores[id], len(piece)})
		if t.types[id] == typeUnused {
			rev[piece] = [2]string{syms[l].piece, syms[r].piece}
		}
	}
	for i := 1; i < len(syms); i++ {
		add(i-1, i)
	}
	for agenda.Len() > 0 {
		top := heap.Pop(agenda).(naivePair)
		l, r := &syms[top.left], &syms[top.right]
		if l.piece == "" || r.piece == "" || len(l.piece)+len(r.piece) != top.size {
			continue
		}
		l.piece = norm[l.start : l.start+top.size]
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = top.left
		}
		r.piece = ""
		add(l.prev, top.left)
		add(top.left, l.next)
	}

	type result struct {
		piece string
		id    int
	}
	var results []result
	var resegment func(w string)
	resegment = func(w string) {
		id := int(t.pieceToID(w))
		if id < 0 || t.types[id] != typeUnused {
			results = append(results, result{w, id})
			return
		}
		p, ok := rev[w]
		if !ok {
			results = append(results, result{w, id})
			return
		}
		resegment(p[0])
		resegment(p[1])
	}
	for i := 0; i != -1; i = syms[i].next {
		resegment(syms[i].piece)
	}

	ids := []int{}
	prevUnk := false
	for _, r := range results {
		isUnk := r.id >= 0 && t.types[r.id] == typeUnknown
		switch {
		case r.id >= 0 && t.types[r.id] == typeControl:
			ids = append(ids, r.id)
		case isUnk && t.byteFallback:
			for i := 0; i < len(r.piece); i++ {
				ids = append(ids, int(t.byteIDs[r.piece[i]]))
			}
		case isUnk && prevUnk:
			// merged into the previous unknown piece
		default:
			ids = append(ids, r.id)
		}
		prevUnk = isUnk
	}
	return ids
}

type naivePair struct {
	left, right int
	score       float32
	size        int
}

type naiveAgenda []naivePair

func (a naiveAgenda) Len() int { return len(a) }
func (a naiveAgenda) Less(i, j int) bool {
	return a[i].score > a[j].score || (a[i].score == a[j].score && a[i].left < a[j].left)
}
func (a naiveAgenda) Swap(i, j int) { a[i], a[j] = a[j], a[i] }
func (a *naiveAgenda) Push(x any)   { *a = append(*a, x.(naivePair)) }
func (a *naiveAgenda) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}

// fuzzModels are the models the differential fuzz target runs on.
var fuzzModels = sync.OnceValues(func() ([]*Tokenizer, error) {
	kjv, err := os.ReadFile(kjvModel)
	if err != nil {
		return nil, err
	}
	nfkc, err := os.ReadFile("testdata/reference/nfkc.model")
	if err != nil {
		return nil, err
	}
	var tb fatalTB
	var out []*Tokenizer
	for _, proto := range [][]byte{
		kjv,
		variantModel(tb, kjv, "kjv-unused"),
		variantModel(tb, kjv, "kjv-vchar"),
		variantModel(tb, kjv, "kjv-nobytes"),
		nfkc,
		variantModel(tb, nfkc, "nfkc-noescape"),
	} {
		tok, err := FromModelProto(proto)
		if err != nil {
			return nil, err
		}
		out = append(out, tok)
	}
	return out, nil
})

// fatalTB lets the test helpers run outside a test; failures panic.
type fatalTB struct{ testing.TB }

func (fatalTB) Helper()                   {}
func (fatalTB) Fatal(args ...any)         { panic(args) }
func (fatalTB) Fatalf(f string, a ...any) { panic(f) }

func TestNaiveEncodeMatchesCases(t *testing.T) {
	tok := grok1(t)
	for _, c := range readJSONL[encodeCase](t, "testdata/grok1_cases.jsonl") {
		if got := naiveEncode(tok, c.Text); !slices.Equal(got, c.IDs) && len(c.IDs) > 0 {
			t.Errorf("naiveEncode(%q) = %v, want %v", short(c.Text), short2(got), short2(c.IDs))
		}
	}
}

// FuzzEncodeMatchesNaive checks the optimized encoder against naiveEncode
// on Grok-1 and on models that use UNUSED pieces, characters found only
// inside pieces, no byte fallback, a charsmap normalizer and user-defined
// symbols.
func FuzzEncodeMatchesNaive(f *testing.F) {
	grok := grok1(f)
	models, err := fuzzModels()
	if err != nil {
		f.Fatal(err)
	}
	models = append(models, grok)
	for _, s := range []string{"", "Hello world", "  a  b  ", "quick jazz box kk", "<sep>ab12▁x ｆｕｌｌ",
		"\xff\xfe\xc3", "12345\n\n\t\t<|mask|>", "The LORD said unto Moses", "ﬁ①"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for i, tok := range models {
			got, want := tok.EncodeBytes(b), naiveEncode(tok, string(b))
			if !slices.Equal(got, want) {
				t.Fatalf("model %d: EncodeBytes(%q) = %v, naive %v", i, b, got, want)
			}
		}
	})
}

// tinyModel builds a small BPE ModelProto to seed FuzzFromModelProto.
func tinyModel(byteFallback bool) []byte {
	piece := func(s string, score float32, typ pieceType) []byte {
		var b []byte
		b = protowire.AppendTag(b, fieldPiecePiece, protowire.BytesType)
		b = protowire.AppendString(b, s)
		b = protowire.AppendTag(b, fieldPieceScore, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, mathFloat32bits(score))
		b = protowire.AppendTag(b, fieldPieceType, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(typ))
	}
	var m []byte
	add := func(s string, score float32, typ pieceType) {
		m = protowire.AppendTag(m, fieldModelPieces, protowire.BytesType)
		m = protowire.AppendBytes(m, piece(s, score, typ))
	}
	add("<unk>", 0, typeUnknown)
	add("<s>", 0, typeControl)
	add("</s>", 0, typeControl)
	add("12", 0, typeUserDefined)
	if byteFallback {
		for b := range 256 {
			add(fmt.Sprintf("<0x%02X>", b), 0, typeByte)
		}
	}
	for i, s := range []string{"▁", "a", "b", "c", "ab", "▁a", "▁ab", "ba", "bc", "abc"} {
		typ := typeNormal
		if s == "ba" {
			typ = typeUnused
		}
		add(s, float32(-i), typ)
	}
	var tr []byte
	tr = protowire.AppendTag(tr, fieldTrainerModelType, protowire.VarintType)
	tr = protowire.AppendVarint(tr, modelTypeBPE)
	if byteFallback {
		tr = protowire.AppendTag(tr, fieldTrainerByteFallback, protowire.VarintType)
		tr = protowire.AppendVarint(tr, 1)
	}
	m = protowire.AppendTag(m, fieldModelTrainerSpec, protowire.BytesType)
	m = protowire.AppendBytes(m, tr)
	var ns []byte
	ns = protowire.AppendTag(ns, fieldNormName, protowire.BytesType)
	ns = protowire.AppendString(ns, "identity")
	ns = protowire.AppendTag(ns, fieldNormRemoveExtraWhitespaces, protowire.VarintType)
	ns = protowire.AppendVarint(ns, 0)
	m = protowire.AppendTag(m, fieldModelNormalizerSpec, protowire.BytesType)
	return protowire.AppendBytes(m, ns)
}

// FuzzFromModelProto feeds arbitrary bytes to FromModelProto: it must
// fail cleanly or give a tokenizer that encodes and decodes without
// panicking.
func FuzzFromModelProto(f *testing.F) {
	f.Add(tinyModel(false), "abc ab 12 ba")
	f.Add(tinyModel(true), "abc ab 12 ba x\xff")
	f.Add([]byte{}, "")
	// Small versions of hostile models: an empty piece, a piece one byte
	// over the limit, nested user-defined pieces and a chain of pieces
	// that each prefix the next.
	unk := testPiece{s: "<unk>", typ: typeUnknown}
	f.Add(protoModel([]testPiece{unk, {s: "a"}, {}, {s: "b"}}), "ab")
	f.Add(protoModel([]testPiece{unk, {s: strings.Repeat("a", maxPieceBytes+1)}}), "aaaa")
	user := []testPiece{unk}
	for k := 1; k <= 12; k++ {
		user = append(user, testPiece{s: strings.Repeat("u", k), typ: typeUserDefined}, testPiece{s: strings.Repeat("u", k) + "v", typ: typeUserDefined})
	}
	f.Add(protoModel(append(user, doublingPieces(16)...)), "uuuuuvuuuaaaaaaaaaaaaaaaaaaaaaav")
	f.Fuzz(func(t *testing.T, data []byte, text string) {
		tok, err := FromModelProto(data)
		if err != nil {
			return
		}
		if len(data) > 0 && tok.VocabSize() == 0 {
			t.Fatal("empty vocabulary accepted")
		}
		ids := tok.Encode(text)
		if !slices.Equal(ids, naiveEncode(tok, text)) {
			t.Fatalf("Encode(%q) = %v, naive %v", text, ids, naiveEncode(tok, text))
		}
		if _, err := tok.Decode(ids); err != nil {
			t.Fatal(err)
		}
		_ = streamDecode(t, tok, ids)
	})
}

func mathFloat32bits(f float32) uint32 { return math.Float32bits(f) }

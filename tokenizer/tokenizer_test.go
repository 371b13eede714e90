package tokenizer

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

func newTestRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

const (
	grok1Model = "testdata/tokenizer.model"
	kjvModel   = "testdata/grok-tiny-kjv/tokenizer.model"
)

var (
	grokOnce sync.Once
	grokTok  *Tokenizer
	grokErr  error
)

// grok1 loads the Grok-1 tokenizer once for all tests.
func grok1(tb testing.TB) *Tokenizer {
	tb.Helper()
	grokOnce.Do(func() { grokTok, grokErr = Load(grok1Model) })
	if grokErr != nil {
		tb.Fatal(grokErr)
	}
	return grokTok
}

type encodeCase struct {
	Text     string   `json:"text"`
	IDs      []int    `json:"ids"`
	Pieces   []string `json:"pieces"`
	Decoded  string   `json:"decoded"`
	Category string   `json:"category"`
}

type decodeCase struct {
	IDs    []int    `json:"ids"`
	Text   string   `json:"text"`
	Pieces []string `json:"pieces"`
}

type invalidCase struct {
	TextHex string `json:"text_hex"`
	IDs     []int  `json:"ids"`
	Decoded string `json:"decoded"`
}

// readJSONL decodes every line of a JSON Lines file into a T.
func readJSONL[T any](tb testing.TB, path string) []T {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []T
	dec := json.NewDecoder(bufio.NewReader(f))
	for dec.More() {
		var v T
		if err := dec.Decode(&v); err != nil {
			tb.Fatalf("%s: record %d: %v", path, len(out)+1, err)
		}
		out = append(out, v)
	}
	return out
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func TestGrok1Cases(t *testing.T) {
	tok := grok1(t)
	cases := readJSONL[encodeCase](t, "testdata/grok1_cases.jsonl")
	if len(cases) != 129 {
		t.Fatalf("got %d cases, want 129", len(cases))
	}
	for i, c := range cases {
		got := tok.Encode(c.Text)
		if c.IDs == nil {
			c.IDs = []int{}
		}
		if !slices.Equal(got, c.IDs) {
			t.Errorf("case %d (%s) Encode(%q):\n got %v\nwant %v\npieces %q", i, c.Category, short(c.Text), short2(got), short2(c.IDs), c.Pieces)
			continue
		}
		dec, err := tok.Decode(c.IDs)
		if err != nil || dec != c.Decoded {
			t.Errorf("case %d (%s) Decode = %q, %v; want %q", i, c.Category, short(dec), err, short(c.Decoded))
		}
	}
}

func short2(ids []int) []int {
	if len(ids) > 40 {
		return ids[:40]
	}
	return ids
}

func TestGrok1DecodeCases(t *testing.T) {
	tok := grok1(t)
	for i, c := range readJSONL[decodeCase](t, "testdata/grok1_decode_cases.jsonl") {
		got, err := tok.Decode(c.IDs)
		if err != nil || got != c.Text {
			t.Errorf("case %d Decode(%v) = %q, %v; want %q (pieces %q)", i, c.IDs, got, err, c.Text, c.Pieces)
		}
	}
}

func TestGrok1InvalidUTF8(t *testing.T) {
	tok := grok1(t)
	for i, c := range readJSONL[invalidCase](t, "testdata/grok1_invalid_utf8_cases.jsonl") {
		in, err := hex.DecodeString(c.TextHex)
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.EncodeBytes(in); !slices.Equal(got, c.IDs) {
			t.Errorf("case %d EncodeBytes(%s) = %v, want %v", i, c.TextHex, got, c.IDs)
		}
		if got := tok.Encode(string(in)); !slices.Equal(got, c.IDs) {
			t.Errorf("case %d Encode(%q) = %v, want %v", i, in, got, c.IDs)
		}
		if got, err := tok.Decode(c.IDs); err != nil || got != c.Decoded {
			t.Errorf("case %d Decode(%v) = %q, %v; want %q", i, c.IDs, got, err, c.Decoded)
		}
	}
}

// streamDecode feeds ids one at a time to a StreamDecoder and checks that
// every chunk is valid UTF-8 (when the pieces are).
func streamDecode(tb testing.TB, tok *Tokenizer, ids []int) string {
	tb.Helper()
	d := tok.NewDecoder()
	var sb strings.Builder
	for _, id := range ids {
		chunk, err := d.Add(id)
		if err != nil {
			tb.Fatalf("Add(%d): %v", id, err)
		}
		if tok.validUTF8 && !utf8.ValidString(chunk) {
			tb.Fatalf("Add(%d) returned invalid UTF-8 %q", id, chunk)
		}
		sb.WriteString(chunk)
	}
	chunk := d.Flush()
	if tok.validUTF8 && !utf8.ValidString(chunk) {
		tb.Fatalf("Flush returned invalid UTF-8 %q", chunk)
	}
	sb.WriteString(chunk)
	return sb.String()
}

func TestStreamDecoder(t *testing.T) {
	tok := grok1(t)
	var seqs [][]int
	for _, c := range readJSONL[encodeCase](t, "testdata/grok1_cases.jsonl") {
		seqs = append(seqs, c.IDs)
	}
	for _, c := range readJSONL[decodeCase](t, "testdata/grok1_decode_cases.jsonl") {
		seqs = append(seqs, c.IDs)
	}
	for _, c := range readJSONL[invalidCase](t, "testdata/grok1_invalid_utf8_cases.jsonl") {
		seqs = append(seqs, c.IDs)
	}
	for i, ids := range seqs {
		want, err := tok.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		if got := streamDecode(t, tok, ids); got != want {
			t.Errorf("sequence %d: streamed %q, Decode %q", i, short(got), short(want))
		}
	}
}

// kjvSamples are the prompts of testdata/grok-tiny-kjv (samples.md), as
// SentencePiece and llama.cpp encode them.
var kjvSamples = []struct {
	text string
	ids  []int
}{
	{"In the beginning God created", []int{1044, 262, 2073, 392, 3308}},
	{"And the king said", []int{301, 262, 417, 395}},
	{"Blessed are the poor in spirit:", []int{1922, 426, 262, 1439, 291, 976, 4061}},
}

func TestKJVSamples(t *testing.T) {
	tok, err := Load(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kjvSamples {
		if got := tok.Encode(c.text); !slices.Equal(got, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.ids)
		}
		if got, err := tok.Decode(c.ids); err != nil || got != c.text {
			t.Errorf("Decode(%v) = %q, %v; want %q", c.ids, got, err, c.text)
		}
	}
}

func TestAccessors(t *testing.T) {
	tok := grok1(t)
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"VocabSize", tok.VocabSize(), 131072},
		{"PAD", tok.PAD(), 0},
		{"BOS", tok.BOS(), 1},
		{"EOS", tok.EOS(), 2},
		{"UNK", tok.UNK(), 3},
	} {
		if c.got != c.want {
			t.Errorf("%s() = %d, want %d", c.name, c.got, c.want)
		}
	}
	for id, want := range map[int]string{
		-1: "", 131072: "", 0: "[PAD]", 3: "[UNK]", 4: "\n", 69: "<0x00>", 324: "<0xFF>",
		130089: "▁", 333: "▁the", 130308: "\ufffd",
	} {
		if got := tok.Piece(id); got != want {
			t.Errorf("Piece(%d) = %q, want %q", id, got, want)
		}
	}
}

func TestSpecialCases(t *testing.T) {
	tok := grok1(t)
	for _, c := range []struct {
		text string
		ids  []int
	}{
		{"", []int{}},
		{"12345", []int{130089, 15, 16, 17, 18, 19}},
		{" Hello", []int{325, 17523}},                    // "▁▁", "Hello"
		{"a<|separator|>b", []int{327, 47, 130110}},      // user-defined inside text
		{"<|control20|><|mask|>", []int{130089, 68, 48}}, // longest match
		{"\n\n\n\n\n\n\n\n\n\n\n", []int{130089, 13, 4}}, // 10 + 1 newlines
		{"[BOS]", []int{794, 130131, 2917, 130165}},      // control pieces are never produced
		{"\u2581", []int{325}},                           // a literal ▁ is a space
	} {
		got := tok.Encode(c.text)
		if !slices.Equal(got, c.ids) {
			pieces := make([]string, len(got))
			for i, id := range got {
				pieces[i] = tok.Piece(id)
			}
			t.Errorf("Encode(%q) = %v %q, want %v", c.text, got, pieces, c.ids)
		}
	}
}

func TestDecodeOutOfRange(t *testing.T) {
	tok := grok1(t)
	for _, ids := range [][]int{{-1}, {131072}, {333, 1 << 40}} {
		if s, err := tok.Decode(ids); err == nil {
			t.Errorf("Decode(%v) = %q, want an error", ids, s)
		} else if !strings.Contains(err.Error(), "out of range") {
			t.Errorf("Decode(%v) error %q does not say out of range", ids, err)
		}
	}
	d := tok.NewDecoder()
	if _, err := d.Add(309); err != nil { // <0xF0>, held back
		t.Fatal(err)
	}
	if _, err := d.Add(-5); err == nil {
		t.Error("Add(-5) succeeded")
	}
	s1, _ := d.Add(228) // <0x9F>
	s2, _ := d.Add(214) // <0x91>
	s3, _ := d.Add(237) // <0xA8>
	if s1+s2 != "" || s3 != "👨" {
		t.Errorf("byte run after a failed Add gave %q %q %q", s1, s2, s3)
	}
	if f := d.Flush(); f != "" {
		t.Errorf("Flush = %q", f)
	}
}

func TestStreamDecoderHoldsIncompleteBytes(t *testing.T) {
	tok := grok1(t)
	d := tok.NewDecoder()
	// "▁the" then the four bytes of 👨, then a lone <0xF0>.
	var chunks []string
	for _, id := range []int{333, 309, 228, 214, 237, 309} {
		s, err := d.Add(id)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, s)
	}
	chunks = append(chunks, d.Flush())
	want := []string{"the", "", "", "", "👨", "", "\ufffd"}
	if !slices.Equal(chunks, want) {
		t.Errorf("chunks = %q, want %q", chunks, want)
	}
	d.Reset()
	if s, _ := d.Add(333); s != "the" {
		t.Errorf("after Reset, Add(▁the) = %q, want %q", s, "the")
	}
}

// TestMalformedModel feeds truncated and corrupted protos to
// FromModelProto: it must return an error or a usable tokenizer, never
// panic.
func TestMalformedModel(t *testing.T) {
	data, err := os.ReadFile(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{
		nil,
		{0x0a},                   // pieces: tag without length
		{0x0a, 0x05, 0x0a},       // pieces: length beyond the end
		{0x0a, 0xff, 0xff, 0xff}, // truncated varint length
		{0x15, 0x00},             // truncated fixed32
		{0x08, 0x80},             // truncated varint
		{0x1b},                   // start group that never ends
		data[:len(data)/2],
		data[:len(data)-1],
	} {
		if _, err := FromModelProto(bad); err == nil {
			t.Errorf("FromModelProto(%d bytes) succeeded", len(bad))
		}
	}
	try := func(b []byte) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("FromModelProto panicked on %x: %v", b, r)
			}
		}()
		tok, err := FromModelProto(b)
		if err == nil {
			ids := tok.Encode("In the beginning \xff 123 ｆｕｌｌ")
			if _, err := tok.Decode(ids); err != nil {
				t.Fatal(err)
			}
		}
	}
	for n := 0; n < len(data); n += 97 {
		try(data[:n])
	}
	rng := newTestRand(1)
	for range 300 {
		b := slices.Clone(data)
		for range 1 + rng.IntN(8) {
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		}
		try(b)
	}
	nfkc, err := os.ReadFile("testdata/reference/nfkc.model")
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		b := slices.Clone(nfkc)
		for range 1 + rng.IntN(16) {
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		}
		try(b)
	}
}

func TestUnsupportedModels(t *testing.T) {
	data, err := os.ReadFile(kjvModel)
	if err != nil {
		t.Fatal(err)
	}
	var trainer []byte
	for _, f := range parseRaw(t, data) {
		if f.num == fieldModelTrainerSpec {
			trainer = f.b
		}
	}
	edit := func(num protowire.Number, v uint64) []byte {
		fields := parseRaw(t, data)
		for i, f := range fields {
			if f.num == fieldModelTrainerSpec {
				fields[i].b = setVarint(t, trainer, num, v)
			}
		}
		return serializeRaw(fields)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"unigram", edit(fieldTrainerModelType, modelTypeUnigram)},
		{"word", edit(fieldTrainerModelType, modelTypeWord)},
		{"whitespace suffix", edit(fieldTrainerWhitespaceSuffix, 1)},
		{"byte pieces without byte_fallback", edit(fieldTrainerByteFallback, 0)},
	} {
		if _, err := FromModelProto(tc.data); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := grok1(t)
	cases := readJSONL[encodeCase](t, "testdata/grok1_cases.jsonl")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range cases {
				c := cases[(i*7+g)%len(cases)]
				if got := tok.Encode(c.Text); len(c.IDs) > 0 && !slices.Equal(got, c.IDs) {
					t.Errorf("concurrent Encode(%q) differs", short(c.Text))
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestVocab checks every piece against grok1_vocab.jsonl, which is too big
// to vendor; it runs only where the shared test data is present.
func TestVocab(t *testing.T) {
	path := ""
	for _, p := range []string{"../../shared/testdata/tokenizer/grok1_vocab.jsonl", "../shared/testdata/tokenizer/grok1_vocab.jsonl"} {
		if _, err := os.Stat(p); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Skip("grok1_vocab.jsonl not found")
	}
	tok := grok1(t)
	type entry struct {
		ID      int     `json:"id"`
		Piece   string  `json:"piece"`
		Type    string  `json:"type"`
		Score   float32 `json:"score"`
		Decode  string  `json:"decode"`
		Surface string  `json:"surface"`
	}
	typeNames := map[pieceType]string{typeNormal: "NORMAL", typeUnknown: "UNKNOWN", typeControl: "CONTROL",
		typeUserDefined: "USER_DEFINED", typeUnused: "UNUSED", typeByte: "BYTE"}
	entries := readJSONL[entry](t, path)
	if len(entries) != tok.VocabSize() {
		t.Fatalf("%d entries, vocabulary has %d", len(entries), tok.VocabSize())
	}
	for _, e := range entries {
		if tok.Piece(e.ID) != e.Piece || typeNames[tok.types[e.ID]] != e.Type || tok.scores[e.ID] != e.Score {
			t.Fatalf("id %d: %q %s %v, want %q %s %v", e.ID, tok.Piece(e.ID), typeNames[tok.types[e.ID]], tok.scores[e.ID], e.Piece, e.Type, e.Score)
		}
		if got, _ := tok.Decode([]int{e.ID}); got != e.Decode {
			t.Fatalf("Decode([%d]) = %q, want %q", e.ID, got, e.Decode)
		}
		if e.Type != "BYTE" {
			if got, _ := tok.Decode([]int{4, e.ID}); got != "\n"+e.Surface {
				t.Fatalf("Decode([4, %d]) = %q, want %q", e.ID, got, "\n"+e.Surface)
			}
		}
	}
}

func FuzzEncodeDecode(f *testing.F) {
	tok := grok1(f)
	for _, c := range readJSONL[encodeCase](f, "testdata/grok1_cases.jsonl") {
		if len(c.Text) < 2000 {
			f.Add([]byte(c.Text))
		}
	}
	for _, c := range readJSONL[invalidCase](f, "testdata/grok1_invalid_utf8_cases.jsonl") {
		b, _ := hex.DecodeString(c.TextHex)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ids := tok.EncodeBytes(b)
		got, err := tok.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		if s := streamDecode(t, tok, ids); s != got {
			t.Fatalf("streamed %q, Decode %q", s, got)
		}
		if !utf8.Valid(b) || strings.Contains(string(b), spaceSymbol) {
			// Invalid bytes come back as U+FFFD and ▁ as a space.
			if !utf8.ValidString(got) {
				t.Fatalf("Decode gave invalid UTF-8 %q", got)
			}
			return
		}
		if got != string(b) {
			t.Fatalf("Decode(Encode(%q)) = %q (ids %v)", b, got, ids)
		}
	})
}

func TestTinyModel(t *testing.T) {
	for _, bf := range []bool{false, true} {
		tok, err := FromModelProto(tinyModel(bf))
		if err != nil {
			t.Fatal(err)
		}
		// "ba" is UNUSED and "12" USER_DEFINED; without byte pieces,
		// unknown characters become one UNK per run.
		for _, s := range []string{"abc ab 12 ba", "bab cab", "xyz", "ab\xffba"} {
			if got, want := tok.Encode(s), naiveEncode(tok, s); !slices.Equal(got, want) {
				t.Errorf("byteFallback=%v Encode(%q) = %v, naive %v", bf, s, got, want)
			}
		}
	}
}

func TestPairOrder(t *testing.T) {
	scores := []float32{-1e9, -2, -1, -0.5, 0, 0.5, 1, 2, 1e9}
	for i := range scores {
		for j := range scores {
			for _, l := range [][2]int32{{0, 1}, {1, 0}, {5, 5}} {
				a, b := pairOrder(scores[i], l[0]), pairOrder(scores[j], l[1])
				want := scores[i] > scores[j] || (scores[i] == scores[j] && l[0] < l[1])
				if got := a > b; got != want {
					t.Errorf("pairOrder(%v, %d) > pairOrder(%v, %d) = %v", scores[i], l[0], scores[j], l[1], got)
				}
			}
		}
	}
	negZero := float32(math.Copysign(0, -1))
	if pairOrder(negZero, 1) != pairOrder(0, 1) {
		t.Error("-0 and +0 order differently")
	}
}

func TestVocabExport(t *testing.T) {
	tok := grok1(t)
	for _, c := range []struct {
		id    int
		score float32
		typ   int32
	}{
		{0, 0, 3}, {3, 0, 2}, {4, 0, 4}, {69, 0, 6}, {401, -76, 1}, {-1, 0, 0}, {131072, 0, 0},
	} {
		if s, ty := tok.Score(c.id), tok.TokenType(c.id); s != c.score || ty != c.typ {
			t.Errorf("Score, TokenType(%d) = %v, %d; want %v, %d", c.id, s, ty, c.score, c.typ)
		}
	}
	if !tok.AddSpacePrefix() || !tok.PlainNormalizer() {
		t.Error("Grok-1 should have a space prefix and a plain normalizer")
	}
	nfkc, err := Load("testdata/reference/nfkc.model")
	if err != nil {
		t.Fatal(err)
	}
	if nfkc.PlainNormalizer() {
		t.Error("nmt_nfkc model reported as plain")
	}
}

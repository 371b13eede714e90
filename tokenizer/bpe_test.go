package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// whiteSpace spells out \s as Rust's regex (and Go's unicode.IsSpace)
// has it, for the expressions the tests compare with.
const whiteSpace = `\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}`

// goPattern is Grok-2's pattern without its lookahead alternative, in Go's
// syntax, with digits taken up to maxDigits at a time.
func goPattern(maxDigits int) *regexp.Regexp {
	return regexp.MustCompile(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\pL\pN]?\pL+|\pN{1,` + fmt.Sprint(maxDigits) + `}` +
		`| ?[^` + whiteSpace + `\pL\pN]+[\r\n]*|[` + whiteSpace + `]*[\r\n]+|[` + whiteSpace + `]+`)
}

// splitAll returns the pieces sp makes of s.
func splitAll(sp *splitter, s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := sp.next(s, i)
		if j <= i || j > len(s) {
			panic(fmt.Sprintf("splitter stuck at %d of %q", i, s))
		}
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// testAlphabet mixes the characters the pattern treats differently.
var testAlphabet = []string{
	"a", "b", "Z", "é", "ß", "ſ", "Ж", "中", "ア", "ی", "ก",
	"0", "7", "٣", "²", "Ⅻ", "３",
	" ", " ", " ", "\t", "\n", "\r", "\r\n", "\v", "\f", "\u0085", "\u00a0", "\u3000", "\u2028", "\ufeff", "\u200b",
	"'", "'s", "'S", "'ll", "'LL", "'Re", "'ve", "'d", "'m", "'t", "'ſ", "'x",
	".", ",", "!", "?", "-", "(", ")", "\"", "#", "<", "|", ">", "😀", "\u0301", "\u0915\u093f", "\ufffd",
	"hello", "World", " the", "1234567",
}

// randomText returns a string of up to n pieces of the alphabet, and with
// invalid true sometimes stray bytes that are not UTF-8.
func randomText(rng *rand.Rand, alphabet []string, n int, invalid bool) string {
	var sb strings.Builder
	for range rng.IntN(n + 1) {
		if invalid && rng.IntN(20) == 0 {
			sb.WriteByte([]byte{0x80, 0xff, 0xc3, 0xe2, 0xf0}[rng.IntN(5)])
			continue
		}
		sb.WriteString(alphabet[rng.IntN(len(alphabet))])
	}
	return sb.String()
}

// TestSplitterCases pins the pieces of texts worked out from the
// expression by hand, the lookahead cases in particular.
func TestSplitterCases(t *testing.T) {
	sp := splitter{maxDigits: 1}
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"a  b", []string{"a", " ", " b"}},         // \s+(?!\S) leaves the last space
		{"a   ", []string{"a", "   "}},             // at the end it takes all
		{"a\t\tb", []string{"a", "\t", "\tb"}},     // a tab may lead a word
		{"x \n\n y", []string{"x", " \n\n", " y"}}, // \s*[\r\n]+ stops after the last newline
		{"x\n  \ny", []string{"x", "\n  \n", "y"}}, // ... which may come after spaces
		{"x  \u3000(", []string{"x", "  ", "\u3000", "("}},
		{"12345", []string{"1", "2", "3", "4", "5"}}, // one digit a piece
		{"it's I'LL we'Re 'ſ 'x", []string{"it", "'s", " I", "'LL", " we", "'Re", " '", "ſ", " '", "x"}},
		{"''s", []string{"''", "s"}},
		{"don't!!\n\nok", []string{"don", "'t", "!!\n\n", "ok"}},
		{" ((x", []string{" ((", "x"}},
		{".hello", []string{".hello"}},
		{"a\xffb", []string{"a", "\xffb"}}, // a stray byte is like U+FFFD
		{"\xff\xfe!", []string{"\xff\xfe!"}},
		{"\r\n\r\n", []string{"\r\n\r\n"}},
		{"  ", []string{"  "}},
		{" ", []string{" "}},
		{"\u00a0x", []string{"\u00a0x"}},
		{"x\u0085 y", []string{"x", "\u0085", " y"}},
		{"\ufeffx", []string{"\ufeffx"}}, // U+FEFF is not \s in Rust: a prefix
	} {
		if got := splitAll(&sp, tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("split(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}

// TestSplitterVsRegexp compares the splitter, lookahead dropped, with Go's
// regexp on the same expression: everything but \s+(?!\S), whose handling
// TestSplitterCases and the js-tiktoken comparison check.
func TestSplitterVsRegexp(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, digits := range []int{1, 3} {
		re := goPattern(digits)
		sp := splitter{maxDigits: digits, noLookahead: true}
		for i := range 20000 {
			s := randomText(rng, testAlphabet, 1+i%40, false)
			got := splitAll(&sp, s)
			want := re.FindAllString(s, -1)
			if strings.Join(want, "") != s {
				t.Fatalf("regexp does not tile %q: %q", s, want)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("digits %d: split(%q) = %q, regexp %q", digits, s, got, want)
			}
		}
	}
}

// naiveBPE is tiktoken's byte-pair merge as js-tiktoken writes it: look up
// each adjacent pair's bytes, merge the lowest rank, leftmost first.
func naiveBPE(ranks map[string]int, p string) []int {
	if id, ok := ranks[p]; ok {
		return []int{id}
	}
	parts := make([]string, len(p))
	for i := range len(p) {
		parts[i] = p[i : i+1]
	}
	for {
		best, br := -1, 0
		for i := 0; i+1 < len(parts); i++ {
			if r, ok := ranks[parts[i]+parts[i+1]]; ok && (best < 0 || r < br) {
				best, br = i, r
			}
		}
		if best < 0 {
			break
		}
		parts[best] += parts[best+1]
		parts = append(parts[:best+1], parts[best+2:]...)
	}
	ids := make([]int, len(parts))
	for i, s := range parts {
		ids[i] = ranks[s]
	}
	return ids
}

// synthRanks builds a vocabulary from text: the 256 bytes, then the most
// frequent substrings of its pieces (2 to 8 bytes), ranked by count. Not
// every token is reachable by merges, which the algorithm must cope with.
func synthRanks(text string, n int) map[string]int {
	sp := splitter{maxDigits: 1}
	count := map[string]int{}
	for _, p := range splitAll(&sp, text) {
		for i := range len(p) {
			for j := i + 2; j <= min(len(p), i+8); j++ {
				count[p[i:j]]++
			}
		}
	}
	keys := make([]string, 0, len(count))
	for k, c := range count {
		if c >= 3 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(a, b int) bool {
		if count[keys[a]] != count[keys[b]] {
			return count[keys[a]] > count[keys[b]]
		}
		return keys[a] < keys[b]
	})
	ranks := map[string]int{}
	for c := range 256 {
		ranks[string([]byte{byte(c)})] = c
	}
	for _, k := range keys {
		if len(ranks) >= n {
			break
		}
		ranks[k] = len(ranks)
	}
	return ranks
}

// tokJSONBytes writes ranks and specials (numbered after the ranks) as a
// tokenizer.tok.json.
func tokJSONBytes(ranks map[string]int, specials []string, extra map[string]any) []byte {
	type tok struct {
		Bytes []int `json:"bytes"`
		Token int   `json:"token"`
	}
	bl := func(s string) []int {
		out := make([]int, len(s))
		for i := range len(s) {
			out[i] = int(s[i])
		}
		return out
	}
	f := map[string]any{"word_split": "V1"}
	var reg []tok
	maxID := -1
	for s, id := range ranks {
		reg = append(reg, tok{bl(s), id})
		maxID = max(maxID, id)
	}
	sort.Slice(reg, func(a, b int) bool { return reg[a].Token < reg[b].Token })
	var sp []tok
	for i, s := range specials {
		sp = append(sp, tok{bl(s), maxID + 1 + i})
	}
	f["regular_tokens"], f["special_tokens"] = reg, sp
	for k, v := range extra {
		if v == nil {
			delete(f, k)
		} else {
			f[k] = v
		}
	}
	data, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return data
}

var grokSpecials = []string{"<|pad|>", "<|separator|>", "<|eos|>", "<|control1|>", "<|reserved_3|>", "<|mask|>"}

// testCorpus is text for building and checking vocabularies.
func testCorpus() string {
	s := benchText()
	return s[:min(len(s), 300_000)]
}

func mustBPE(t testing.TB, data []byte) *BPE {
	t.Helper()
	b, err := FromTokJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBPEMatchesNaive checks Encode against the naive merge loop on a
// synthetic vocabulary, over real and random text, with long pieces that
// take the heap path.
func TestBPEMatchesNaive(t *testing.T) {
	corpus := testCorpus()
	ranks := synthRanks(corpus, 3000)
	b := mustBPE(t, tokJSONBytes(ranks, grokSpecials, nil))
	sp := splitter{maxDigits: 1}
	rng := rand.New(rand.NewPCG(3, 4))
	var texts []string
	for i := 0; i+2000 <= len(corpus) && len(texts) < 100; i += 2500 {
		texts = append(texts, corpus[i:i+2000])
	}
	for i := range 3000 {
		texts = append(texts, randomText(rng, testAlphabet, 1+i%60, i%3 == 0))
	}
	// Long pieces (over heapMergeBytes) of repeated and mixed letters.
	texts = append(texts, strings.Repeat("a", 1000), strings.Repeat("the", 300), strings.Repeat(" ", 500),
		strings.Repeat("!", 777), strings.Repeat("ab", 5000))
	for range 200 {
		var sb strings.Builder
		for range 65 + rng.IntN(300) {
			sb.WriteByte("etaoinshrdlu"[rng.IntN(12)])
		}
		texts = append(texts, sb.String())
	}
	for _, text := range texts {
		var want []int
		for _, p := range splitAll(&sp, text) {
			want = append(want, naiveBPE(ranks, p)...)
		}
		got := b.EncodeOrdinary(text)
		if !slices.Equal(got, want) {
			t.Fatalf("Encode(%.80q) = %v, naive %v", text, got, want)
		}
		dec, err := b.DecodeBytes(got)
		if err != nil || string(dec) != text {
			t.Fatalf("DecodeBytes(Encode(%.80q)) = %.80q, %v", text, dec, err)
		}
	}
}

// TestBPESpecial checks the handling of special tokens in the text.
func TestBPESpecial(t *testing.T) {
	ranks := synthRanks(testCorpus(), 1000)
	b := mustBPE(t, tokJSONBytes(ranks, grokSpecials, nil))
	eos, _ := b.SpecialID("<|eos|>")
	sep, _ := b.SpecialID("<|separator|>")
	if b.EOS() != eos || b.Separator() != sep || b.PAD() < 0 || !b.IsSpecial(eos) || b.IsSpecial(5) {
		t.Fatalf("EOS %d sep %d pad %d", b.EOS(), b.Separator(), b.PAD())
	}
	onlyEOS, err := b.AllowSpecial("<|eos|>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AllowSpecial("<|nope|>"); err == nil {
		t.Error("AllowSpecial of an unknown token succeeded")
	}
	text := "Human: hi<|separator|>\n\nAssistant: ok<|eos|>"
	plain := b.EncodeOrdinary(text)
	for _, tc := range []struct {
		name    string
		allowed Allowed
		want    []int
	}{
		{"none", Allowed{}, plain},
		{"eos", onlyEOS, append(b.EncodeOrdinary("Human: hi<|separator|>\n\nAssistant: ok"), eos)},
		{"all", AllSpecial, slices.Concat(b.EncodeOrdinary("Human: hi"), []int{sep}, b.EncodeOrdinary("\n\nAssistant: ok"), []int{eos})},
		{"default", b.DefaultAllowed(), slices.Concat(b.EncodeOrdinary("Human: hi"), []int{sep}, b.EncodeOrdinary("\n\nAssistant: ok"), []int{eos})},
	} {
		if got := b.Encode(text, tc.allowed); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Encode = %v, want %v", tc.name, got, tc.want)
		}
	}
	// <|mask|> is not one of the servers' defaults.
	if got := b.Encode("<|mask|>", b.DefaultAllowed()); slices.Contains(got, b.VocabSize()-1) {
		t.Errorf("default set allows <|mask|>: %v", got)
	}
	// Strict: a special token not allowed is an error, as in tiktoken.
	if _, err := b.EncodeStrict(text, onlyEOS); err == nil {
		t.Error("EncodeStrict with <|separator|> not allowed succeeded")
	} else if de := (*DisallowedSpecialError)(nil); !errors.As(err, &de) || de.Token != "<|separator|>" || de.Offset != 9 {
		t.Errorf("EncodeStrict: %v", err)
	}
	if got, err := b.EncodeStrict(text, AllSpecial); err != nil || !slices.Equal(got, b.Encode(text, AllSpecial)) {
		t.Errorf("EncodeStrict(all) = %v, %v", got, err)
	}
	// Whitespace before a special token ends its segment: \s+(?!\S) sees
	// the segment's end.
	a := b.Encode("x  <|eos|>", AllSpecial)
	if want := slices.Concat(b.EncodeOrdinary("x  "), []int{eos}); !slices.Equal(a, want) {
		t.Errorf("Encode(x  <|eos|>) = %v, want %v", a, want)
	}
	if dec, err := b.Decode(b.Encode(text, AllSpecial)); err != nil || dec != text {
		t.Errorf("Decode = %q, %v", dec, err)
	}
}

// TestBPEDecode checks Decode, its errors and the stream decoder.
func TestBPEDecode(t *testing.T) {
	ranks := synthRanks(testCorpus(), 1000)
	b := mustBPE(t, tokJSONBytes(ranks, grokSpecials, nil))
	if _, err := b.Decode([]int{-1}); err == nil {
		t.Error("Decode(-1) succeeded")
	}
	if _, err := b.Decode([]int{b.VocabSize()}); err == nil {
		t.Error("Decode(VocabSize) succeeded")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 500 {
		text := randomText(rng, testAlphabet, 30, i%2 == 0) + "<|eos|>"
		ids := b.Encode(text, AllSpecial)
		want, err := b.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(text) && want != text {
			t.Fatalf("Decode(Encode(%q)) = %q", text, want)
		}
		d := b.NewDecoder()
		var sb strings.Builder
		for _, id := range ids {
			s, err := d.Add(id)
			if err != nil {
				t.Fatal(err)
			}
			if !utf8.ValidString(s) {
				t.Fatalf("chunk %q is not UTF-8", s)
			}
			sb.WriteString(s)
		}
		sb.WriteString(d.Flush())
		if sb.String() != want {
			t.Fatalf("streamed %q, Decode %q", sb.String(), want)
		}
		d.Reset()
	}
	// A character split over tokens is held back until complete.
	d := b.NewDecoder()
	e := "é"
	if s, _ := d.Add(int(b.byteID[e[0]])); s != "" {
		t.Errorf("half a character gave %q", s)
	}
	if s, _ := d.Add(int(b.byteID[e[1]])); s != e {
		t.Errorf("the whole character gave %q", s)
	}
	if _, err := d.Add(-3); err == nil {
		t.Error("Add(-3) succeeded")
	}
}

// TestTokJSONErrors checks that bad tok.json files are refused with an
// error that says what is wrong.
func TestTokJSONErrors(t *testing.T) {
	ranks := map[string]int{}
	for c := range 256 {
		ranks[string([]byte{byte(c)})] = c
	}
	ranks["ab"] = 256
	missing := map[string]int{}
	for s, id := range ranks {
		if s != "z" {
			missing[s] = id
		}
	}
	dupID := map[string]int{"xyz": 256}
	for s, id := range ranks {
		dupID[s] = id
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"not JSON", []byte(`{"regular_tokens": [`), "bad JSON at line 1"},
		{"no word_split", tokJSONBytes(ranks, nil, map[string]any{"word_split": nil}), `no "word_split"`},
		{"word_split V2", tokJSONBytes(ranks, nil, map[string]any{"word_split": "V2"}), `word_split "V2"`},
		{"other pattern", tokJSONBytes(ranks, nil, map[string]any{"pat_str": `\w+`}), "is not supported"},
		{"missing byte", tokJSONBytes(missing, nil, nil), "the byte 0x7a is not a token"},
		{"duplicate id", tokJSONBytes(dupID, nil, nil), "id 256 is given to two tokens"},
		{"byte over 255", []byte(`{"word_split":"V1","regular_tokens":[{"bytes":[256],"token":0}]}`), "numbers 0 to 255"},
		{"bytes not a list", []byte(`{"word_split":"V1","regular_tokens":[{"bytes":"ab","token":0}]}`), "array of numbers"},
		{"no token", []byte(`{"word_split":"V1","regular_tokens":[{"bytes":[1]}]}`), `needs "bytes" and "token"`},
		{"empty bytes", []byte(`{"word_split":"V1","regular_tokens":[{"bytes":[],"token":0}]}`), "has no bytes"},
		{"huge id", []byte(`{"word_split":"V1","regular_tokens":[{"bytes":[1],"token":99999999}]}`), "outside [0, 2097152)"},
		{"negative id", []byte(`{"word_split":"V1","regular_tokens":[{"bytes":[1],"token":-1}]}`), "outside [0,"},
		{"long token", []byte(`{"word_split":"V1","regular_tokens":[{"bytes":[` + strings.Repeat("1,", 4096) + `1],"token":0}]}`), "more than the 4096 allowed"},
		{"vocab_size", tokJSONBytes(ranks, grokSpecials, map[string]any{"vocab_size": 300}), "vocab_size is 300, but there are 263 tokens"},
		{"special not UTF-8", tokJSONBytes(ranks, []string{"<\xff>"}, nil), "not valid UTF-8"},
		{"special twice", tokJSONBytes(ranks, []string{"<|a|>", "<|a|>"}, nil), "given twice"},
		{"default_allowed", tokJSONBytes(ranks, grokSpecials, map[string]any{"default_allowed_special": [][]int{{60, 62}}}), "default_allowed_special[0]"},
	} {
		_, err := FromTokJSON(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	// vocab_size right, default_allowed_special adds <|mask|>.
	b, err := FromTokJSON(tokJSONBytes(ranks, grokSpecials, map[string]any{
		"vocab_size": 263, "default_allowed_special": [][]int{[]int{60, 124, 109, 97, 115, 107, 124, 62}}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Encode("<|mask|>", b.DefaultAllowed()); len(got) != 1 || got[0] != 262 {
		t.Errorf("Encode(<|mask|>) = %v", got)
	}
}

// TestTokJSONMemory bounds, by counting, what reading a tok.json made of
// many tiny entries allocates.
func TestTokJSONMemory(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"word_split":"V1","regular_tokens":[`)
	for i := range 200_000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"bytes":[%d],"token":%d}`, i%256, i)
	}
	sb.WriteString(`]}`)
	data := []byte(sb.String())
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := FromTokJSON(data)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "same bytes") {
		t.Errorf("err = %v, want a duplicate-bytes error", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes: allocated %d (%.1fx)", len(data), alloc, float64(alloc)/float64(len(data)))
	if alloc > 16*uint64(len(data)) {
		t.Errorf("reading %d bytes allocated %d, more than 16x", len(data), alloc)
	}
}

// byteLevelEncode maps bytes to GPT-2's byte-level alphabet.
func byteLevelEncode(s string) string {
	inv := map[byte]rune{}
	for r, c := range byteLevelDecode {
		inv[c] = r
	}
	var sb strings.Builder
	for i := range len(s) {
		sb.WriteRune(inv[s[i]])
	}
	return sb.String()
}

// hfJSONBytes writes ranks as transformers' TikTokenConverter does: the
// vocabulary in the byte-level alphabet and, for each token, the merge
// that tiktoken's algorithm restricted to lower ranks ends with.
func hfJSONBytes(ranks map[string]int, specials []string, pattern string, pairForm bool) []byte {
	type merge struct {
		rank int
		l, r string
	}
	var merges []merge
	vocab := map[string]int{}
	maxID := -1
	for s, id := range ranks {
		vocab[byteLevelEncode(s)] = id
		maxID = max(maxID, id)
		if len(s) < 2 {
			continue
		}
		// bpe(ranks, token, max_rank=rank): merge while the rank is lower.
		parts := make([]string, len(s))
		for i := range len(s) {
			parts[i] = s[i : i+1]
		}
		for {
			best, br := -1, 0
			for i := 0; i+1 < len(parts); i++ {
				if r, ok := ranks[parts[i]+parts[i+1]]; ok && r < id && (best < 0 || r < br) {
					best, br = i, r
				}
			}
			if best < 0 {
				break
			}
			parts[best] += parts[best+1]
			parts = append(parts[:best+1], parts[best+2:]...)
		}
		if len(parts) == 2 {
			merges = append(merges, merge{id, parts[0], parts[1]})
		}
	}
	sort.Slice(merges, func(a, b int) bool { return merges[a].rank < merges[b].rank })
	var ml []any
	for _, m := range merges {
		if pairForm {
			ml = append(ml, []string{byteLevelEncode(m.l), byteLevelEncode(m.r)})
		} else {
			ml = append(ml, byteLevelEncode(m.l)+" "+byteLevelEncode(m.r))
		}
	}
	var added []map[string]any
	for i, s := range specials {
		added = append(added, map[string]any{"id": maxID + 1 + i, "content": s, "single_word": false,
			"lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	f := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil, "added_tokens": added, "normalizer": nil,
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
			"vocab": vocab, "merges": ml},
	}
	data, err := json.Marshal(f)
	if err != nil {
		panic(err)
	}
	return data
}

// TestHFTokenizerJSON reads a tokenizer.json converted from a tiktoken
// vocabulary, in both merge forms, and checks that it encodes as the
// tok.json of the same ranks does.
func TestHFTokenizerJSON(t *testing.T) {
	corpus := testCorpus()
	ranks := synthRanks(corpus, 2000)
	tj := mustBPE(t, tokJSONBytes(ranks, grokSpecials, nil))
	rng := rand.New(rand.NewPCG(7, 8))
	for _, pairForm := range []bool{false, true} {
		hf, err := FromHFTokenizerJSON(hfJSONBytes(ranks, grokSpecials, GrokPattern, pairForm))
		if err != nil {
			t.Fatal(err)
		}
		if hf.VocabSize() != tj.VocabSize() || hf.EOS() != tj.EOS() {
			t.Fatalf("vocab %d eos %d, tok.json %d %d", hf.VocabSize(), hf.EOS(), tj.VocabSize(), tj.EOS())
		}
		diff := 0
		for i := range 3000 {
			var text string
			if i%2 == 0 {
				o := rng.IntN(len(corpus) - 500)
				text = corpus[o : o+500]
			} else {
				text = randomText(rng, testAlphabet, 40, false) + "<|eos|>"
			}
			if !slices.Equal(hf.Encode(text, hf.DefaultAllowed()), tj.Encode(text, AllSpecial)) {
				diff++
			}
		}
		if diff > 0 {
			t.Errorf("pair form %v: %d of 3000 texts encode differently from the tok.json", pairForm, diff)
		}
	}
	// Refusals.
	good := string(hfJSONBytes(ranks, nil, GrokPattern, false))
	for _, tc := range []struct{ name, from, to, want string }{
		{"other model", `"type":"BPE"`, `"type":"WordPiece"`, `model type "WordPiece"`},
		{"dropout", `"dropout":null`, `"dropout":0.1`, "dropout"},
		{"byte fallback", `"byte_fallback":false`, `"byte_fallback":true`, "byte_fallback"},
		{"use_regex", `"use_regex":false`, `"use_regex":true`, "pre-tokenizer"},
		{"normalizer", `"normalizer":null`, `"normalizer":{"type":"NFC"}`, "normalizer"},
		{"pattern", `\\p{N}|`, `\\p{N}{1,2}|`, "is not supported"},
		{"not byte-level", `"ab":`, `"a b":`, "byte-level alphabet"},
	} {
		bad := strings.Replace(good, tc.from, tc.to, 1)
		if bad == good {
			t.Fatalf("%s: %q not found", tc.name, tc.from)
		}
		if _, err := FromHFTokenizerJSON([]byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkBPEEncode encodes benchText with a vocabulary built from it
// (BenchmarkBPEEncodeCL100k in bpe_node_test.go uses a real one).
func BenchmarkBPEEncode(bm *testing.B) {
	text := benchText()
	b := mustBPE(bm, tokJSONBytes(synthRanks(text[:300_000], 30000), grokSpecials, nil))
	bm.SetBytes(int64(len(text)))
	bm.ReportAllocs()
	for bm.Loop() {
		b.Encode(text, AllSpecial)
	}
}

package tokenizer

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// The js-tiktoken comparison: bpecheck/check.mjs runs the npm package
// js-tiktoken (pinned in bpecheck/package.json; .ci/run installs it) with
// the ranks it ships and Grok-2's pattern, and these tests compare its
// pieces and ids with ours. They skip only when node is not installed.

const bpecheckDir = "bpecheck"

// nodeHarness returns the node binary. Without node or the harness's
// package the test skips, except in CI (CI set), whose .ci/run installs
// both: there their absence is a failure, so the comparison cannot
// silently stop running.
func nodeHarness(tb testing.TB) string {
	tb.Helper()
	missing := tb.Skipf
	if os.Getenv("CI") != "" {
		missing = tb.Fatalf
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed: the js-tiktoken comparison needs it (.ci/run installs it)")
	}
	if _, err := os.Stat(filepath.Join(bpecheckDir, "node_modules", "js-tiktoken", "package.json")); err != nil {
		missing("js-tiktoken is not installed: run `npm ci --prefix tokenizer/%s` (as .ci/run does): %v", bpecheckDir, err)
	}
	return node
}

func runNode(tb testing.TB, node string, args ...string) {
	tb.Helper()
	cmd := exec.Command(node, append([]string{"check.mjs"}, args...)...)
	cmd.Dir = bpecheckDir
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("node check.mjs %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// jsRanks reads a ranks module that js-tiktoken ships: a JSON object after
// "export default", whose bpe_ranks lines are "key offset token...", the
// tokens in base64 with ranks from offset on.
func jsRanks(tb testing.TB, name string) map[string]int {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(bpecheckDir, "node_modules", "js-tiktoken", "dist", "ranks", name+".js"))
	if err != nil {
		tb.Fatal(err)
	}
	var m struct {
		BPERanks string `json:"bpe_ranks"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(string(data), "export default ")), ";")), &m); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	ranks := map[string]int{}
	for line := range strings.SplitSeq(m.BPERanks, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		off, err := strconv.Atoi(f[1])
		if err != nil {
			tb.Fatalf("%s: bad line %.40q", name, line)
		}
		for i, tok := range f[2:] {
			b, err := base64.StdEncoding.DecodeString(tok)
			if err != nil {
				tb.Fatalf("%s: %v", name, err)
			}
			ranks[string(b)] = off + i
		}
	}
	if len(ranks) < 50000 {
		tb.Fatalf("%s: only %d ranks", name, len(ranks))
	}
	return ranks
}

// realTexts returns pieces of real text: paragraphs and lines of the
// benchmark prose, the Grok-1 test vectors (many scripts) and the KJV
// samples.
func realTexts(tb testing.TB, n int, rng *rand.Rand) []string {
	var src []string
	for _, c := range readJSONL[encodeCase](tb, "testdata/grok1_cases.jsonl") {
		src = append(src, c.Text)
	}
	if kjv, err := os.ReadFile("../testdata/grok-tiny-kjv/samples.md"); err == nil {
		src = append(src, strings.Split(string(kjv), "\n")...)
	}
	text := benchText()
	var out []string
	for len(out) < n {
		switch rng.IntN(4) {
		case 0:
			out = append(out, src[rng.IntN(len(src))])
		default: // a random stretch of prose, cut at any byte of a character
			o := rng.IntN(len(text) - 600)
			for o > 0 && text[o]&0xc0 == 0x80 {
				o--
			}
			e := o + 1 + rng.IntN(500)
			for e < len(text) && text[e]&0xc0 == 0x80 {
				e++
			}
			out = append(out, text[o:e])
		}
	}
	return out
}

// goClass is the class the splitter gives a code point, as check.mjs
// writes classes: L, N or o.
func goClass(r rune) byte {
	switch {
	case unicode.IsLetter(r):
		return 'L'
	case unicode.IsNumber(r):
		return 'N'
	}
	return 'o'
}

type nodeResult struct {
	Split  []int `json:"split"`
	IDs    []int `json:"ids"`
	Strict []int `json:"strict"`
}

// TestBPEVsJSTiktoken compares pieces and ids with js-tiktoken over 100k
// random and real-text strings, on cl100k_base's ranks as a tok.json
// with Grok-2's special tokens, and on o200k_base's for 10k more.
func TestBPEVsJSTiktoken(t *testing.T) {
	node := nodeHarness(t)
	dir := t.TempDir()

	// Node's Unicode (ICU) is newer than Go's tables: code points whose
	// \p{L} or \p{N} differ are left out of random text, and real texts
	// holding one are set aside.
	classFile := filepath.Join(dir, "classes")
	runNode(t, node, "classes", classFile)
	js, err := os.ReadFile(classFile)
	if err != nil || len(js) != 0x110000 {
		t.Fatalf("classes: %d bytes, %v", len(js), err)
	}
	differ := map[rune]bool{}
	for r := rune(0); r < 0x110000; r++ {
		if (r < 0xd800 || r >= 0xe000) && js[r] != goClass(r) {
			differ[r] = true
		}
	}
	t.Logf("%d code points are letters or numbers in node's Unicode and not in Go's %s (or the reverse)", len(differ), unicode.Version)

	rng := rand.New(rand.NewPCG(2025, 8))
	alphabet := slices.Clone(testAlphabet)
	alphabet = append(alphabet, grokSpecials...)
	alphabet = append(alphabet, "<|eos", "|>", "<|separator|>")
	randRune := func() string {
		for {
			var r rune
			switch rng.IntN(3) {
			case 0:
				r = rune(rng.IntN(0x3000))
			case 1:
				r = rune(rng.IntN(0x10000))
			default:
				r = rune(rng.IntN(0x110000))
			}
			if (r < 0xd800 || r >= 0xe000) && !differ[r] {
				return string(r)
			}
		}
	}
	for _, name := range []string{"cl100k_base", "o200k_base"} {
		count := 100_000
		if name != "cl100k_base" {
			count = 10_000
		}
		ranks := jsRanks(t, name)
		b, err := FromTokJSON(tokJSONBytes(ranks, grokSpecials, nil))
		if err != nil {
			t.Fatal(err)
		}
		var texts []string
		setAside := 0
		for _, s := range realTexts(t, count*3/10, rng) {
			if strings.ContainsFunc(s, func(r rune) bool { return differ[r] }) {
				setAside++
				continue
			}
			texts = append(texts, s)
		}
		for len(texts) < count {
			var sb strings.Builder
			for range rng.IntN(40) {
				if rng.IntN(4) == 0 {
					sb.WriteString(randRune())
				} else {
					sb.WriteString(alphabet[rng.IntN(len(alphabet))])
				}
			}
			texts = append(texts, sb.String())
		}
		type line struct {
			Text    string   `json:"text"`
			Allowed []string `json:"allowed"`
		}
		in := filepath.Join(dir, name+".in.jsonl")
		f, err := os.Create(in)
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriter(f)
		allowed := make([][]string, len(texts))
		for i, s := range texts {
			allowed[i] = []string{}
			for _, sp := range grokSpecials {
				if rng.IntN(2) == 0 {
					allowed[i] = append(allowed[i], sp)
				}
			}
			data, _ := json.Marshal(line{s, allowed[i]})
			w.Write(data)
			w.WriteByte('\n')
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		out := filepath.Join(dir, name+".out.jsonl")
		start := time.Now()
		runNode(t, node, "encode", name, in, out)
		t.Logf("%s: js-tiktoken took %v for %d texts", name, time.Since(start).Round(time.Millisecond), len(texts))

		rf, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(rf)
		sc.Buffer(nil, 1<<24)
		sp := b.split
		var splitOK, idsOK, strictOK, withSpecial, strictErr, bad int
		for i := 0; sc.Scan(); i++ {
			var r nodeResult
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			s := texts[i]
			var lens []int
			for _, p := range splitAll(&sp, s) {
				lens = append(lens, len(p))
			}
			if len(s) == 0 {
				lens = []int{}
			}
			al, err := b.AllowSpecial(allowed[i]...)
			if err != nil {
				t.Fatal(err)
			}
			ids := b.Encode(s, al)
			strict, serr := b.EncodeStrict(s, al)
			if strings.Contains(s, "<|") {
				withSpecial++
			}
			if serr != nil {
				strictErr++
			}
			ok := true
			if slices.Equal(lens, r.Split) {
				splitOK++
			} else {
				ok = false
				t.Errorf("%s: split(%q): byte lengths %v, js %v", name, s, lens, r.Split)
			}
			if slices.Equal(ids, r.IDs) || (len(ids) == 0 && len(r.IDs) == 0) {
				idsOK++
			} else {
				ok = false
				t.Errorf("%s: Encode(%q, %q) = %v, js %v", name, s, allowed[i], ids, r.IDs)
			}
			if (serr != nil) == (r.Strict == nil) && (serr != nil || slices.Equal(strict, r.Strict) || len(strict) == 0 && len(r.Strict) == 0) {
				strictOK++
			} else {
				ok = false
				t.Errorf("%s: EncodeStrict(%q, %q) = %v, %v; js %v", name, s, allowed[i], strict, serr, r.Strict)
			}
			if !ok {
				if bad++; bad > 10 {
					t.Fatal("too many differences")
				}
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		rf.Close()
		if splitOK+bad < len(texts) && !t.Failed() {
			t.Fatalf("%s: node returned fewer lines than the %d texts", name, len(texts))
		}
		t.Logf("%s: %d texts (%d real, %d real set aside for Unicode differences; %d with \"<|\", %d refused by strict): pieces agree %d, ids agree %d, strict agrees %d",
			name, len(texts), count*3/10-setAside, setAside, withSpecial, strictErr, splitOK, idsOK, strictOK)
	}
}

// TestJSTiktokenSpeed, when GROK_BPE_JSBENCH=1, measures js-tiktoken and
// Encode on benchText with cl100k_base's ranks and logs both rates. It
// checks nothing: it is how the speed ratio is measured.
func TestJSTiktokenSpeed(t *testing.T) {
	if os.Getenv("GROK_BPE_JSBENCH") != "1" {
		t.Skip("set GROK_BPE_JSBENCH=1 to measure js-tiktoken's speed")
	}
	node := nodeHarness(t)
	text := benchText()
	file := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "check.mjs", "bench", "cl100k_base", file, "3")
	cmd.Dir = bpecheckDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("js-tiktoken: %s", strings.TrimSpace(string(out)))
	b, err := FromTokJSON(tokJSONBytes(jsRanks(t, "cl100k_base"), grokSpecials, nil))
	if err != nil {
		t.Fatal(err)
	}
	res := testing.Benchmark(func(bm *testing.B) {
		bm.SetBytes(int64(len(text)))
		for bm.Loop() {
			b.Encode(text, Allowed{})
		}
	})
	t.Logf("Go Encode: %s, %d tokens", fmt.Sprint(res), len(b.Encode(text, Allowed{})))
}

// BenchmarkBPEEncodeCL100k encodes benchText with cl100k_base's ranks
// (from the js-tiktoken package) and Grok-2's pattern.
func BenchmarkBPEEncodeCL100k(bm *testing.B) {
	nodeHarness(bm)
	b, err := FromTokJSON(tokJSONBytes(jsRanks(bm, "cl100k_base"), grokSpecials, nil))
	if err != nil {
		bm.Fatal(err)
	}
	text := benchText()
	bm.SetBytes(int64(len(text)))
	bm.ReportAllocs()
	for bm.Loop() {
		b.Encode(text, AllSpecial)
	}
}

package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// benchText returns about 1.2 MB of English prose, built deterministically:
// Debian's license texts (/usr/share/common-licenses) when present, else
// the English, code and long cases of the test vectors; their paragraphs
// are shuffled with a fixed seed and repeated until the size is reached.
var benchText = sync.OnceValue(func() string {
	var paras []string
	files, _ := filepath.Glob("/usr/share/common-licenses/*")
	for _, f := range files {
		if fi, err := os.Stat(f); err != nil || fi.IsDir() {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		paras = append(paras, strings.Split(string(data), "\n\n")...)
	}
	if len(paras) == 0 {
		var cases []encodeCase
		func() {
			f, err := os.Open("testdata/grok1_cases.jsonl")
			if err != nil {
				panic(err)
			}
			f.Close()
		}()
		cases = readJSONL[encodeCase](nopTB{}, "testdata/grok1_cases.jsonl")
		for _, c := range cases {
			switch c.Category {
			case "english", "long", "code":
				paras = append(paras, c.Text)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	for sb.Len() < 1200000 {
		for _, i := range rng.Perm(len(paras)) {
			sb.WriteString(paras[i])
			sb.WriteString("\n\n")
		}
	}
	return sb.String()
})

// nopTB lets readJSONL run outside a test; it panics on failure.
type nopTB struct{ testing.TB }

func (nopTB) Helper()                   {}
func (nopTB) Fatal(args ...any)         { panic(args) }
func (nopTB) Fatalf(f string, a ...any) { panic(f) }

func BenchmarkEncode(b *testing.B) {
	tok := grok1(b)
	text := benchText()
	b.Run("OneString", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.Encode(text)
		}
	})
	b.Run("Lines", func(b *testing.B) {
		lines := strings.Split(text, "\n")
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			for _, l := range lines {
				tok.Encode(l)
			}
		}
	})
}

func BenchmarkLoad(b *testing.B) {
	data, err := os.ReadFile(grok1Model)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromModelProto(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := grok1(b)
	text := benchText()
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := tok.Decode(ids); err != nil {
			b.Fatal(err)
		}
	}
}

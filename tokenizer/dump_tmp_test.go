package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestDumpBench(t *testing.T) {
	dir := os.Getenv("TOKREF")
	if dir == "" {
		t.Skip()
	}
	text := benchText()
	os.WriteFile(dir+"/bench.txt", []byte(text), 0o644)
	ids := grok1(t).Encode(text)
	b, _ := json.Marshal(ids)
	os.WriteFile(dir+"/bench_go_ids.json", b, 0o644)
	var all [][]int
	for _, l := range strings.Split(text, "\n") {
		all = append(all, grok1(t).Encode(l))
	}
	b, _ = json.Marshal(all)
	os.WriteFile(dir+"/bench_go_lines.json", b, 0o644)
}

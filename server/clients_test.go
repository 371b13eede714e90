package server

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grok-go/grok/runner"
)

// TestStockClients runs the official ollama and openai npm packages
// (testdata/node, installed by .ci/run with npm ci) against a server on
// 127.0.0.1 that requires an API key. It skips when node or the packages
// are absent, except in CI (CI set), where .ci/run installs them and their
// absence fails the test.
func TestStockClients(t *testing.T) {
	missing := t.Skipf
	if os.Getenv("CI") != "" {
		missing = t.Fatalf
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed: the stock-client test needs it (.ci/run installs it)")
	}
	dir := filepath.Join("testdata", "node")
	for _, pkg := range []string{"ollama", "openai"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			missing("the npm package %s is not installed: run `npm ci --prefix server/testdata/node` (as .ci/run does)", pkg)
		}
	}
	ts := newTestServer(t, runner.Options{Slots: 2}, Options{APIKeys: []string{"sekret"}, Version: "9.8.7"})
	want := greedyText(t, newTestServer(t, runner.Options{}, Options{}), "In the beginning God", 8)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "clients.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GROK_URL="+ts.URL, "GROK_KEY=sekret", "GROK_MODEL="+modelName)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node clients.mjs: %v\n%s", err, stderr.String())
	}
	var got struct {
		Version  string
		Tags     []string
		Show     map[string]any
		PS       []string `json:"ps"`
		Generate struct {
			Response     string
			DoneReason   string `json:"done_reason"`
			Done         bool
			EvalCount    int  `json:"eval_count"`
			HasDurations bool `json:"has_durations"`
		}
		GenerateStream struct {
			Response  string
			Done      bool
			EvalCount int `json:"eval_count"`
		}
		Chat                        struct{ Role, Content, Streamed string }
		OllamaNoKey, OllamaBadModel struct {
			Status  int
			Message string
		}
		Models       []string
		Completion   string
		ChatStream   string
		OpenaiBadKey struct {
			Status     int
			Name, Code string
		}
	}
	if err := json.Unmarshal(stdout, &got); err != nil {
		t.Fatalf("output %q: %v", stdout, err)
	}
	name := modelName + ":latest"
	g := got.Generate
	switch {
	case got.Version != "9.8.7":
		t.Errorf("ollama version(): %q", got.Version)
	case len(got.Tags) != 1 || got.Tags[0] != name, len(got.PS) != 1 || got.PS[0] != name:
		t.Errorf("ollama list()/ps(): %v %v", got.Tags, got.PS)
	case got.Show["family"] != "grok":
		t.Errorf("ollama show(): %v", got.Show)
	}
	if g.Response != want || !g.Done || g.DoneReason != "length" || g.EvalCount != 8 || !g.HasDurations {
		t.Errorf("ollama generate(): %+v; want response %q", g, want)
	}
	if gs := got.GenerateStream; gs.Response != want || !gs.Done || gs.EvalCount != 8 {
		t.Errorf("ollama generate(stream): %+v; want %q", gs, want)
	}
	if c := got.Chat; c.Role != "assistant" || c.Content == "" || c.Streamed != c.Content {
		t.Errorf("ollama chat(): %+v", c)
	}
	if e := got.OllamaNoKey; e.Status != 401 || !strings.Contains(e.Message, "API key") {
		t.Errorf("ollama without a key: %+v", e)
	}
	if e := got.OllamaBadModel; e.Status != 404 || !strings.Contains(e.Message, "not found") {
		t.Errorf("ollama with an unknown model: %+v", e)
	}
	if len(got.Models) != 1 || got.Models[0] != modelName || got.Completion != want || got.ChatStream == "" {
		t.Errorf("openai: models %v, completion %q (want %q), chat stream %q", got.Models, got.Completion, want, got.ChatStream)
	}
	if e := got.OpenaiBadKey; e.Status != 401 || e.Name != "AuthenticationError" || e.Code != "invalid_api_key" {
		t.Errorf("openai with a wrong key: %+v", e)
	}
}

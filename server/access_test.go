package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/sampler"
)

// do sends a request with headers and returns the response, body read.
func do(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestAPIKey(t *testing.T) {
	ts := newTestServer(t, runner.Options{}, Options{APIKeys: []string{"k1", "second"}})
	const chat = `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}`
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		code                     int
	}{
		{"no key", "POST", "/v1/chat/completions", chat, nil, 401},
		{"wrong key", "POST", "/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer nope"}, 401},
		{"prefix of a key", "POST", "/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer k"}, 401},
		{"basic auth", "POST", "/v1/chat/completions", chat, map[string]string{"Authorization": "Basic azE="}, 401},
		{"bearer", "POST", "/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer k1"}, 200},
		{"second key", "POST", "/v1/chat/completions", chat, map[string]string{"Authorization": "Bearer second"}, 200},
		{"x-api-key", "POST", "/v1/chat/completions", chat, map[string]string{"X-Api-Key": "k1"}, 200},
		{"models without", "GET", "/v1/models", "", nil, 401},
		{"metrics without", "GET", "/metrics", "", nil, 401},
		{"unknown path without", "GET", "/nope", "", nil, 401},
		{"health needs none", "GET", "/health", "", nil, 200},
		{"ollama without", "GET", "/api/tags", "", nil, 401},
		{"ollama with", "GET", "/api/tags", "", map[string]string{"Authorization": "Bearer k1"}, 200},
		{"llama.cpp without", "POST", "/tokenize", `{"content":"x"}`, nil, 401},
	} {
		resp, body := do(t, tc.method, ts.URL+tc.path, tc.body, tc.hdr)
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %d %s; want %d", tc.name, resp.StatusCode, body, tc.code)
			continue
		}
		if tc.code != 401 {
			continue
		}
		var v map[string]any
		json.Unmarshal([]byte(body), &v)
		if strings.HasPrefix(tc.path, "/api/") {
			if _, ok := v["error"].(string); !ok {
				t.Errorf("%s: ollama's 401 is {\"error\": string}, got %s", tc.name, body)
			}
		} else if e, _ := v["error"].(map[string]any); e["code"] != "invalid_api_key" || e["type"] != "invalid_request_error" {
			t.Errorf("%s: 401 body %s is not OpenAI's", tc.name, body)
		}
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", tc.name)
		}
	}
}

func TestCORS(t *testing.T) {
	ts := newTestServer(t, runner.Options{}, Options{CORSOrigins: []string{"https://app.example"}, APIKeys: []string{"k"}})
	preflight := func(origin string) *http.Response {
		resp, _ := do(t, "OPTIONS", ts.URL+"/v1/chat/completions", "", map[string]string{"Origin": origin,
			"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})
		return resp
	}
	resp := preflight("https://app.example")
	h := resp.Header
	if resp.StatusCode != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example" ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "authorization") || h.Get("Access-Control-Max-Age") == "" {
		t.Errorf("preflight from an allowed origin: %d %v", resp.StatusCode, h)
	}
	resp = preflight("https://evil.example")
	for k := range resp.Header {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Errorf("preflight from another origin got %s", k)
		}
	}
	// The real request: allowed origin gets the header, even on a 401
	// (so that the page can read why); another origin gets none.
	resp, _ = do(t, "GET", ts.URL+"/v1/models", "", map[string]string{"Origin": "https://app.example"})
	if resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Errorf("401 to an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = do(t, "GET", ts.URL+"/v1/models", "", map[string]string{"Origin": "https://app.example", "Authorization": "Bearer k"})
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(resp.Header.Get("Vary"), "Origin") {
		t.Errorf("allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = do(t, "GET", ts.URL+"/v1/models", "", map[string]string{"Origin": "https://evil.example", "Authorization": "Bearer k"})
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("another origin got Access-Control-Allow-Origin: %v", resp.Header)
	}

	any := newTestServer(t, runner.Options{}, Options{CORSOrigins: []string{"*"}})
	resp, _ = do(t, "OPTIONS", any.URL+"/api/chat", "", map[string]string{"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"})
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
		resp.Header.Get("Access-Control-Allow-Headers") != corsHeaders {
		t.Errorf("* preflight: %d %v", resp.StatusCode, resp.Header)
	}
	// Without --cors there are no CORS headers at all.
	none := newTestServer(t, runner.Options{}, Options{})
	resp, _ = do(t, "OPTIONS", none.URL+"/v1/models", "", map[string]string{"Origin": "http://localhost:3000", "Access-Control-Request-Method": "GET"})
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("no --cors: %v", resp.Header)
	}
}

// A streaming client that leaves is counted as 499 in the metrics, not 200.
func TestStreamDisconnectIs499(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 1, BeforeStep: paced(2 * time.Millisecond)}, Options{})
	for _, path := range []string{"/v1/completions", "/api/generate"} {
		ctx, cancel := context.WithCancel(context.Background())
		body := `{"prompt":"And God said","max_tokens":240,"stream":true,"ignore_eos":true}`
		if path == "/api/generate" {
			body = `{"model":"` + modelName + `","prompt":"And God said","options":{"num_predict":240}}`
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		cancel()
		resp.Body.Close()
		waitFor(t, 10*time.Second, "the slot to be freed", func() bool { return ts.eng.Stats().Active == 0 })
	}
	var metrics string
	waitFor(t, 10*time.Second, "499 in the metrics", func() bool {
		_, metrics = do(t, "GET", ts.URL+"/metrics", "", nil)
		return strings.Contains(metrics, `grok_http_requests_total{code="499",endpoint="completions"} 1`) &&
			strings.Contains(metrics, `grok_http_requests_total{code="499",endpoint="ollama_generate"} 1`)
	})
	if strings.Contains(metrics, `code="200",endpoint="completions"`) {
		t.Errorf("the left stream was also counted as 200")
	}
}

// A byte-fallback token that leaves a character incomplete is listed once
// among top_logprobs, under its bytes:\xNN name, not also under "".
func TestByteTokenOnceInTopLogprobs(t *testing.T) {
	m, err := demo()
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{tok: m.Tokenizer}
	b.vocab, b.isByte, b.byteOf = vocabTable(m.Tokenizer)
	id := -1 // a lead byte, which leaves its character incomplete
	for i, isByte := range b.isByte {
		if isByte && b.byteOf[i] >= 0xc0 {
			id = i
			break
		}
	}
	if id < 0 {
		t.Fatal("the demo tokenizer has no byte pieces")
	}
	g := &gen{b: b, j: &job{}}
	tok := pendingToken{}
	tok.ID, tok.Text, tok.Logprob = id, "", -0.5
	tok.Top = []sampler.TokenProb{{Token: id, Prob: 0.6, Logprob: -0.5}}
	lp := g.completionLogprobs([]pendingToken{tok})
	if top := lp.TopLogprobs[0]; len(top) != 1 {
		t.Errorf("top_logprobs %v: the byte token is listed %d times", top, len(top))
	}
}

// A model whose vocabulary is larger than its tokenizer (padded embedding
// rows) is refused when attached, rather than failing mid-answer on the
// first padded id it samples.
func TestVocabularyLargerThanTokenizer(t *testing.T) {
	m, err := demo()
	if err != nil {
		t.Fatal(err)
	}
	padded := *m.LanguageModel
	padded.Config.VocabSize = m.Tokenizer.VocabSize() + 64
	eng, err := runner.New(&padded, m.Tokenizer, runner.Options{Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	err = New(Options{Logger: quietLogger()}).Attach(Model{Engine: eng})
	if err == nil || !strings.Contains(err.Error(), "4160 rows but its tokenizer only 4096") {
		t.Errorf("Attach: %v", err)
	}
	if CheckVocabulary(4096, 4096) != nil || CheckVocabulary(4096, 5000) != nil {
		t.Error("a tokenizer as large as the vocabulary (or larger: the loader's case) is refused here")
	}
}

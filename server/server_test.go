package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grok-go/grok/runner"
)

// /health says 503 until a model is attached, generation endpoints answer
// 503 with Retry-After, and /v1/models already lists the model.
func TestHealthBeforeLoad(t *testing.T) {
	s := New(Options{ModelID: modelName, Logger: quietLogger()})
	ts := httptest.NewServer(s)
	defer ts.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/health"); code != 503 || !strings.Contains(body, `"loading"`) {
		t.Errorf("/health before load: %d %s", code, body)
	}
	code, v := post(t, ts.URL, "/v1/completions", `{"prompt":"x"}`)
	if code != 503 || v["error"].(map[string]any)["type"] != "server_error" {
		t.Errorf("completion before load: %d %v", code, v)
	}
	if code, body := get("/v1/models"); code != 200 || !strings.Contains(body, modelName) {
		t.Errorf("/v1/models before load: %d %s", code, body)
	}
	m, err := demo()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := runner.New(m.LanguageModel, m.Tokenizer, runner.Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := s.Attach(Model{Engine: eng}); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/health"); code != 200 || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Errorf("/health after load: %d %s", code, body)
	}
	s.Drain()
	if code, _ := get("/health"); code != 503 {
		t.Errorf("/health while draining: %d", code)
	}
}

// /metrics exposes the request, token, slot and latency metrics.
func TestMetrics(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 2}, Options{})
	if code, v := post(t, ts.URL, "/v1/completions", `{"prompt":"And God said","max_tokens":5,"temperature":0}`); code != 200 {
		t.Fatalf("completion: %d %v", code, v)
	}
	post(t, ts.URL, "/v1/completions", `{"prompt":`) // a 400
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	for _, want := range []string{
		`grok_http_requests_total{code="200",endpoint="completions"} 1`,
		`grok_http_requests_total{code="400",endpoint="completions"} 1`,
		`grok_generation_tokens_total 5`,
		`grok_prompt_tokens_total 3`,
		`grok_model_loaded 1`,
		`grok_slots 2`,
		`grok_active_slots 0`,
		`grok_queue_depth 0`,
		`grok_batch_occupancy_ratio 0`,
		`grok_engine_steps_total 5`,
		`grok_engine_batch_rows_total 5`,
		`grok_time_to_first_token_seconds_count 1`,
		`grok_time_per_output_token_seconds_count 1`,
		`grok_requests_finished_total{finish_reason="length"} 1`,
		`grok_engine_forward_seconds_total`,
		`grok_queue_rejected_total 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// Malformed requests get the right status and OpenAI's error shape, never
// a 500.
func TestMalformedRequests(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 1}, Options{MaxBodyBytes: 4096})
	long := strings.Repeat("And the LORD spake unto Moses, saying, ", 40) // > 256 tokens
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		param, code              string
		msg                      string
	}{
		{"bad JSON", "POST", "/v1/completions", `{"prompt": "x",`, 400, "", "", "parse the JSON"},
		{"not an object", "POST", "/v1/completions", `[1,2]`, 400, "", "", "JSON object"},
		{"empty body", "POST", "/v1/chat/completions", ``, 400, "", "", "empty"},
		{"max_tokens a string", "POST", "/v1/completions", `{"prompt":"x","max_tokens":"ten"}`, 400, "max_tokens", "", "expected an integer"},
		{"max_tokens a fraction", "POST", "/v1/completions", `{"prompt":"x","max_tokens":1.5}`, 400, "max_tokens", "", "expected an integer"},
		{"temperature a string", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}`, 400, "temperature", "", "expected a number"},
		{"stream a string", "POST", "/v1/completions", `{"prompt":"x","stream":"yes"}`, 400, "stream", "", "boolean"},
		{"prompt an object", "POST", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt", "", "Invalid type for 'prompt'"},
		{"prompt missing", "POST", "/v1/completions", `{"max_tokens":3}`, 400, "prompt", "", "provide a prompt"},
		{"prompts batched", "POST", "/v1/completions", `{"prompt":["a","b"]}`, 400, "prompt", "", "one prompt per request"},
		{"token out of range", "POST", "/v1/completions", `{"prompt":[5,99999]}`, 400, "prompt", "", "outside the vocabulary"},
		{"token not an int", "POST", "/v1/completions", `{"prompt":[5,"x"]}`, 400, "prompt", "", "integers"},
		{"n=2", "POST", "/v1/completions", `{"prompt":"x","n":2}`, 400, "n", "", "n=2"},
		{"n=2 chat", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":2}`, 400, "n", "", "n must be 1"},
		{"best_of", "POST", "/v1/completions", `{"prompt":"x","best_of":3}`, 400, "best_of", "", "best_of"},
		{"unknown model", "POST", "/v1/completions", `{"model":"gpt-9","prompt":"x"}`, 404, "model", "model_not_found", "gpt-9"},
		{"unknown model chat", "POST", "/v1/chat/completions", `{"model":"gpt-9","messages":[]}`, 404, "model", "model_not_found", "does not exist"},
		{"prompt too long", "POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, long), 400, "prompt", "", "maximum context length is 256"},
		{"max_tokens too big", "POST", "/v1/completions", `{"prompt":"x","max_tokens":1000}`, 400, "max_tokens", "", "maximum context length is 256"},
		{"max_completion_tokens too big", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":300}`, 400, "max_completion_tokens", "", "maximum context length"},
		{"max_tokens zero", "POST", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, "max_tokens", "", "at least 1"},
		{"max_tokens negative", "POST", "/v1/completions", `{"prompt":"x","max_tokens":-4}`, 400, "max_tokens", "", "at least 1"},
		{"temperature negative", "POST", "/v1/completions", `{"prompt":"x","temperature":-1}`, 400, "temperature", "", "out of range"},
		{"temperature huge", "POST", "/v1/completions", `{"prompt":"x","temperature":1e300}`, 400, "temperature", "", "out of range"},
		{"top_p above 1", "POST", "/v1/completions", `{"prompt":"x","top_p":1.5}`, 400, "top_p", "", "out of range"},
		{"top_k negative", "POST", "/v1/completions", `{"prompt":"x","top_k":-3}`, 400, "top_k", "", "out of range"},
		{"min_p", "POST", "/v1/completions", `{"prompt":"x","min_p":2}`, 400, "min_p", "", "out of range"},
		{"presence_penalty", "POST", "/v1/completions", `{"prompt":"x","presence_penalty":3}`, 400, "presence_penalty", "", "out of range"},
		{"repetition_penalty", "POST", "/v1/completions", `{"prompt":"x","repetition_penalty":0}`, 400, "repetition_penalty", "", "> 0"},
		{"logprobs too many", "POST", "/v1/completions", `{"prompt":"x","logprobs":9}`, 400, "logprobs", "", "[0, 8]"},
		{"top_logprobs too many", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":20}`, 400, "top_logprobs", "", "[0, 8]"},
		{"top_logprobs without logprobs", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, 400, "top_logprobs", "", "requires logprobs"},
		{"stop a number", "POST", "/v1/completions", `{"prompt":"x","stop":7}`, 400, "stop", "", "string or an array"},
		{"too many stops", "POST", "/v1/completions", `{"prompt":"x","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, 400, "stop", "", "at most 16"},
		{"no messages", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "messages", "", "at least one"},
		{"bad role", "POST", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "messages[0].role", "", "Invalid role"},
		{"image content", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0]", "", "text only"},
		{"tools", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, 400, "tools", "", "not supported"},
		{"logit_bias", "POST", "/v1/completions", `{"prompt":"x","logit_bias":{"5":10}}`, 400, "logit_bias", "", "not supported"},
		{"echo with logprobs", "POST", "/v1/completions", `{"prompt":"x","echo":true,"logprobs":1}`, 400, "echo", "", "not supported"},
		{"body too large", "POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, strings.Repeat("a", 5000)), 413, "", "request_too_large", "larger than the limit"},
		{"wrong method", "GET", "/v1/completions", ``, 405, "", "method_not_allowed", "use POST"},
		{"wrong method chat", "PUT", "/v1/chat/completions", `{}`, 405, "", "method_not_allowed", "use POST"},
		{"POST to models", "POST", "/v1/models", `{}`, 405, "", "method_not_allowed", "use GET"},
		{"unknown path", "POST", "/v1/embeddings", `{}`, 404, "", "", "Invalid URL"},
		{"unknown model id", "GET", "/v1/models/gpt-9", ``, 404, "model", "model_not_found", "gpt-9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var v struct {
				Error *struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &v); err != nil || v.Error == nil {
				t.Fatalf("not an OpenAI error: %s", raw)
			}
			// Every key of OpenAI's error object is present, null or not.
			for _, k := range []string{`"message":`, `"type":`, `"param":`, `"code":`} {
				if !strings.Contains(string(raw), k) {
					t.Errorf("error lacks %s: %s", k, raw)
				}
			}
			e := v.Error
			if e.Type != "invalid_request_error" || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("error %+v, want a message with %q", e, tc.msg)
			}
			if got := deref(e.Param); got != tc.param {
				t.Errorf("param %q, want %q", got, tc.param)
			}
			if got := deref(e.Code); got != tc.code {
				t.Errorf("code %q, want %q", got, tc.code)
			}
		})
	}
	// None of that reached the engine.
	if st := ts.eng.Stats(); st.Requests != 0 {
		t.Errorf("engine saw %d requests", st.Requests)
	}
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// Unknown fields are ignored, an empty model is the served one, and a
// token-id prompt gives the same answer as its text.
func TestLenientFields(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 1}, Options{})
	m, _ := demo()
	ids := m.Tokenizer.Encode("And God said")
	idJSON, _ := json.Marshal(ids)
	code, a := post(t, ts.URL, "/v1/completions", `{"prompt":"And God said","max_tokens":6,"temperature":0,"frobnicate":{"x":[1]},"user":"u1"}`)
	if code != 200 {
		t.Fatalf("%d %v", code, a)
	}
	code, b := post(t, ts.URL, "/v1/completions", fmt.Sprintf(`{"model":"","prompt":%s,"max_tokens":6,"temperature":0}`, idJSON))
	if code != 200 {
		t.Fatalf("%d %v", code, b)
	}
	code, c := post(t, ts.URL, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":[%s],"max_tokens":6,"top_p":0,"echo":true}`, modelName, idJSON))
	if code != 200 {
		t.Fatalf("%d %v", code, c)
	}
	ta, _ := completionText(t, a)
	tb, _ := completionText(t, b)
	tc, _ := completionText(t, c)
	if ta != tb || tc != "And God said"+ta || ta == "" {
		t.Errorf("text %q, by ids %q, echoed with top_p 0 %q", ta, tb, tc)
	}
	if a["object"] != "text_completion" || !strings.HasPrefix(a["id"].(string), "cmpl-") || a["model"] != modelName {
		t.Errorf("answer %v", a)
	}
	u := a["usage"].(map[string]any)
	if u["prompt_tokens"] != float64(len(ids)) || u["completion_tokens"] != 6.0 || u["total_tokens"] != float64(len(ids)+6) {
		t.Errorf("usage %v", u)
	}
	// An empty prompt starts from BOS.
	if code, v := post(t, ts.URL, "/v1/completions", `{"prompt":"","max_tokens":2}`); code != 200 {
		t.Errorf("empty prompt: %d %v", code, v)
	}
}

// Greedy output of a request is the same whether it runs alone or among 15
// others, through the whole server (with fewer slots than requests too, so
// that some wait and are prefilled while others decode).
func TestGreedyAloneEqualsBatched(t *testing.T) {
	type req struct {
		path string
		body string
	}
	n := 12
	if raceEnabled {
		n = 4
	}
	var reqs []req
	for i, p := range prompts {
		if i%4 == 3 {
			reqs = append(reqs, req{"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":%d,"temperature":0}`, p, n)})
		} else {
			reqs = append(reqs, req{"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0}`, p, n)})
		}
	}
	alone := newTestServer(t, runner.Options{Slots: 1}, Options{})
	want := make([]string, len(reqs))
	for i, r := range reqs {
		code, v := post(t, alone.URL, r.path, r.body)
		if code != 200 {
			t.Fatalf("%d %v", code, v)
		}
		want[i], _ = completionText(t, v)
	}
	for _, slots := range []int{16, 5} {
		ts := newTestServer(t, runner.Options{Slots: slots, PrefillChunk: 3}, Options{})
		got := make([]string, len(reqs))
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Go(func() {
				code, v, err := tryPost(ts.URL, r.path, r.body)
				if err != nil || code != 200 {
					t.Errorf("request %d: %d %v %v", i, code, v, err)
					return
				}
				c := v["choices"].([]any)[0].(map[string]any)
				if msg, ok := c["message"].(map[string]any); ok {
					got[i], _ = msg["content"].(string)
				} else {
					got[i], _ = c["text"].(string)
				}
			})
		}
		wg.Wait()
		for i := range reqs {
			if got[i] != want[i] {
				t.Errorf("slots=%d request %d: batched %q, alone %q", slots, i, got[i], want[i])
			}
		}
		if st := ts.eng.Stats(); slots == 16 && st.BatchRows <= st.Steps {
			t.Errorf("slots=16: %d rows in %d steps: the requests never shared a batch", st.BatchRows, st.Steps)
		}
	}
}

// A client that disconnects mid-stream frees its slot at the next step.
func TestDisconnectFreesSlot(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 2, BeforeStep: paced(2 * time.Millisecond)}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions",
		strings.NewReader(`{"prompt":"And God said","max_tokens":240,"stream":true,"ignore_eos":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q, %v", line, err)
	}
	if st := ts.eng.Stats(); st.Active != 1 {
		t.Fatalf("stats while streaming: %+v", st)
	}
	cancel()
	var st runner.Stats
	waitFor(t, 5*time.Second, "the slot to be freed", func() bool {
		st = ts.eng.Stats()
		return st.Active == 0 && st.Cancelled == 1
	})
	if st.GeneratedTokens >= 240 {
		t.Errorf("the request ran to the end (%d tokens) instead of being cancelled", st.GeneratedTokens)
	}
	// Nothing runs any more.
	steps := st.Steps
	time.Sleep(50 * time.Millisecond)
	if st := ts.eng.Stats(); st.Steps != steps {
		t.Errorf("the engine kept stepping after the cancel: %d → %d", steps, st.Steps)
	}
}

// Beyond the queue, requests get 503 with Retry-After; a waiting request
// runs once the slot frees.
func TestQueueFull(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 1, MaxQueue: 1, BeforeStep: paced(5 * time.Millisecond)}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := func() *http.Response {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions",
			strings.NewReader(`{"prompt":"And God said","max_tokens":240,"stream":true,"ignore_eos":true}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r1 := long()
	defer r1.Body.Close()
	waitFor(t, 5*time.Second, "the first request to run", func() bool { return ts.eng.Stats().Active == 1 })
	done := make(chan map[string]any, 1)
	go func() {
		_, v, err := tryPost(ts.URL, "/v1/completions", `{"prompt":"And God said","max_tokens":2}`)
		if err != nil {
			t.Error(err)
		}
		done <- v
	}()
	waitFor(t, 5*time.Second, "the second request to queue", func() bool { return ts.eng.Stats().Queued == 1 })
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "queue is full") {
		t.Errorf("third request: %d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	cancel() // the first client leaves; the queued request takes the slot
	select {
	case v := <-done:
		if _, f := completionText(t, v); f == "" {
			t.Errorf("queued request: %v", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued request never ran")
	}
	if st := ts.eng.Stats(); st.Rejected != 1 {
		t.Errorf("stats: %+v", st)
	}
}

// A request that outlives the server's timeout ends with 504 (or an error
// event when streamed), and its slot is freed.
func TestTimeout(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 1, BeforeStep: paced(2 * time.Millisecond)}, Options{Timeout: 100 * time.Millisecond})
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"And God said","max_tokens":250,"ignore_eos":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 504 || resp.Header.Get("x-should-retry") != "false" || !strings.Contains(string(b), `"timeout_error"`) {
		t.Errorf("non-streamed: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"max_tokens":200,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	chunks, done := sseEvents(t, resp.Body)
	resp.Body.Close()
	if last := chunks[len(chunks)-1]; done || last["error"] == nil {
		t.Errorf("streamed: last chunk %v, [DONE]=%v", last, done)
	}
	if st := ts.eng.Stats(); st.Active != 0 || st.Cancelled != 2 {
		t.Errorf("stats: %+v", st)
	}
}

// Stop strings end the text before them, and the logprobs tokens line up
// with the text: they concatenate to it (up to the token in which the stop
// string began), and text_offset points at each.
func TestStopStringsAndLogprobs(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 1}, Options{})
	const p = `"prompt":"And God said","temperature":0`
	_, v := post(t, ts.URL, "/v1/completions", `{`+p+`,"max_tokens":24,"logprobs":3}`)
	full, finish := completionText(t, v)
	if finish != "length" {
		t.Fatalf("finish %q", finish)
	}
	checkLogprobs(t, v, full, 3)
	// Stop at the second word of the answer, as a string that spans a token
	// boundary: its first character ends one token and the rest starts the
	// next.
	words := strings.SplitAfter(full, " ")
	if len(words) < 4 {
		t.Fatalf("answer %q too short", full)
	}
	cut := len(words[0]) + len(words[1]) + len(words[2]) - 1 // the space before the fourth word
	stop := full[cut-1 : cut+2]
	want := full[:strings.Index(full, stop)]
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{%s,"max_tokens":24,"logprobs":2,"stop":[%q,"zzz"],"stream":%v}`, p, stop, stream)
		if !stream {
			_, v := post(t, ts.URL, "/v1/completions", body)
			text, finish := completionText(t, v)
			if text != want || finish != "stop" {
				t.Errorf("stop %q: %q (%s), want %q", stop, text, finish, want)
			}
			checkLogprobs(t, v, text, 2)
			continue
		}
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		chunks, done := sseEvents(t, resp.Body)
		resp.Body.Close()
		text, finish := streamText(chunks)
		if text != want || finish != "stop" || !done {
			t.Errorf("streamed, stop %q: %q (%s), want %q", stop, text, finish, want)
		}
		var toks []string
		for _, c := range chunks {
			lp, _ := c["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)
			if lp == nil {
				continue
			}
			for _, s := range lp["tokens"].([]any) {
				toks = append(toks, s.(string))
			}
		}
		if !linesUp(toks, text) {
			t.Errorf("streamed tokens %q do not line up with text %q", toks, text)
		}
	}
}

// checkLogprobs checks a completion's logprobs object against its text.
func checkLogprobs(t *testing.T, v map[string]any, text string, k int) {
	t.Helper()
	lp := v["choices"].([]any)[0].(map[string]any)["logprobs"].(map[string]any)
	toks, lps, tops, offs := lp["tokens"].([]any), lp["token_logprobs"].([]any), lp["top_logprobs"].([]any), lp["text_offset"].([]any)
	if len(toks) == 0 || len(lps) != len(toks) || len(tops) != len(toks) || len(offs) != len(toks) {
		t.Fatalf("logprobs lengths %d %d %d %d", len(toks), len(lps), len(tops), len(offs))
	}
	var b strings.Builder
	for i := range toks {
		tok := toks[i].(string)
		if int(offs[i].(float64)) != len([]rune(b.String())) {
			t.Errorf("token %d %q: text_offset %v, want %d", i, tok, offs[i], len([]rune(b.String())))
		}
		b.WriteString(tok)
		l := lps[i].(float64)
		top := tops[i].(map[string]any)
		if l > 0 || len(top) < k || len(top) > k+1 || top[tok] != l {
			t.Errorf("token %d %q: logprob %v, top %v", i, tok, l, top)
		}
	}
	strs := make([]string, len(toks))
	for i, s := range toks {
		strs[i] = s.(string)
	}
	if !linesUp(strs, text) {
		t.Errorf("tokens %q do not line up with text %q", toks, text)
	}
}

// linesUp reports whether tokens concatenate to text, or to text and the
// rest of a last token in which a stop string began.
func linesUp(toks []string, text string) bool {
	joined := strings.Join(toks, "")
	excess := len(joined) - len(text)
	return strings.HasPrefix(joined, text) && (excess == 0 || len(toks) > 0 && excess < len(toks[len(toks)-1]))
}

// Run answers /health with 503 while loading, then serves; on shutdown it
// lets a running stream finish, and then refuses new connections.
func TestRunGracefulShutdown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	s := New(Options{ModelID: modelName, Logger: quietLogger(), ShutdownTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		runErr <- s.Run(ctx, ln, func() (Model, error) {
			<-release
			m, err := demo()
			if err != nil {
				return Model{}, err
			}
			eng, err := runner.New(m.LanguageModel, m.Tokenizer, runner.Options{Slots: 2, BeforeStep: paced(5 * time.Millisecond)})
			return Model{Engine: eng, ChatTemplate: "{{ messages }}"}, err
		})
	}()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	health := func() int {
		resp, err := client.Get(url + "/health")
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := health(); c != 503 {
		t.Fatalf("/health while loading: %d", c)
	}
	close(release)
	waitFor(t, 5*time.Second, "the model to load", func() bool { return health() == 200 })
	resp, err := client.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"And God said","max_tokens":30,"stream":true,"ignore_eos":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	chunks, done := sseEvents(t, br)
	if text, finish := streamText(chunks); !done || finish != "length" || text == "" {
		t.Errorf("stream during shutdown: done=%v finish=%q", done, finish)
	}
	select {
	case err := <-runErr:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return")
	}
	if _, err := (&http.Client{}).Get(url + "/health"); err == nil {
		t.Error("the server still accepts connections after shutdown")
	}
}

// A load failure ends Run with the error.
func TestRunLoadError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{ModelID: modelName, Logger: quietLogger()})
	err = s.Run(context.Background(), ln, func() (Model, error) { return Model{}, fmt.Errorf("no such file") })
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Run: %v", err)
	}
}

// A panic in a handler becomes a 500 in OpenAI's shape, and the server
// goes on.
func TestRecover(t *testing.T) {
	s := New(Options{ModelID: modelName, Logger: quietLogger()})
	rec := httptest.NewRecorder()
	s.instrument("test", rec, httptest.NewRequest("GET", "/x", nil), func(http.ResponseWriter, *http.Request) { panic("boom") })
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"server_error"`) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

// A client that sends its headers and then stalls its body, or sends less
// than it declared, gets an answer at the body timeout, whatever the
// endpoint, and then the server closes the connection instead of holding it
// while it waits for the rest. hang only detects a hang.
func TestStalledBody(t *testing.T) {
	const hang = 20 * time.Second
	ts := newTestServer(t, runner.Options{Slots: 1}, Options{BodyTimeout: 200 * time.Millisecond, MaxBodyBytes: 4096})
	for _, tc := range []struct {
		name, head, body string
		status           int
	}{
		{"completion", "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n", `{"prompt":`, 408},
		{"chat, chunked", "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n", "c\r\n{\"messages\":\r\n", 408},
		{"nothing of the body", "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n", "", 408},
		// The answer is written at once; what net/http then reads of the
		// rest (up to 256 KiB) must give up at the deadline too.
		{"over the limit, the rest stalled", "POST /v1/completions HTTP/1.1\r\nContent-Length: 8000\r\n", `{"prompt":"` + strings.Repeat("a", 5000), 413},
		{"not JSON", "POST /v1/completions HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n", "prompt=", 415},
		{"health, body unread", "GET /health HTTP/1.1\r\nContent-Length: 100\r\n", "x", 200},
		{"unknown path, body unread", "POST /v1/embeddings HTTP/1.1\r\nContent-Length: 100\r\n", "x", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ts.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(hang))
			if _, err := io.WriteString(c, tc.head+"Host: x\r\n\r\n"+tc.body); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.status || !resp.Close {
				t.Errorf("status %d, Connection: close %v, body %q, %v; want %d and close", resp.StatusCode, resp.Close, b, err, tc.status)
			}
			// The server closes its side: EOF (or a reset), not our deadline.
			if _, err := br.ReadByte(); err == nil || os.IsTimeout(err) {
				t.Errorf("the connection is still open after the answer: %v", err)
			}
		})
	}
}

// The body deadline ends with the body: a request whose body came whole
// runs and streams for longer than the body timeout, and its connection
// serves the next request.
func TestBodyTimeoutSparesLongAnswers(t *testing.T) {
	const bodyTimeout = 100 * time.Millisecond
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			// The engine stops before its second step until the test has
			// waited out the body timeout.
			gate := make(chan struct{})
			var steps atomic.Int64
			ts := newTestServer(t, runner.Options{Slots: 1, BeforeStep: func() {
				if steps.Add(1) == 2 {
					<-gate
				}
			}}, Options{BodyTimeout: bodyTimeout})
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			type result struct {
				status int
				raw    []byte
				err    error
			}
			res := make(chan result, 1)
			go func() {
				resp, err := client.Post(ts.URL+"/v1/completions", "application/json",
					strings.NewReader(fmt.Sprintf(`{"prompt":"And God said","max_tokens":20,"ignore_eos":true,"stream":%v}`, stream)))
				if err != nil {
					res <- result{err: err}
					return
				}
				defer resp.Body.Close()
				raw, err := io.ReadAll(resp.Body)
				res <- result{resp.StatusCode, raw, err}
			}()
			waitFor(t, 10*time.Second, "the engine to reach its second step", func() bool { return steps.Load() >= 2 })
			time.Sleep(3 * bodyTimeout)
			close(gate)
			select {
			case r := <-res:
				if r.err != nil || r.status != 200 {
					t.Fatalf("status %d, %q, %v", r.status, r.raw, r.err)
				}
				var text, finish string
				done := true
				if stream {
					var chunks []map[string]any
					chunks, done = sseEvents(t, bytes.NewReader(r.raw))
					text, finish = streamText(chunks)
				} else {
					var v map[string]any
					if err := json.Unmarshal(r.raw, &v); err != nil {
						t.Fatalf("%q: %v", r.raw, err)
					}
					text, finish = completionText(t, v)
				}
				if !done || finish != "length" || text == "" {
					t.Errorf("answer after the body timeout: %q (%s), [DONE]=%v", text, finish, done)
				}
			case <-time.After(time.Minute):
				t.Fatal("no answer")
			}
			if st := ts.eng.Stats(); st.Cancelled != 0 {
				t.Errorf("the request was cancelled: %+v", st)
			}
			if code, v, err := func() (int, map[string]any, error) {
				resp, err := client.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","max_tokens":2}`))
				if err != nil {
					return 0, nil, err
				}
				defer resp.Body.Close()
				var v map[string]any
				err = json.NewDecoder(resp.Body).Decode(&v)
				return resp.StatusCode, v, err
			}(); code != 200 || err != nil {
				t.Errorf("next request: %d %v %v", code, v, err)
			}
		})
	}
}

// While Run drains, the listener stays open: new connections get 503 with
// Retry-After from /health and the generation endpoints (and are closed
// after the answer) while the request in flight finishes. Run closes the
// listener when that request is done, or, if it is not, at the shutdown
// timeout, cancelling it.
func TestRunDrain(t *testing.T) {
	for _, tc := range []struct {
		name     string
		finishes bool // the request in flight ends within the drain
	}{
		{"request finishes", true},
		{"shutdown timeout", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			url := "http://" + ln.Addr().String()
			grace := time.Minute
			if !tc.finishes {
				grace = 3 * time.Second // long enough for the checks below
			}
			s := New(Options{ModelID: modelName, Logger: quietLogger(), ShutdownTimeout: grace})
			// The engine stops before its second step until the test lets
			// it go, so the request is in flight for as long as needed.
			gate := make(chan struct{})
			var steps atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			runErr := make(chan error, 1)
			go func() {
				runErr <- s.Run(ctx, ln, func() (Model, error) {
					m, err := demo()
					if err != nil {
						return Model{}, err
					}
					eng, err := runner.New(m.LanguageModel, m.Tokenizer, runner.Options{Slots: 2, BeforeStep: func() {
						if steps.Add(1) == 2 {
							<-gate
						}
					}})
					return Model{Engine: eng}, err
				})
			}()
			fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			keepAlive := &http.Client{Transport: &http.Transport{}}
			defer keepAlive.CloseIdleConnections()
			health := func(c *http.Client) (*http.Response, error) {
				resp, err := c.Get(url + "/health")
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				return resp, err
			}
			waitFor(t, 10*time.Second, "the model to load", func() bool {
				resp, err := health(fresh)
				return err == nil && resp.StatusCode == 200
			})
			if resp, err := health(keepAlive); err != nil || resp.Close {
				t.Fatalf("keep-alive /health before the drain: %v %v", resp, err)
			}
			inflight, err := fresh.Post(url+"/v1/completions", "application/json",
				strings.NewReader(`{"prompt":"And God said","max_tokens":100,"ignore_eos":true,"stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer inflight.Body.Close()
			br := bufio.NewReader(inflight.Body)
			if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
				t.Fatalf("first line %q, %v", line, err)
			}

			cancel()
			// Every new connection gets an answer: 200 until the drain
			// begins, then 503.
			waitFor(t, 10*time.Second, "/health to say 503", func() bool {
				resp, err := health(fresh)
				if err != nil {
					t.Fatalf("/health during the drain: %v", err)
				}
				return resp.StatusCode == 503
			})
			for _, rq := range []struct{ client, path, body string }{
				{"fresh", "/health", ""},
				{"keep-alive", "/health", ""},
				{"fresh", "/v1/completions", `{"prompt":"x","max_tokens":2}`},
				{"keep-alive", "/v1/completions", `{"prompt":"x","max_tokens":2,"stream":true}`},
				{"fresh", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`},
			} {
				c := fresh
				if rq.client == "keep-alive" {
					c = keepAlive
				}
				var resp *http.Response
				var err error
				if rq.body == "" {
					resp, err = c.Get(url + rq.path)
				} else {
					resp, err = c.Post(url+rq.path, "application/json", strings.NewReader(rq.body))
				}
				if err != nil {
					t.Fatalf("%s %s during the drain: %v", rq.client, rq.path, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !resp.Close || !strings.Contains(string(b), "shutting down") {
					t.Errorf("%s %s during the drain: %d Retry-After=%q Connection: close %v %s",
						rq.client, rq.path, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close, b)
				}
			}
			select {
			case err := <-runErr:
				t.Fatalf("Run returned with a request in flight: %v", err)
			default:
			}

			if tc.finishes {
				close(gate)
			} else {
				// The drain ends at the timeout: the listener closes, and
				// then the engine can step again, to cancel the request.
				waitFor(t, time.Minute, "the listener to close", func() bool {
					_, err := health(fresh)
					return err != nil
				})
				close(gate)
			}
			chunks, done := sseEvents(t, br)
			text, finish := streamText(chunks)
			if tc.finishes && (!done || finish != "length" || text == "") {
				t.Errorf("the request in flight: done=%v finish=%q", done, finish)
			}
			if !tc.finishes && (done || finish == "length") {
				t.Errorf("the request in flight ran to its end after the shutdown timeout: done=%v finish=%q", done, finish)
			}
			select {
			case err := <-runErr:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Run did not return")
			}
			if _, err := health(fresh); err == nil {
				t.Error("the server still accepts connections after Run returned")
			}
		})
	}
}

// The generation endpoints take a JSON body: a request that declares any
// other Content-Type (curl -d sends a form type) gets 415 telling how to
// send it; application/json with parameters, in any case, is JSON, and so
// is a request without a Content-Type.
func TestContentType(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 1}, Options{})
	for _, tc := range []struct {
		ct     string
		status int
	}{
		{"application/json", 200},
		{"application/json; charset=utf-8", 200},
		{"Application/JSON;Charset=UTF-8", 200},
		{"", 200}, // no header at all
		{"application/x-www-form-urlencoded", 415},
		{"text/plain; charset=utf-8", 415},
		{"multipart/form-data; boundary=x", 415},
		{"application/json; charset=iso-8859-1", 415},
		{"application/jsonl", 415},
		{"application/json;;", 415}, // malformed
	} {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			t.Run(fmt.Sprintf("%s %q", path, tc.ct), func(t *testing.T) {
				body := `{"prompt":"x","max_tokens":1}`
				if path == "/v1/chat/completions" {
					body = `{"messages":[{"role":"user","content":"x"}],"max_tokens":1}`
				}
				req, err := http.NewRequest("POST", ts.URL+path, strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if tc.ct != "" {
					req.Header.Set("Content-Type", tc.ct)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, raw)
				}
				if tc.status == 200 {
					return
				}
				var v struct {
					Error struct {
						Message string  `json:"message"`
						Type    string  `json:"type"`
						Code    *string `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal(raw, &v); err != nil || resp.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("not an OpenAI error: %s", raw)
				}
				if e := v.Error; e.Type != "invalid_request_error" || deref(e.Code) != "unsupported_media_type" || !strings.Contains(e.Message, "Content-Type: application/json") {
					t.Errorf("error %+v", e)
				}
			})
		}
	}
	if st := ts.eng.Stats(); st.Requests != 8 {
		t.Errorf("the engine saw %d requests, want the 8 JSON ones", st.Requests)
	}
}

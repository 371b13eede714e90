package server

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/grok-go/grok/runner"
)

// get fetches path and decodes its JSON answer.
func get(t testing.TB, url, path string) (int, any) {
	t.Helper()
	resp, err := http.Get(url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("GET %s: %d %q is not JSON", path, resp.StatusCode, raw)
	}
	return resp.StatusCode, v
}

// greedyText is the /v1/completions greedy continuation that the
// other APIs' greedy answers must equal.
func greedyText(t *testing.T, ts *testServer, prompt string, n int) string {
	t.Helper()
	code, v := post(t, ts.URL, "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": n, "temperature": 0})
	if code != 200 {
		t.Fatalf("completions: %d %v", code, v)
	}
	text, _ := completionText(t, v)
	return text
}

// ndjsonLines reads an ollama stream.
func ndjsonLines(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if sc.Text() == "" {
			t.Fatal("empty line in an NDJSON stream")
		}
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, v)
	}
	return out
}

func TestOllamaGenerateAndChat(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 2}, Options{})
	const prompt = "In the beginning God"
	want := greedyText(t, ts, prompt, 8)
	greedy := map[string]any{"temperature": 0, "repeat_penalty": 1, "num_predict": 8}

	t.Run("generate whole", func(t *testing.T) {
		code, v := post(t, ts.URL, "/api/generate", map[string]any{"model": modelName, "prompt": prompt, "stream": false, "options": greedy})
		if code != 200 {
			t.Fatalf("%d %v", code, v)
		}
		if v["response"] != want || v["done"] != true || v["done_reason"] != "length" || v["model"] != modelName {
			t.Errorf("answer %v; want response %q", v, want)
		}
		for _, k := range []string{"total_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration", "created_at", "context"} {
			if _, ok := v[k]; !ok {
				t.Errorf("no %q in %v", k, v)
			}
		}
		if v["eval_count"] != 8.0 {
			t.Errorf("eval_count %v, want 8", v["eval_count"])
		}
		if ctx, _ := v["context"].([]any); len(ctx) != int(v["prompt_eval_count"].(float64))+8 {
			t.Errorf("context has %d ids, want prompt + 8", len(ctx))
		}
	})
	t.Run("generate streamed", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"model": modelName + ":latest", "prompt": prompt, "options": greedy})
		resp, err := http.Post(ts.URL+"/api/generate", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Errorf("Content-Type %q", ct)
		}
		lines := ndjsonLines(t, resp.Body)
		var text strings.Builder
		for i, l := range lines {
			text.WriteString(l["response"].(string))
			if done := l["done"] == true; done != (i == len(lines)-1) {
				t.Errorf("line %d of %d: done=%v", i, len(lines), done)
			}
		}
		last := lines[len(lines)-1]
		if text.String() != want || last["done_reason"] != "length" || last["eval_count"] != 8.0 || last["model"] != modelName+":latest" {
			t.Errorf("stream %q, last %v; want %q", text.String(), last, want)
		}
	})
	t.Run("chat", func(t *testing.T) {
		msgs := []map[string]string{{"role": "user", "content": "Who made the heaven?"}}
		code, v := post(t, ts.URL, "/api/chat", map[string]any{"model": modelName, "messages": msgs, "stream": false, "options": greedy})
		if code != 200 {
			t.Fatalf("%d %v", code, v)
		}
		msg, _ := v["message"].(map[string]any)
		whole, _ := msg["content"].(string)
		if msg["role"] != "assistant" || whole == "" || v["done"] != true || v["eval_count"] == nil {
			t.Errorf("chat answer %v", v)
		}
		// The same, streamed.
		body, _ := json.Marshal(map[string]any{"model": modelName, "messages": msgs, "options": greedy})
		resp, err := http.Post(ts.URL+"/api/chat", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var text strings.Builder
		lines := ndjsonLines(t, resp.Body)
		for _, l := range lines {
			text.WriteString(l["message"].(map[string]any)["content"].(string))
		}
		if text.String() != whole || lines[len(lines)-1]["done"] != true {
			t.Errorf("streamed chat %q, whole %q", text.String(), whole)
		}
	})
	t.Run("stop", func(t *testing.T) {
		opts := map[string]any{"temperature": 0, "repeat_penalty": 1, "num_predict": 8, "stop": []string{want[2:5]}}
		_, v := post(t, ts.URL, "/api/generate", map[string]any{"model": modelName, "prompt": prompt, "stream": false, "options": opts})
		if v["response"] != want[:2] || v["done_reason"] != "stop" {
			t.Errorf("stop %q: %v", want[2:5], v)
		}
	})
	t.Run("load", func(t *testing.T) {
		_, v := post(t, ts.URL, "/api/generate", map[string]any{"model": modelName})
		if v["done"] != true || v["done_reason"] != "load" {
			t.Errorf("empty prompt: %v", v)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			body map[string]any
			code int
			want string
		}{
			{"/api/generate", map[string]any{"model": "llama3", "prompt": "x"}, 404, "not found"},
			{"/api/generate", map[string]any{"prompt": "x"}, 400, "model is required"},
			{"/api/generate", map[string]any{"model": modelName, "prompt": "x", "options": map[string]any{"top_p": 2}}, 400, "top_p"},
			{"/api/generate", map[string]any{"model": modelName, "prompt": "x", "format": "json"}, 400, "format"},
			{"/api/generate", map[string]any{"model": modelName, "prompt": "x", "context": []int{1 << 20}}, 400, "context"},
			{"/api/chat", map[string]any{"model": modelName, "messages": []map[string]string{{"role": "wizard", "content": "x"}}}, 400, "role"},
			{"/api/chat", map[string]any{"model": modelName, "messages": []map[string]any{{"role": "user", "content": "x"}}, "tools": []any{map[string]any{}}}, 400, "tool"},
			{"/api/show", map[string]any{"model": "nope"}, 404, "not found"},
		} {
			code, v := post(t, ts.URL, tc.path, tc.body)
			msg, ok := v["error"].(string) // ollama's shape: a string
			if code != tc.code || !ok || !strings.Contains(msg, tc.want) {
				t.Errorf("%s %v: %d %v; want %d with an error string mentioning %q", tc.path, tc.body, code, v, tc.code, tc.want)
			}
		}
	})
}

func TestOllamaModelRoutes(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 3}, Options{Version: "1.2.3"})
	ts.srv.be.Load().info = ModelInfo{Format: "gguf", SizeBytes: 12800000, ParameterCount: 6400000, Quantization: "F16",
		Metadata: map[string]any{"general.name": "tiny"}}
	name := modelName + ":latest"

	_, v := get(t, ts.URL, "/api/tags")
	models := v.(map[string]any)["models"].([]any)
	m := models[0].(map[string]any)
	d := m["details"].(map[string]any)
	if len(models) != 1 || m["name"] != name || m["model"] != name || m["size"] != 12800000.0 || len(m["digest"].(string)) != 64 ||
		d["format"] != "gguf" || d["family"] != "grok" || d["parameter_size"] != "6.4M" || d["quantization_level"] != "F16" {
		t.Errorf("tags: %v", v)
	}
	_, v = get(t, ts.URL, "/api/ps")
	p := v.(map[string]any)["models"].([]any)[0].(map[string]any)
	if p["name"] != name || p["expires_at"] == nil || p["size_vram"] != 0.0 || p["context_length"] != 256.0 {
		t.Errorf("ps: %v", v)
	}
	_, v = get(t, ts.URL, "/api/version")
	if v.(map[string]any)["version"] != "1.2.3" {
		t.Errorf("version: %v", v)
	}
	code, sv := post(t, ts.URL, "/api/show", map[string]any{"model": name})
	info, _ := sv["model_info"].(map[string]any)
	if code != 200 || info["general.parameter_count"] != 6400000.0 || info["general.name"] != "tiny" || sv["details"] == nil ||
		sv["capabilities"].([]any)[0] != "completion" {
		t.Errorf("show: %d %v", code, sv)
	}
	// The older "name" field.
	if code, sv := post(t, ts.URL, "/api/show", map[string]any{"name": modelName}); code != 200 {
		t.Errorf("show by name: %d %v", code, sv)
	}
	resp, err := http.Get(ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "running") {
		t.Errorf("GET /: %d %q", resp.StatusCode, body)
	}
}

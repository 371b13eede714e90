package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/grok-go/grok/runner"
)

func TestLlamaCompletion(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 2}, Options{})
	const prompt = "In the beginning God"
	want := greedyText(t, ts, prompt, 8)

	t.Run("whole", func(t *testing.T) {
		code, v := post(t, ts.URL, "/completion", map[string]any{"prompt": prompt, "n_predict": 8, "temperature": 0,
			"n_probs": 3, "cache_prompt": true, "return_tokens": true})
		if code != 200 {
			t.Fatalf("%d %v", code, v)
		}
		if v["content"] != want || v["stop"] != true || v["stop_type"] != "limit" || v["tokens_predicted"] != 8.0 || v["model"] != modelName {
			t.Errorf("answer %v; want content %q", v, want)
		}
		if toks, _ := v["tokens"].([]any); len(toks) != 8 {
			t.Errorf("tokens: %v", v["tokens"])
		}
		gs, _ := v["generation_settings"].(map[string]any)
		if gs["n_ctx"] != 256.0 || gs["n_predict"] != 8.0 || gs["temperature"] != 0.0 || gs["n_probs"] != 3.0 {
			t.Errorf("generation_settings: %v", gs)
		}
		tm, _ := v["timings"].(map[string]any)
		if tm["predicted_n"] != 8.0 || tm["prompt_n"] == nil {
			t.Errorf("timings: %v", tm)
		}
		probs, _ := v["completion_probabilities"].([]any)
		if len(probs) != 8 {
			t.Fatalf("completion_probabilities: %v", v["completion_probabilities"])
		}
		var joined strings.Builder
		for _, p := range probs {
			p := p.(map[string]any)
			joined.WriteString(p["token"].(string))
			top := p["top_logprobs"].([]any)
			// Greedy: the sampled token is the most likely one.
			if len(top) != 3 || top[0].(map[string]any)["id"] != p["id"] {
				t.Errorf("probability entry %v", p)
			}
		}
		if joined.String() != want {
			t.Errorf("tokens of completion_probabilities join to %q, want %q", joined.String(), want)
		}
	})
	t.Run("stream", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": 8, "temperature": 0, "stream": true})
		resp, err := http.Post(ts.URL+"/completion", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		chunks, done := sseEvents(t, resp.Body)
		if done {
			t.Error("llama.cpp's /completion stream ends without [DONE]")
		}
		var text strings.Builder
		for i, c := range chunks {
			text.WriteString(c["content"].(string))
			if stop := c["stop"] == true; stop != (i == len(chunks)-1) {
				t.Errorf("chunk %d of %d: stop=%v", i, len(chunks), stop)
			}
		}
		last := chunks[len(chunks)-1]
		if text.String() != want || last["stop_type"] != "limit" || last["timings"] == nil {
			t.Errorf("stream %q, last %v", text.String(), last)
		}
	})
	t.Run("stop word", func(t *testing.T) {
		_, v := post(t, ts.URL, "/completion", map[string]any{"prompt": prompt, "n_predict": 8, "temperature": 0, "stop": []string{want[2:5]}})
		if v["content"] != want[:2] || v["stop_type"] != "word" || v["stopping_word"] != want[2:5] {
			t.Errorf("stop %q: %v", want[2:5], v)
		}
	})
	t.Run("n_predict 0", func(t *testing.T) {
		_, v := post(t, ts.URL, "/completion", map[string]any{"prompt": prompt, "n_predict": 0})
		if v["content"] != "" || v["tokens_predicted"] != 0.0 || v["stop"] != true || v["tokens_evaluated"] == 0.0 {
			t.Errorf("n_predict 0: %v", v)
		}
	})
	t.Run("mixed prompt", func(t *testing.T) {
		code, tv := post(t, ts.URL, "/tokenize", map[string]any{"content": prompt})
		ids := tv["tokens"].([]any)
		if code != 200 || len(ids) == 0 {
			t.Fatalf("tokenize: %d %v", code, tv)
		}
		_, v := post(t, ts.URL, "/completion", map[string]any{"prompt": ids, "n_predict": 8, "temperature": 0})
		if v["content"] != want {
			t.Errorf("token-id prompt: %q, want %q", v["content"], want)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{"n_predict": 4}, "prompt"},
			{map[string]any{"prompt": []string{"a", "b"}}, "prompts"},
			{map[string]any{"prompt": "x", "n_probs": 99}, "n_probs"},
			{map[string]any{"prompt": "x", "grammar": "root ::= \"a\""}, "grammar"},
			{map[string]any{"prompt": "x", "mirostat": 2}, "mirostat"},
			{map[string]any{"prompt": []int{1 << 20}}, "vocabulary"},
		} {
			code, v := post(t, ts.URL, "/completion", tc.body)
			e, _ := v["error"].(map[string]any)
			if msg, _ := e["message"].(string); code != 400 || !strings.Contains(msg, tc.want) {
				t.Errorf("%v: %d %v; want 400 mentioning %q", tc.body, code, v, tc.want)
			}
		}
	})
}

func TestLlamaTokenizeTemplatePropsSlots(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 3}, Options{})
	code, v := post(t, ts.URL, "/tokenize", map[string]any{"content": "Let there be light", "with_pieces": true, "add_special": true})
	toks, _ := v["tokens"].([]any)
	if code != 200 || len(toks) < 2 {
		t.Fatalf("tokenize: %d %v", code, v)
	}
	var ids []int
	var pieces strings.Builder
	for i, x := range toks {
		m := x.(map[string]any)
		ids = append(ids, int(m["id"].(float64)))
		if i > 0 {
			pieces.WriteString(m["piece"].(string))
		}
	}
	if strings.TrimSpace(pieces.String()) != "Let there be light" {
		t.Errorf("pieces join to %q", pieces.String())
	}
	_, v = post(t, ts.URL, "/detokenize", map[string]any{"tokens": ids[1:]})
	if v["content"] != "Let there be light" {
		t.Errorf("detokenize: %v", v)
	}
	// A lone byte of a multi-byte character is its bytes, not text.
	_, v = post(t, ts.URL, "/tokenize", map[string]any{"content": "\u2603", "with_pieces": true})
	for _, x := range v["tokens"].([]any) {
		if _, isStr := x.(map[string]any)["piece"].(string); isStr && x.(map[string]any)["piece"] == "" {
			t.Errorf("empty piece in %v", v)
		}
	}
	if code, v := post(t, ts.URL, "/detokenize", map[string]any{"tokens": []int{-1}}); code != 400 {
		t.Errorf("detokenize -1: %d %v", code, v)
	}
	_, v = post(t, ts.URL, "/apply-template", map[string]any{"messages": []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}}})
	if v["prompt"] != "System: Be brief.\nUser: Hi\nAssistant:" {
		t.Errorf("apply-template: %v", v)
	}
	_, pv := get(t, ts.URL, "/props")
	props := pv.(map[string]any)
	dgs, _ := props["default_generation_settings"].(map[string]any)
	if props["total_slots"] != 3.0 || dgs["n_ctx"] != 256.0 || dgs["params"].(map[string]any)["top_k"] != 40.0 {
		t.Errorf("props: %v", props)
	}
	_, sv := get(t, ts.URL, "/slots")
	slots := sv.([]any)
	if len(slots) != 3 || slots[2].(map[string]any)["id"] != 2.0 || slots[0].(map[string]any)["is_processing"] != false {
		t.Errorf("slots: %v", sv)
	}
}

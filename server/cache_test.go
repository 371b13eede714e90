package server

import (
	"testing"

	"github.com/grok-go/grok/runner"
)

// The second of two requests with the same prompt reports the tokens it
// took from the prompt cache, as OpenAI does, and answers the same.
func TestUsageCachedTokens(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 1}, Options{})
	body := `{"prompt":"And God said, Let there be light: and there was light.","max_tokens":4,"temperature":0}`
	cachedOf := func(v map[string]any) float64 {
		d, _ := v["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)
		c, _ := d["cached_tokens"].(float64)
		return c
	}
	code, first := post(t, ts.URL, "/v1/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %v", code, first)
	}
	_, second := post(t, ts.URL, "/v1/completions", body)
	prompt := second["usage"].(map[string]any)["prompt_tokens"].(float64)
	if c := cachedOf(first); c != 0 {
		t.Errorf("first request: %v cached tokens", c)
	}
	if c := cachedOf(second); c != prompt-1 {
		t.Errorf("second request: %v cached tokens, want %v (all but the last prompt token)", c, prompt-1)
	}
	text := func(v map[string]any) string { return v["choices"].([]any)[0].(map[string]any)["text"].(string) }
	if text(first) != text(second) {
		t.Errorf("answers differ: %q and %q", text(first), text(second))
	}
}

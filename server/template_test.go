package server

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/runner"
)

// withChatTemplate rewrites the demo model's GGUF with a
// tokenizer.chat_template key, as a converter writes one.
func withChatTemplate(t *testing.T, tmpl string) *loader.Model {
	t.Helper()
	f, err := gguf.Parse(defaultmodel.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	w := gguf.NewWriter()
	for _, kv := range f.Metadata {
		if kv.Key != gguf.AlignmentKey {
			if err := w.AddKV(kv.Key, kv.Value); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.AddKV("tokenizer.chat_template", tmpl); err != nil {
		t.Fatal(err)
	}
	for _, ti := range f.Tensors {
		if err := w.AddTensorOf(f, ti); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	m, err := loader.FromGGUFBytes(buf.Bytes(), "templated")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// serveModel serves m with the file's chat template, as grok serve does.
func serveModel(t *testing.T, m *loader.Model) (*testServer, error) {
	t.Helper()
	eng, err := runner.New(m.LanguageModel, m.Tokenizer, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	tmpl, _ := m.GGUF.String("tokenizer.chat_template")
	s := New(Options{ModelID: modelName, Logger: quietLogger()})
	if err := s.Attach(Model{Engine: eng, ChatTemplate: tmpl}); err != nil {
		return nil, err
	}
	ts := &testServer{Server: httptest.NewServer(s), srv: s, eng: eng}
	t.Cleanup(ts.Close)
	return ts, nil
}

const fileTemplate = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}" +
	"{% if add_generation_prompt %}{{ 'In the beginning' }}{% endif %}"

// A GGUF's tokenizer.chat_template renders /v1/chat/completions, /api/chat
// and /apply-template: the chat answer is the completion of the rendered
// prompt, and the template's end-of-turn marker is a stop.
func TestFileChatTemplate(t *testing.T) {
	ts, err := serveModel(t, withChatTemplate(t, fileTemplate))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who made the heaven?"}}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWho made the heaven?<|im_end|>\nIn the beginning"
	code, v := post(t, ts.URL, "/apply-template", map[string]any{"messages": msgs})
	if code != 200 || v["prompt"] != want {
		t.Fatalf("apply-template: %d %q, want %q", code, v["prompt"], want)
	}
	code, v = post(t, ts.URL, "/v1/completions", map[string]any{"prompt": want, "max_tokens": 12, "temperature": 0, "stop": "<|im_end|>"})
	if code != 200 {
		t.Fatalf("completions: %d %v", code, v)
	}
	plain, _ := completionText(t, v)
	code, v = post(t, ts.URL, "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 12, "temperature": 0})
	if code != 200 {
		t.Fatalf("chat: %d %v", code, v)
	}
	got, _ := completionText(t, v)
	if got != strings.TrimLeft(plain, " ") || got == "" {
		t.Errorf("chat answer %q, want the rendered prompt's completion %q", got, plain)
	}
	if n := v["usage"].(map[string]any)["prompt_tokens"].(float64); int(n) != len(ts.eng.Tokenizer().Encode(want)) {
		t.Errorf("prompt_tokens %v, want %d", n, len(ts.eng.Tokenizer().Encode(want)))
	}
	code, v = post(t, ts.URL, "/api/chat", map[string]any{"model": modelName, "messages": msgs, "stream": false, "options": map[string]any{"temperature": 0, "num_predict": 12, "repeat_penalty": 1}})
	if code != 200 {
		t.Fatalf("ollama chat: %d %v", code, v)
	}
	if c := v["message"].(map[string]any)["content"]; c != got {
		t.Errorf("/api/chat %q, want %q", c, got)
	}
	if _, p := get(t, ts.URL, "/props"); p.(map[string]any)["chat_template"] != fileTemplate {
		t.Errorf("/props chat_template %v", p.(map[string]any)["chat_template"])
	}
}

// A template that does not parse is refused at load with a hint, rather
// than chat requests being rendered in a format the model does not know.
func TestBrokenTemplateRefused(t *testing.T) {
	for tmpl, want := range map[string]string{
		"{% for m in messages %}{{ m.content }}":                  "does not compile",
		"{{ raise_exception('this template needs tools') }}":      "needs tools",
		"{% macro f() %}{{ f() }}{% endmacro %}{{ messages[0] }}": "calls itself",
	} {
		_, err := serveModel(t, withChatTemplate(t, tmpl))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--chat-template") {
			t.Errorf("%q: %v, want an error with %q and the --chat-template hint", tmpl, err, want)
		}
	}
}

// A chat longer than the context loses its oldest turns (the system
// message stays), or is refused with truncate: false.
func TestChatTruncation(t *testing.T) {
	ts := newTestServer(t, runner.Options{}, Options{})
	line := "And God said, Let there be light: and there was light, and God saw the light, that it was good."
	msgs := []map[string]string{{"role": "system", "content": "You are the scribe."}}
	for range 8 {
		msgs = append(msgs, map[string]string{"role": "user", "content": line}, map[string]string{"role": "assistant", "content": line})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": "What was good?"})
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		code       int
		want       string
	}{
		{"openai truncates", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 4, "temperature": 0}, 200, ""},
		{"openai default length", "/v1/chat/completions", map[string]any{"messages": msgs, "temperature": 0}, 200, ""},
		{"openai refuses", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 4, "truncate": false}, 400, "maximum context length"},
		{"ollama truncates", "/api/chat", map[string]any{"model": modelName, "messages": msgs, "stream": false, "options": map[string]any{"num_predict": 4}}, 200, ""},
		{"ollama refuses", "/api/chat", map[string]any{"model": modelName, "messages": msgs, "stream": false, "truncate": false}, 400, "no room"},
		{"last turn too long", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": strings.Repeat(line+" ", 20)}}}, 400, "last turn kept"},
		{"answer too long", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 250}, 400, "fewer than the 250 asked for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, v := post(t, ts.URL, tc.path, tc.body)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %v", code, tc.code, v)
			}
			if tc.code != 200 {
				msg := v["error"]
				if m, ok := msg.(map[string]any); ok {
					msg = m["message"]
				}
				if !strings.Contains(msg.(string), tc.want) {
					t.Errorf("error %q, want it to contain %q", msg, tc.want)
				}
				return
			}
			var prompt float64
			if u, ok := v["usage"].(map[string]any); ok {
				prompt = u["prompt_tokens"].(float64)
			} else {
				prompt = v["prompt_eval_count"].(float64)
			}
			if prompt > 256-4 || prompt < 30 {
				t.Errorf("prompt_tokens %v: want the conversation cut to fit 256 tokens", prompt)
			}
		})
	}
}

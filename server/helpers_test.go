package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/runner"
)

// The tests serve the embedded demo model (grok-tiny-kjv, context 256),
// which writes real text, so that stop strings, chat and logprobs are
// exercised on a real tokenizer. Its weights are parsed once and shared:
// the model is read-only, and each test runs its own engine.
var demo = sync.OnceValues(func() (*loader.Model, error) {
	return loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
})

const modelName = defaultmodel.Name

// testServer is a Server with an engine over the demo model behind an
// httptest.Server.
type testServer struct {
	*httptest.Server
	srv *Server
	eng *runner.Engine
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// paced slows the engine to at least d per step, so that a request of n
// tokens lasts at least n·d however fast the kernels are: tests that cancel
// or time out a running request need it still running.
func paced(d time.Duration) func() { return func() { time.Sleep(d) } }

// newTestServer starts a server with the given engine options; the test's
// cleanup closes it (waiting for its handlers) and then the engine.
func newTestServer(t testing.TB, eo runner.Options, so Options) *testServer {
	t.Helper()
	m, err := demo()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := runner.New(m.LanguageModel, m.Tokenizer, eo)
	if err != nil {
		t.Fatal(err)
	}
	if so.ModelID == "" {
		so.ModelID = modelName
	}
	if so.Logger == nil {
		so.Logger = quietLogger()
	}
	s := New(so)
	if err := s.Attach(Model{Engine: eng}); err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(s), srv: s, eng: eng}
	t.Cleanup(func() {
		ts.Close()
		eng.Close()
	})
	return ts
}

// post sends body (a string, or a value to encode) to path and returns
// the status and the decoded JSON answer, failing the test on a transport
// error. It must be called from the test's goroutine; others use tryPost.
func post(t testing.TB, url, path string, body any) (int, map[string]any) {
	t.Helper()
	code, v, err := tryPost(url, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, v
}

// tryPost is post for any goroutine: it returns the error.
func tryPost(url, path string, body any) (int, map[string]any, error) {
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(enc)
	}
	resp, err := http.Post(url+path, "application/json", rd)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, nil, fmt.Errorf("POST %s: status %d, body %q is not JSON: %v", path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, v, nil
}

// completionText returns choices[0].text (or .message.content for chat)
// and finish_reason of a decoded answer.
func completionText(t testing.TB, v map[string]any) (text, finish string) {
	t.Helper()
	ch, ok := v["choices"].([]any)
	if !ok || len(ch) != 1 {
		t.Fatalf("answer without one choice: %v", v)
	}
	c := ch[0].(map[string]any)
	finish, _ = c["finish_reason"].(string)
	if msg, ok := c["message"].(map[string]any); ok {
		text, _ = msg["content"].(string)
		return text, finish
	}
	text, _ = c["text"].(string)
	return text, finish
}

// sseEvents reads a server-sent event stream: the JSON chunks, and whether
// it ended with [DONE].
func sseEvents(t testing.TB, r io.Reader) (chunks []map[string]any, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %q", data)
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, v)
	}
	return chunks, done
}

// streamText concatenates the text of completion or chat chunks and
// returns the finish reason of the last choice that had one.
func streamText(chunks []map[string]any) (text, finish string) {
	var b strings.Builder
	for _, c := range chunks {
		ch, _ := c["choices"].([]any)
		for _, x := range ch {
			m := x.(map[string]any)
			if f, ok := m["finish_reason"].(string); ok {
				finish = f
			}
			if d, ok := m["delta"].(map[string]any); ok {
				s, _ := d["content"].(string)
				b.WriteString(s)
			} else {
				s, _ := m["text"].(string)
				b.WriteString(s)
			}
		}
	}
	return b.String(), finish
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ctxTimeout is a test context with a deadline.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// prompts are varied KJV-style openings for the batching tests.
var prompts = []string{
	"In the beginning God",
	"And the LORD said unto Moses",
	"Blessed are the",
	"The LORD is my shepherd",
	"And it came to pass",
	"For God so loved",
	"Thou shalt not",
	"And Jesus answered and said",
	"Hear, O Israel",
	"Let there be light",
	"Now the serpent was",
	"I am the way",
	"And David said",
	"Wherefore",
	"O give thanks unto the LORD, for he is good:",
	"These are the generations of",
}

package server

import (
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/runner"
)

// A server over a group of replicas (grok serve --dp) answers concurrent
// requests with exactly the text and logprobs one engine gives them, and
// reports the group's slots.
func TestServeOverReplicas(t *testing.T) {
	m, err := demo()
	if err != nil {
		t.Fatal(err)
	}
	var lms []*model.LanguageModel
	for range 2 {
		lm, err := model.New(m.Config, m.Source)
		if err != nil {
			t.Fatal(err)
		}
		p := parallel.New(1)
		t.Cleanup(p.Close)
		lm.Pool = p
		lms = append(lms, lm)
	}
	eng, err := runner.NewGroup(lms, m.Tokenizer, runner.Options{Slots: 4})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{ModelID: modelName, Logger: quietLogger()})
	if err := s.Attach(Model{Engine: eng}); err != nil {
		t.Fatal(err)
	}
	group := httptest.NewServer(s)
	t.Cleanup(func() {
		group.Close()
		eng.Close()
	})
	one := newTestServer(t, runner.Options{Slots: 1}, Options{})

	prompts := []string{"And God said", "In the beginning", "The LORD is my", "Blessed are the", "And it came to pass", "Thou shalt"}
	body := func(p string) string {
		return fmt.Sprintf(`{"prompt":%q,"max_tokens":16,"temperature":0,"logprobs":2}`, p)
	}
	got := make([]map[string]any, len(prompts))
	var wg sync.WaitGroup
	errs := make(chan error, len(prompts))
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, v, err := tryPost(group.URL, "/v1/completions", body(p))
			if err == nil && code != 200 {
				err = fmt.Errorf("%q: status %d: %v", p, code, v)
			}
			if err != nil {
				errs <- err
			}
			got[i] = v
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, p := range prompts {
		_, want := post(t, one.URL, "/v1/completions", body(p))
		g, w := got[i]["choices"].([]any)[0].(map[string]any), want["choices"].([]any)[0].(map[string]any)
		if fmt.Sprint(g["text"], g["logprobs"]) != fmt.Sprint(w["text"], w["logprobs"]) {
			t.Errorf("%q over replicas: %q, one engine: %q", p, g["text"], w["text"])
		}
	}
	if _, props := get(t, group.URL, "/props"); props.(map[string]any)["total_slots"] != 4.0 {
		t.Errorf("total_slots %v, want 4 (2 replicas × 2)", props.(map[string]any)["total_slots"])
	}
}

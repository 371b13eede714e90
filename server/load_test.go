package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/tensor"
)

// loadKind is one kind of request in the load test.
type loadKind int

const (
	greedyCompletion loadKind = iota
	greedyCompletionStream
	greedyChat
	greedyChatStream
	seededCompletion
	seededCompletionStream
	cancelledStream
	numLoadKinds
)

func (k loadKind) stream() bool {
	return k == greedyCompletionStream || k == greedyChatStream || k == seededCompletionStream || k == cancelledStream
}

// refKey groups the kinds whose answers must agree: streamed or not, the
// text is the same.
func (k loadKind) refKey() string {
	switch k {
	case greedyCompletion, greedyCompletionStream:
		return "greedy"
	case greedyChat, greedyChatStream:
		return "chat"
	case seededCompletion, seededCompletionStream:
		return "seeded"
	}
	return ""
}

// loadRequest builds the request body for a kind and prompt; max_tokens
// varies with the prompt (4 to 11) so that requests finish at different
// steps and slots are refilled mid-batch.
func loadRequest(k loadKind, pi int) (path, body string) {
	p := prompts[pi]
	n := 4 + pi%8
	stream := k.stream()
	switch k {
	case greedyChat, greedyChatStream:
		return "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d,"temperature":0,"stream":%v}`, modelName, p, n, stream)
	case seededCompletion, seededCompletionStream:
		return "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0.9,"top_k":40,"seed":%d,"stream":%v}`, p, n, 1000+pi, stream)
	case cancelledStream:
		return "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":200,"ignore_eos":true,"stream":true}`, p)
	}
	return "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0,"stream":%v}`, p, n, stream)
}

type loadAnswer struct {
	text, finish string
}

// doLoadRequest sends one request and returns its answer; a cancelled
// stream is read up to its first chunk and then abandoned.
func doLoadRequest(ctx context.Context, client *http.Client, url string, k loadKind, pi int) (loadAnswer, error) {
	path, body := loadRequest(k, pi)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", url+path, strings.NewReader(body))
	if err != nil {
		return loadAnswer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return loadAnswer{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return loadAnswer{}, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	if !k.stream() {
		var v struct {
			Choices []struct {
				Text         string `json:"text"`
				FinishReason string `json:"finish_reason"`
				Message      struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			return loadAnswer{}, err
		}
		if len(v.Choices) != 1 {
			return loadAnswer{}, fmt.Errorf("%d choices", len(v.Choices))
		}
		c := v.Choices[0]
		return loadAnswer{c.Text + c.Message.Content, c.FinishReason}, nil
	}
	sc := bufio.NewScanner(resp.Body)
	var a loadAnswer
	var b strings.Builder
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			a.text = b.String()
			return a, nil
		}
		if k == cancelledStream {
			cancel() // the client goes away after its first token
			return loadAnswer{}, nil
		}
		var c struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason *string `json:"finish_reason"`
				Delta        struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return a, err
		}
		if c.Error != nil {
			return a, fmt.Errorf("error event: %s", data)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Text + ch.Delta.Content)
			if ch.FinishReason != nil {
				a.finish = *ch.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		return a, err
	}
	return a, errors.New("the stream ended without [DONE]")
}

// A load test: 32 concurrent clients send 500 requests (64 under the race
// detector: see loadRequests) of every kind, streamed and not, greedy and seeded,
// and some clients leave mid-stream. Every completed answer must equal the
// answer the same request got alone, the engine must end idle with its
// counts adding up, and no goroutine may be left behind. The KV memory is
// the serving default's (f16, prefix cache on) in a pool of one context,
// an eighth of what the slots could fill, so that requests wait for pages
// and cached prefixes are evicted.
func TestLoad(t *testing.T) {
	// The model may run on a process-wide worker pool that starts on first
	// use and stays; start it before taking the goroutines to ignore.
	warmModel(t)
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // runs after the server's cleanup below
	// Pacing keeps an abandoned 200-token stream running until its client
	// leaves, however fast the kernels.
	ts := newTestServer(t, runner.Options{Slots: 8, MaxQueue: 64, BeforeStep: paced(time.Millisecond),
		KType: tensor.F16, VType: tensor.F16, KVTokens: 256}, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(client.CloseIdleConnections)
	ctx := ctxTimeout(t, 3*time.Minute)
	nPrompts := loadPrompts

	// References: each (kind group, prompt) alone, one at a time.
	ref := map[string]loadAnswer{}
	for _, k := range []loadKind{greedyCompletion, greedyChat, seededCompletion} {
		for pi := range nPrompts {
			a, err := doLoadRequest(ctx, client, ts.URL, k, pi)
			if err != nil {
				t.Fatal(err)
			}
			ref[fmt.Sprint(k.refKey(), pi)] = a
		}
	}
	base := ts.eng.Stats()

	const clients = 32
	var next, completed, cancelled atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= loadRequests || ctx.Err() != nil {
					return
				}
				k, pi := loadKind(i%int(numLoadKinds)), (i/int(numLoadKinds))%nPrompts
				a, err := doLoadRequest(ctx, client, ts.URL, k, pi)
				if err != nil {
					t.Errorf("request %d (kind %d, prompt %d): %v", i, k, pi, err)
					continue
				}
				if k == cancelledStream {
					cancelled.Add(1)
					continue
				}
				completed.Add(1)
				if want := ref[fmt.Sprint(k.refKey(), pi)]; a != want {
					t.Errorf("request %d (kind %d, prompt %d): %+v, alone %+v", i, k, pi, a, want)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var st runner.Stats
	waitFor(t, 10*time.Second, "the engine to go idle", func() bool {
		st = ts.eng.Stats()
		return st.Active == 0 && st.Queued == 0 && st.Requests-base.Requests == loadRequests
	})
	if done := st.Finished + st.Cancelled; done != st.Requests {
		t.Errorf("engine: %d requests, %d finished, %d cancelled", st.Requests, st.Finished, st.Cancelled)
	}
	if st.Cancelled < cancelled.Load()/2 {
		t.Errorf("only %d of %d abandoned streams were cancelled in the engine", st.Cancelled, cancelled.Load())
	}
	if occ := float64(st.BatchRows-base.BatchRows) / float64(st.Steps-base.Steps); occ < 2 {
		t.Errorf("mean batch occupancy %.2f: requests were not batched", occ)
	}
	if st.CachedTokens == base.CachedTokens {
		t.Error("no prompt token came from the prefix cache")
	}
	if st.KVPagesFree+st.KVPagesCached != st.KVPages {
		t.Errorf("idle engine: %d pages free and %d cached of %d", st.KVPagesFree, st.KVPagesCached, st.KVPages)
	}
	t.Logf("%d requests (%d completed, %d abandoned) in %v; %d tokens, mean batch %.1f; %d prompt tokens cached, %d prefilled, %d preemptions",
		loadRequests, completed.Load(), cancelled.Load(), elapsed.Round(time.Millisecond),
		st.GeneratedTokens-base.GeneratedTokens, float64(st.BatchRows-base.BatchRows)/float64(st.Steps-base.Steps),
		st.CachedTokens-base.CachedTokens, st.PrefillTokens-base.PrefillTokens, st.Preempted-base.Preempted)
}

// warmModel runs the demo model once, on an engine of its own that it
// closes, so that whatever lasting goroutines the model starts on first use
// (the kernels' worker pool) exist before a leak check's baseline.
func warmModel(t testing.TB) {
	t.Helper()
	m, err := demo()
	if err != nil {
		t.Fatal(err)
	}
	eng, err := runner.New(m.LanguageModel, m.Tokenizer, runner.Options{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	st, err := eng.Submit(context.Background(), runner.Request{Prompt: []int{5, 6}, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := st.Recv(context.Background())
		if err != nil || ev.Done {
			return
		}
	}
}

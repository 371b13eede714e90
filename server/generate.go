package server

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grok-go/grok/runner"
)

// generate submits j and writes its answer, streamed or whole.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, b *backend, j *job) {
	arrived := time.Now()
	ctx := r.Context()
	gctx, cancel := ctx, context.CancelFunc(func() {})
	if s.opts.Timeout > 0 {
		gctx, cancel = context.WithTimeout(ctx, s.opts.Timeout)
	}
	defer cancel()
	st, err := b.eng.Submit(gctx, j.req)
	switch {
	case errors.Is(err, runner.ErrQueueFull):
		j.writeError(w, unavailable(1, "The server is overloaded: all slots are busy and the queue is full. Retry later."))
		return
	case errors.Is(err, runner.ErrClosed):
		j.writeError(w, unavailable(5, "The server is shutting down."))
		return
	case err != nil:
		// Validation has caught what the runner would refuse; what is
		// left is still the request's fault.
		j.writeError(w, invalid("", "%v", err))
		return
	}
	// Whatever way this handler ends, the slot is freed at the next step.
	defer st.Cancel()

	g := &gen{b: b, j: j, id: newID(j.chat), arrived: arrived, created: arrived.Unix(), model: s.opts.ModelID, trimLead: j.chat}
	g.offset = utf8.RuneCountInString(j.echo)
	var out streamOut
	if j.stream {
		out = newStreamOut(w, g)
		out.start(g)
	}
	var firstTok time.Time
	var last runner.Event
	for {
		ev, err := st.Recv(ctx)
		if err != nil {
			// The client went away; the deferred Cancel frees the slot.
			s.metrics.finished.WithLabelValues(runner.FinishCancelled).Inc()
			s.clientGone(w, g, out)
			return
		}
		if len(ev.Tokens) > 0 && firstTok.IsZero() {
			firstTok = time.Now()
			s.metrics.ttft.Observe(firstTok.Sub(arrived).Seconds())
		}
		text, toks := g.add(ev)
		if ev.Done {
			last = ev
			if out != nil && (text != "" || len(toks) > 0) {
				out.delta(g, text, toks)
			}
			break
		}
		if out != nil && (text != "" || len(toks) > 0) {
			if !out.delta(g, text, toks) {
				// The write failed: the client is gone.
				s.metrics.finished.WithLabelValues(runner.FinishCancelled).Inc()
				s.clientGone(w, g, out)
				return
			}
		}
	}
	u := last.Usage
	s.metrics.finished.WithLabelValues(last.Finish).Inc()
	if u.CompletionTokens > 1 {
		s.metrics.tpot.Observe(u.Decode.Seconds() / float64(u.CompletionTokens-1))
	}
	var fail *apiError
	switch last.Finish {
	case runner.FinishStop, runner.FinishLength:
	case runner.FinishCancelled:
		switch {
		case ctx.Err() != nil:
			s.clientGone(w, g, out)
			return
		case errors.Is(gctx.Err(), context.DeadlineExceeded):
			fail = &apiError{status: http.StatusGatewayTimeout, noRetry: true, Type: "timeout_error", Code: strPtr("timeout"),
				Message: "The request took longer than the server's limit of " + s.opts.Timeout.String() + "."}
		default:
			fail = unavailable(5, "The server is shutting down; the request was cancelled.")
		}
	default:
		s.log.Error("generation failed", "id", g.id, "err", last.Err)
		fail = &apiError{status: http.StatusInternalServerError, Type: "server_error", Message: "Generation failed: " + errString(last.Err)}
	}
	var ttft time.Duration
	if !firstTok.IsZero() {
		ttft = firstTok.Sub(arrived)
	}
	s.log.Info("request done", "id", g.id, "finish", last.Finish, "prompt_tokens", u.PromptTokens,
		"completion_tokens", u.CompletionTokens, "queued", u.Queued.Round(time.Millisecond),
		"ttft", ttft.Round(time.Millisecond), "total", time.Since(arrived).Round(time.Millisecond))
	us := &usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails: &promptTokensDetails{CachedTokens: u.CachedTokens}}
	if out != nil {
		if fail != nil {
			out.fail(fail)
			return
		}
		out.finish(g, last, us)
		return
	}
	if fail != nil {
		j.writeError(w, fail)
		return
	}
	writeJSON(w, http.StatusOK, g.whole(last, us))
}

// statusClientClosed is nginx's "client closed request": what the metrics
// and logs record for a request whose client left before its answer.
const statusClientClosed = 499

// clientGone notes a client that left: no answer can reach it, but the
// request is logged and recorded in the metrics as 499 rather than 200,
// streamed or not (a stream's 200 went out before the client left).
func (s *Server) clientGone(w http.ResponseWriter, g *gen, out streamOut) {
	s.log.Info("client gone before the answer ended", "id", g.id, "status", statusClientClosed)
	if out == nil {
		w.WriteHeader(statusClientClosed)
	}
	if rec, ok := w.(*statusRecorder); ok {
		rec.status = statusClientClosed
	}
}

func errString(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}

// newID makes a response id in OpenAI's style.
func newID(chat bool) string {
	if chat {
		return "chatcmpl-" + rand.Text()
	}
	return "cmpl-" + rand.Text()
}

// gen follows one request's output: its text so far and the logprobs of
// the tokens whose text has been released.
//
// Text that might begin a stop string is held back by the runner; the
// tokens that produced it are held back here too, so that a token appears
// in logprobs only with (or after) its text, and the tokens that made up a
// stop string never appear. At the end, a token whose text was partly
// released (a stop string began inside it) is kept.
type gen struct {
	b        *backend
	j        *job
	id       string
	arrived  time.Time
	created  int64
	model    string
	trimLead bool // chat: drop the space the model writes after "Assistant:"

	text     strings.Builder // released text, for the whole answer
	released int             // bytes released
	decoded  int             // bytes of token text seen
	runes    int             // code points of token text seen
	offset   int             // code points before the completion (echo)
	pending  []pendingToken
	all      []pendingToken // released tokens, for the whole answer

	sawEOS bool            // the answer ended with the EOS token
	ids    []int           // generated ids but EOS (ollama's context, llama.cpp's tokens)
	evIDs  []int           // those of the last event
	raw    strings.Builder // all token text, stop strings included (llama.cpp: stopping_word)
}

type pendingToken struct {
	runner.TokenInfo
	start int // byte offset in the decoded text
	runes int // code-point offset in the decoded text
}

// add takes an event and returns the text and tokens it releases.
func (g *gen) add(ev runner.Event) (string, []pendingToken) {
	text := ev.Text
	g.released += len(text)
	if g.trimLead {
		text = strings.TrimLeft(text, " ")
		g.trimLead = text == ""
	}
	if !g.j.stream {
		g.text.WriteString(text)
	}
	g.evIDs = g.evIDs[:0]
	for _, ti := range ev.Tokens {
		if ti.ID == g.b.eos && !g.j.req.IgnoreEOS {
			g.sawEOS = true
			continue
		}
		g.evIDs = append(g.evIDs, ti.ID)
		if g.j.kind != kindOpenAI {
			g.ids = append(g.ids, ti.ID)
			g.raw.WriteString(ti.Text)
		}
	}
	if !g.j.logprobs {
		return text, nil
	}
	for _, ti := range ev.Tokens {
		if ti.ID == g.b.eos && !g.j.req.IgnoreEOS {
			continue // the end of the answer is not part of it
		}
		g.pending = append(g.pending, pendingToken{ti, g.decoded, g.runes})
		g.decoded += len(ti.Text)
		g.runes += utf8.RuneCountInString(ti.Text)
	}
	n := 0
	for n < len(g.pending) {
		p := &g.pending[n]
		if p.start+len(p.Text) > g.released && !(ev.Done && p.start < g.released) {
			break
		}
		n++
	}
	if n == 0 {
		return text, nil
	}
	out := g.pending[:n:n]
	g.pending = g.pending[n:]
	if !g.j.stream {
		g.all = append(g.all, out...)
	}
	if ev.Done {
		g.pending = nil
	}
	return text, out
}

// completionLogprobs renders tokens in the legacy completions shape. Each
// top_logprobs map holds the k most likely tokens and the sampled one (so
// k+1 entries at most, as OpenAI documents).
func (g *gen) completionLogprobs(toks []pendingToken) *completionLogprobs {
	lp := &completionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for _, t := range toks {
		lp.Tokens = append(lp.Tokens, t.Text)
		lp.TokenLogprobs = append(lp.TokenLogprobs, jsonLogprob(t.Logprob))
		lp.TextOffset = append(lp.TextOffset, g.offset+t.runes)
		top := make(map[string]float64, len(t.Top)+1)
		for _, a := range t.Top {
			top[g.b.tokenText(a.Token)] = jsonLogprob(a.Logprob)
		}
		// The sampled token under the name it has among alternatives: a
		// byte that leaves a character incomplete has no text of its own,
		// and keyed by "" it would appear twice.
		key := t.Text
		if key == "" {
			key = g.b.tokenText(t.ID)
		}
		if _, ok := top[key]; !ok {
			top[key] = jsonLogprob(t.Logprob)
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
	}
	return lp
}

// chatLogprobs renders tokens as logprobs.content entries.
func (g *gen) chatLogprobs(toks []pendingToken) *chatLogprobs {
	lp := &chatLogprobs{Content: make([]chatTokenLogprob, 0, len(toks))}
	for _, t := range toks {
		s := t.Text
		if s == "" {
			s = g.b.tokenText(t.ID) // a byte of a character that a later token completes
		}
		c := chatTokenLogprob{Token: s, Logprob: jsonLogprob(t.Logprob), Bytes: g.b.tokenBytes(t.ID, t.Text),
			TopLogprobs: make([]chatTopLogprob, 0, len(t.Top))}
		for _, a := range t.Top {
			at := g.b.tokenText(a.Token)
			c.TopLogprobs = append(c.TopLogprobs, chatTopLogprob{Token: at, Logprob: jsonLogprob(a.Logprob), Bytes: g.b.tokenBytes(a.Token, at)})
		}
		lp.Content = append(lp.Content, c)
	}
	return lp
}

// whole is the non-streamed response.
func (g *gen) whole(last runner.Event, u *usage) any {
	switch g.j.kind {
	case kindOllama:
		return g.ollamaFinal(last, true)
	case kindLlama:
		return g.llamaFinal(last, true)
	}
	finish := last.Finish
	if g.j.chat {
		ch := chatChoice{Message: chatMessage{Role: "assistant", Content: g.text.String()}, FinishReason: finish}
		if g.j.logprobs {
			ch.Logprobs = g.chatLogprobs(g.all)
		}
		return chatCompletion{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.model,
			Choices: []chatChoice{ch}, Usage: *u}
	}
	ch := completionChoice{Text: g.j.echo + g.text.String(), FinishReason: &finish}
	if g.j.logprobs {
		ch.Logprobs = g.completionLogprobs(g.all)
	}
	return completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
		Choices: []completionChoice{ch}, Usage: u}
}

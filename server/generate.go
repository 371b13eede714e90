package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grok-go/grok/runner"
)

// chatStop ends a chat answer where the model starts writing the user's
// next turn (see chatPrompt).
const chatStop = "\nUser:"

// accept reads the request body into req (a pointer to a request whose
// model name is *model), checks the model and that the engine is ready. On
// failure it writes the error response and returns nil; on success the
// caller must call s.release when the request ends.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, req any, model *string) *backend {
	var body []byte
	e := checkContentType(r)
	if e == nil {
		body, e = s.readBody(w, r)
	}
	if e == nil {
		e = decodeBody(body, req)
	}
	if e == nil {
		e = s.checkModel(*model)
	}
	var b *backend
	if e == nil {
		b, e = s.ready()
	}
	if e != nil {
		writeError(w, e)
		return nil
	}
	return b
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	b := s.accept(w, r, &req, &req.Model)
	if b == nil {
		return
	}
	defer s.release()
	var j job
	if e := req.sampling(&j); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case req.BestOf != nil && *req.BestOf != 1:
		writeError(w, invalid("best_of", "best_of=%d is not supported (it must be 1).", *req.BestOf))
		return
	case req.Suffix != nil && *req.Suffix != "":
		writeError(w, invalid("suffix", "suffix is not supported by this server."))
		return
	case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > maxLogprobs):
		writeError(w, invalid("logprobs", "logprobs=%d is out of range: it must lie in [0, %d].", *req.Logprobs, maxLogprobs))
		return
	}
	text, ids, e := parsePrompt(req.Prompt)
	if e != nil {
		writeError(w, e)
		return
	}
	echo := req.Echo != nil && *req.Echo
	if ids == nil {
		ids = b.tok.Encode(text)
	} else {
		for _, id := range ids {
			if id < 0 || id >= b.tok.VocabSize() {
				writeError(w, invalid("prompt", "Token id %d in 'prompt' is outside the vocabulary [0, %d).", id, b.tok.VocabSize()))
				return
			}
		}
		if echo {
			text, _ = b.tok.Decode(ids)
		}
	}
	if len(ids) == 0 {
		// Nothing to condition on: start from BOS, as a document does.
		ids = []int{b.tok.BOS()}
	}
	if req.Logprobs != nil {
		if echo {
			writeError(w, invalid("echo", "echo together with logprobs is not supported (prompt logprobs are not computed)."))
			return
		}
		j.logprobs = true
		j.req.Logprobs = true
		j.req.TopLogprobs = *req.Logprobs
	}
	if echo {
		j.echo = text
	}
	j.req.Prompt = ids
	if j.req.MaxTokens, e = maxTokens("max_tokens", req.MaxTokens, defaultCompletionTokens, len(ids), b.ctx); e != nil {
		writeError(w, e)
		return
	}
	s.generate(w, r, b, &j)
}

// maxLogprobs is the most alternatives a request may ask for per token.
const maxLogprobs = 8

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	b := s.accept(w, r, &req, &req.Model)
	if b == nil {
		return
	}
	defer s.release()
	j := job{chat: true}
	if e := req.sampling(&j); e != nil {
		writeError(w, e)
		return
	}
	switch {
	case !isNull(req.Tools) && string(req.Tools) != "[]", !isNull(req.Functions) && string(req.Functions) != "[]":
		writeError(w, invalid("tools", "Tool calling is not supported by this server."))
		return
	case req.ResponseFormat != nil && req.ResponseFormat.Type != "" && req.ResponseFormat.Type != "text":
		writeError(w, invalid("response_format", "response_format %q is not supported: this server returns plain text.", req.ResponseFormat.Type))
		return
	case req.TopLogprobs != nil && (*req.TopLogprobs < 0 || *req.TopLogprobs > maxLogprobs):
		writeError(w, invalid("top_logprobs", "top_logprobs=%d is out of range: it must lie in [0, %d].", *req.TopLogprobs, maxLogprobs))
		return
	case req.TopLogprobs != nil && *req.TopLogprobs > 0 && (req.Logprobs == nil || !*req.Logprobs):
		writeError(w, invalid("top_logprobs", "top_logprobs requires logprobs to be true."))
		return
	}
	prompt, e := chatPrompt(req.Messages)
	if e != nil {
		writeError(w, e)
		return
	}
	if req.Logprobs != nil && *req.Logprobs {
		j.logprobs = true
		j.req.Logprobs = true
		if req.TopLogprobs != nil {
			j.req.TopLogprobs = *req.TopLogprobs
		}
	}
	j.req.Prompt = b.tok.Encode(prompt)
	j.req.Stop = append(j.req.Stop, chatStop)
	param, asked := "max_tokens", req.MaxTokens
	if req.MaxCompletionTokens != nil { // the newer name wins
		param, asked = "max_completion_tokens", req.MaxCompletionTokens
	}
	if j.req.MaxTokens, e = maxTokens(param, asked, 0, len(j.req.Prompt), b.ctx); e != nil {
		writeError(w, e)
		return
	}
	s.generate(w, r, b, &j)
}

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
		writeError(w, unavailable(1, "The server is overloaded: all slots are busy and the queue is full. Retry later."))
		return
	case errors.Is(err, runner.ErrClosed):
		writeError(w, unavailable(5, "The server is shutting down."))
		return
	case err != nil:
		// Validation has caught what the runner would refuse; what is
		// left is still the request's fault.
		writeError(w, invalid("", "%v", err))
		return
	}
	// Whatever way this handler ends, the slot is freed at the next step.
	defer st.Cancel()

	g := &gen{b: b, j: j, id: newID(j.chat), created: arrived.Unix(), model: s.opts.ModelID, trimLead: j.chat}
	g.offset = utf8.RuneCountInString(j.echo)
	var out streamOut
	if j.stream {
		out = newSSE(w)
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
				return // the write failed: the client is gone
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
	us := &usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	if out != nil {
		if fail != nil {
			out.fail(fail)
			return
		}
		out.finish(g, last.Finish, us)
		return
	}
	if fail != nil {
		writeError(w, fail)
		return
	}
	writeJSON(w, http.StatusOK, g.whole(last.Finish, us))
}

// statusClientClosed is nginx's "client closed request": what the metrics
// and logs record for a request whose client left before its answer.
const statusClientClosed = 499

// clientGone notes a client that left: no answer can reach it, but an
// unanswered request is recorded as 499 rather than the default 200.
func (s *Server) clientGone(w http.ResponseWriter, g *gen, out streamOut) {
	s.log.Debug("client gone", "id", g.id)
	if out == nil {
		w.WriteHeader(statusClientClosed)
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
		if _, ok := top[t.Text]; !ok {
			top[t.Text] = jsonLogprob(t.Logprob)
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
func (g *gen) whole(finish string, u *usage) any {
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

// streamOut writes a streamed answer.
type streamOut interface {
	start(g *gen)
	delta(g *gen, text string, toks []pendingToken) bool
	finish(g *gen, reason string, u *usage)
	fail(e *apiError)
}

// sse writes server-sent events: "data: {json}\n\n" per chunk and
// "data: [DONE]" at the end, flushing each so the client sees tokens as
// they come.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // tell nginx-like proxies not to buffer
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

func (e *sse) send(v any) bool {
	if e.err != nil {
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("server: encoding a chunk: " + err.Error())
	}
	if _, e.err = e.w.Write(append(append([]byte("data: "), b...), '\n', '\n')); e.err == nil {
		e.err = e.rc.Flush()
	}
	return e.err == nil
}

func (e *sse) usageField(g *gen) any {
	if g.j.includeUsage {
		return nullUsage
	}
	return nil
}

func (e *sse) start(g *gen) {
	if !g.j.chat {
		if g.j.echo != "" {
			e.send(completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
				Choices: []completionChoice{{Text: g.j.echo}}, Usage: e.usageField(g)})
		}
		return
	}
	// OpenAI's first chunk names the role, with empty content.
	empty := ""
	e.send(chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
		Choices: []chatChunkChoice{{Delta: chatDelta{Role: "assistant", Content: &empty}}}, Usage: e.usageField(g)})
}

func (e *sse) delta(g *gen, text string, toks []pendingToken) bool {
	if g.j.chat {
		ch := chatChunkChoice{Delta: chatDelta{Content: &text}}
		if g.j.logprobs {
			ch.Logprobs = g.chatLogprobs(toks)
		}
		return e.send(chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
			Choices: []chatChunkChoice{ch}, Usage: e.usageField(g)})
	}
	ch := completionChoice{Text: text}
	if g.j.logprobs {
		ch.Logprobs = g.completionLogprobs(toks)
	}
	return e.send(completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
		Choices: []completionChoice{ch}, Usage: e.usageField(g)})
}

func (e *sse) finish(g *gen, reason string, u *usage) {
	if g.j.chat {
		e.send(chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
			Choices: []chatChunkChoice{{Delta: chatDelta{}, FinishReason: &reason}}, Usage: e.usageField(g)})
		if g.j.includeUsage {
			e.send(chatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.model,
				Choices: []chatChunkChoice{}, Usage: u})
		}
	} else {
		e.send(completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
			Choices: []completionChoice{{Text: "", FinishReason: &reason}}, Usage: e.usageField(g)})
		if g.j.includeUsage {
			e.send(completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.model,
				Choices: []completionChoice{}, Usage: u})
		}
	}
	if e.err == nil {
		if _, e.err = e.w.Write([]byte("data: [DONE]\n\n")); e.err == nil {
			e.err = e.rc.Flush()
		}
	}
}

// fail ends a stream with an error event, which the official SDKs raise
// as an error; no [DONE] follows.
func (e *sse) fail(ae *apiError) {
	e.send(struct {
		Error *apiError `json:"error"`
	}{ae})
}

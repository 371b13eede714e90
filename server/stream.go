package server

import (
	"encoding/json"
	"net/http"

	"github.com/grok-go/grok/runner"
)

// streamOut writes a streamed answer.
type streamOut interface {
	start(g *gen)
	delta(g *gen, text string, toks []pendingToken) bool
	finish(g *gen, last runner.Event, u *usage)
	fail(e *apiError)
}

// newStreamOut starts the stream of g's API: OpenAI's and llama.cpp's are
// server-sent events, ollama's newline-delimited JSON.
func newStreamOut(w http.ResponseWriter, g *gen) streamOut {
	switch g.j.kind {
	case kindOllama:
		return newNDJSON(w)
	case kindLlama:
		return &llamaSSE{newSSE(w)}
	}
	return newSSE(w)
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

func (e *sse) finish(g *gen, last runner.Event, u *usage) {
	reason := last.Finish
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

package server

import "net/http"

// accept reads the request body into req (a pointer to a request whose
// model name is *model), checks the model and that the engine is ready. On
// failure it writes the error response and returns nil; on success the
// caller must call s.release when the request ends.
func (s *Server) accept(w http.ResponseWriter, r *http.Request, req any, model *string) *backend {
	return s.acceptAs(w, r, req, model, kindOpenAI)
}

// acceptAs is accept for the API kind: it decides how the model name is
// checked (llama.cpp's routes ignore it, as llama.cpp does, when model is
// nil) and the shape of the error.
func (s *Server) acceptAs(w http.ResponseWriter, r *http.Request, req any, model *string, kind apiKind) *backend {
	var body []byte
	e := checkContentType(r)
	if e == nil {
		body, e = s.readBody(w, r)
	}
	if e == nil {
		e = decodeBody(body, req)
	}
	if e == nil {
		switch {
		case kind == kindOllama:
			e = s.checkOllamaModel(*model)
		case model != nil:
			e = s.checkModel(*model)
		}
	}
	var b *backend
	if e == nil {
		b, e = s.ready()
	}
	if e != nil {
		(&job{kind: kind}).writeError(w, e)
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
	msgs, e := chatMessages(req.Messages)
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
	param, asked := "max_tokens", req.MaxTokens
	if req.MaxCompletionTokens != nil { // the newer name wins
		param, asked = "max_completion_tokens", req.MaxCompletionTokens
	}
	reserve, must := b.ctx/4, ""
	if asked != nil && *asked > 0 {
		reserve, must = *asked, param
	}
	if e := s.chatPromptIDs(b, &j, msgs, req.Truncate == nil || *req.Truncate, reserve, must); e != nil {
		writeError(w, e)
		return
	}
	if j.req.MaxTokens, e = maxTokens(param, asked, 0, len(j.req.Prompt), b.ctx); e != nil {
		writeError(w, e)
		return
	}
	s.generate(w, r, b, &j)
}

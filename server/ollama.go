package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/sampler"
)

// This file holds ollama's native API (docs/api.md in the ollama
// repository): /api/generate and /api/chat, streamed as newline-delimited
// JSON unless "stream": false, and /api/tags, /api/show, /api/ps and
// /api/version. Field names are ollama's; errors are {"error": "message"},
// which is what ollama's clients read.

// ollamaOptions are the request's "options" that the server applies. The
// resource settings ollama also takes (num_ctx, num_batch, num_gpu,
// num_thread, use_mmap…) are accepted and ignored: the model is loaded
// once, with the server's flags.
type ollamaOptions struct {
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	MinP             *float64        `json:"min_p"`
	NumPredict       *int            `json:"num_predict"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	RepeatPenalty    *float64        `json:"repeat_penalty"`
	RepeatLastN      *int            `json:"repeat_last_n"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	TypicalP         *float64        `json:"typical_p"`
	Mirostat         *int            `json:"mirostat"`
}

type ollamaGenerateRequest struct {
	Model    string          `json:"model"`
	Prompt   string          `json:"prompt"`
	Suffix   string          `json:"suffix"`
	System   string          `json:"system"`
	Template string          `json:"template"`
	Context  []int           `json:"context"`
	Stream   *bool           `json:"stream"`
	Raw      bool            `json:"raw"`
	Format   json.RawMessage `json:"format"`
	Images   json.RawMessage `json:"images"`
	Think    json.RawMessage `json:"think"`
	Options  *ollamaOptions  `json:"options"`
}

type ollamaMessage struct {
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	Images    json.RawMessage `json:"images,omitempty"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
}

type ollamaChatRequest struct {
	Model    string          `json:"model"`
	Messages []ollamaMessage `json:"messages"`
	Tools    json.RawMessage `json:"tools"`
	Format   json.RawMessage `json:"format"`
	Stream   *bool           `json:"stream"`
	Think    json.RawMessage `json:"think"`
	Options  *ollamaOptions  `json:"options"`
	// Truncate (default true) drops the oldest turns of a chat too long
	// for the context; false refuses it.
	Truncate *bool `json:"truncate"`
}

// ollamaChunk is one line of an answer, streamed or whole: the fields of
// the last one (done: true) are set only there.
type ollamaChunk struct {
	Model     string         `json:"model"`
	CreatedAt string         `json:"created_at"`
	Response  *string        `json:"response,omitempty"` // /api/generate
	Message   *ollamaMessage `json:"message,omitempty"`  // /api/chat
	Done      bool           `json:"done"`

	DoneReason         string `json:"done_reason,omitempty"`
	Context            []int  `json:"context,omitempty"`
	TotalDuration      int64  `json:"total_duration,omitempty"`
	LoadDuration       int64  `json:"load_duration,omitempty"`
	PromptEvalCount    int    `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration int64  `json:"prompt_eval_duration,omitempty"`
	EvalCount          int    `json:"eval_count,omitempty"`
	EvalDuration       int64  `json:"eval_duration,omitempty"`
}

// writeOllamaError writes e as ollama does: {"error": "message"}.
func writeOllamaError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	if e.retryAfter > 0 {
		h.Set("Retry-After", fmt.Sprint(e.retryAfter))
	}
	writeJSON(w, e.status, map[string]string{"error": e.Message})
}

// ollamaName is the name the model is listed under: ollama's names carry a
// tag, ":latest" when none is given.
func (s *Server) ollamaName() string {
	if strings.Contains(s.opts.ModelID, ":") {
		return s.opts.ModelID
	}
	return s.opts.ModelID + ":latest"
}

// checkOllamaModel accepts the served id with or without its tag. ollama
// requires a model name.
func (s *Server) checkOllamaModel(name string) *apiError {
	switch name {
	case "":
		return invalid("model", "model is required")
	case s.opts.ModelID, s.ollamaName():
		return nil
	}
	return &apiError{status: http.StatusNotFound, Type: "invalid_request_error", Param: strPtr("model"),
		Code: strPtr("model_not_found"), Message: fmt.Sprintf("model '%s' not found (this server serves '%s')", name, s.ollamaName())}
}

// sampling applies ollama's options over ollama's defaults (temperature
// 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1 over the last 64 tokens).
func (o *ollamaOptions) sampling(j *job) *apiError {
	p := sampler.Params{Temperature: 0.8, TopK: 40, TopP: 0.9, RepeatPenalty: 1.1, RepeatLastN: 64}
	if o == nil {
		o = &ollamaOptions{}
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case o.Temperature != nil && !(finite(*o.Temperature) && *o.Temperature >= 0):
		return invalid("options.temperature", "options.temperature=%v must be a number >= 0 (0 = greedy).", *o.Temperature)
	case o.TopP != nil && !(*o.TopP >= 0 && *o.TopP <= 1):
		return invalid("options.top_p", "options.top_p=%v must lie in [0, 1].", *o.TopP)
	case o.MinP != nil && !(*o.MinP >= 0 && *o.MinP <= 1):
		return invalid("options.min_p", "options.min_p=%v must lie in [0, 1].", *o.MinP)
	case o.RepeatPenalty != nil && !(finite(*o.RepeatPenalty) && *o.RepeatPenalty >= 0):
		return invalid("options.repeat_penalty", "options.repeat_penalty=%v must be a number >= 0 (1 = off).", *o.RepeatPenalty)
	case o.RepeatLastN != nil && *o.RepeatLastN < -1:
		return invalid("options.repeat_last_n", "options.repeat_last_n=%d must be >= -1 (0 = off, -1 = the whole context).", *o.RepeatLastN)
	case o.PresencePenalty != nil && !finite(*o.PresencePenalty):
		return invalid("options.presence_penalty", "options.presence_penalty must be a finite number.")
	case o.FrequencyPenalty != nil && !finite(*o.FrequencyPenalty):
		return invalid("options.frequency_penalty", "options.frequency_penalty must be a finite number.")
	case o.Mirostat != nil && *o.Mirostat != 0:
		return invalid("options.mirostat", "options.mirostat=%d is not supported (only 0).", *o.Mirostat)
	case o.TypicalP != nil && *o.TypicalP > 0 && *o.TypicalP < 1:
		return invalid("options.typical_p", "options.typical_p=%v is not supported (only 1, off).", *o.TypicalP)
	}
	if o.Temperature != nil {
		p.Temperature = float32(*o.Temperature)
	}
	if o.TopP != nil {
		p.TopP = float32(*o.TopP)
		if *o.TopP == 0 {
			p.Temperature = 0 // the nucleus of mass 0 is the top token
		}
	}
	if o.TopK != nil {
		p.TopK = max(*o.TopK, 0) // ollama: 0 or less is off
	}
	if o.MinP != nil {
		p.MinP = float32(*o.MinP)
	}
	if o.RepeatPenalty != nil {
		p.RepeatPenalty = float32(*o.RepeatPenalty)
	}
	if o.PresencePenalty != nil {
		p.PresencePenalty = float32(*o.PresencePenalty)
	}
	if o.FrequencyPenalty != nil {
		p.FrequencyPenalty = float32(*o.FrequencyPenalty)
	}
	if o.RepeatLastN != nil {
		if *o.RepeatLastN == 0 { // ollama and llama.cpp: a window of 0 turns the penalties off
			p.RepeatPenalty, p.PresencePenalty, p.FrequencyPenalty = 0, 0, 0
		} else {
			p.RepeatLastN = *o.RepeatLastN
		}
	}
	if o.Seed != nil && *o.Seed >= 0 {
		p.Seed = uint64(*o.Seed)
	} else {
		p.Seed = rand.Uint64()
	}
	if err := p.Validate(); err != nil {
		return invalid("options", "%v", err)
	}
	stops, e := parseStop(o.Stop)
	if e != nil {
		e.Param = strPtr("options.stop")
		return e
	}
	j.req.Sampling = p
	j.req.Stop = append(j.req.Stop, stops...)
	return nil
}

// ollamaMaxTokens is num_predict: a positive count is cut to what fits
// (ollama stops at the context's end with done_reason "length"); 0 and the
// negative values (-1 infinite, -2 fill the context) run until the context
// is full.
func ollamaMaxTokens(o *ollamaOptions, promptLen, ctxLen int) (int, *apiError) {
	room := ctxLen - promptLen
	if room < 1 {
		return 0, invalid("prompt", "The prompt has %d tokens; the context holds %d (prompt and answer together), which leaves no room for an answer.", promptLen, ctxLen)
	}
	if o != nil && o.NumPredict != nil && *o.NumPredict > 0 {
		return min(*o.NumPredict, room), nil
	}
	return room, nil
}

// ollamaUnsupported refuses the fields that would change the answer and
// that the server does not implement.
func ollamaUnsupported(format, images, think json.RawMessage) *apiError {
	switch {
	case !isNull(format) && string(format) != `""`:
		return invalid("format", "format (JSON mode or a schema) is not supported by this server")
	case !isNull(images) && string(images) != "[]":
		return invalid("images", "images are not supported: this model reads text only")
	case !isNull(think) && string(think) != "false":
		return invalid("think", "this model does not support thinking")
	}
	return nil
}

func (s *Server) handleOllamaGenerate(w http.ResponseWriter, r *http.Request) {
	var req ollamaGenerateRequest
	b := s.acceptAs(w, r, &req, &req.Model, kindOllama)
	if b == nil {
		return
	}
	defer s.release()
	j := job{kind: kindOllama, ollamaGenerate: true, ollamaModel: req.Model, stream: req.Stream == nil || *req.Stream}
	fail := func(e *apiError) { j.writeError(w, e) }
	if e := ollamaUnsupported(req.Format, req.Images, req.Think); e != nil {
		fail(e)
		return
	}
	switch {
	case req.Suffix != "":
		fail(invalid("suffix", "suffix (fill-in-the-middle) is not supported by this server"))
		return
	case req.Template != "":
		fail(invalid("template", "template is not supported: /api/generate does not apply templates (use /api/chat, which applies the model's chat template, or render the prompt yourself)"))
		return
	}
	if req.Prompt == "" && req.System == "" && len(req.Context) == 0 {
		// ollama answers an empty prompt by loading the model.
		writeJSON(w, http.StatusOK, ollamaChunk{Model: req.Model, CreatedAt: nowOllama(), Response: new(string), Done: true, DoneReason: "load"})
		return
	}
	if e := req.Options.sampling(&j); e != nil {
		fail(e)
		return
	}
	for _, id := range req.Context {
		if id < 0 || id >= b.tok.VocabSize() {
			fail(invalid("context", "Token id %d in 'context' is outside the vocabulary [0, %d).", id, b.tok.VocabSize()))
			return
		}
	}
	// A base model has no template: the prompt is the text itself, after
	// the system text on a line of its own when there is one.
	text := req.Prompt
	if req.System != "" && !req.Raw {
		text = req.System + "\n" + text
	}
	ids := append(append([]int(nil), req.Context...), b.tok.Encode(text)...)
	if len(ids) == 0 {
		ids = []int{b.tok.BOS()}
	}
	j.req.Prompt = ids
	var e *apiError
	if j.req.MaxTokens, e = ollamaMaxTokens(req.Options, len(ids), b.ctx); e != nil {
		fail(e)
		return
	}
	s.generate(w, r, b, &j)
}

func (s *Server) handleOllamaChat(w http.ResponseWriter, r *http.Request) {
	var req ollamaChatRequest
	b := s.acceptAs(w, r, &req, &req.Model, kindOllama)
	if b == nil {
		return
	}
	defer s.release()
	j := job{kind: kindOllama, chat: true, ollamaModel: req.Model, stream: req.Stream == nil || *req.Stream}
	fail := func(e *apiError) { j.writeError(w, e) }
	if e := ollamaUnsupported(req.Format, nil, req.Think); e != nil {
		fail(e)
		return
	}
	if !isNull(req.Tools) && string(req.Tools) != "[]" {
		fail(invalid("tools", "tool calling is not supported by this server"))
		return
	}
	if len(req.Messages) == 0 {
		writeJSON(w, http.StatusOK, ollamaChunk{Model: req.Model, CreatedAt: nowOllama(),
			Message: &ollamaMessage{Role: "assistant"}, Done: true, DoneReason: "load"})
		return
	}
	in := make([]chatMessageIn, len(req.Messages))
	for i, m := range req.Messages {
		if !isNull(m.Images) && string(m.Images) != "[]" {
			fail(invalid(fmt.Sprintf("messages[%d].images", i), "images are not supported: this model reads text only"))
			return
		}
		content, _ := json.Marshal(m.Content)
		in[i] = chatMessageIn{Role: m.Role, Content: content}
	}
	msgs, e := chatMessages(in)
	if e != nil {
		fail(e)
		return
	}
	if e := req.Options.sampling(&j); e != nil {
		fail(e)
		return
	}
	reserve := b.ctx / 4
	if o := req.Options; o != nil && o.NumPredict != nil && *o.NumPredict > 0 {
		reserve = *o.NumPredict // cut to what fits, as ollama does
	}
	if e := s.chatPromptIDs(b, &j, msgs, req.Truncate == nil || *req.Truncate, reserve, ""); e != nil {
		fail(e)
		return
	}
	if j.req.MaxTokens, e = ollamaMaxTokens(req.Options, len(j.req.Prompt), b.ctx); e != nil {
		fail(e)
		return
	}
	s.generate(w, r, b, &j)
}

// nowOllama is a created_at timestamp as ollama writes it.
func nowOllama() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// ollamaFinal is the last object of an answer (whole: the only one, with
// all the text).
func (g *gen) ollamaFinal(last runner.Event, whole bool) ollamaChunk {
	u := last.Usage
	reason := last.Finish
	c := ollamaChunk{Model: g.j.modelName(g), CreatedAt: nowOllama(), Done: true, DoneReason: reason,
		TotalDuration: int64(time.Since(g.arrived)), PromptEvalCount: u.PromptTokens, PromptEvalDuration: int64(u.Prefill),
		EvalCount: u.CompletionTokens, EvalDuration: int64(u.Decode)}
	text := ""
	if whole {
		text = g.text.String()
	}
	if g.j.chat {
		c.Message = &ollamaMessage{Role: "assistant", Content: text}
	} else {
		c.Response = &text
		c.Context = append(append([]int(nil), g.j.req.Prompt...), g.ids...)
	}
	return c
}

// modelName is the model an answer names: ollama echoes the request's.
func (j *job) modelName(g *gen) string {
	if j.ollamaModel != "" {
		return j.ollamaModel
	}
	return g.model
}

// ndjson writes ollama's stream: one JSON object a line, each flushed.
type ndjson struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &ndjson{w: w, rc: http.NewResponseController(w)}
}

func (n *ndjson) send(v any) bool {
	if n.err != nil {
		return false
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("server: encoding a chunk: " + err.Error())
	}
	if _, n.err = n.w.Write(append(b, '\n')); n.err == nil {
		n.err = n.rc.Flush()
	}
	return n.err == nil
}

func (n *ndjson) start(g *gen) {}

func (n *ndjson) delta(g *gen, text string, _ []pendingToken) bool {
	if text == "" {
		return true
	}
	c := ollamaChunk{Model: g.j.modelName(g), CreatedAt: nowOllama()}
	if g.j.chat {
		c.Message = &ollamaMessage{Role: "assistant", Content: text}
	} else {
		c.Response = &text
	}
	return n.send(c)
}

func (n *ndjson) finish(g *gen, last runner.Event, _ *usage) { n.send(g.ollamaFinal(last, false)) }

// fail ends the stream with ollama's error line, which its clients raise.
func (n *ndjson) fail(e *apiError) { n.send(map[string]string{"error": e.Message}) }

// ollamaDetails is a model's "details".
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

type ollamaModelEntry struct {
	Name       string        `json:"name"`
	Model      string        `json:"model"`
	ModifiedAt string        `json:"modified_at,omitempty"`
	Size       int64         `json:"size"`
	Digest     string        `json:"digest"`
	Details    ollamaDetails `json:"details"`
	// /api/ps only.
	ExpiresAt     string `json:"expires_at,omitempty"`
	SizeVRAM      *int64 `json:"size_vram,omitempty"`
	ContextLength int    `json:"context_length,omitempty"`
}

// ParameterSize writes a parameter count as ollama does and people say it:
// "6.4M", "314.0B".
func ParameterSize(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.1fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// ollamaEntry describes the loaded model. The digest identifies the
// file (its path, size and time), not its bytes: hashing hundreds of
// gigabytes at every start would be too slow.
func (s *Server) ollamaEntry(b *backend) ollamaModelEntry {
	in := b.info
	format := in.Format
	if format == "" {
		format = "gguf"
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d\x00%d", s.opts.ModelID, in.Path, in.SizeBytes, in.ModifiedAt.UnixNano()))
	e := ollamaModelEntry{Name: s.ollamaName(), Model: s.ollamaName(), Size: in.SizeBytes, Digest: hex.EncodeToString(sum[:]),
		Details: ollamaDetails{Format: format, Family: "grok", Families: []string{"grok"},
			ParameterSize: ParameterSize(in.ParameterCount), QuantizationLevel: in.Quantization}}
	if !in.ModifiedAt.IsZero() {
		e.ModifiedAt = in.ModifiedAt.Format(time.RFC3339Nano)
	} else {
		e.ModifiedAt = b.loaded.Format(time.RFC3339Nano)
	}
	return e
}

// handleOllamaRoot answers ollama's liveness probe (GET /).
func (s *Server) handleOllamaRoot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("grok is running\n"))
}

func (s *Server) handleOllamaTags(w http.ResponseWriter, r *http.Request) {
	models := []ollamaModelEntry{}
	if b := s.be.Load(); b != nil {
		models = append(models, s.ollamaEntry(b))
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

// handleOllamaPs lists the loaded model: it stays loaded for the server's
// life, which expires_at puts a century away.
func (s *Server) handleOllamaPs(w http.ResponseWriter, r *http.Request) {
	models := []ollamaModelEntry{}
	if b := s.be.Load(); b != nil {
		e := s.ollamaEntry(b)
		e.ModifiedAt = ""
		e.ExpiresAt = b.loaded.AddDate(100, 0, 0).Format(time.RFC3339Nano)
		e.SizeVRAM = new(int64) // no GPU
		e.ContextLength = b.ctx
		models = append(models, e)
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (s *Server) handleOllamaVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.opts.Version})
}

type ollamaShowRequest struct {
	Model   string `json:"model"`
	Name    string `json:"name"` // the older spelling
	Verbose bool   `json:"verbose"`
}

func (s *Server) handleOllamaShow(w http.ResponseWriter, r *http.Request) {
	var req ollamaShowRequest
	var body []byte
	e := checkContentType(r)
	if e == nil {
		body, e = s.readBody(w, r)
	}
	if e == nil {
		e = decodeBody(body, &req)
	}
	if e == nil && req.Model == "" {
		req.Model = req.Name
	}
	if e == nil {
		e = s.checkOllamaModel(req.Model)
	}
	b := s.be.Load()
	if e == nil && b == nil {
		e = unavailable(5, "The model is still loading; try again shortly.")
	}
	if e != nil {
		writeOllamaError(w, e)
		return
	}
	entry := s.ollamaEntry(b)
	info := map[string]any{}
	for k, v := range b.info.Metadata {
		info[k] = v
	}
	info["general.architecture"] = "grok"
	info["general.parameter_count"] = b.info.ParameterCount
	info["grok.context_length"] = b.ctx
	from := b.info.Path
	if from == "" {
		from = s.opts.ModelID + " (embedded)"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"modelfile":    fmt.Sprintf("# served by grok\nFROM %s\n", from),
		"parameters":   "",
		"template":     b.chat.Source(),
		"details":      entry.Details,
		"model_info":   info,
		"capabilities": []string{"completion"},
		"modified_at":  entry.ModifiedAt,
	})
}

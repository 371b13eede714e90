// Package server is grok's OpenAI-compatible HTTP server: /v1/completions
// and /v1/chat/completions (JSON or server-sent events), /v1/models, /health
// and Prometheus /metrics, over a runner.Engine that batches every active
// request into one forward pass per step.
//
// The server holds no model state of its own. Each request is parsed and
// validated into a runner.Request, submitted with the request's context (a
// client that goes away frees its slot at the next step), and its events
// are written out as they come. See README.md beside this file for the
// fields supported, the chat template and measured throughput.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grok-go/grok/chattemplate"
	"github.com/grok-go/grok/runner"
)

// Options configures a Server.
type Options struct {
	// ModelID is the id the model is served under: the only value of
	// "model" that requests may name (besides leaving it empty).
	ModelID string
	// MaxBodyBytes limits request bodies (default 1 MiB); larger ones get 413.
	MaxBodyBytes int64
	// BodyTimeout limits the time from a request's headers to the end of
	// its body (default 30 s). A body that has not arrived by then gets
	// 408 and its connection is closed.
	BodyTimeout time.Duration
	// Timeout limits one generation request from arrival to last token,
	// queueing included (0 = no limit).
	Timeout time.Duration
	// ShutdownTimeout is how long Run lets in-flight requests finish after
	// its context is done before cutting them off (default 30 s). During
	// that drain new requests are still accepted and answered 503.
	ShutdownTimeout time.Duration
	// Logger receives request and error logs (default slog.Default()).
	Logger *slog.Logger
	// APIKeys, when not empty, are the keys a request must present as
	// "Authorization: Bearer KEY" (or "X-Api-Key: KEY"); others get 401.
	// /health and CORS preflights need none.
	APIKeys []string
	// CORSOrigins are the browser origins allowed to call the API ("*":
	// any). Other origins get no CORS headers, so browsers refuse them.
	CORSOrigins []string
	// Version is reported by /api/version and /props (default "dev").
	Version string
}

// Model is what a Server serves: an engine and what the server reports
// about the model file.
type Model struct {
	// Engine runs the requests. It must have a tokenizer. Run closes it
	// when it shuts down; a caller of Attach closes it itself.
	Engine *runner.Engine
	// ChatTemplate is the file's Jinja chat template, if any: chat
	// requests are rendered with it unless Template is set. A template that
	// does not parse or render makes Attach fail.
	ChatTemplate string
	// Template, when set, renders chat requests instead (--chat-template);
	// with neither, the plain template does.
	Template *chattemplate.Template
	// Info describes the model file for /api/tags, /api/show, /api/ps
	// and /props. It may be left zero.
	Info ModelInfo
}

// ModelInfo is what the server reports about the model file.
type ModelInfo struct {
	Path           string    // the file or folder it was loaded from ("" for the embedded model)
	Format         string    // "gguf", "xai", "safetensors"
	SizeBytes      int64     // bytes of weights
	ParameterCount int64     // weights' elements
	Quantization   string    // the tensor type holding most bytes ("F16", "Q8_0")
	ModifiedAt     time.Time // the file's modification time, if known
	// Metadata is the GGUF's key/value metadata (large arrays summarised),
	// for /api/show's model_info.
	Metadata map[string]any
}

// backend is the state that exists once the model is loaded.
type backend struct {
	eng    *runner.Engine
	tok    runner.Tokenizer
	vocab  []string // display text of every token, for top_logprobs
	isByte []bool   // byte-fallback pieces
	byteOf []byte   // the byte of a byte-fallback piece
	eos    int
	ctx    int
	info   ModelInfo
	tmpl   string
	chat   *chattemplate.Template
	loaded time.Time
}

// Server is an http.Handler serving the OpenAI-compatible API. It answers
// before a model is attached: /health with 503 and generation endpoints with
// 503 and Retry-After, so that clients can wait for the model to load.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	created int64
	handler http.Handler

	be atomic.Pointer[backend]

	// mu guards the drain state, so that no generation request can be
	// admitted once Drain has looked at the count.
	mu       sync.Mutex
	draining bool
	inflight int           // generation requests admitted by ready and not yet released
	idle     chan struct{} // closed once draining with nothing in flight
}

// New returns a Server with no model attached.
func New(opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 30 * time.Second
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{opts: opts, log: opts.Logger, created: time.Now().Unix(), idle: make(chan struct{})}
	s.metrics = newMetrics(s)
	s.handler = s.routes()
	return s
}

// Attach starts serving m. It fails if the engine has no tokenizer.
func (s *Server) Attach(m Model) error {
	eng := m.Engine
	tok := eng.Tokenizer()
	if tok == nil {
		return errors.New("server: the model has no tokenizer")
	}
	if err := CheckVocabulary(eng.Model().Config.VocabSize, tok.VocabSize()); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	chat, err := modelTemplate(m, tok)
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	b := &backend{eng: eng, tok: tok, eos: eng.EOS(), ctx: eng.Context(), info: m.Info, tmpl: m.ChatTemplate, chat: chat, loaded: time.Now()}
	b.vocab, b.isByte, b.byteOf = vocabTable(tok)
	s.be.Store(b)
	s.log.Info("model ready", "model", s.opts.ModelID, "slots", eng.Slots(), "context", b.ctx, "chat_template", chat.Name())
	return nil
}

// CheckVocabulary refuses a model whose vocabulary (the rows of its
// embedding and output matrices) is larger than its tokenizer: the model
// could sample an id that has no text, and generation would fail half-way.
// llama.cpp refuses such a file at load too (the tensors' shape must match
// the token list), and its converter pads the token list instead ([PAD…]
// tokens); a tokenizer larger than the vocabulary is refused by the loader.
func CheckVocabulary(modelVocab, tokenizerVocab int) error {
	if tokenizerVocab >= modelVocab {
		return nil
	}
	return fmt.Errorf("the model's vocabulary has %d rows but its tokenizer only %d pieces: ids %d to %d have no text, and generation would fail on the first one sampled. "+
		"Use the tokenizer the model was trained with, or pad the tokenizer to %d pieces (as llama.cpp's converter does with [PAD] tokens)",
		modelVocab, tokenizerVocab, tokenizerVocab, modelVocab-1, modelVocab)
}

// Drain makes the server refuse new generation requests (503 with
// Retry-After) and report /health as 503, while requests already running
// go on. Run calls it when shutting down.
func (s *Server) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	s.draining = true
	if s.inflight == 0 {
		close(s.idle)
	}
}

func (s *Server) isDraining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// release ends a generation request that ready admitted.
func (s *Server) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.draining && s.inflight == 0 {
		close(s.idle)
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Run serves on ln at once, so that /health answers while load runs, then
// attaches the model load returns. When ctx is done it drains: it goes on
// accepting connections but answers new generation requests and /health
// with 503 and Retry-After, closes each connection after its answer, and
// lets in-flight generation requests finish for up to ShutdownTimeout.
// Then it closes the listener and the engine (which ends what is left as
// cancelled) and the connections. It returns nil after a shutdown asked for
// by ctx, or the error that stopped it (load's included). If ctx is done
// while load still runs, Run returns without waiting for it, and closes the
// engine load returns later.
func (s *Server) Run(ctx context.Context, ln net.Listener, load func() (Model, error)) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// No ReadTimeout or WriteTimeout: a streamed answer lasts as long
		// as generation does; Options.Timeout bounds that instead, and
		// the router's per-request deadline bounds the body
		// (Options.BodyTimeout).
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	s.log.Info("listening", "addr", ln.Addr().String(), "model", s.opts.ModelID)

	type loaded struct {
		m   Model
		err error
	}
	lc := make(chan loaded, 1)
	go func() {
		m, err := load()
		lc <- loaded{m, err}
	}()
	var eng *runner.Engine
	var err error
	loadDone := false
	select {
	case l := <-lc:
		loadDone = true
		if l.err == nil {
			eng = l.m.Engine
			l.err = s.Attach(l.m)
		}
		if l.err != nil {
			err = fmt.Errorf("loading the model: %w", l.err)
		}
	case err = <-serveErr:
	case <-ctx.Done():
	}
	if !loadDone {
		// Shutting down before the model is ready: whatever load still
		// makes is closed when it arrives.
		go func() {
			if l := <-lc; l.err == nil && l.m.Engine != nil {
				l.m.Engine.Close()
			}
		}()
	}
	if err == nil && ctx.Err() == nil {
		select {
		case err = <-serveErr:
		case <-ctx.Done():
		}
	}
	// The listener stays open while the drain lasts: a client that comes
	// now gets a 503 it can act on rather than a refused connection.
	// Keep-alives go off first, so that every 503 of the drain says
	// Connection: close.
	hs.SetKeepAlivesEnabled(false)
	s.Drain()
	if err == nil {
		s.log.Info("shutting down: waiting for requests in flight", "timeout", s.opts.ShutdownTimeout)
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	select {
	case <-s.idle:
	case <-sctx.Done():
	}
	if serr := hs.Shutdown(sctx); serr != nil && err == nil {
		s.log.Warn("shutdown timeout: cancelling the requests still running", "err", serr)
	}
	// Closing the engine ends the streams still running as cancelled, so
	// their handlers return; then the connections can be closed.
	if eng != nil {
		eng.Close()
	}
	hs.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// route is one path of the API.
type route struct {
	endpoint string // metrics label
	method   string
	h        http.HandlerFunc
}

// routes builds the handler. It routes by hand rather than with
// http.ServeMux so that unknown paths and wrong methods get OpenAI-shaped
// JSON errors instead of ServeMux's plain-text ones.
func (s *Server) routes() http.Handler {
	table := map[string]route{
		"/v1/completions":      {"completions", http.MethodPost, s.handleCompletions},
		"/v1/chat/completions": {"chat_completions", http.MethodPost, s.handleChat},
		"/v1/models":           {"models", http.MethodGet, s.handleModels},
		"/health":              {"health", http.MethodGet, s.handleHealth},
		"/metrics":             {"metrics", http.MethodGet, s.metrics.handler.ServeHTTP},

		// llama.cpp's own routes (tools/server/README.md).
		"/completion":     {"llama_completion", http.MethodPost, s.handleLlamaCompletion},
		"/completions":    {"llama_completion", http.MethodPost, s.handleLlamaCompletion},
		"/tokenize":       {"tokenize", http.MethodPost, s.handleTokenize},
		"/detokenize":     {"detokenize", http.MethodPost, s.handleDetokenize},
		"/apply-template": {"apply_template", http.MethodPost, s.handleApplyTemplate},
		"/props":          {"props", http.MethodGet, s.handleProps},
		"/slots":          {"slots", http.MethodGet, s.handleSlots},

		// ollama's routes (docs/api.md).
		"/":             {"ollama_root", http.MethodGet, s.handleOllamaRoot},
		"/api/generate": {"ollama_generate", http.MethodPost, s.handleOllamaGenerate},
		"/api/chat":     {"ollama_chat", http.MethodPost, s.handleOllamaChat},
		"/api/tags":     {"ollama_tags", http.MethodGet, s.handleOllamaTags},
		"/api/show":     {"ollama_show", http.MethodPost, s.handleOllamaShow},
		"/api/ps":       {"ollama_ps", http.MethodGet, s.handleOllamaPs},
		"/api/version":  {"ollama_version", http.MethodGet, s.handleOllamaVersion},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			// Bound the body whether or not the handler reads it: net/http
			// drains an unread body before it answers, and without a
			// deadline a stalled client holds the connection for ever.
			// readBody lifts the deadline once the body is in.
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
		}
		rt, ok := table[r.URL.Path]
		if !ok && strings.HasPrefix(r.URL.Path, "/v1/models/") {
			rt, ok = route{"models", http.MethodGet, s.handleModel}, true
		}
		if !ok {
			rt = route{endpoint: "other"}
		}
		allowed := s.cors(w, r)
		if isPreflight(r) {
			s.instrument("cors_preflight", w, r, func(w http.ResponseWriter, r *http.Request) { s.preflight(w, r, allowed) })
			return
		}
		s.instrument(rt.endpoint, w, r, func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path != "/health" && !s.authorized(r):
				s.unauthorized(w, r)
			case !ok:
				writeError(w, &apiError{status: http.StatusNotFound, Type: "invalid_request_error",
					Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
			case r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead):
				w.Header().Set("Allow", rt.method)
				writeError(w, &apiError{status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
					Code: strPtr("method_not_allowed"), Message: fmt.Sprintf("Method %s is not allowed on %s; use %s.", r.Method, r.URL.Path, rt.method)})
			default:
				rt.h(w, r)
			}
		})
	})
}

// statusRecorder remembers the status a handler wrote, for metrics and
// for the recover middleware (which can only answer 500 if nothing was
// written yet). Unwrap lets http.ResponseController reach the connection's
// Flush.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// instrument runs h with panic recovery and records the request's status
// and duration.
func (s *Server) instrument(endpoint string, w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	rec := &statusRecorder{ResponseWriter: w}
	start := time.Now()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v) // the connection is to be cut; net/http handles it
			}
			s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			if rec.status == 0 {
				writeError(rec, &apiError{status: http.StatusInternalServerError, Type: "server_error",
					Message: "The server had an error while processing your request."})
			} else {
				// A stream is under way: the client sees it end early.
				rec.status = http.StatusInternalServerError
			}
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		s.metrics.observeHTTP(endpoint, rec.status, time.Since(start))
	}()
	h(rec, r)
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	switch {
	case s.isDraining():
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
	case s.be.Load() == nil:
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

func (s *Server) modelObject() modelObject {
	return modelObject{ID: s.opts.ModelID, Object: "model", Created: s.created, OwnedBy: "grok-go"}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: []modelObject{s.modelObject()}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
	if id != s.opts.ModelID {
		writeError(w, modelNotFound(id))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
}

// readBody reads the request body up to the size limit, within the body
// deadline the router set (Options.BodyTimeout). A body read whole lifts
// the deadline: left on, it would fire in the server's background read
// while a long answer streams, which would take it for a dead client and
// cancel the request. A body that fails keeps it, so that what net/http
// still reads of the body after the answer fails at once too, and the
// connection is closed after the error.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err == nil {
		http.NewResponseController(w).SetReadDeadline(time.Time{}) // best effort: not all writers support it
		return body, nil
	}
	w.Header().Set("Connection", "close")
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Code: strPtr("request_too_large"), Message: fmt.Sprintf("The request body is larger than the limit of %d bytes.", mbe.Limit)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &apiError{status: http.StatusRequestTimeout, Type: "invalid_request_error",
			Code: strPtr("request_timeout"), Message: fmt.Sprintf("The request body did not arrive within %v.", s.opts.BodyTimeout)}
	}
	return nil, invalid("", "Reading the request body failed: %v", err)
}

// checkContentType refuses a body declared as anything but JSON, such as
// the form encoding curl -d sends by default. A request without a
// Content-Type is read as JSON: many minimal clients send none.
func checkContentType(r *http.Request) *apiError {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return &apiError{status: http.StatusUnsupportedMediaType, Type: "invalid_request_error", Code: strPtr("unsupported_media_type"),
		Message: fmt.Sprintf("Unsupported Content-Type %q: the request body must be JSON (UTF-8), sent with the header `Content-Type: application/json`.", ct)}
}

// ready admits a generation request: it returns the backend, which the
// caller hands back with release when the request ends, or the error to
// answer while there is no backend or while draining.
func (s *Server) ready() (*backend, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil, unavailable(5, "The server is shutting down.")
	}
	b := s.be.Load()
	if b == nil {
		return nil, unavailable(5, "The model is still loading; try again shortly.")
	}
	s.inflight++
	return b, nil
}

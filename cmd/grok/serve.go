package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/server"
)

func init() {
	register(command{
		name:    "serve",
		usage:   "[-m MODEL] [--addr 127.0.0.1:8080] [--parallel N] [--ctx N] [--queue N] [--timeout DUR] [-t THREADS]",
		summary: "serve an OpenAI-compatible API (completions, chat) with continuous batching",
		run:     runServe,
	})
}

func runServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[-m MODEL] [flags]", stderr)
	mf := addModelFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	parallel := fs.Int("parallel", 4, "requests decoded together in one batch (slots); each holds a KV memory of --ctx rows")
	ctxLen := fs.Int("ctx", 0, "context per slot in tokens, prompt and completion together (0 = the model's, capped to what fits in memory)")
	fs.IntVar(ctxLen, "c", 0, "same as --ctx")
	queue := fs.Int("queue", 64, "requests that may wait for a slot; beyond it requests get 503 with Retry-After")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit on one request, queueing included (0 = none)")
	grace := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long requests in flight may finish")
	threads := fs.Int("t", 0, "threads (0 = all cores)")
	alias := fs.String("alias", "", "model id to serve under (default: the model file's base name)")
	maxBody := fs.Int64("max-body", 1<<20, "largest request body in bytes (413 beyond)")
	bodyTimeout := fs.Duration("body-timeout", 30*time.Second, "time a client may take to send its request body (408 beyond)")
	verbose := fs.Bool("v", false, "log every request at debug level")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	switch {
	case *parallel < 1:
		return usagef("--parallel must be at least 1")
	case *ctxLen < 0:
		return usagef("--ctx must not be negative")
	case *queue < 1:
		return usagef("--queue must be at least 1")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	id := *alias
	if id == "" {
		id = modelID(*mf.path)
	}
	srv := server.New(server.Options{ModelID: id, Timeout: *timeout, ShutdownTimeout: *grace,
		MaxBodyBytes: *maxBody, BodyTimeout: *bodyTimeout, Logger: log})

	// Listen before loading, so that a busy port fails at once and /health
	// answers 503 while a large model maps in.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process at once
	}()
	setThreads(*threads)
	// The model is handed over when loaded, to be closed after the engine;
	// if a signal comes while it is still loading, the process just exits.
	loaded := make(chan *loader.Model, 1)
	err = srv.Run(ctx, ln, func() (server.Model, error) {
		start := time.Now()
		m, err := openModelOrDefault(mf, stderr)
		if err != nil {
			return server.Model{}, err
		}
		if m.Tokenizer == nil {
			m.Close()
			return server.Model{}, errors.New("the model has no tokenizer: pass --tokenizer tokenizer.model")
		}
		eng, err := newEngine(m, runner.Options{Slots: *parallel, Context: *ctxLen, MaxQueue: *queue}, "--ctx (or fewer --parallel slots)",
			func(msg string) { log.Warn(msg) })
		if err != nil {
			m.Close()
			return server.Model{}, err
		}
		loaded <- m
		var tmpl string
		if m.GGUF != nil {
			tmpl, _ = m.GGUF.String("tokenizer.chat_template")
		}
		log.Info("model loaded", "path", m.Path, "took", time.Since(start).Round(time.Millisecond),
			"slots", *parallel, "context", eng.Context())
		return server.Model{Engine: eng, ChatTemplate: tmpl}, nil
	})
	select {
	case m := <-loaded:
		m.Close()
	default:
	}
	return err
}

// modelID is the id a model is served under: the file's base name without
// its extension, or the embedded model's name.
func modelID(path string) string {
	if path == "" {
		return defaultmodel.Name
	}
	base := filepath.Base(filepath.Clean(path))
	for _, ext := range []string{".gguf", ".safetensors"} {
		if strings.HasSuffix(strings.ToLower(base), ext) {
			return base[:len(base)-len(ext)]
		}
	}
	return base
}

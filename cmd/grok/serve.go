package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/server"
)

func init() {
	register(command{
		name:    "serve",
		usage:   "[-m MODEL] [--host 127.0.0.1] [--port 8080] [-np N] [--ctx-size N] [--api-key KEY] [--cors ORIGIN] [flags]",
		summary: "serve the OpenAI, ollama and llama.cpp APIs (completions, chat) with continuous batching",
		run:     runServe,
	})
}

func runServe(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "[-m MODEL] [flags]", stderr)
	mf := addModelFlags(fs)
	addTPFlag(fs, mf)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on (or --host and --port)")
	host := fs.String("host", "127.0.0.1", "address to listen on (llama.cpp's spelling; with --port)")
	port := fs.Int("port", 8080, "port to listen on (llama.cpp's spelling; with --host)")
	slots := fs.Int("parallel", 4, "requests decoded together in one batch (slots); they share the KV memory's pages (--kv-memory)")
	fs.IntVar(slots, "np", 4, "same as --parallel")
	dp := fs.Int("dp", 1, "replicas of the model on the data axis, in this process: the threads (and --parallel's slots and the KV memory) are shared out among them, and each request goes to the replica with the most room; with --tp each replica is split so")
	ctxLen := fs.Int("ctx", 0, "context per slot in tokens, prompt and completion together (0 = the model's, capped to what fits in memory)")
	fs.IntVar(ctxLen, "c", 0, "same as --ctx")
	fs.IntVar(ctxLen, "ctx-size", 0, "same as --ctx")
	var apiKeys, cors stringList
	fs.Var(&apiKeys, "api-key", "API key clients must send as `Authorization: Bearer KEY` (repeatable or a comma list; default $GROK_API_KEY or $LLAMA_API_KEY); /health needs none")
	fs.Var(&cors, "cors", "browser origin allowed to call the API (repeatable or a comma list; * = any); without it, no CORS headers")
	compat := addLlamaCompat(fs)
	queue := fs.Int("queue", 64, "requests that may wait for a slot; beyond it requests get 503 with Retry-After")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit on one request, queueing included (0 = none)")
	grace := fs.Duration("shutdown-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long requests in flight may finish")
	threads := fs.Int("t", 0, "threads (0 = all cores)")
	var precision precisionFlag
	fs.Var(&precision, "precision", precisionHelp)
	alias := fs.String("alias", "", "model id to serve under (default: the model file's base name)")
	maxBody := fs.Int64("max-body", 1<<20, "largest request body in bytes (413 beyond)")
	bodyTimeout := fs.Duration("body-timeout", 30*time.Second, "time a client may take to send its request body (408 beyond)")
	verbose := fs.Bool("v", false, "log every request at debug level")
	tmplFlag := fs.String("chat-template", "", chatTemplateHelp())
	kv := addKVFlags(fs)
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["host"] || set["port"] {
		if set["addr"] {
			return usagef("give --addr or --host/--port, not both")
		}
		if *port < 0 || *port > 65535 {
			return usagef("--port %d is not a port number", *port)
		}
		*addr = net.JoinHostPort(*host, strconv.Itoa(*port))
	}
	keys := splitList(apiKeys)
	if len(keys) == 0 {
		// llama.cpp's variable too, so that a llama.cpp deployment keeps its key.
		for _, env := range []string{"GROK_API_KEY", "LLAMA_API_KEY"} {
			if keys = splitList([]string{os.Getenv(env)}); len(keys) > 0 {
				break
			}
		}
	}
	compat.notes(fs, stderr)
	switch {
	case *slots < 1:
		return usagef("--parallel must be at least 1")
	case *ctxLen < 0:
		return usagef("--ctx must not be negative")
	case *queue < 1:
		return usagef("--queue must be at least 1")
	case mf.shards() < 1:
		return usagef("--tp must be at least 1, got %d", mf.shards())
	case *dp < 1:
		return usagef("--dp must be at least 1, got %d", *dp)
	case *dp > 1 && theJob != nil:
		return usagef("--dp runs its replicas in one process; under mpirun, start one job per replica")
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
		MaxBodyBytes: *maxBody, BodyTimeout: *bodyTimeout, Logger: log,
		APIKeys: keys, CORSOrigins: splitList(cors), Version: version()})
	if len(keys) == 0 && !isLoopback(*addr) {
		log.Warn("listening beyond this machine without an API key: anyone who can reach it can use it (set --api-key)", "addr", *addr)
	}

	if theJob != nil && theJob.c.Rank() != 0 {
		// Under mpirun only rank 0 serves; this rank opens its shard and
		// follows rank 0's Forward calls until it shuts down.
		setThreads(*threads)
		_, err := openTextModel(mf, stderr)
		return err
	}
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
	// Each replica gets an even share of the threads: the loaded model
	// the default pool's, the others pools of their own.
	perReplica := *threads
	if perReplica <= 0 {
		perReplica = parallel.DefaultThreads()
	}
	perReplica = max(1, perReplica / *dp)
	setThreads(perReplica)
	var pools []*parallel.Pool
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	// The model is handed over when loaded, to be closed after the engine;
	// if a signal comes while it is still loading, the process just exits.
	loaded := make(chan *loader.Model, 1)
	err = srv.Run(ctx, ln, func() (server.Model, error) {
		start := time.Now()
		m, err := openTextModel(mf, stderr)
		if err != nil {
			return server.Model{}, err
		}
		eo := runner.Options{Slots: *slots, Context: *ctxLen, MaxQueue: *queue, Precision: precision.p}
		kv.apply(&eo)
		lms := []*model.LanguageModel{m.LanguageModel}
		for range *dp - 1 {
			p := parallel.New(perReplica)
			pools = append(pools, p)
			r, err := m.Replica(mf.shards(), p)
			if err != nil {
				m.Close()
				return server.Model{}, err
			}
			lms = append(lms, r)
		}
		eng, err := newEngine(m, lms, eo, "--ctx (or fewer --parallel slots)", func(msg string) { log.Warn(msg) })
		if err != nil {
			m.Close()
			return server.Model{}, err
		}
		tmpl, err := modelChatTemplate(m, *tmplFlag)
		if err != nil {
			eng.Close()
			m.Close()
			return server.Model{}, err
		}
		loaded <- m
		src, _, _ := fileChatTemplate(m)
		log.Info("model loaded", "path", m.Path, "took", time.Since(start).Round(time.Millisecond),
			"slots", eng.Slots(), "replicas", eng.Replicas(), "context", eng.Context(), "kv_memory", kvSummary(eng.KV()), "chat_template", tmpl.Name())
		return server.Model{Engine: eng, ChatTemplate: src, Template: tmpl, Info: modelInfo(m)}, nil
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

// isLoopback reports whether addr listens on this machine only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// modelInfo is what the server reports about m (ollama's /api/tags and
// /api/show, llama.cpp's /props).
func modelInfo(m *loader.Model) server.ModelInfo {
	in := server.ModelInfo{Path: m.Path, Format: m.Format}
	var quantBytes map[string]int64 = map[string]int64{}
	for _, t := range m.Tensors() {
		in.SizeBytes += t.Bytes
		in.ParameterCount += elements(t.Shape)
		quantBytes[t.Type] += t.Bytes
	}
	for typ, b := range quantBytes {
		if b > quantBytes[in.Quantization] || (b == quantBytes[in.Quantization] && typ < in.Quantization) {
			in.Quantization = typ
		}
	}
	if st, err := os.Stat(m.Path); err == nil {
		in.ModifiedAt = st.ModTime()
	}
	if m.GGUF != nil {
		in.Metadata = map[string]any{}
		for _, kv := range m.GGUF.Metadata {
			if kv.Value.Len() > 64 {
				continue // the vocabulary and its scores: ollama leaves them out too
			}
			in.Metadata[kv.Key] = kv.Value.Data
		}
	}
	return in
}

// elements is the number of values of a tensor shape.
func elements(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

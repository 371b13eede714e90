package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/grok-go/grok/kernels"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/sampler"
	"github.com/grok-go/grok/server"
)

func init() {
	register(command{
		name:    "run",
		usage:   "[-m MODEL] [flags] [PROMPT]  (without PROMPT: a chat on a terminal, else the prompt from stdin)",
		summary: "generate text from a prompt, streamed to stdout",
		run:     runRun,
	})
}

// genFlags are the sampling and generation flags, in llama.cpp's spelling.
type genFlags struct {
	n                           *int
	temp, topP, minP            *float64
	topK, repeatLastN           *int
	repeatPen, presPen, freqPen *float64
	seed                        *int64
	stop                        stringList
	ctx                         *int
	threads                     *int
	kv                          *kvFlags
	ignoreEOS, truncate         *bool
	precision                   precisionFlag
}

func addGenFlags(fs *flag.FlagSet) *genFlags {
	g := &genFlags{
		n:           fs.Int("n", 128, "new tokens to generate at most (0: none, -1: until the context is full)"),
		temp:        fs.Float64("temp", 0.8, "temperature; 0 = greedy"),
		topK:        fs.Int("top-k", 40, "keep the k most likely tokens (0 = off)"),
		topP:        fs.Float64("top-p", 0.95, "nucleus sampling threshold, runners.py's rule (1 = off)"),
		minP:        fs.Float64("min-p", 0.05, "drop tokens below min-p × the top probability (0 = off)"),
		repeatPen:   fs.Float64("repeat-penalty", 1, "repetition penalty (1 = off)"),
		repeatLastN: fs.Int("repeat-last-n", 64, "tokens of history the penalties look at (-1 = all)"),
		presPen:     fs.Float64("presence-penalty", 0, "OpenAI presence penalty"),
		freqPen:     fs.Float64("frequency-penalty", 0, "OpenAI frequency penalty"),
		seed:        fs.Int64("seed", -1, "random seed (-1 = random)"),
		ctx:         fs.Int("c", 0, "context size in tokens (0 = the model's, capped to what fits in memory)"),
		threads:     fs.Int("t", 0, "threads (0 = all cores)"),
		ignoreEOS:   fs.Bool("ignore-eos", false, "keep generating after the end-of-sequence token, as runners.py does"),
		truncate:    fs.Bool("truncate", false, "drop the start of a prompt that leaves no room in the context for -n new tokens (a warning says how many tokens went) instead of failing"),
	}
	fs.Var(&g.stop, "stop", "stop string (repeatable)")
	fs.Var(&g.precision, "precision", precisionHelp)
	fs.IntVar(g.n, "n-predict", 128, "same as -n")
	fs.IntVar(g.ctx, "ctx-size", 0, "same as -c")
	g.kv = addKVFlags(fs)
	return g
}

// params are the sampling settings; random tells that the seed was drawn
// here (-1), so that the caller can print it and the run can be repeated.
func (g *genFlags) params() (p sampler.Params, random bool) {
	seed := uint64(*g.seed)
	if *g.seed < 0 {
		// Below 2^63, so that --seed (an int64) can repeat the run.
		seed, random = rand.Uint64()>>1, true
	}
	return sampler.Params{
		Temperature: float32(*g.temp), TopK: *g.topK, TopP: float32(*g.topP), MinP: float32(*g.minP),
		RepeatPenalty: float32(*g.repeatPen), RepeatLastN: *g.repeatLastN,
		PresencePenalty: float32(*g.presPen), FrequencyPenalty: float32(*g.freqPen), Seed: seed,
	}, random
}

// engineOptions are the runner options of run and chat: one slot, -c and
// the KV memory's flags.
func (g *genFlags) engineOptions(slots int) runner.Options {
	o := runner.Options{Slots: slots, Context: *g.ctx, Precision: g.precision.p}
	g.kv.apply(&o)
	return o
}

// request is the runner request for prompt. -n 0 is not one (it generates
// nothing); a negative -n runs until the context is full, the runner's 0.
func (g *genFlags) request(prompt []int) (req runner.Request, randomSeed bool) {
	n := max(*g.n, 0)
	p, random := g.params()
	return runner.Request{Prompt: prompt, MaxTokens: n, Sampling: p, Stop: g.stop,
		IgnoreEOS: *g.ignoreEOS, TruncatePrompt: *g.truncate}, random
}

// openModelOrDefault opens -m, or the embedded demo model when it is empty.
// When stderr is a terminal it says what it is loading and how long it took:
// weights are memory-mapped, so a large model's pages arrive lazily and the
// first tokens can be slow; the line tells the user why.
//
// A bad --tp is refused before any weight is read: below 1 here, and
// counts the model cannot be split into by the loader (model.ShardError),
// named here as the flag's fault.
func openModelOrDefault(mf *modelFlags, stderr io.Writer) (*loader.Model, error) {
	if theJob != nil {
		return theJob.open(mf)
	}
	if n := mf.shards(); n < 1 {
		return nil, usagef("--tp must be at least 1, got %d", n)
	}
	m, err := openModel(mf, stderr)
	var se *model.ShardError
	if errors.As(err, &se) {
		err = fmt.Errorf("--tp %d: %w", mf.shards(), err)
	}
	return m, err
}

func openModel(mf *modelFlags, stderr io.Writer) (*loader.Model, error) {
	if *mf.path == "" {
		if rs := *mf.ropeScaling; rs != "" && rs != "none" {
			return nil, usagef("--rope-scaling %s needs -m MODEL: the built-in demo model has plain RoPE", rs)
		}
		return loader.FromGGUFBytesWith(defaultmodel.GGUF, defaultmodel.Name, mf.options(stderr))
	}
	tty := isTerminal(stderr)
	start := time.Now()
	if tty {
		fmt.Fprintf(stderr, "loading %s ...", *mf.path)
	}
	m, err := mf.open(stderr)
	if tty {
		if err != nil {
			fmt.Fprintln(stderr, " failed")
		} else {
			var bytes int64
			for _, t := range m.Tensors() {
				bytes += t.Bytes
			}
			fmt.Fprintf(stderr, " %.1f MB of weights mapped in %v\n", float64(bytes)/1e6, time.Since(start).Round(time.Millisecond))
		}
	}
	if err == nil {
		for _, w := range m.Warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
	}
	return m, err
}

// newEngine starts the runner for m (over lms, m's network and its
// replicas, when not nil). If the context was left to its default
// and the model's sequence_len did not fit in memory, it says so through
// note; a KV memory too large for the machine gets an error naming ctxFlag.
func newEngine(m *loader.Model, lms []*model.LanguageModel, o runner.Options, ctxFlag string, note func(string)) (*runner.Engine, error) {
	if m.Tokenizer != nil {
		// Refused before the KV memory is allocated (see server.CheckVocabulary).
		if err := server.CheckVocabulary(m.Config.VocabSize, m.Tokenizer.VocabSize()); err != nil {
			return nil, err
		}
	}
	if lms == nil {
		lms = []*model.LanguageModel{m.LanguageModel}
	}
	eng, err := runner.NewGroup(lms, m.Tokenizer, o)
	var me *runner.MemoryError
	if errors.As(err, &me) {
		if me.Tokens > 0 {
			return nil, fmt.Errorf("%w: lower --kv-memory", err)
		}
		return nil, fmt.Errorf("%w: lower the context with %s N", err, ctxFlag)
	}
	if err != nil {
		return nil, err
	}
	if o.Context <= 0 && (o.KVMemory > 0 || o.KVTokens > 0) && eng.Context() < m.Config.SequenceLen {
		note(fmt.Sprintf("the model's context of %d tokens does not fit in --kv-memory: using %d", m.Config.SequenceLen, eng.Context()))
	} else if o.Context <= 0 && eng.Context() < m.Config.SequenceLen {
		note(fmt.Sprintf("the model's context of %d tokens does not fit in memory: using %d (set it with %s)",
			m.Config.SequenceLen, eng.Context(), ctxFlag))
	}
	return eng, nil
}

// openTextModel is openModelOrDefault for the commands that need text: a
// model without a tokenizer is closed and refused.
func openTextModel(mf *modelFlags, stderr io.Writer) (*loader.Model, error) {
	m, err := openModelOrDefault(mf, stderr)
	if err == nil && m.Tokenizer == nil {
		m.Close()
		err = errors.New("the model has no tokenizer: pass --tokenizer tokenizer.model")
	}
	return m, err
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func runRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "[-m MODEL] [flags] [PROMPT]", stderr)
	mf := addModelFlags(fs)
	addTPFlag(fs, mf)
	g := addGenFlags(fs)
	noEcho := fs.Bool("no-display-prompt", false, "print only the continuation, not the prompt")
	quiet := fs.Bool("q", false, "do not print timings to stderr")
	promptFlag := fs.String("p", "", "the prompt (llama.cpp's spelling; else the arguments, else stdin)")
	fs.StringVar(promptFlag, "prompt", "", "same as -p")
	tmplFlag := fs.String("chat-template", "", "for the chat (no PROMPT on a terminal): "+chatTemplateHelp())
	system := fs.String("system", "", "for the chat: the system message")
	compat := addLlamaCompat(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	promptSet := false
	fs.Visit(func(f *flag.Flag) { promptSet = promptSet || f.Name == "p" || f.Name == "prompt" })
	compat.notes(fs, stderr)
	var prompt string
	switch {
	case promptSet && len(pos) > 0:
		return usagef("give the prompt with -p or as arguments, not both")
	case promptSet:
		prompt = *promptFlag
	case len(pos) > 0:
		prompt = strings.Join(pos, " ")
	case isTerminal(os.Stdin):
		// ollama run's way: no prompt on a terminal opens a chat.
		return startChat(mf, g, fs, *tmplFlag, *system, false, os.Stdin, stdout, stderr)
	default:
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		prompt = strings.TrimSuffix(string(b), "\n")
	}
	setThreads(*g.threads)
	m, err := openTextModel(mf, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	ids := m.Tokenizer.Encode(prompt)
	if len(ids) == 0 {
		return usagef("the prompt is empty")
	}
	eng, err := newEngine(m, nil, g.engineOptions(1), "-c", func(msg string) { fmt.Fprintln(stderr, "note:", msg) })
	if err != nil {
		return err
	}
	defer eng.Close()
	if *g.truncate {
		kept, err := truncatePrompt(ids, *g.n, eng.Context(), stderr)
		if err != nil {
			return err
		}
		if len(kept) < len(ids) {
			// Show what the model reads, not what it was given.
			ids = kept
			if prompt, err = m.Tokenizer.Decode(ids); err != nil {
				return err
			}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	req, randomSeed := g.request(ids)
	if randomSeed && !*quiet {
		fmt.Fprintf(stderr, "seed: %d\n", req.Sampling.Seed)
	}
	if g.precision.p == kernels.Fast && !*quiet {
		fmt.Fprintf(stderr, "precision: %s\n", precisionNote(g.precision.p, m.LanguageModel))
	}
	if *g.n == 0 {
		// llama.cpp's -n 0: nothing is generated.
		if !*noEcho {
			fmt.Fprintln(stdout, prompt)
		}
		if !*quiet {
			fmt.Fprintf(stderr, "\nprompt: %d tokens; generation: 0 tokens (-n 0)\n", len(ids))
		}
		return nil
	}
	st, err := eng.Submit(ctx, req)
	if err != nil {
		return err
	}
	if !*noEcho {
		fmt.Fprint(stdout, prompt)
	}
	flusher, _ := stdout.(interface{ Sync() error })
	for {
		ev, err := st.Recv(context.Background())
		if err != nil {
			return err
		}
		if ev.Text != "" {
			io.WriteString(stdout, ev.Text)
			if flusher != nil {
				flusher.Sync()
			}
		}
		if ev.Done {
			fmt.Fprintln(stdout)
			if ev.Finish == runner.FinishError {
				return ev.Err
			}
			if !*quiet {
				u := ev.Usage
				fmt.Fprintf(stderr, "\nprompt: %d tokens in %v (%.1f tok/s); generation: %d tokens in %v (%.1f tok/s); finish: %s; total %v\n",
					u.PromptTokens, u.Prefill.Round(time.Millisecond), rate(u.PromptTokens, u.Prefill),
					u.CompletionTokens, u.Decode.Round(time.Millisecond), rate(u.CompletionTokens-1, u.Decode),
					ev.Finish, time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
	}
}

// truncatePrompt is --truncate: when the prompt and n new tokens (n ≤ 0:
// until the context is full) do not fit in ctx, it keeps the prompt's end,
// leaving room for n new tokens but at most half the context, and warns
// on stderr how many tokens it dropped. A context too small to keep any of
// the prompt is an error, not an empty prompt.
func truncatePrompt(ids []int, n, ctx int, stderr io.Writer) ([]int, error) {
	room := ctx / 2
	if n > 0 {
		room = min(n, ctx/2)
	}
	room = max(room, 1)
	if len(ids)+room <= ctx {
		return ids, nil
	}
	keep := ctx - room
	if keep < 1 {
		return nil, fmt.Errorf("--truncate: the context of %d tokens is too small to keep any of the prompt and generate; raise -c", ctx)
	}
	fmt.Fprintf(stderr, "warning: --truncate: the prompt has %d tokens and the context holds %d: dropped its first %d tokens, keeping the last %d to leave room for %d new ones\n",
		len(ids), ctx, len(ids)-keep, keep, room)
	return ids[len(ids)-keep:], nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 || n <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// setThreads sizes the worker pool the model runs on (0 = all cores).
var setThreads = parallel.SetThreads

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grok-go/grok/chattemplate"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/sampler"
	"github.com/grok-go/grok/server"
)

func init() {
	register(command{
		name:    "chat",
		usage:   "[-m MODEL] [--chat-template NAME|FILE] [--system TEXT] [flags]",
		summary: "chat with the model in the terminal, as `ollama run` does",
		run:     runChat,
	})
}

// chatTemplateHelp is the --chat-template flag's help.
func chatTemplateHelp() string {
	return "chat template: a built-in (" + strings.Join(chattemplate.Names(), ", ") + ") or a Jinja file; default: the model file's, else grok-2 for Grok-2 models, else plain"
}

// modelChatTemplate picks the template chats with m are rendered with:
// the flag (a built-in name or a Jinja file), else the model file's (a
// GGUF's tokenizer.chat_template; chat_template.jinja or
// tokenizer_config.json beside safetensors), else grok-2 for a Grok-2
// model (it has a dense MLP) and plain for the others (Grok-1 is a base
// model). A broken template is an error, not a fallback.
func modelChatTemplate(m *loader.Model, flagValue string) (*chattemplate.Template, error) {
	var tok chattemplate.Tokens
	if m.Tokenizer != nil {
		tok = server.TemplateTokens(m.Tokenizer)
	}
	if flagValue != "" {
		if chattemplate.IsBuiltin(flagValue) {
			return chattemplate.Builtin(flagValue, tok)
		}
		src, err := readTemplateFile(flagValue)
		if err != nil {
			return nil, fmt.Errorf("--chat-template %s: not a built-in template (%s) nor a readable file: %w", flagValue, strings.Join(chattemplate.Names(), ", "), err)
		}
		return chattemplate.Parse(flagValue, src, tok)
	}
	src, from, err := fileChatTemplate(m)
	if err != nil {
		return nil, err
	}
	if src != "" {
		t, err := chattemplate.Parse(from, src, tok)
		if err != nil {
			return nil, fmt.Errorf("%w (choose another with --chat-template NAME: %s)", err, strings.Join(chattemplate.Names(), ", "))
		}
		return t, nil
	}
	if m.Config.DenseFFNSize > 0 {
		return chattemplate.Builtin("grok-2", tok)
	}
	return chattemplate.Builtin("plain", tok)
}

func readTemplateFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Size() > chattemplate.MaxSourceBytes {
		return "", fmt.Errorf("%d bytes, more than the limit of %d", fi.Size(), chattemplate.MaxSourceBytes)
	}
	b, err := os.ReadFile(path)
	return string(b), err
}

// fileChatTemplate returns the model file's chat template and where it
// came from, or "" when it has none.
func fileChatTemplate(m *loader.Model) (src, from string, err error) {
	if m.GGUF != nil {
		s, _ := m.GGUF.String("tokenizer.chat_template")
		return s, "tokenizer.chat_template", nil
	}
	if m.Format != "safetensors" || m.Path == "" {
		return "", "", nil
	}
	dir := m.Path
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		dir = filepath.Dir(dir)
	}
	p := filepath.Join(dir, "chat_template.jinja")
	if s, err := readTemplateFile(p); err == nil {
		return s, p, nil
	}
	p = filepath.Join(dir, "tokenizer_config.json")
	fi, err := os.Stat(p)
	if err != nil {
		return "", "", nil
	}
	if fi.Size() > 64<<20 {
		return "", "", fmt.Errorf("%s: %d bytes, too large to read", p, fi.Size())
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", "", err
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", "", fmt.Errorf("%s: %w", p, err)
	}
	if len(cfg.ChatTemplate) == 0 || string(cfg.ChatTemplate) == "null" {
		return "", "", nil
	}
	var one string
	if json.Unmarshal(cfg.ChatTemplate, &one) == nil {
		return one, p, nil
	}
	// A list of named templates: the "default" one, else the first.
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil || len(named) == 0 {
		return "", "", fmt.Errorf("%s: chat_template is neither a string nor a list of {name, template}", p)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, p + " (default)", nil
		}
	}
	return named[0].Template, p + " (" + named[0].Name + ")", nil
}

func runChat(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("chat", "[-m MODEL] [flags]", stderr)
	mf := addModelFlags(fs)
	addTPFlag(fs, mf)
	g := addGenFlags(fs)
	tmplFlag := fs.String("chat-template", "", chatTemplateHelp())
	system := fs.String("system", "", "system message")
	verbose := fs.Bool("verbose", false, "print timings after each answer (/set verbose)")
	compat := addLlamaCompat(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("grok chat takes no prompt; type it at the >>> prompt (or use grok run PROMPT)")
	}
	compat.notes(fs, stderr)
	return startChat(mf, g, fs, *tmplFlag, *system, *verbose, os.Stdin, stdout, stderr)
}

// startChat loads the model and runs the chat REPL on in; Ctrl-C (SIGINT)
// stops the answer being written, not the REPL.
func startChat(mf *modelFlags, g *genFlags, fs *flag.FlagSet, tmplFlag, system string, verbose bool, in io.Reader, stdout, stderr io.Writer) error {
	setThreads(*g.threads)
	m, err := openTextModel(mf, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	tmpl, err := modelChatTemplate(m, tmplFlag)
	if err != nil {
		return err
	}
	eng, err := newEngine(m, nil, g.engineOptions(1), "-c", func(msg string) { fmt.Fprintln(stderr, "note:", msg) })
	if err != nil {
		return err
	}
	defer eng.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	interrupt := make(chan struct{}, 1)
	go func() {
		for range sigs {
			select {
			case interrupt <- struct{}{}:
			default:
			}
		}
	}()
	c := newChatSession(eng, tmpl, g, fs, m)
	c.system, c.verbose = system, verbose
	c.in, c.out, c.errw, c.interrupt = in, stdout, stderr, interrupt
	return c.run()
}

// chatSession is the REPL: it reads lines from in, answers on out, and
// stops an answer when interrupt fires. It is driven by tests through
// pipes and a channel, without a terminal.
type chatSession struct {
	eng       *runner.Engine
	tmpl      *chattemplate.Template
	in        io.Reader
	out, errw io.Writer
	interrupt <-chan struct{}
	// cancelled, if set, is called once an interrupt has cancelled the
	// answer (tests wait for it before letting the engine go on).
	cancelled func()

	params     sampler.Params
	randomSeed bool
	numPredict int // -1: until the end of the turn or the context
	stops      []string
	system     string
	history    []chattemplate.Message
	verbose    bool
	info       string // /show info
}

func newChatSession(eng *runner.Engine, tmpl *chattemplate.Template, g *genFlags, fs *flag.FlagSet, m *loader.Model) *chatSession {
	p, random := g.params()
	n := -1 // ollama's num_predict default: the turn ends it
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "n" || f.Name == "n-predict" {
			n = *g.n
		}
	})
	c := &chatSession{eng: eng, tmpl: tmpl, params: p, randomSeed: random, numPredict: n, stops: g.stop}
	var b strings.Builder
	fmt.Fprintf(&b, "  Model\n    %-18s %s\n", "architecture", "grok")
	if m != nil {
		from := m.Path
		if from == "" {
			from = "(embedded demo model)"
		}
		fmt.Fprintf(&b, "    %-18s %s (%s)\n", "file", from, m.Format)
		fmt.Fprintf(&b, "    %-18s %d\n", "context length", m.Config.SequenceLen)
		fmt.Fprintf(&b, "    %-18s %d\n", "embedding length", m.Config.EmbSize)
		fmt.Fprintf(&b, "    %-18s %d (%d active)\n", "experts", m.Config.NumExperts, m.Config.NumSelectedExperts)
	}
	fmt.Fprintf(&b, "    %-18s %d\n", "session context", eng.Context())
	fmt.Fprintf(&b, "    %-18s %s\n", "chat template", tmpl.Name())
	c.info = b.String()
	return c
}

type chatLine struct {
	text string
	err  error
}

// run is the REPL loop; it returns at /bye or at the end of the input.
func (c *chatSession) run() error {
	lines := make(chan chatLine)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		r := bufio.NewReader(c.in)
		for {
			s, err := r.ReadString('\n')
			if s != "" || err == nil {
				select {
				case lines <- chatLine{text: strings.TrimRight(s, "\r\n")}:
				case <-stop:
					return
				}
			}
			if err != nil {
				select {
				case lines <- chatLine{err: err}:
				case <-stop:
				}
				return
			}
		}
	}()
	if c.randomSeed {
		fmt.Fprintf(c.errw, "seed: %d\n", c.params.Seed)
	}
	var sb strings.Builder
	multiline := "" // "", "prompt" or "system": what a """ block is for
	for {
		if multiline != "" {
			fmt.Fprint(c.out, "... ")
		} else {
			fmt.Fprint(c.out, ">>> ")
		}
		var l chatLine
		select {
		case l = <-lines:
		case <-c.interrupt:
			fmt.Fprintln(c.out, "\nUse Ctrl + d or /bye to exit.")
			sb.Reset()
			multiline = ""
			continue
		}
		if l.err != nil {
			fmt.Fprintln(c.out)
			if errors.Is(l.err, io.EOF) {
				return nil
			}
			return l.err
		}
		line := l.text
		switch {
		case multiline != "":
			before, done := strings.CutSuffix(line, `"""`)
			sb.WriteString(before)
			if !done {
				sb.WriteString("\n")
				continue
			}
			if multiline == "system" {
				c.setSystem(sb.String())
				sb.Reset()
				multiline = ""
				continue
			}
			multiline = ""
		case strings.HasPrefix(line, `"""`):
			rest := strings.TrimPrefix(line, `"""`)
			rest, done := strings.CutSuffix(rest, `"""`)
			sb.WriteString(rest)
			if !done {
				sb.WriteString("\n")
				multiline = "prompt"
				continue
			}
		case strings.HasPrefix(line, "/"):
			quit, startSystem := c.command(line)
			if quit {
				return nil
			}
			if startSystem != nil {
				sb.WriteString(*startSystem)
				sb.WriteString("\n")
				multiline = "system"
			}
			continue
		default:
			sb.WriteString(line)
		}
		if text := sb.String(); strings.TrimSpace(text) != "" {
			c.reply(text)
		}
		sb.Reset()
	}
}

// command runs a /command. It reports whether the REPL should end, and
// the start of a multi-line system message (/set system """…).
func (c *chatSession) command(line string) (quit bool, system *string) {
	args := strings.Fields(line)
	switch args[0] {
	case "/bye", "/exit":
		return true, nil
	case "/clear":
		c.history = nil
		fmt.Fprintln(c.out, "Cleared session context")
	case "/?", "/help":
		c.help(args[1:])
	case "/set":
		return false, c.set(line, args)
	case "/show":
		c.show(args)
	case "/load", "/save", "/list":
		fmt.Fprintf(c.out, "%s is not supported: grok chat holds one model, loaded with -m\n", args[0])
	default:
		fmt.Fprintf(c.out, "Unknown command '%s'. Type /? for help\n", args[0])
	}
	return false, nil
}

func (c *chatSession) help(args []string) {
	w := c.errw
	if len(args) > 0 {
		switch strings.TrimPrefix(args[0], "/") {
		case "set":
			c.usageSet()
			return
		case "show":
			c.usageShow()
			return
		case "shortcut", "shortcuts":
			fmt.Fprintln(w, "Available keyboard shortcuts:\n  Ctrl + c            Stop the model from responding\n  Ctrl + d            Exit (/bye)")
			fmt.Fprintln(w)
			return
		}
	}
	fmt.Fprintln(w, "Available Commands:")
	fmt.Fprintln(w, "  /set            Set session variables")
	fmt.Fprintln(w, "  /show           Show model information")
	fmt.Fprintln(w, "  /clear          Clear session context")
	fmt.Fprintln(w, "  /bye            Exit")
	fmt.Fprintln(w, "  /?, /help       Help for a command")
	fmt.Fprintln(w, "  /? shortcuts    Help for keyboard shortcuts")
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Use """ to begin a multi-line message.`)
	fmt.Fprintln(w)
}

func (c *chatSession) usageSet() {
	w := c.errw
	fmt.Fprintln(w, "Available Commands:")
	fmt.Fprintln(w, "  /set parameter ...     Set a parameter")
	fmt.Fprintln(w, "  /set system <string>   Set system message")
	fmt.Fprintln(w, "  /set verbose           Show LLM stats")
	fmt.Fprintln(w, "  /set quiet             Disable LLM stats")
	fmt.Fprintln(w)
}

func (c *chatSession) usageShow() {
	w := c.errw
	fmt.Fprintln(w, "Available Commands:")
	fmt.Fprintln(w, "  /show info         Show details for this model")
	fmt.Fprintln(w, "  /show parameters   Show parameters for this session")
	fmt.Fprintln(w, "  /show system       Show system message")
	fmt.Fprintln(w, "  /show template     Show prompt template")
	fmt.Fprintln(w)
}

func (c *chatSession) usageParameters() {
	w := c.errw
	fmt.Fprintln(w, "Available Parameters:")
	fmt.Fprintln(w, "  /set parameter seed <int>               Random number seed")
	fmt.Fprintln(w, "  /set parameter num_predict <int>        Max number of tokens to predict (-1: until the turn ends)")
	fmt.Fprintln(w, "  /set parameter top_k <int>              Pick from top k num of tokens")
	fmt.Fprintln(w, "  /set parameter top_p <float>            Pick token based on sum of probabilities")
	fmt.Fprintln(w, "  /set parameter min_p <float>            Pick token based on top token probability * min_p")
	fmt.Fprintln(w, "  /set parameter temperature <float>      Set creativity level")
	fmt.Fprintln(w, "  /set parameter repeat_penalty <float>   How strongly to penalize repetitions")
	fmt.Fprintln(w, "  /set parameter repeat_last_n <int>      Set how far back to look for repetitions")
	fmt.Fprintln(w, "  /set parameter presence_penalty <float> Penalize tokens that appeared")
	fmt.Fprintln(w, "  /set parameter frequency_penalty <float> Penalize tokens by how often they appeared")
	fmt.Fprintln(w, "  /set parameter stop <string> <string> ...   Set the stop parameters")
	fmt.Fprintln(w)
}

// set runs /set; it returns the start of a multi-line system message.
func (c *chatSession) set(line string, args []string) *string {
	if len(args) < 2 {
		c.usageSet()
		return nil
	}
	switch args[1] {
	case "parameter":
		if len(args) < 4 {
			c.usageParameters()
			return nil
		}
		if err := c.setParameter(args[2], args[3:]); err != nil {
			fmt.Fprintf(c.out, "Couldn't set parameter: %q\n", err.Error())
			return nil
		}
		fmt.Fprintf(c.out, "Set parameter '%s' to '%s'\n", args[2], strings.Join(args[3:], ", "))
	case "system":
		if len(args) < 3 {
			c.usageSet()
			return nil
		}
		// The message as typed, spaces kept, after "/set system ".
		text := strings.TrimSpace(line[strings.Index(line, "system")+len("system"):])
		if rest, ok := strings.CutPrefix(text, `"""`); ok {
			if body, done := strings.CutSuffix(rest, `"""`); done {
				c.setSystem(body)
				return nil
			}
			return &rest
		}
		c.setSystem(text)
	case "verbose":
		c.verbose = true
		fmt.Fprintln(c.out, "Set 'verbose' mode.")
	case "quiet":
		c.verbose = false
		fmt.Fprintln(c.out, "Set 'quiet' mode.")
	case "history", "nohistory", "wordwrap", "nowordwrap", "format", "noformat", "think", "nothink":
		fmt.Fprintf(c.out, "'/set %s' is not supported by grok chat; nothing changed.\n", args[1])
	default:
		fmt.Fprintf(c.out, "Unknown command '/set %s'. Type /? for help\n", args[1])
	}
	return nil
}

func (c *chatSession) setSystem(s string) {
	c.system = s
	fmt.Fprintln(c.out, "Set system message.")
}

// setParameter sets one of ollama's parameters, by ollama's name.
func (c *chatSession) setParameter(name string, vals []string) error {
	p := c.params
	v := vals[0]
	var err error
	f32 := func(dst *float32) {
		var f float64
		if f, err = strconv.ParseFloat(v, 64); err == nil {
			*dst = float32(f)
		}
	}
	switch name {
	case "temperature":
		f32(&p.Temperature)
	case "top_p":
		f32(&p.TopP)
	case "min_p":
		f32(&p.MinP)
	case "repeat_penalty":
		f32(&p.RepeatPenalty)
	case "presence_penalty":
		f32(&p.PresencePenalty)
	case "frequency_penalty":
		f32(&p.FrequencyPenalty)
	case "top_k":
		p.TopK, err = strconv.Atoi(v)
	case "repeat_last_n":
		p.RepeatLastN, err = strconv.Atoi(v)
	case "seed":
		var s int64
		if s, err = strconv.ParseInt(v, 10, 64); err == nil {
			p.Seed = uint64(s)
		}
	case "num_predict":
		var n int
		if n, err = strconv.Atoi(v); err == nil {
			c.numPredict = n
		}
		return err
	case "stop":
		c.stops = append([]string(nil), vals...)
		return nil
	case "num_ctx":
		return fmt.Errorf("the context (%d tokens) is fixed when the model loads: restart with -c N", c.eng.Context())
	case "num_gpu", "num_thread", "num_batch":
		return fmt.Errorf("%s has no effect here: grok runs on the CPU with -t threads", name)
	default:
		return fmt.Errorf("unknown parameter %q", name)
	}
	if err != nil {
		return fmt.Errorf("%s: %v", name, err)
	}
	if err := p.Validate(); err != nil {
		return err
	}
	c.params = p
	return nil
}

func (c *chatSession) show(args []string) {
	if len(args) < 2 {
		c.usageShow()
		return
	}
	switch args[1] {
	case "info":
		fmt.Fprint(c.out, c.info)
		fmt.Fprintln(c.out)
	case "parameters":
		p := c.params
		fmt.Fprintln(c.out, "Session parameters:")
		for _, kv := range [][2]string{
			{"temperature", fmt.Sprint(p.Temperature)}, {"top_k", fmt.Sprint(p.TopK)}, {"top_p", fmt.Sprint(p.TopP)},
			{"min_p", fmt.Sprint(p.MinP)}, {"repeat_penalty", fmt.Sprint(p.RepeatPenalty)}, {"repeat_last_n", fmt.Sprint(p.RepeatLastN)},
			{"presence_penalty", fmt.Sprint(p.PresencePenalty)}, {"frequency_penalty", fmt.Sprint(p.FrequencyPenalty)},
			{"seed", fmt.Sprint(p.Seed)}, {"num_predict", fmt.Sprint(c.numPredict)}, {"num_ctx", fmt.Sprint(c.eng.Context())},
			{"stop", strings.Join(append(append([]string(nil), c.stops...), c.tmpl.Stops()...), " ")},
		} {
			fmt.Fprintf(c.out, "  %-30s %s\n", kv[0], strconv.Quote(kv[1]))
		}
		fmt.Fprintln(c.out)
	case "system":
		if c.system == "" {
			fmt.Fprintln(c.out, "No system message was specified for this session.")
		} else {
			fmt.Fprintln(c.out, c.system+"\n")
		}
	case "template":
		fmt.Fprintf(c.out, "%s (%s)\n", c.tmpl.Source(), c.tmpl.Name())
	case "license", "modelfile":
		fmt.Fprintf(c.out, "'/show %s' is not available for grok models.\n", args[1])
	default:
		fmt.Fprintf(c.out, "Unknown command '/show %s'. Type /? for help\n", args[1])
	}
}

// encode tokenizes a rendered prompt; a leading bos_token is the BOS id.
func (c *chatSession) encode(prompt string) []int {
	tok := c.eng.Tokenizer()
	if bos := c.tmpl.Tokens().BOS; bos != "" && tok.BOS() >= 0 && strings.HasPrefix(prompt, bos) {
		return append([]int{tok.BOS()}, tok.Encode(prompt[len(bos):])...)
	}
	return tok.Encode(prompt)
}

// reply answers the user's message. The whole conversation is rendered
// each turn; the runner's prompt cache finds the earlier turns in the
// slot's KV memory, so only the new tokens are prefilled. A conversation that no longer fits loses its oldest turns,
// for good, with a note on stderr; an answer cut short by Ctrl-C stays in
// the history as far as it went, so that user and assistant turns still
// alternate.
func (c *chatSession) reply(user string) {
	ctxLen := c.eng.Context()
	reserve := ctxLen / 4
	if c.numPredict > 0 {
		reserve = min(c.numPredict, ctxLen/2)
	}
	var msgs []chattemplate.Message
	if c.system != "" {
		msgs = append(msgs, chattemplate.Message{Role: "system", Content: c.system})
	}
	msgs = append(append(msgs, c.history...), chattemplate.Message{Role: "user", Content: user})
	f, err := c.tmpl.Fit(msgs, ctxLen-max(1, reserve), c.encode)
	if err != nil {
		fmt.Fprintf(c.out, "error: %v\n\n", err)
		return
	}
	if len(f.IDs) >= ctxLen {
		fmt.Fprintf(c.out, "error: the message is too long: the prompt has %d tokens and the context holds %d (even with the earlier turns dropped)\n\n", len(f.IDs), ctxLen)
		return
	}
	if f.Dropped > 0 {
		// The system message belongs to no turn: the dropped messages
		// are the history's first.
		c.history = c.history[f.Dropped:]
		fmt.Fprintf(c.errw, "note: the conversation outgrew the context of %d tokens: dropped the %d oldest messages (%d tokens)\n", ctxLen, f.Dropped, f.DroppedTokens)
	}
	n := c.numPredict
	if n <= 0 || len(f.IDs)+n > ctxLen {
		n = ctxLen - len(f.IDs)
	}
	req := runner.Request{Prompt: f.IDs, MaxTokens: n, Sampling: c.params,
		Stop: append(append([]string(nil), c.stops...), c.tmpl.Stops()...)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := c.eng.Submit(ctx, req)
	if err != nil {
		fmt.Fprintf(c.out, "error: %v\n\n", err)
		return
	}
	done := make(chan struct{})
	var interrupted atomic.Bool
	go func() {
		select {
		case <-c.interrupt:
			interrupted.Store(true)
			cancel()
			if c.cancelled != nil {
				c.cancelled()
			}
		case <-done:
		}
	}()
	defer close(done)
	start := time.Now()
	var answer strings.Builder
	lead := true
	for {
		ev, err := st.Recv(context.Background())
		if err != nil {
			fmt.Fprintf(c.out, "\nerror: %v\n\n", err)
			return
		}
		text := ev.Text
		if lead {
			text = strings.TrimLeft(text, " ")
			lead = text == ""
		}
		if text != "" {
			answer.WriteString(text)
			io.WriteString(c.out, text)
			if s, ok := c.out.(interface{ Sync() error }); ok {
				s.Sync()
			}
		}
		if !ev.Done {
			continue
		}
		if ev.Finish == runner.FinishError {
			fmt.Fprintf(c.out, "\nerror: %v\n\n", ev.Err)
			return
		}
		fmt.Fprintln(c.out)
		if interrupted.Load() {
			fmt.Fprintln(c.out, "(stopped)")
		}
		fmt.Fprintln(c.out)
		c.history = append(c.history, chattemplate.Message{Role: "user", Content: user},
			chattemplate.Message{Role: "assistant", Content: answer.String()})
		if c.verbose {
			u := ev.Usage
			fmt.Fprintf(c.errw, "total duration:       %v\nprompt eval count:    %d token(s)\nprompt eval duration: %v\nprompt eval rate:     %.2f tokens/s\neval count:           %d token(s)\neval duration:        %v\neval rate:            %.2f tokens/s\n\n",
				time.Since(start).Round(time.Millisecond), u.PromptTokens, u.Prefill.Round(time.Millisecond), rate(u.PromptTokens, u.Prefill),
				u.CompletionTokens, u.Decode.Round(time.Millisecond), rate(u.CompletionTokens-1, u.Decode))
		}
		return
	}
}

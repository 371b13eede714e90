// Package chattemplate renders chat conversations into model prompts: the
// Jinja chat templates that model files carry (a GGUF's
// tokenizer.chat_template, Hugging Face's chat_template.jinja or
// tokenizer_config.json), evaluated as Hugging Face's apply_chat_template
// evaluates them, and built-in templates by name (plain, grok-2, chatml,
// llama-3, mistral, gemma). It also fits a conversation into a context by
// dropping its oldest turns.
//
// Templates are evaluated with github.com/ardanlabs/jinja: pure Go, no
// dependencies, Hugging Face's trim_blocks/lstrip_blocks defaults, and no
// file access (a template cannot include or import anything).
package chattemplate

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// Message is one message of a conversation.
type Message struct {
	Role    string // system, developer, user, assistant, tool
	Content string
}

// Tokens are the model's special token texts, passed to a template as
// bos_token and eos_token.
type Tokens struct {
	BOS, EOS string
}

// Template renders conversations. It is safe for concurrent use.
type Template struct {
	name   string
	source string
	jt     *jinja.Template
	stops  []string
	tokens Tokens
}

// Limits on a template from a model file, which is input like any other.
const (
	// MaxSourceBytes bounds a template's source: real ones are a few KiB
	// (gpt-oss's, among the largest, is 17 KiB).
	MaxSourceBytes = 1 << 20
	// maxProbeOutput bounds what the probe conversation may render to.
	maxProbeOutput = 1 << 20
	// probeTimeout bounds the probe render at load: a template that loops
	// for ever is refused instead of hanging every chat request.
	probeTimeout = 10 * time.Second
)

// endOfTurn are the end-of-turn markers of the common template families:
// each one that a template's source writes becomes a stop string.
var endOfTurn = []string{
	"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<|separator|>",
	"<|eos|>", "<|endoftext|>", "<|end_of_text|>", "<｜end▁of▁sentence｜>", "<|return|>",
	"<|END_OF_TURN_TOKEN|>", "<|end_of_turn|>",
}

// Parse compiles a Jinja chat template (name says where it came from, for
// messages and /show). It refuses, with an error saying why, a template
// that is too large, does not compile, defines macros that call each other
// in a cycle (their recursion would overflow the stack), or fails, loops
// or grows without bound on a one-message conversation.
func Parse(name, source string, tok Tokens) (*Template, error) {
	if len(source) > MaxSourceBytes {
		return nil, fmt.Errorf("chat template %s: %d bytes, more than the limit of %d", name, len(source), MaxSourceBytes)
	}
	if strings.TrimSpace(source) == "" {
		return nil, fmt.Errorf("chat template %s is empty", name)
	}
	if cyc := macroCycle(source); cyc != "" {
		return nil, fmt.Errorf("chat template %s: macro %s calls itself (directly or through other macros); recursive macros are refused", name, cyc)
	}
	jt, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template %s does not compile: %w", name, err)
	}
	t := &Template{name: name, source: source, jt: jt, tokens: tok}
	for _, s := range endOfTurn {
		if strings.Contains(source, s) {
			t.stops = append(t.stops, s)
		}
	}
	if tok.EOS != "" && strings.Contains(source, "eos_token") && !slices.Contains(t.stops, tok.EOS) {
		t.stops = append(t.stops, tok.EOS)
	}
	if err := t.probe(); err != nil {
		return nil, err
	}
	return t, nil
}

// probe renders a one-message conversation, which every chat template
// accepts, within probeTimeout and maxProbeOutput.
func (t *Template) probe() error {
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := t.Render([]Message{{Role: "user", Content: "Hello"}}, true)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		switch {
		case r.err != nil:
			return fmt.Errorf("chat template %s fails on a one-message conversation: %w", t.name, r.err)
		case len(r.out) > maxProbeOutput:
			return fmt.Errorf("chat template %s renders a one-message conversation to %d bytes (more than %d)", t.name, len(r.out), maxProbeOutput)
		case !strings.Contains(r.out, "Hello"):
			return fmt.Errorf("chat template %s leaves the message out of the prompt (%q)", t.name, truncateText(r.out, 80))
		}
		return nil
	case <-time.After(probeTimeout):
		// The goroutine cannot be stopped; refusing the template keeps
		// it from running again.
		return fmt.Errorf("chat template %s did not finish rendering a one-message conversation within %v", t.name, probeTimeout)
	}
}

var (
	macroDef  = regexp.MustCompile(`\{%-?\s*macro\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	macroEnd  = regexp.MustCompile(`\{%-?\s*endmacro\b`)
	callNamed = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
)

// macroCycle returns the name of a macro that can reach itself through
// calls by name, or "". ardanlabs/jinja has no recursion limit, and a Go
// stack overflow kills the process rather than failing the render.
func macroCycle(src string) string {
	defs := macroDef.FindAllStringSubmatchIndex(src, -1)
	if len(defs) == 0 {
		return ""
	}
	calls := map[string][]string{}
	for i, d := range defs {
		name := src[d[2]:d[3]]
		body := src[d[1]:]
		if i+1 < len(defs) {
			body = src[d[1]:defs[i+1][0]]
		}
		if e := macroEnd.FindStringIndex(body); e != nil {
			body = body[:e[0]]
		}
		for _, m := range callNamed.FindAllStringSubmatch(body, -1) {
			calls[name] = append(calls[name], m[1])
		}
	}
	const (
		unseen = iota
		onPath
		finished
	)
	state := map[string]int{}
	var visit func(string) bool
	visit = func(n string) bool {
		switch state[n] {
		case onPath:
			return true
		case finished:
			return false
		}
		state[n] = onPath
		for _, c := range calls[n] {
			if _, isMacro := calls[c]; isMacro || c == n {
				if visit(c) {
					return true
				}
			}
		}
		state[n] = finished
		return false
	}
	for _, d := range defs {
		if n := src[d[2]:d[3]]; visit(n) {
			return n
		}
	}
	return ""
}

// Name says which template this is: a built-in's name, or where a model's
// template came from.
func (t *Template) Name() string { return t.name }

// Source is the template's Jinja source.
func (t *Template) Source() string { return t.source }

// Stops are the strings that end an assistant turn: generation stops at
// the first one.
func (t *Template) Stops() []string { return slices.Clone(t.stops) }

// Tokens are the special token texts the template is rendered with.
func (t *Template) Tokens() Tokens { return t.tokens }

// ErrTemplate wraps the errors a template raises (raise_exception) or
// meets while rendering: they are the conversation's fault or the
// template's, not the server's.
var ErrTemplate = errors.New("chat template")

// Render renders msgs, with the opening of an assistant turn at the end
// when addGenerationPrompt is set.
func (t *Template) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(m.Role))
		d.AsDict().Set("content", jinja.NewString(m.Content))
		list[i] = d
	}
	out, err := t.jt.RenderValues(map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"bos_token":             jinja.NewString(t.tokens.BOS),
		"eos_token":             jinja.NewString(t.tokens.EOS),
	})
	if err != nil {
		return "", fmt.Errorf("%w %s: %v", ErrTemplate, t.name, err)
	}
	return out, nil
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/runner"
)

// syncBuffer is an io.Writer the test reads while the REPL writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// repl drives a chatSession over pipes, as a terminal would.
type repl struct {
	t         *testing.T
	c         *chatSession
	in        *io.PipeWriter
	out, errw *syncBuffer
	interrupt chan struct{}
	done      chan error
}

// startREPL runs a chat on the demo model (real text) with the given
// engine options and flags.
func startREPL(t *testing.T, eo runner.Options, args ...string) *repl {
	t.Helper()
	m, err := loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := runner.New(m.LanguageModel, m.Tokenizer, eo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eng.Close)
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	g := addGenFlags(fs)
	if err := fs.Parse(append([]string{"--temp", "0", "--seed", "1"}, args...)); err != nil {
		t.Fatal(err)
	}
	tmpl, err := modelChatTemplate(m, "")
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	r := &repl{t: t, in: pw, out: &syncBuffer{}, errw: &syncBuffer{}, interrupt: make(chan struct{}, 1), done: make(chan error, 1)}
	r.c = newChatSession(eng, tmpl, g, fs, m)
	r.c.in, r.c.out, r.c.errw, r.c.interrupt = pr, r.out, r.errw, r.interrupt
	go func() { r.done <- r.c.run() }()
	t.Cleanup(func() { pw.Close() })
	return r
}

// send types lines and waits for the REPL to print n more prompts.
func (r *repl) send(lines ...string) string {
	r.t.Helper()
	before := r.out.String()
	prompts := r.prompts()
	for _, l := range lines {
		if _, err := io.WriteString(r.in, l+"\n"); err != nil {
			r.t.Fatal(err)
		}
	}
	r.waitOut(prompts + len(lines))
	return strings.TrimPrefix(r.out.String(), before)
}

func (r *repl) prompts() int {
	s := r.out.String()
	return strings.Count(s, ">>> ") + strings.Count(s, "... ")
}

// waitOut waits until the REPL has printed n prompts; the deadline only
// catches hangs.
func (r *repl) waitOut(n int) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		s := r.out.String()
		if strings.Count(s, ">>> ")+strings.Count(s, "... ") >= n {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the REPL did not prompt again; output so far:\n%s", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestChatREPL(t *testing.T) {
	r := startREPL(t, runner.Options{}, "-n", "8")
	r.waitOut(1)
	out := r.send("Who made the heaven?")
	if len(r.c.history) != 2 || r.c.history[0].Content != "Who made the heaven?" || r.c.history[1].Content == "" {
		t.Fatalf("history %q after one turn (output %q)", r.c.history, out)
	}
	if !strings.Contains(out, r.c.history[1].Content) || strings.HasPrefix(out, " ") {
		t.Errorf("output %q does not show the answer %q without its leading space", out, r.c.history[1].Content)
	}
	// The second turn sees the first: the prompt is the whole history.
	r.send(`"""In the`, `beginning"""`)
	if len(r.c.history) != 4 || r.c.history[2].Content != "In the\nbeginning" {
		t.Errorf("multi-line message: history %q", r.c.history)
	}
	for _, tc := range []struct{ line, want string }{
		{"/set parameter temperature 0.7", "Set parameter 'temperature' to '0.7'"},
		{"/set parameter top_k 5", "Set parameter 'top_k' to '5'"},
		{"/set parameter temperature hot", "Couldn't set parameter"},
		{"/set parameter num_ctx 4096", "fixed when the model loads"},
		{"/set parameter stop Amen Selah", "Set parameter 'stop' to 'Amen, Selah'"},
		{"/show parameters", `"0.7"`},
		{"/set system You are the scribe.", "Set system message."},
		{"/show system", "You are the scribe."},
		{"/show template", "(plain)"},
		{"/show info", "chat template"},
		{"/frobnicate", "Unknown command '/frobnicate'"},
		{"/set wordwrap", "not supported"},
	} {
		if got := r.send(tc.line); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want it to contain %q", tc.line, got, tc.want)
		}
	}
	if r.c.params.Temperature != 0.7 || r.c.params.TopK != 5 || strings.Join(r.c.stops, "|") != "Amen|Selah" {
		t.Errorf("params %+v stops %q", r.c.params, r.c.stops)
	}
	// A multi-line system message, as ollama reads it.
	r.send(`/set system """Be`, `brief."""`)
	if r.c.system != "Be\nbrief." {
		t.Errorf("system %q", r.c.system)
	}
	if got := r.send("/clear"); !strings.Contains(got, "Cleared session context") || len(r.c.history) != 0 {
		t.Errorf("/clear: %q, history %q", got, r.c.history)
	}
	// Ctrl-C at the prompt says how to leave; Ctrl-D leaves.
	n := r.prompts()
	r.interrupt <- struct{}{}
	r.waitOut(n + 1)
	if !strings.Contains(r.out.String(), "Use Ctrl + d or /bye to exit.") {
		t.Errorf("no hint after Ctrl-C at the prompt: %q", r.out.String())
	}
	r.in.Close()
	if err := <-r.done; err != nil {
		t.Errorf("end of input: %v", err)
	}
}

func TestChatBye(t *testing.T) {
	r := startREPL(t, runner.Options{})
	r.waitOut(1)
	io.WriteString(r.in, "/bye\n")
	if err := <-r.done; err != nil {
		t.Error(err)
	}
}

// Ctrl-C in the middle of an answer stops that answer, not the REPL; the
// part written stays in the history.
func TestChatInterruptStopsTheAnswer(t *testing.T) {
	var steps int
	reached, release := make(chan struct{}), make(chan struct{})
	r := startREPL(t, runner.Options{BeforeStep: func() {
		steps++
		if steps == 4 { // the prefill and two tokens have run
			close(reached)
			<-release
		}
	}}, "-n", "100", "--ignore-eos")
	cancelled := make(chan struct{})
	r.c.cancelled = func() { close(cancelled) }
	r.waitOut(1)
	io.WriteString(r.in, "Who made the heaven?\n")
	<-reached
	r.interrupt <- struct{}{}
	// The answer is cancelled before the engine goes on (else it could end
	// by itself first); the runner frees the slot at its next step.
	<-cancelled
	close(release)
	r.waitOut(2)
	out := r.out.String()
	if !strings.Contains(out, "(stopped)") {
		t.Fatalf("no (stopped) after Ctrl-C: %q", out)
	}
	if len(r.c.history) != 2 || len(r.eng().Tokenizer().Encode(r.c.history[1].Content)) >= 100 {
		t.Errorf("history after the interrupt: %q", r.c.history)
	}
	// The REPL goes on.
	r.send("And the earth?")
	if len(r.c.history) != 4 {
		t.Errorf("after the next turn, history %q", r.c.history)
	}
}

func (r *repl) eng() *runner.Engine { return r.c.eng }

// A chat that outgrows the context loses its oldest turns, with a note.
func TestChatDropsOldTurns(t *testing.T) {
	r := startREPL(t, runner.Options{Context: 96}, "-n", "4")
	r.waitOut(1)
	r.send("/set system Thou art the scribe.")
	line := "And God said, Let there be light: and there was light."
	for range 4 {
		r.send(line)
	}
	if !strings.Contains(r.errw.String(), "dropped the 2 oldest messages") {
		t.Errorf("stderr %q: want a note on the dropped turns", r.errw.String())
	}
	if len(r.c.history) >= 8 || r.c.system == "" {
		t.Errorf("history %d messages, system %q", len(r.c.history), r.c.system)
	}
	if got := r.send(strings.Repeat(line+" ", 10)); !strings.Contains(got, "too long") {
		t.Errorf("a message longer than the context: %q", got)
	}
}

func TestTruncatePrompt(t *testing.T) {
	for _, tc := range []struct {
		len, n, ctx, keep int
		warn, err         string
	}{
		{10, 4, 16, 10, "", ""},
		{14, 4, 16, 12, "dropped its first 2 tokens, keeping the last 12", ""},
		{100, 4, 16, 12, "dropped its first 88", ""},
		{100, 100, 16, 8, "room for 8 new ones", ""}, // at most half the context goes to the answer
		{100, -1, 16, 8, "keeping the last 8", ""},
		{5, 4, 1, 0, "", "too small"},
	} {
		var e strings.Builder
		ids := make([]int, tc.len)
		for i := range ids {
			ids[i] = i
		}
		kept, err := truncatePrompt(ids, tc.n, tc.ctx, &e)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: error %v", tc, err)
			}
			continue
		}
		if err != nil || len(kept) != tc.keep || (tc.keep > 0 && kept[len(kept)-1] != tc.len-1) {
			t.Errorf("%+v: kept %v, %v", tc, kept, err)
		}
		if !strings.Contains(e.String(), tc.warn) || (tc.warn == "") != (e.Len() == 0) {
			t.Errorf("%+v: stderr %q", tc, e.String())
		}
	}
}

// grok run --truncate warns and generates from the prompt's end.
func TestRunTruncate(t *testing.T) {
	long := strings.Repeat("In the beginning God created the heaven and the earth. ", 10)
	out, errs, code := grok(t, "run", "-m", tiny, "-c", "32", "-n", "4", "--temp", "0", "--truncate", "-q", long)
	if code != 0 || !strings.Contains(errs, "warning: --truncate") || !strings.Contains(errs, "keeping the last 28") {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
	if len(out) >= len(long) {
		t.Errorf("the echoed prompt is the whole one, not what the model read: %q", out)
	}
	_, errs, code = grok(t, "run", "-m", tiny, "-c", "32", "-n", "4", long)
	if code == 0 {
		t.Errorf("without --truncate a prompt longer than the context should fail: %q", errs)
	}
}

func TestModelChatTemplate(t *testing.T) {
	m, err := loader.Open(tiny, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for flagValue, want := range map[string]string{"": "plain", "chatml": "chatml", "grok-2": "grok-2"} {
		tmpl, err := modelChatTemplate(m, flagValue)
		if err != nil || tmpl.Name() != want {
			t.Errorf("--chat-template %q: %v, %v; want %s", flagValue, tmpl, err, want)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "t.jinja")
	os.WriteFile(file, []byte("{% for m in messages %}<{{ m.content }}>{% endfor %}"), 0o644)
	if tmpl, err := modelChatTemplate(m, file); err != nil || tmpl.Name() != file {
		t.Errorf("a file: %v, %v", tmpl, err)
	}
	if _, err := modelChatTemplate(m, "nonesuch"); err == nil || !strings.Contains(err.Error(), "chatml") {
		t.Errorf("an unknown name: %v", err)
	}
	os.WriteFile(file, []byte("{% if %}"), 0o644)
	if _, err := modelChatTemplate(m, file); err == nil || !strings.Contains(err.Error(), "does not compile") {
		t.Errorf("a broken file: %v", err)
	}
	// A Grok-2 model without a template of its own gets Grok-2's.
	g2, err := loader.Open("../../testdata/grok2-tiny/grok2-tiny.gguf", loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if tmpl, err := modelChatTemplate(g2, ""); err != nil || tmpl.Name() != "grok-2" {
		t.Errorf("grok2-tiny: %v, %v", tmpl, err)
	}
	// Hugging Face's files beside safetensors.
	for files, want := range map[string]string{
		"chat_template.jinja":   "{{ messages[0].content }}",
		"tokenizer_config.json": `{"chat_template": "{{ messages[0].content }}!"}`,
		"named":                 `{"chat_template": [{"name": "tool_use", "template": "x{{ messages[0].content }}"}, {"name": "default", "template": "d{{ messages[0].content }}"}]}`,
	} {
		d := t.TempDir()
		name := files
		if name == "named" {
			name = "tokenizer_config.json"
		}
		os.WriteFile(filepath.Join(d, name), []byte(want), 0o644)
		src, from, err := fileChatTemplate(&loader.Model{Format: "safetensors", Path: d})
		if err != nil || src == "" || !strings.Contains(from, name) {
			t.Errorf("%s: %q from %q, %v", files, src, from, err)
		}
		if files == "named" && !strings.HasPrefix(src, "d") {
			t.Errorf("named templates: %q, want the default one", src)
		}
	}
}

package chattemplate

import (
	"errors"
	"strings"
	"testing"
)

var (
	chat = []Message{
		{"system", "You are a helpful assistant."},
		{"user", "Who made the heaven?"},
		{"assistant", "God made the heaven and the earth."},
		{"user", `  And then? "é" `},
	}
	noSystem = []Message{{"user", "Hello"}, {"assistant", " Hi. "}, {"user", "Bye"}}
	tokens   = Tokens{BOS: "<s>", EOS: "</s>"}
)

// The expected prompts are what Python's jinja2 3.1.6 renders from the same
// sources in Hugging Face's environment (trim_blocks, lstrip_blocks,
// raise_exception), which is apply_chat_template's.
func TestBuiltins(t *testing.T) {
	for _, tc := range []struct {
		name, conv, want, err string
	}{
		{"plain", "chat", "System: You are a helpful assistant.\nUser: Who made the heaven?\nAssistant: God made the heaven and the earth.\nUser:   And then? \"é\" \nAssistant:", ""},
		{"plain", "nosys", "User: Hello\nAssistant:  Hi. \nUser: Bye\nAssistant:", ""},
		{"grok-2", "chat", "System: You are a helpful assistant.<|separator|>\n\nHuman: Who made the heaven?<|separator|>\n\nAssistant: God made the heaven and the earth.<|separator|>\n\nHuman: And then? \"é\"<|separator|>\n\nAssistant:", ""},
		{"grok-2", "nosys", "Human: Hello<|separator|>\n\nAssistant:  Hi. <|separator|>\n\nHuman: Bye<|separator|>\n\nAssistant:", ""},
		{"chatml", "chat", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWho made the heaven?<|im_end|>\n<|im_start|>assistant\nGod made the heaven and the earth.<|im_end|>\n<|im_start|>user\n  And then? \"é\" <|im_end|>\n<|im_start|>assistant\n", ""},
		{"chatml", "nosys", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n Hi. <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n", ""},
		{"llama-3", "chat", "<s><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho made the heaven?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nGod made the heaven and the earth.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd then? \"é\"<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", ""},
		{"llama-3", "nosys", "<s><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", ""},
		{"mistral", "chat", "", "Conversation roles must alternate user/assistant/user/assistant/..."},
		{"mistral", "nosys", "<s>[INST] Hello [/INST] Hi. </s>[INST] Bye [/INST]", ""},
		{"gemma", "chat", "", "System role not supported"},
		{"gemma", "nosys", "<s><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi.<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n", ""},
	} {
		t.Run(tc.name+"/"+tc.conv, func(t *testing.T) {
			tmpl, err := Builtin(tc.name, tokens)
			if err != nil {
				t.Fatal(err)
			}
			msgs := chat
			if tc.conv == "nosys" {
				msgs = noSystem
			}
			got, err := tmpl.Render(msgs, true)
			if tc.err != "" {
				if err == nil || !errors.Is(err, ErrTemplate) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestBuiltinStops(t *testing.T) {
	for name, want := range map[string]string{
		"plain": "\nUser:", "grok-2": "<|separator|>,<|eos|>", "chatml": "<|im_end|>",
		"llama-3": "<|eot_id|>", "mistral": "</s>", "gemma": "<end_of_turn>",
	} {
		tmpl, err := Builtin(name, tokens)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(tmpl.Stops(), ","); got != want {
			t.Errorf("%s: stops %q, want %q", name, got, want)
		}
	}
	if _, err := Builtin("nope", tokens); err == nil || !strings.Contains(err.Error(), "chatml") {
		t.Errorf("an unknown name: %v, want an error listing the names", err)
	}
}

// Features that real templates (Llama 3.1's, Qwen's, Mistral's…) use, and
// the stops found in a file's template.
func TestParse(t *testing.T) {
	src := `{%- set ns = namespace(sys='') -%}
{%- for m in messages -%}
  {%- if m.role == 'system' %}{% set ns.sys = m.content | trim %}{% continue %}{% endif -%}
  {{- '<|im_start|>' ~ m['role'] ~ '\n' ~ m.content.strip() ~ '<|im_end|>\n' -}}
{%- endfor -%}
{%- if ns.sys %}[{{ ns.sys | upper }}]{% endif -%}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif -%}
{{- eos_token if messages | length > 9 else '' -}}`
	tmpl, err := Parse("file", src, tokens)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.Render(chat, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>user\nWho made the heaven?<|im_end|>\n<|im_start|>assistant\nGod made the heaven and the earth.<|im_end|>\n<|im_start|>user\nAnd then? \"é\"<|im_end|>\n[YOU ARE A HELPFUL ASSISTANT.]<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if s := strings.Join(tmpl.Stops(), ","); s != "<|im_end|>,</s>" {
		t.Errorf("stops %q, want <|im_end|> and the EOS the template writes", s)
	}
}

// A broken template is refused at Parse with a message that says why.
func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"syntax", "{% for m in messages %}{{ m.content }}", "does not compile"},
		{"empty", "  \n", "empty"},
		{"raises", "{{ raise_exception('no user turns here') }}", "no user turns here"},
		{"recursive macro", "{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(messages) }}", "macro f calls itself"},
		{"mutual recursion", "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}{{ messages[0].content }}", "calls itself"},
		{"drops the content", "{% for m in messages %}{{ m.role }}{% endfor %}", "leaves the message out"},
		{"huge output", "{{ 'x' * 2000000 }}{{ messages[0].content }}", "more than"},
		{"too large", strings.Repeat(" ", MaxSourceBytes+1), "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("tokenizer.chat_template", tc.src, tokens)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Macros that call each other without a cycle are fine.
	if _, err := Parse("ok", "{% macro a(x) %}<{{ x }}>{% endmacro %}{% macro b(x) %}{{ a(x) }}{% endmacro %}{% for m in messages %}{{ b(m.content) }}{% endfor %}", tokens); err != nil {
		t.Error(err)
	}
}

// byteTokens counts a byte a token.
func byteTokens(s string) []int { return make([]int, len(s)) }

func TestFit(t *testing.T) {
	tmpl, err := Builtin("plain", tokens)
	if err != nil {
		t.Fatal(err)
	}
	long := []Message{
		{"system", "S"},
		{"user", "u1"}, {"assistant", "a1"},
		{"user", "u2"}, {"assistant", "a2"}, {"assistant", "a2b"},
		{"user", "u3"}, {"assistant", "a3"},
		{"user", "u4"},
	}
	full, _ := tmpl.Render(long, true)
	render := func(msgs ...Message) string { p, _ := tmpl.Render(msgs, true); return p }
	for _, tc := range []struct {
		name    string
		limit   int
		want    string
		dropped int
		fits    bool
	}{
		{"fits", len(full), full, 0, true},
		{"one turn", len(full) - 1, render(long[0], long[3], long[4], long[5], long[6], long[7], long[8]), 2, true},
		{"two turns", len(full) - 24, render(long[0], long[6], long[7], long[8]), 5, true},
		{"last turn only", len(render(long[0], long[8])), render(long[0], long[8]), 7, true},
		{"nothing fits", 5, render(long[0], long[8]), 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := tmpl.Fit(long, tc.limit, byteTokens)
			if err != nil {
				t.Fatal(err)
			}
			if f.Prompt != tc.want || f.Dropped != tc.dropped || f.Fits != tc.fits || len(f.IDs) != len(f.Prompt) {
				t.Errorf("got %q dropped %d fits %v, want %q dropped %d fits %v", f.Prompt, f.Dropped, f.Fits, tc.want, tc.dropped, tc.fits)
			}
			if f.DroppedTokens != len(full)-len(f.Prompt) {
				t.Errorf("dropped tokens %d, want %d", f.DroppedTokens, len(full)-len(f.Prompt))
			}
		})
	}
	// A conversation with one turn cannot lose any.
	f, err := tmpl.Fit(long[:2], 3, byteTokens)
	if err != nil || f.Fits || f.Dropped != 0 {
		t.Errorf("one turn: %+v, %v", f, err)
	}
	// Strict templates keep working: turns start at user messages.
	m, _ := Builtin("mistral", tokens)
	if _, err := m.Fit(noSystem, 20, byteTokens); err != nil {
		t.Errorf("mistral: %v", err)
	}
}

package chattemplate

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// builtin is a template known by name, with the strings that end its
// assistant turns.
type builtin struct {
	source string
	stops  func(Tokens) []string
	about  string
}

var builtins = map[string]builtin{
	// Grok-1 is a base model: a line per message and an open assistant
	// turn; the model would go on to write the user's next line.
	"plain": {
		source: `{%- for m in messages -%}` +
			`{%- if m.role == 'system' or m.role == 'developer' -%}{%- set label = 'System' -%}` +
			`{%- elif m.role == 'user' -%}{%- set label = 'User' -%}` +
			`{%- elif m.role == 'assistant' -%}{%- set label = 'Assistant' -%}` +
			`{%- else -%}{%- set label = 'Tool' -%}{%- endif -%}` +
			`{{- label + ': ' + m.content + '\n' -}}` +
			`{%- endfor -%}` +
			`{%- if add_generation_prompt -%}{{- 'Assistant:' -}}{%- endif -%}`,
		stops: func(Tokens) []string { return []string{"\nUser:"} },
		about: "System:/User:/Assistant: lines, for base models (Grok-1)",
	},
	// xai-org/grok-2, as SGLang's tiktoken tokenizer and llama.cpp's
	// LLM_CHAT_TEMPLATE_GROK_2 render it.
	"grok-2": {
		source: "{% for message in messages %}{% if message['role'] == 'user' %}{{ 'Human: ' + message['content'].strip() + '<|separator|>\\n\\n' }}" +
			"{% elif message['role'] == 'system' %}{{ 'System: ' + message['content'].strip() + '<|separator|>\\n\\n' }}" +
			"{% elif message['role'] == 'assistant' %}{{ 'Assistant: '  + message['content'] + '<|separator|>\\n\\n' }}{% endif %}{% endfor %}" +
			"{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
		stops: func(Tokens) []string { return []string{"<|separator|>", "<|eos|>"} },
		about: "Human: …<|separator|> turns, Grok-2's",
	},
	"chatml": {
		source: "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}" +
			"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
		stops: func(Tokens) []string { return []string{"<|im_end|>"} },
		about: "<|im_start|>role … <|im_end|> (Qwen, Hermes, …)",
	},
	// Meta-Llama-3-8B-Instruct's tokenizer_config.json.
	"llama-3": {
		source: "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}" +
			"{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}" +
			"{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
		stops: func(Tokens) []string { return []string{"<|eot_id|>"} },
		about: "<|start_header_id|>role<|end_header_id|> … <|eot_id|> (Llama 3)",
	},
	// Mistral-7B-Instruct-v0.1's: user and assistant turns must alternate.
	"mistral": {
		source: "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
			"{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}" +
			"{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
		stops: func(t Tokens) []string {
			if t.EOS != "" {
				return []string{t.EOS}
			}
			return nil
		},
		about: "[INST] … [/INST] (Mistral 7B Instruct; user and assistant only)",
	},
	// gemma-2-2b-it's: no system role.
	"gemma": {
		source: "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}" +
			"{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
			"{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}" +
			"{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}" +
			"{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
		stops: func(Tokens) []string { return []string{"<end_of_turn>"} },
		about: "<start_of_turn>user … <end_of_turn> (Gemma; no system role)",
	},
}

// Names lists the built-in templates.
func Names() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Describe is a line about each built-in template, for help texts.
func Describe() string {
	var b strings.Builder
	for _, n := range Names() {
		fmt.Fprintf(&b, "%s: %s; ", n, builtins[n].about)
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// IsBuiltin reports whether name is a built-in template.
func IsBuiltin(name string) bool {
	_, ok := builtins[name]
	return ok
}

// Builtin returns the built-in template name, rendered with tok.
func Builtin(name string, tok Tokens) (*Template, error) {
	b, ok := builtins[name]
	if !ok {
		return nil, fmt.Errorf("no built-in chat template %q (there are %s)", name, strings.Join(Names(), ", "))
	}
	t, err := Parse(name, b.source, tok)
	if err != nil {
		return nil, err // unreachable: the tests render every built-in
	}
	t.stops = slices.Clone(b.stops(tok))
	return t, nil
}

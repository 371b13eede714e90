package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/runner"
)

// llama.cpp's spellings work, and the commands default to the embedded
// demo model as run does.
func TestLlamaFlagsAndDefaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		stdout []string // substrings
		stderr []string
		absent []string // not in stdout+stderr
	}{
		{"version", []string{"--version"}, []string{"grok ", "go1"}, nil, nil},
		{"-p and --n-predict", []string{"run", "-p", "In the beginning", "--n-predict", "4", "--temp", "0", "-q"},
			[]string{"In the beginning "}, nil, []string{"seed:"}},
		{"-n 0 generates nothing", []string{"run", "-p", "In the beginning", "-n", "0", "--seed", "1"},
			[]string{"In the beginning\n"}, []string{"generation: 0 tokens"}, []string{"tok/s"}},
		{"random seed printed", []string{"run", "-p", "In the beginning", "-n", "2"}, nil, []string{"seed: "}, nil},
		{"-ngl and -fa", []string{"run", "-ngl", "99", "-fa", "on", "--ctx-size", "64", "-p", "And", "-n", "1", "--seed", "3"},
			[]string{"And"}, []string{"no GPU offload", "-fa: accepted"}, []string{"on And"}},
		{"inspect embedded", []string{"inspect"}, []string{"grok-tiny-kjv", "parameters", "6435072 (6.4M)", "general.name", "tokenizer.ggml.tokens", "[4096 × string]"}, nil, nil},
	} {
		var o, e bytes.Buffer
		code := runMain(tc.args, &o, &e)
		if code != 0 {
			t.Errorf("%s: exit %d: %s", tc.name, code, e.String())
			continue
		}
		for _, w := range tc.stdout {
			if !strings.Contains(o.String(), w) {
				t.Errorf("%s: stdout %q lacks %q", tc.name, o.String(), w)
			}
		}
		for _, w := range tc.stderr {
			if !strings.Contains(e.String(), w) {
				t.Errorf("%s: stderr %q lacks %q", tc.name, e.String(), w)
			}
		}
		for _, w := range tc.absent {
			if strings.Contains(o.String()+e.String(), w) {
				t.Errorf("%s: output has %q: %q %q", tc.name, w, o.String(), e.String())
			}
		}
	}
}

// An unknown flag gets one line and a hint, not the help (twice).
func TestUnknownFlagOneLine(t *testing.T) {
	for _, cmd := range []string{"run", "serve", "inspect", "logits", "tokenize"} {
		_, e, code := grok(t, cmd, "--no-such-flag")
		if code != 2 || strings.Contains(e, "flags:") || strings.Count(e, "no-such-flag") != 1 ||
			strings.Count(e, "\n") > 2 || !strings.Contains(e, "grok "+cmd+" -h") {
			t.Errorf("%s: exit %d, stderr %q", cmd, code, e)
		}
	}
	// -h still prints the help, once.
	_, e, code := grok(t, "run", "-h")
	if code != 0 || strings.Count(e, "usage: grok run") != 1 || !strings.Contains(e, "-n-predict") {
		t.Errorf("run -h: exit %d, %q", code, e)
	}
}

// run and serve refuse a tokenizer smaller than the model's vocabulary
// before they allocate anything (see server.CheckVocabulary).
func TestNewEngineRefusesPaddedVocabulary(t *testing.T) {
	m, err := loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
	if err != nil {
		t.Fatal(err)
	}
	padded := *m.LanguageModel
	padded.Config.VocabSize += 64
	pm := *m
	pm.LanguageModel = &padded
	pm.Config = padded.Config
	_, err = newEngine(&pm, nil, runner.Options{Context: 8}, "-c", func(string) {})
	if err == nil || !strings.Contains(err.Error(), "only 4096 pieces") {
		t.Errorf("newEngine: %v", err)
	}
}

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/grok-go/grok/loader"
)

func init() {
	register(command{
		name:    "tokenize",
		usage:   "[-t tokenizer.model|tokenizer.tok.json|tokenizer.json | -m MODEL]  < one JSON string per line",
		summary: "encode JSON strings from stdin to JSON arrays of token ids",
		run:     func(a []string, o, e io.Writer) error { return runTokenize(a, os.Stdin, o, e, false) },
	})
	register(command{
		name:    "detokenize",
		usage:   "[-t tokenizer.model|tokenizer.tok.json|tokenizer.json | -m MODEL]  < one JSON array of ids per line",
		summary: "decode JSON arrays of token ids from stdin to JSON strings",
		run:     func(a []string, o, e io.Writer) error { return runTokenize(a, os.Stdin, o, e, true) },
	})
}

func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer, decode bool) error {
	name := "tokenize"
	if decode {
		name = "detokenize"
	}
	fs := newFlagSet(name, "[-t tokenizer.model|tokenizer.tok.json|tokenizer.json | -m MODEL]", stderr)
	tpath := fs.String("t", "", "a tokenizer file: SentencePiece tokenizer.model, Grok-2's tokenizer.tok.json or a Hugging Face tokenizer.json")
	mpath := fs.String("m", "", "a model whose embedded vocabulary to use (GGUF; default: the embedded demo model)")
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	var tok loader.Tokenizer
	switch {
	case *tpath != "" && *mpath != "":
		return usagef("give -t or -m, not both")
	case *tpath != "":
		var err error
		if tok, err = loader.LoadTokenizer(*tpath); err != nil {
			return err
		}
	default:
		mf := &modelFlags{path: mpath, tokenizer: new(string), preset: new(string), ropeScaling: new(string)}
		m, err := openModelOrDefault(mf, stderr)
		if err != nil {
			return err
		}
		defer m.Close()
		if tok = m.Tokenizer; tok == nil {
			return errors.New("the model has no tokenizer")
		}
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w) // one value per line; no HTML escaping of <, >, &
	enc.SetEscapeHTML(false)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var out any
		if decode {
			var ids []int
			if err := json.Unmarshal(sc.Bytes(), &ids); err != nil {
				return fmt.Errorf("line %d: want a JSON array of token ids: %v", line, err)
			}
			text, err := tok.Decode(ids)
			if err != nil {
				return fmt.Errorf("line %d: %v", line, err)
			}
			out = text
		} else {
			var text string
			if err := json.Unmarshal(sc.Bytes(), &text); err != nil {
				return fmt.Errorf("line %d: want a JSON string: %v", line, err)
			}
			ids := tok.Encode(text)
			if ids == nil {
				ids = []int{}
			}
			out = ids
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return sc.Err()
}

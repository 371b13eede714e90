package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"github.com/grok-go/grok/kernels"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
)

func init() {
	register(command{
		name:    "logits",
		usage:   "[-m MODEL] --tokens 5,17,42 [--tokens 7,8] [--incremental] [-o FILE]",
		summary: "write the logits of token sequences as little-endian float32",
		run:     runLogits,
	})
}

// parseTokens reads "5,17,42" into ids.
func parseTokens(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("bad token id %q", f)
		}
		ids = append(ids, v)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("empty token list %q", s)
	}
	return ids, nil
}

func runLogits(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("logits", "[-m MODEL] --tokens 5,17,42 [--tokens 7,8] [--incremental] [-o FILE]", stderr)
	mf := addModelFlags(fs)
	addTPFlag(fs, mf)
	var toks stringList
	fs.Var(&toks, "tokens", "comma-separated token ids of one sequence (repeat for a batch)")
	incremental := fs.Bool("incremental", false, "feed the tokens one at a time through the KV cache")
	out := fs.String("o", "-", "output file (- for stdout)")
	var precision precisionFlag
	fs.Var(&precision, "precision", precisionHelp+" (sequences of one token, and --incremental, are decode)")
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if len(toks) == 0 {
		return usagef("at least one --tokens is required")
	}
	seqs := make([][]int, len(toks))
	maxLen := 0
	for i, s := range toks {
		var err error
		if seqs[i], err = parseTokens(s); err != nil {
			return usagef("--tokens: %v", err)
		}
		maxLen = max(maxLen, len(seqs[i]))
	}
	m, err := openModelOrDefault(mf, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	m.LanguageModel.Precision = precision.p
	if precision.p == kernels.Fast {
		fmt.Fprintln(stderr, "grok logits: precision", precisionNote(precision.p, m.LanguageModel))
	}
	logits, err := evalLogits(m.LanguageModel, seqs, *incremental)
	if err != nil {
		return err
	}
	var w io.Writer = stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var buf [4]byte
	for _, seq := range logits {
		for _, v := range seq {
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(v))
			bw.Write(buf[:])
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if f, ok := w.(*os.File); ok && *out != "-" {
		return f.Close()
	}
	return nil
}

// evalLogits runs all sequences as one batch, either in one pass or token by
// token through the KV memory, and returns each sequence's [T × vocab]
// logits, position-major.
func evalLogits(lm *model.LanguageModel, seqs [][]int, incremental bool) ([][]float32, error) {
	c := &lm.Config
	maxLen := 0
	for i, s := range seqs {
		if len(s) > c.SequenceLen {
			return nil, fmt.Errorf("sequence %d has %d tokens, more than the model's context of %d", i+1, len(s), c.SequenceLen)
		}
		maxLen = max(maxLen, len(s))
	}
	mem, err := lm.NewKVMemory(len(seqs), maxLen)
	if err != nil {
		return nil, err
	}
	V := c.VocabSize
	res := make([][]float32, len(seqs))
	if !incremental {
		in := make([]model.Input, len(seqs))
		for i, s := range seqs {
			in[i] = model.Input{Slot: i, Tokens: s, AllLogits: true}
		}
		out, err := lm.Forward(mem, in)
		if err != nil {
			return nil, err
		}
		off := 0
		for i, s := range seqs {
			res[i] = append([]float32(nil), out[off:off+len(s)*V]...)
			off += len(s) * V
		}
		return res, nil
	}
	var in []model.Input
	var who []int
	for t := 0; t < maxLen; t++ {
		in, who = in[:0], who[:0]
		for i, s := range seqs {
			if t < len(s) {
				in = append(in, model.Input{Slot: i, Tokens: s[t : t+1]})
				who = append(who, i)
			}
		}
		out, err := lm.Forward(mem, in)
		if err != nil {
			return nil, err
		}
		for j, i := range who {
			res[i] = append(res[i], out[j*V:(j+1)*V]...)
		}
	}
	return res, nil
}

// modelFlags are the flags every model-using command shares.
type modelFlags struct {
	path, tokenizer, preset, ropeScaling *string
	tp                                   *int  // --tp (addTPFlag), or nil: one shard
	numa                                 *bool // --numa (addTPFlag), or nil
}

// addTPFlag adds --tp and --numa to the commands that run the model.
func addTPFlag(fs *flag.FlagSet, mf *modelFlags) {
	mf.tp = fs.Int("tp", 1, "split the model into N shards on its model axis (tensor parallelism), run in this process on the threads divided among them; N must divide the kv heads")
	mf.numa = fs.Bool("numa", false, numaHelp)
}

// shards returns --tp's value (1 without the flag).
func (f *modelFlags) shards() int {
	if f.tp == nil {
		return 1
	}
	return *f.tp
}

// options are the loader options of the flags; --numa's notes go to
// stderr.
func (f *modelFlags) options(stderr io.Writer) loader.Options {
	o := loader.Options{TP: f.shards(), Pool: parallel.Default()}
	if f.numa != nil && *f.numa {
		o.Place = placeNUMA(numaRoot, o.TP, o.Pool, stderr)
	}
	if f.tokenizer != nil {
		o.Tokenizer = *f.tokenizer
	}
	if f.preset != nil {
		o.Preset = *f.preset
	}
	if f.ropeScaling != nil {
		o.RopeScaling = *f.ropeScaling
	}
	return o
}

func addModelFlags(fs interface {
	String(name, value, usage string) *string
}) *modelFlags {
	return &modelFlags{
		path:        fs.String("m", "", "model: a GGUF file, an xAI checkpoint folder, or safetensors (file or folder)"),
		tokenizer:   fs.String("tokenizer", "", "tokenizer.model for formats that do not embed one"),
		preset:      fs.String("preset", "", "config preset for an xAI checkpoint without config.json (grok-1)"),
		ropeScaling: fs.String("rope-scaling", "none", "RoPE scaling: none (plain RoPE; Grok-2's YaRN keys are ignored, as SGLang runs it) or yarn (apply a GGUF's grok.rope.scaling.* keys, or Grok-2 config.json's, as llama.cpp does)"),
	}
}

func (f *modelFlags) open(stderr io.Writer) (*loader.Model, error) {
	if *f.path == "" {
		return nil, usagef("-m MODEL is required")
	}
	return loader.Open(*f.path, f.options(stderr))
}

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/grok-go/grok/convert"
	"github.com/grok-go/grok/loader"
)

const (
	convertUsage  = "-i SRC -o DST.gguf [--type " + convert.TypeNames + "] [--tokenizer tokenizer.model] [--preset grok-1] [--name NAME] [-v]"
	quantizeUsage = "[-v] [--split-max-size N[M|G]] IN.gguf OUT.gguf [TYPE: " + convert.QuantizeTypeNames + "; default q8_0]"
)

func init() {
	register(command{
		name:    "convert",
		usage:   convertUsage,
		summary: "convert a model (GGUF, xAI checkpoint, safetensors) to a llama.cpp GGUF",
		run:     runConvert,
	})
	register(command{
		name:    "quantize",
		usage:   quantizeUsage,
		summary: "requantise a GGUF file as llama-quantize does (default q8_0)",
		run:     runQuantize,
	})
}

func runConvert(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("convert", convertUsage, stderr)
	in := fs.String("i", "", "source model: a GGUF file, an xAI checkpoint folder, or safetensors (file, index or folder)")
	out := fs.String("o", "", "output GGUF file (written to a temporary file and renamed when complete)")
	typeName := fs.String("type", "keep", "tensor type: f32, f16, bf16, q8_0, keep (each tensor's own type; xAI int8 → Q8_0 exactly), or a llama-quantize mixture (q4_0 … q6_k, q4_k_m, …: each matrix typed by llama-quantize's rules); norms and router always F32")
	tok := fs.String("tokenizer", "", "vocabulary to embed instead of the source's: a tokenizer.model, tokenizer.tok.json or tokenizer.json, or a GGUF to copy it from")
	preset := fs.String("preset", "", "config preset for an xAI checkpoint without config.json (grok-1)")
	name := fs.String("name", "", "general.name (default: the source GGUF's, else the source's file or folder name)")
	verbose := fs.Bool("v", false, "print progress per tensor (the default when stderr is a terminal)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("unexpected argument %q", pos[0])
	case *in == "":
		return usagef("-i SRC is required")
	case *out == "":
		return usagef("-o DST.gguf is required")
	}
	typ, err := convert.ParseType(*typeName)
	if err != nil {
		return usagef("--type: %v", err)
	}
	// Fail on a bad output path before the (possibly long) loading.
	if err := convert.CheckOutput(*out, *in); err != nil {
		return err
	}
	var vocab loader.Tokenizer
	if *tok != "" {
		if vocab, err = convert.LoadVocab(*tok); err != nil {
			return err
		}
	}
	m, err := loader.Open(*in, loader.Options{Preset: *preset, WeightsOnly: true})
	if err != nil {
		return err
	}
	defer m.Close()
	warn := func(s string) { fmt.Fprintf(stderr, "grok convert: warning: %s\n", s) }
	for _, w := range m.Warnings {
		warn(w)
	}
	opt := convert.Options{Type: typ, Tokenizer: vocab, Name: *name, Warn: warn}
	if *verbose || convertProgressWanted(stderr) {
		opt.Progress = stderr
		fmt.Fprintf(stderr, "converting %s (%s) to %s, type %v\n", *in, m.Format, *out, typ)
	}
	ctx, stop := convertSignalContext()
	defer stop()
	start := time.Now()
	res, err := convert.Convert(ctx, m, *out, opt)
	if err != nil {
		return err
	}
	convertReport(stderr, *out, res, time.Since(start))
	return nil
}

func runQuantize(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("quantize", quantizeUsage, stderr)
	verbose := fs.Bool("v", false, "print progress per tensor (the default when stderr is a terminal)")
	split := fs.String("split-max-size", "", "write gguf-split shards OUT-00001-of-0000N.gguf of at most N[M|G] bytes of tensor data each, as llama-gguf-split does")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	var maxBytes int64
	if *split != "" {
		if maxBytes, err = convert.ParseSplitSize(*split); err != nil {
			return usagef("--split-max-size: %v", err)
		}
	}
	if len(pos) < 2 {
		return usagef("IN.gguf and OUT.gguf are required")
	}
	if len(pos) > 3 {
		return usagef("unexpected argument %q", pos[3])
	}
	typ := convert.FtypeQ8_0
	if len(pos) == 3 {
		if typ, err = convert.ParseQuantizeType(pos[2]); err != nil {
			return usagef("%v", err)
		}
	}
	opt := convert.QuantizeOptions{Warn: func(s string) { fmt.Fprintf(stderr, "grok quantize: warning: %s\n", s) }, SplitMaxBytes: maxBytes}
	if *verbose || convertProgressWanted(stderr) {
		opt.Progress = stderr
		fmt.Fprintf(stderr, "quantizing %s to %s, type %v\n", pos[0], pos[1], typ)
	}
	ctx, stop := convertSignalContext()
	defer stop()
	start := time.Now()
	res, err := convert.Quantize(ctx, pos[0], pos[1], typ, opt)
	if err != nil {
		return err
	}
	out := pos[1]
	if len(res.Files) > 1 {
		out = fmt.Sprintf("%s … %s (%d shards)", res.Files[0], res.Files[len(res.Files)-1], len(res.Files))
	}
	convertReport(stderr, out, res, time.Since(start))
	return nil
}

// convertSignalContext returns a context cancelled by Ctrl-C or SIGTERM, so that
// an interrupted conversion removes its temporary file.
func convertSignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// convertReport prints the one-line summary of a conversion.
func convertReport(w io.Writer, path string, res *convert.Result, d time.Duration) {
	in, out := float64(res.SourceBytes)/1e6, float64(res.Bytes)/1e6
	fmt.Fprintf(w, "wrote %s: %d tensors, %.1f MB from %.1f MB, general.file_type %d, %.1fs (%.0f MB/s read)\n",
		path, res.Tensors, out, in, res.FileType, d.Seconds(), in/max(d.Seconds(), 1e-9))
}

// convertProgressWanted reports whether w is a terminal (a character device), where
// per-tensor progress is shown without -v.
func convertProgressWanted(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

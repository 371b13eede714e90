// Command grok runs Grok-family Mixture-of-Experts models: generation, an
// OpenAI-compatible server, logits evaluation, tokenization, inspection,
// conversion and benchmarks. Run `grok help` for the list of commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

type command struct {
	name, usage, summary string
	run                  func(args []string, stdout, stderr io.Writer) error
}

var commands []command

func register(c command) { commands = append(commands, c) }

func main() {
	os.Exit(runJob(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(args[1:], stdout, stderr)
			if err == nil {
				return 0
			}
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			var ue usageError
			if errors.As(err, &ue) {
				// One line for the mistake and a hint, not the whole help.
				fmt.Fprintf(stderr, "grok %s: %v\nusage: grok %s %s (`grok %s -h` lists the flags)\n", c.name, err, c.name, c.usage, c.name)
				return 2
			}
			fmt.Fprintf(stderr, "grok %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "grok: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: grok <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `grok <command> -h` for a command's flags.")
}

// usageError marks an error in the command line (exit status 2).
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// parseFlagsOnly is parseInterspersed for commands that take no positional
// arguments: one is refused rather than ignored, so that `grok inspect
// FILE` does not quietly describe the default model instead of FILE.
func parseFlagsOnly(fs *flag.FlagSet, args []string) error {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		hint := ""
		if fs.Lookup("m") != nil {
			hint = " (give the model with -m)"
		}
		return usagef("unexpected argument %q%s", pos[0], hint)
	}
	return nil
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("grok run PROMPT -n 10"), as users of llama.cpp expect. The
// flag package's own messages are silenced: -h prints the help once, and a
// bad flag comes back as a usageError for runMain's one-line report.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	args = joinFlashAttn(args)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				if h, ok := helps[fs]; ok {
					h()
				}
				return nil, err
			}
			return nil, usageError{err}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// helps prints each FlagSet's help, for parseInterspersed to call on -h.
var helps = map[*flag.FlagSet]func(){}

// newFlagSet makes a FlagSet whose errors are returned, not printed and
// exited on; -h prints its help (through parseInterspersed) once.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	helps[fs] = func() {
		fmt.Fprintf(stderr, "usage: grok %s %s\n\nflags:\n", name, usage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// joinFlashAttn turns llama.cpp's "-fa on" (a flag with a value, or none in
// older releases) into "-fa=on", so that the value is not taken for the
// prompt.
func joinFlashAttn(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if (a == "-fa" || a == "--fa" || a == "--flash-attn" || a == "-flash-attn") && i+1 < len(args) {
			switch args[i+1] {
			case "on", "off", "auto", "true", "false", "1", "0":
				out = append(out, a+"="+args[i+1])
				i++
				continue
			}
		}
		out = append(out, a)
	}
	return out
}

// llamaCompat are llama.cpp's flags that mean nothing on a CPU engine:
// accepted, so that a llama.cpp command line works, with a note.
type llamaCompat struct {
	ngl *int
	fa  *string
}

func addLlamaCompat(fs *flag.FlagSet) *llamaCompat {
	c := &llamaCompat{ngl: new(int), fa: new(string)}
	for _, n := range []string{"ngl", "n-gpu-layers", "gpu-layers"} {
		fs.IntVar(c.ngl, n, -1, "llama.cpp's GPU layers: accepted; grok runs on the CPU, there is no GPU offload")
	}
	for _, n := range []string{"fa", "flash-attn"} {
		fs.Var(optionalValue{c.fa}, n, "llama.cpp's flash attention (on|off|auto): accepted, no effect (attention is computed the same way either way)")
	}
	return c
}

// notes says which of those flags were given and why they do nothing.
func (c *llamaCompat) notes(fs *flag.FlagSet, stderr io.Writer) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "ngl", "n-gpu-layers", "gpu-layers":
			fmt.Fprintf(stderr, "note: -%s: grok runs on the CPU; there is no GPU offload, the flag has no effect\n", f.Name)
		case "fa", "flash-attn":
			fmt.Fprintf(stderr, "note: -%s: accepted for llama.cpp compatibility; it has no effect (attention is computed the same way either way)\n", f.Name)
		}
	})
}

// optionalValue is a string flag that may be given without a value
// ("-fa" alone means "on").
type optionalValue struct{ p *string }

func (o optionalValue) String() string {
	if o.p == nil {
		return ""
	}
	return *o.p
}
func (o optionalValue) Set(v string) error { *o.p = v; return nil }
func (o optionalValue) IsBoolFlag() bool   { return true }

// splitList reads repeatable, comma-separated values (--cors a,b --cors c).
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
	}
	return out
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

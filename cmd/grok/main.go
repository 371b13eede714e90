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
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
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
				fmt.Fprintf(stderr, "grok %s: %v\nusage: grok %s %s\n", c.name, err, c.name, c.usage)
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

// parseInterspersed parses flags that may come before or after positional
// arguments ("grok run PROMPT -n 10"), as users of llama.cpp expect.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
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

// newFlagSet makes a FlagSet whose errors are returned, not printed and exited on.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: grok %s %s\n\nflags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

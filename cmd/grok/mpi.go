//go:build mpi

package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/grok-go/grok/comm/mpi"
)

// runJob runs the command as one rank of an MPI job when the process was
// started by mpirun (see job), else as runMain does.
func runJob(args []string, stdout, stderr io.Writer) int {
	if !mpi.Launched() {
		return runMain(args, stdout, stderr)
	}
	c, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(stderr, "grok:", err)
		return 1
	}
	if s := os.Getenv("GROK_MPI_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			// Every rank sees the same environment (mpirun -x) or not:
			// refuse on each rather than run with different bounds.
			fmt.Fprintf(stderr, "grok: rank %d: GROK_MPI_TIMEOUT=%q is not a positive duration (e.g. 30s)\n", c.Rank(), s)
			c.Abort(2)
		}
		c.Timeout = d
	}
	if s := os.Getenv("GROK_MPI_SPIN"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			fmt.Fprintf(stderr, "grok: rank %d: GROK_MPI_SPIN=%q is not a duration (e.g. 1ms)\n", c.Rank(), s)
			c.Abort(2)
		}
		c.Spin = d
	}
	if c.Size() == 1 {
		code := runMain(args, stdout, stderr)
		mpi.Finalize()
		return code
	}
	log := stderr
	if c.Rank() != 0 {
		log = prefixed{stderr, fmt.Sprintf("grok: rank %d (%s): ", c.Rank(), c.Host())}
	}
	j := &job{c: c, log: log,
		setTimeout: func(d time.Duration) time.Duration { old := c.Timeout; c.Timeout = d; return old },
		exit: func(code int) {
			if err := mpi.Finalize(); err != nil {
				fmt.Fprintln(log, err)
			}
			os.Exit(code)
		},
	}
	if err := j.refuse(args); err != nil {
		if c.Rank() == 0 {
			fmt.Fprintln(stderr, "grok:", err)
		}
		mpi.Finalize()
		return 2
	}
	theJob = j
	var code int
	if c.Rank() == 0 {
		code = runMain(args, stdout, stderr)
	} else {
		// Ctrl-C is for rank 0's command (chat, serve), which shuts the
		// followers down; mpirun forwards it to every rank.
		signal.Ignore(os.Interrupt)
		code = runMain(args, io.Discard, io.Discard)
	}
	code = j.finish(code)
	if err := mpi.Finalize(); err != nil {
		fmt.Fprintln(log, err)
	}
	return code
}

// prefixed writes each Write to w after prefix (a follower's messages
// name the rank and host they come from).
type prefixed struct {
	w      io.Writer
	prefix string
}

func (p prefixed) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

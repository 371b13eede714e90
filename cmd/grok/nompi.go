//go:build !mpi

package main

import "io"

// runJob is runMain: without the build tag mpi, grok runs as one process.
func runJob(args []string, stdout, stderr io.Writer) int { return runMain(args, stdout, stderr) }

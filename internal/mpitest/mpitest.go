// Package mpitest starts a test binary as the ranks of an MPI job, under
// Open MPI's mpirun or MPICH's Hydra (mpiexec.hydra, mpirun.mpich), for the
// tests of the MPI build (comm/mpi and cmd/grok under the tag mpi).
//
// GROK_MPIRUN names the launcher (default mpirun); its flavour comes from
// its --version output, and each flavour gets its own flags for the same
// job. The launcher must be the MPI the test binary was built against:
// pkg-config's mpi-c is Open MPI on Debian, and an MPICH build needs
// PKG_CONFIG_PATH pointing at an mpi-c.pc made from mpich.pc (docs/scale.md).
package mpitest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Var is the environment variable that names the launcher.
const Var = "GROK_MPIRUN"

// Flavour is a launcher's family, which decides its flags.
type Flavour int

const (
	// OpenMPI is Open MPI's mpirun (ORTE in 4.x, PRRTE in 5.x).
	OpenMPI Flavour = iota + 1
	// Hydra is MPICH's process manager (mpiexec.hydra, mpirun.mpich;
	// also Intel MPI's and MVAPICH's mpiexec).
	Hydra
)

func (f Flavour) String() string {
	switch f {
	case OpenMPI:
		return "Open MPI"
	case Hydra:
		return "Hydra"
	}
	return fmt.Sprintf("Flavour(%d)", int(f))
}

// ParseVersion returns the flavour that a launcher's --version output
// names.
func ParseVersion(out string) (Flavour, error) {
	switch {
	case strings.Contains(out, "Open MPI"), strings.Contains(out, "OpenRTE"):
		return OpenMPI, nil
	case strings.Contains(out, "HYDRA"):
		return Hydra, nil
	}
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return 0, fmt.Errorf("mpitest: a launcher that is neither Open MPI's nor MPICH's Hydra (--version: %q)", line)
}

// Launcher is an installed MPI launcher.
type Launcher struct {
	Path    string // the command as named (GROK_MPIRUN or a default)
	Flavour Flavour
}

// ErrNotInstalled is returned (wrapped) by Find when the launcher is not
// on PATH.
var ErrNotInstalled = errors.New("not installed")

// Find returns the launcher GROK_MPIRUN names, or mpirun.
func Find() (*Launcher, error) {
	name := os.Getenv(Var)
	if name == "" {
		name = "mpirun"
	}
	return Named(name)
}

// Named returns the launcher name, its flavour read from its --version.
func Named(name string) (*Launcher, error) {
	if _, err := exec.LookPath(name); err != nil {
		return nil, fmt.Errorf("mpitest: %s: %w", name, ErrNotInstalled)
	}
	// A launcher that hangs on --version is broken; bound it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("mpitest: %s --version: %v\n%s", name, err, out)
	}
	f, err := ParseVersion(string(out))
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, name)
	}
	return &Launcher{Path: name, Flavour: f}, nil
}

// App is one program of a job: NP ranks running Argv (Argv[0] the
// executable).
type App struct {
	NP   int
	Argv []string
}

// Args returns the launcher's arguments (after its name) for a job of
// apps, an MPMD line when there are several, with env (VAR=value each)
// set on every rank.
//
// Open MPI gets the flags CI needs: it runs as root in a container, with
// more ranks than cores, where shared memory cannot use cross-memory
// attach (process_vm_readv needs ptrace rights containers often lack).
// Hydra needs none of them: it runs as root, starts any number of ranks on
// the local host, and its shared memory does not use cross-memory attach;
// it passes its whole environment to the ranks, and -genv says which
// variables the job depends on.
func (l *Launcher) Args(env []string, apps ...App) []string {
	var a []string
	switch l.Flavour {
	case OpenMPI:
		a = append(a, "--allow-run-as-root", "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism", "none")
		for _, e := range env {
			a = append(a, "-x", e)
		}
	case Hydra:
		for _, e := range env {
			k, v, _ := strings.Cut(e, "=")
			a = append(a, "-genv", k, v)
		}
	}
	for i, app := range apps {
		if i > 0 {
			a = append(a, ":")
		}
		a = append(a, "-n", strconv.Itoa(app.NP))
		a = append(a, app.Argv...)
	}
	return a
}

// Command returns the launcher running apps with env added to every rank's
// environment and to the launcher's own.
func (l *Launcher) Command(env []string, apps ...App) *exec.Cmd {
	cmd := exec.Command(l.Path, l.Args(env, apps...)...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

var (
	findOnce sync.Once
	found    *Launcher
	findErr  error
)

// Launch returns the launcher the tests use (Find's, looked up once per
// process). It skips t when the launcher is not installed and fails it
// when the launcher cannot be used.
func Launch(t testing.TB) *Launcher {
	t.Helper()
	findOnce.Do(func() { found, findErr = Find() })
	switch {
	case errors.Is(findErr, ErrNotInstalled):
		t.Skipf("%v (apt-get install openmpi-bin, or mpich with %s=mpirun.mpich)", findErr, Var)
	case findErr != nil:
		t.Fatal(findErr)
	}
	return found
}

// Other returns an installed launcher of another flavour than f (Open
// MPI's under its Debian names, or MPICH's Hydra), or nil.
func Other(f Flavour) *Launcher {
	names := []string{"mpirun.openmpi", "mpiexec.openmpi", "mpirun"}
	if f == OpenMPI {
		names = []string{"mpiexec.hydra", "mpirun.mpich", "mpiexec.mpich", "mpiexec"}
	}
	for _, n := range names {
		if l, err := Named(n); err == nil && l.Flavour != f {
			return l
		}
	}
	return nil
}

// rankVars are the variables launchers give each rank its rank in: Open
// MPI's, MPICH's (Hydra's PMI, also Slurm's) and PMIx's.
var rankVars = []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}

// Rank returns the rank a launcher gave the process whose environment
// getenv reads, and false when no launcher did.
func Rank(getenv func(string) string) (int, bool) {
	for _, k := range rankVars {
		if r, err := strconv.Atoi(getenv(k)); err == nil && r >= 0 {
			return r, true
		}
	}
	return 0, false
}

// Getenv returns a getenv over environ (VAR=value each, as
// /proc/PID/environ lists them), for Rank of another process.
func Getenv(environ []string) func(string) string {
	return func(k string) string {
		for _, e := range environ {
			if v, ok := strings.CutPrefix(e, k+"="); ok {
				return v
			}
		}
		return ""
	}
}

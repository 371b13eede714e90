package main

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/grok-go/grok/cluster"
	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/loader"
)

// job is this process's place in a model split over the ranks of an MPI
// job (`mpirun -np N grok …`, in a build with the tag mpi; see
// docs/scale.md): rank 0 runs the command and does all the I/O, the other
// ranks load their shards and follow its Forward calls (package cluster).
// It is nil when the process runs alone.
type job struct {
	c comm.Comm
	// log takes this rank's own messages (a follower's stderr is otherwise
	// silent: rank 0 reports for the job).
	log io.Writer
	// loadTimeout is set as the comm's collective timeout while the ranks
	// agree on the model, which each may take a while to map and check.
	setTimeout func(time.Duration) (old time.Duration)
	// exit ends a follower's process (MPI_Finalize, then os.Exit).
	exit func(code int)

	agreed bool
	leader *cluster.Leader
}

var theJob *job

// jobCommands are the commands that run under mpirun: those that run a
// model. The others (convert, quantize, inspect, …) are a single
// process's work.
var jobCommands = map[string]bool{"run": true, "chat": true, "logits": true, "bench": true, "serve": true}

// loadTimeout bounds how long a rank waits for the others to open the model.
const loadTimeout = 10 * time.Minute

// refuse returns the error a command that cannot run under this job gets, or nil.
func (j *job) refuse(args []string) error {
	if len(args) == 0 || jobCommands[args[0]] || args[0] == "help" || strings.HasPrefix(args[0], "-") || args[0] == "version" {
		return nil
	}
	return fmt.Errorf("grok %s does not run under mpirun with %d ranks (run, chat, logits, bench and serve do)", args[0], j.c.Size())
}

// open opens this rank's shard of the model mf names, checks with the
// other ranks that they opened the same model with the same build, and
// then on rank 0 returns it with the Forward calls going to the others;
// on the other ranks it follows rank 0 until it shuts down, and exits.
func (j *job) open(mf *modelFlags) (*loader.Model, error) {
	var err error
	switch {
	case *mf.path == "":
		err = usagef("under mpirun, -m MODEL is required (the same path on every host)")
	case mf.shards() != 1:
		err = usagef("under mpirun the %d ranks are the shards: --tp %d does not apply", j.c.Size(), mf.shards())
	case mf.numa != nil && *mf.numa:
		err = usagef("under mpirun --numa does not apply: bind each rank to a node with mpirun (e.g. --bind-to numa --map-by numa)")
	}
	if err != nil {
		j.agree(cluster.Identity{State: cluster.Failed})
		return nil, err
	}
	opt := mf.options(io.Discard)
	// Counted, so that LanguageModel.Collectives (grok bench) sees the
	// shard's collectives and the broadcast of each call.
	cc := comm.NewCounting(j.c)
	opt.TP, opt.Comm = 1, cc
	m, err := loader.Open(*mf.path, opt)
	id := cluster.Identity{State: cluster.Failed}
	if err == nil {
		id = fingerprint(m)
	} else if j.c.Rank() != 0 {
		fmt.Fprintf(j.log, "%v\n", err)
	}
	if aerr := j.agree(id); err == nil && aerr != nil {
		m.Close()
		err = aerr
		if j.c.Rank() != 0 {
			fmt.Fprintf(j.log, "%v\n", err)
		}
	}
	if err != nil {
		return nil, err
	}
	if j.c.Rank() == 0 {
		j.leader = cluster.NewLeader(cc, cluster.HeartbeatEvery)
		m.LanguageModel.Hook = j.leader
		return m, nil
	}
	lm := m.LanguageModel
	f := cluster.NewFollower(cc, lm, lm.NewPagedKVMemory)
	code, err := f.Run()
	if err != nil {
		fmt.Fprintf(j.log, "%v; aborting the job\n", err)
		j.c.Abort(1)
	}
	j.exit(code)
	return nil, fmt.Errorf("unreachable: the follower exited")
}

// agree runs cluster.Agree once per process, with a timeout long enough
// for every rank to open its model.
func (j *job) agree(id cluster.Identity) error {
	if j.agreed {
		return nil
	}
	j.agreed = true
	id.Build = buildID()
	if j.setTimeout != nil {
		old := j.setTimeout(loadTimeout)
		defer j.setTimeout(old)
	}
	return cluster.Agree(j.c, id)
}

// finish ends rank 0's command: the ranks that never opened a model still
// meet in the agreement, and the followers are told to exit with code.
func (j *job) finish(code int) int {
	if err := j.agree(cluster.Identity{State: cluster.NotOpened}); err != nil {
		if j.c.Rank() == 0 {
			fmt.Fprintf(j.log, "%v\n", err)
		}
		code = max(code, 1)
	}
	if j.leader != nil {
		if err := j.leader.Close(code); err != nil {
			fmt.Fprintf(j.log, "%v\n", err)
			code = max(code, 1)
		}
	}
	return code
}

// buildID names the binary for the agreement: version and commit, and
// when the tree was modified (or the commit is unknown) a digest of the
// executable itself.
func buildID() string {
	id := versionLine()
	modified := true
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.modified" {
				modified = s.Value == "true"
			}
		}
	}
	if modified {
		id += " modified"
		if exe, err := os.Executable(); err == nil {
			if b, err := os.ReadFile(exe); err == nil {
				id += fmt.Sprintf(" sha256:%x", sha256.Sum256(b))
			}
		}
	}
	return id
}

// fingerprint digests the model m was opened from: the config, the tensor
// table (names, types, shapes, sizes, and for GGUF the offsets) and the
// sizes of the files under its path.
func fingerprint(m *loader.Model) cluster.Identity {
	id := cluster.Identity{State: cluster.Loaded}
	full := m.LanguageModel.Sharding().Full
	id.Config = cluster.Digest(m.Format, fmt.Sprintf("%+v", full))
	var table []string
	if m.GGUF != nil {
		table = append(table, fmt.Sprint("data@", m.GGUF.DataOffset))
		for _, t := range m.GGUF.Tensors {
			table = append(table, fmt.Sprint(t.Name, t.Type, t.Dims, t.Offset, t.Size))
		}
	} else {
		for _, t := range m.Tensors() {
			table = append(table, fmt.Sprint(t.Name, t.Type, t.Shape, t.Bytes))
		}
	}
	id.Tensors = cluster.Digest(table...)
	id.Files = cluster.Digest(fileSizes(m.Path)...)
	return id
}

// fileSizes lists path's size, or a folder's files and their sizes, or
// the files that start with path (gguf-split parts).
func fileSizes(path string) []string {
	var out []string
	st, err := os.Stat(path)
	switch {
	case err == nil && !st.IsDir():
		return []string{fmt.Sprint(filepath.Base(path), st.Size())}
	case err == nil:
		filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					rel, _ := filepath.Rel(path, p)
					out = append(out, fmt.Sprint(rel, info.Size()))
				}
			}
			return nil
		})
	default:
		parts, _ := filepath.Glob(path + "*")
		for _, p := range parts {
			if info, err := os.Stat(p); err == nil && !info.IsDir() {
				out = append(out, fmt.Sprint(filepath.Base(p), info.Size()))
			}
		}
	}
	sort.Strings(out)
	return out
}

//go:build mpi

// Package mpi implements comm.Comm over MPI_COMM_WORLD, so that the shards
// of a model split on the mesh's "model" axis can run as the ranks of an MPI
// job on several hosts (`mpirun -np N grok …`, built with `-tags mpi`).
//
// It is a thin cgo binding of the dozen calls the shards need, written here
// rather than taken from an existing Go binding: github.com/sbromberger/gompi
// ignores every MPI error code, broadcasts a []byte as MPI_INT (four times
// the buffer's length) and indexes &x[0] of empty slices;
// github.com/emer/empi only initialises with MPI_THREAD_MULTIPLE and is tied
// to its framework's tensor types; neither has nonblocking collectives, and
// the Go module proxy serves neither. The binding needs Open MPI 4.1 or MPICH
// (any MPI-3 library; pkg-config name mpi-c, as Debian's libopenmpi-dev and
// libmpich-dev install it).
//
// Threading: Init asks for MPI_THREAD_SERIALIZED. Goroutines move between OS
// threads, so the guarantee of MPI_THREAD_FUNNELED (only the thread that
// called Init calls MPI) cannot be kept without pinning the caller, but no
// two calls overlap: every call holds the Comm's mutex, except Abort,
// which must end the job even while another goroutine polls a collective
// (and which Open MPI and MPICH carry out from any thread).
//
// Every collective is started nonblocking (MPI_Iallgather, MPI_Ibcast,
// MPI_Ibarrier) and completed by polling MPI_Test against a deadline, the
// Comm's Timeout: a rank that died or stalls shows as a collective that does
// not complete, and the waiting rank then prints which call it was and ends
// the job with MPI_Abort instead of hanging. Polling spins briefly, then
// sleeps, so a follower rank waiting for its next command uses no CPU.
//
// AllReduceSum is an MPI_Allgather followed by an add in rank order on every
// rank, not MPI_Allreduce: MPI does not promise the order (nor the same
// order on every rank) of MPI_SUM's additions, and the comm.Comm contract is
// the rank-order sum, exactly as comm.Local computes it. The cost is Size
// times the bytes of a ring all-reduce, which for the few thousand floats
// per token a shard sums is a few microseconds.
package mpi

/*
#cgo pkg-config: mpi-c
#include <mpi.h>

static int grok_init(int want, int *got) { return MPI_Init_thread(NULL, NULL, want, got); }
static int grok_initialized(void) { int f = 0; MPI_Initialized(&f); return f; }
static int grok_finalized(void) { int f = 0; MPI_Finalized(&f); return f; }
static int grok_errors_return(void) { return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN); }
static int grok_rank(int *r) { return MPI_Comm_rank(MPI_COMM_WORLD, r); }
static int grok_size(int *n) { return MPI_Comm_size(MPI_COMM_WORLD, n); }
static int grok_iallgather(void *src, int n, void *dst, MPI_Request *req) {
	return MPI_Iallgather(src, n, MPI_FLOAT, dst, n, MPI_FLOAT, MPI_COMM_WORLD, req);
}
static int grok_ibcast(void *buf, int n, int root, MPI_Request *req) {
	return MPI_Ibcast(buf, n, MPI_BYTE, root, MPI_COMM_WORLD, req);
}
static int grok_ibarrier(MPI_Request *req) { return MPI_Ibarrier(MPI_COMM_WORLD, req); }
static int grok_test(MPI_Request *req, int *done) { return MPI_Test(req, done, MPI_STATUS_IGNORE); }
static int grok_abort(int code) { return MPI_Abort(MPI_COMM_WORLD, code); }
static int grok_finalize(void) { return MPI_Finalize(); }
static void grok_error_string(int code, char *buf, int *n) { MPI_Error_string(code, buf, n); }
static int grok_thread_serialized(void) { return MPI_THREAD_SERIALIZED; }
static int grok_max_error_string(void) { return MPI_MAX_ERROR_STRING; }
static int grok_processor_name(char *buf, int *n) { return MPI_Get_processor_name(buf, n); }
static int grok_max_processor_name(void) { return MPI_MAX_PROCESSOR_NAME; }
*/
import "C"

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/grok-go/grok/comm"
)

// DefaultTimeout is how long a collective may wait for the other ranks
// before the job is aborted.
const DefaultTimeout = 30 * time.Second

// DefaultSpin is Comm.Spin's default: longer than a decode step's
// collectives take when the ranks are level, so that they rarely pay a nap
// (figures: docs/scale.md); GROK_MPI_SPIN sets it per job.
const DefaultSpin = time.Millisecond

// Comm is this process's endpoint of MPI_COMM_WORLD. It implements
// comm.Comm; its methods may be called from any goroutine.
type Comm struct {
	mu   sync.Mutex
	rank int
	size int

	// Timeout bounds each collective's wait for the other ranks (0: wait
	// for ever). It may be changed between calls.
	Timeout time.Duration
	// Spin is how long wait polls without pausing before it naps between
	// polls (DefaultSpin). Longer suits ranks with a core each (a host or
	// NUMA node per rank); shorter suits more ranks than cores, where
	// spinning takes the core from the very peer being waited for.
	Spin time.Duration
	// Log receives the message printed before a timeout aborts the job
	// (nil: os.Stderr).
	Log io.Writer

	stats Stats

	gather []float32      // AllReduceSum's scratch: every rank's buffer
	pin    runtime.Pinner // the buffers of the request in flight
	req    C.MPI_Request  // the request in flight (a field: a local would escape to the heap)
	done   C.int
	// nap is wait's pause between polls: a nanosleep, because time.Sleep
	// rounds short sleeps up to the runtime's millisecond timer wait.
	nap syscall.Timespec
}

var _ comm.Comm = (*Comm)(nil)

// Stats counts an endpoint's collectives since Init.
type Stats struct {
	Calls int64         // collectives that moved data or synchronised
	Bytes int64         // bytes received (AllGather, AllReduceSum) or broadcast
	Time  time.Duration // time from each call's start to its completion
}

// Stats returns the counts so far.
func (c *Comm) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

var (
	initOnce sync.Once
	world    *Comm
	initErr  error
)

// Launched reports whether the process looks started by mpirun or another
// MPI launcher (Open MPI's, MPICH's Hydra, PMIx or Slurm's PMI): only then
// does the command line initialise MPI, so that a binary built with the tag
// still runs on its own as a plain process.
func Launched() bool {
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"} {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// launchedSize returns the number of ranks the launcher says it started
// (Open MPI's variable, or the PMI one MPICH's Hydra and Slurm set).
func launchedSize() (int, bool) {
	for _, k := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"} {
		if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
			return n, true
		}
	}
	return 0, false
}

// Init initialises MPI (once per process) and returns the world endpoint.
// It asks for MPI_THREAD_SERIALIZED (see the package doc) and makes MPI
// errors return codes instead of ending the job, so that each becomes a Go
// error naming the call. A world of another size than the launcher
// started (a binary built against another MPI library than the
// launcher's, whose ranks each start alone) is an error.
func Init() (*Comm, error) {
	initOnce.Do(func() {
		var got C.int
		if rc := C.grok_init(C.grok_thread_serialized(), &got); rc != 0 {
			initErr = mpiError("MPI_Init_thread", rc)
			return
		}
		if got < C.grok_thread_serialized() {
			// Every rank links the same library and returns this error,
			// which the caller prints before exiting (an abort here would
			// end the job before the message is out).
			initErr = fmt.Errorf("mpi: the MPI library offers thread level %d, below MPI_THREAD_SERIALIZED", int(got))
			return
		}
		if rc := C.grok_errors_return(); rc != 0 {
			initErr = mpiError("MPI_Comm_set_errhandler", rc)
			return
		}
		var r, n C.int
		if rc := C.grok_rank(&r); rc != 0 {
			initErr = mpiError("MPI_Comm_rank", rc)
			return
		}
		if rc := C.grok_size(&n); rc != 0 {
			initErr = mpiError("MPI_Comm_size", rc)
			return
		}
		if want, ok := launchedSize(); ok && want != int(n) {
			// Each rank would run alone, as a whole job of its own.
			initErr = fmt.Errorf("mpi: the launcher started %d ranks, but MPI_COMM_WORLD has %d: this binary links another MPI library than the launcher's (Open MPI's mpirun and MPICH's mpiexec do not mix)", want, int(n))
			return
		}
		world = &Comm{rank: int(r), size: int(n), Timeout: DefaultTimeout, Spin: DefaultSpin, nap: syscall.Timespec{Nsec: 50_000}}
	})
	return world, initErr
}

// Finalize ends this process's part in MPI; after it no call may be made.
// Every rank must call it before exiting normally.
func Finalize() error {
	if C.grok_initialized() == 0 || C.grok_finalized() != 0 {
		return nil
	}
	if world != nil {
		world.mu.Lock()
		defer world.mu.Unlock()
	}
	if rc := C.grok_finalize(); rc != 0 {
		return mpiError("MPI_Finalize", rc)
	}
	return nil
}

// Rank is this process's rank in MPI_COMM_WORLD.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks in MPI_COMM_WORLD.
func (c *Comm) Size() int { return c.size }

// Host is the name MPI gives this rank's processor (its host name).
func (c *Comm) Host() string {
	buf := make([]byte, int(C.grok_max_processor_name())+1)
	var n C.int
	if C.grok_processor_name((*C.char)(unsafe.Pointer(&buf[0])), &n) != 0 {
		return "?"
	}
	return string(buf[:n])
}

// Abort ends the whole job: every rank exits with code.
func (c *Comm) Abort(code int) { abort(code) }

// abortGrace is how long abort lets the launcher forward this rank's last
// output: MPICH's Hydra tears the job down on MPI_Abort without forwarding
// what is still in flight, which is the message saying why.
const abortGrace = 500 * time.Millisecond

func abort(code int) {
	time.Sleep(abortGrace)
	C.grok_abort(C.int(code))
	os.Exit(code) // MPI_Abort does not return; this is in case it did
}

// AllGather sets dst to every rank's src in rank order.
func (c *Comm) AllGather(dst, src []float32) error {
	if len(dst) != c.size*len(src) {
		return fmt.Errorf("mpi: AllGather of %d elements into %d on %d ranks", len(src), len(dst), c.size)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.allGather(dst, src, "MPI_Iallgather")
}

func (c *Comm) allGather(dst, src []float32, what string) error {
	if len(src) == 0 {
		return nil
	}
	if len(src) > math.MaxInt32 {
		return fmt.Errorf("mpi: %s of %d elements: more than MPI's int count", what, len(src))
	}
	// MPI keeps the pointers until the request completes.
	defer c.pin.Unpin()
	c.pin.Pin(&src[0])
	c.pin.Pin(&dst[0])
	if rc := C.grok_iallgather(unsafe.Pointer(&src[0]), C.int(len(src)), unsafe.Pointer(&dst[0]), &c.req); rc != 0 {
		return mpiError(what, rc)
	}
	c.stats.Bytes += int64(len(dst)) * 4
	return c.wait(what)
}

// AllReduceSum replaces buf by the element-wise sum over the ranks, added
// in rank order (see the package doc).
func (c *Comm) AllReduceSum(buf []float32) error {
	if c.size == 1 || len(buf) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(buf)
	if cap(c.gather) < c.size*n {
		c.gather = make([]float32, c.size*n)
	}
	g := c.gather[:c.size*n]
	if err := c.allGather(g, buf, "MPI_Iallgather (AllReduceSum)"); err != nil {
		return err
	}
	copy(buf, g[:n])
	for q := 1; q < c.size; q++ {
		for i, v := range g[q*n : (q+1)*n] {
			buf[i] += v
		}
	}
	return nil
}

// Bcast copies root's buf into every other rank's buf.
func (c *Comm) Bcast(buf []byte, root int) error {
	if root < 0 || root >= c.size {
		return fmt.Errorf("mpi: Bcast from rank %d of %d", root, c.size)
	}
	if len(buf) == 0 || c.size == 1 {
		return nil
	}
	if len(buf) > math.MaxInt32 {
		return fmt.Errorf("mpi: Bcast of %d bytes: more than MPI's int count", len(buf))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.pin.Unpin()
	c.pin.Pin(&buf[0])
	if rc := C.grok_ibcast(unsafe.Pointer(&buf[0]), C.int(len(buf)), C.int(root), &c.req); rc != 0 {
		return mpiError("MPI_Ibcast", rc)
	}
	c.stats.Bytes += int64(len(buf))
	return c.wait("MPI_Ibcast")
}

// Barrier returns when every rank has called it.
func (c *Comm) Barrier() error {
	if c.size == 1 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc := C.grok_ibarrier(&c.req); rc != 0 {
		return mpiError("MPI_Ibarrier", rc)
	}
	return c.wait("MPI_Ibarrier")
}

// Past these, a wait counts as idle (a follower between requests) and
// sleeps idleSleep between polls.
const (
	idleAfter = 100 * time.Millisecond
	idleSleep = 10 * time.Millisecond
)

// wait polls the request in flight until it completes. It spins for the
// first Spin (a decode step's collectives complete within it when the
// ranks are level), then naps between polls, and sleeps idleSleep at a
// time once it has waited idleAfter: on a host with more runnable threads
// than cores, spinning or yielding takes the core from the very peer being
// waited for. Past the Timeout it reports and aborts the job: the request
// cannot be cancelled, and the other ranks are stuck in the same collective.
func (c *Comm) wait(what string) error {
	start := time.Now()
	c.stats.Calls++
	defer func() { c.stats.Time += time.Since(start) }()
	c.done = 0
	for i := 0; ; i++ {
		if rc := C.grok_test(&c.req, &c.done); rc != 0 {
			return mpiError(what, rc)
		}
		if c.done != 0 {
			return nil
		}
		if i < 64 || i&15 != 0 {
			continue
		}
		el := time.Since(start)
		if c.Timeout > 0 && el > c.Timeout {
			w := c.Log
			if w == nil {
				w = os.Stderr
			}
			fmt.Fprintf(w, "grok: rank %d of %d: %s did not complete in %v: another rank has died or stalled; aborting the job\n",
				c.rank, c.size, what, c.Timeout)
			abort(3)
		}
		switch {
		case el < c.Spin:
		case el < idleAfter:
			syscall.Nanosleep(&c.nap, nil) // see nap
		default:
			time.Sleep(idleSleep)
		}
	}
}

func mpiError(call string, rc C.int) error {
	buf := make([]byte, int(C.grok_max_error_string())+1)
	var n C.int
	C.grok_error_string(rc, (*C.char)(unsafe.Pointer(&buf[0])), &n)
	return fmt.Errorf("mpi: %s: %s (error %d)", call, buf[:n], int(rc))
}

//go:build mpi

package mpi

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/mpitest"
)

// The tests run in two roles. Started by `go test` (not under a launcher),
// TestUnderMpirun starts this test binary again under mpirun with 2 and 4
// ranks; started by mpirun, each rank runs the collective tests below
// against MPI_COMM_WORLD.

func TestMain(m *testing.M) {
	if !Launched() {
		os.Exit(m.Run())
	}
	if _, err := Init(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		code = faultChild()
	}
	if err := Finalize(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// mpirun runs this binary under the launcher (GROK_MPIRUN, see
// internal/mpitest) with np ranks, the test filter run, and env added; it
// returns the combined output and the exit error.
func mpirun(t *testing.T, np int, run string, env ...string) (string, error) {
	t.Helper()
	return launch(t, mpitest.Launch(t), np, run, env...)
}

func launch(t *testing.T, l *mpitest.Launcher, np int, run string, env ...string) (string, error) {
	t.Helper()
	cmd := l.Command(env, mpitest.App{NP: np, Argv: []string{os.Args[0], "-test.run", run, "-test.v"}})
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(2 * time.Minute): // a hang, not a measurement
		cmd.Process.Kill()
		<-done
		t.Fatalf("%s -np %d hung:\n%s", l.Path, np, out.String())
	}
	return "", nil
}

func TestUnderMpirun(t *testing.T) {
	if Launched() {
		t.Skip("the launcher's side")
	}
	for _, np := range []int{2, 4} {
		out, err := mpirun(t, np, "^TestWorld")
		if err != nil {
			t.Fatalf("mpirun -np %d: %v\n%s", np, err, out)
		}
		if n := strings.Count(out, "--- FAIL"); n > 0 || strings.Count(out, "\nPASS") != np {
			t.Fatalf("mpirun -np %d: want %d passing ranks:\n%s", np, np, out)
		}
	}
}

// TestWrongLauncher: started by a launcher of the other MPI (MPICH's for
// a build against Open MPI, or the reverse), each rank would be a world of
// one; Init refuses that, naming the cause.
func TestWrongLauncher(t *testing.T) {
	if Launched() {
		t.Skip("the launcher's side")
	}
	l := mpitest.Launch(t)
	other := mpitest.Other(l.Flavour)
	if other == nil {
		t.Skipf("no launcher other than %s's is installed", l.Flavour)
	}
	out, err := launch(t, other, 2, "^TestWorld")
	if err == nil || !strings.Contains(out, "the launcher started 2 ranks, but MPI_COMM_WORLD has 1") {
		t.Fatalf("%s (%s) -np 2: %v, want every rank to refuse a world of 1:\n%s", other.Path, other.Flavour, err, out)
	}
}

func worldComm(t *testing.T) *Comm {
	if !Launched() {
		t.Skip("run by TestUnderMpirun under mpirun")
	}
	c, err := Init()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func faultComm() *Comm {
	c, _ := Init() // TestMain initialised it
	return c
}

func TestWorldCollectives(t *testing.T) {
	c := worldComm(t)
	n, r := c.Size(), c.Rank()
	if n < 2 || r < 0 || r >= n {
		t.Fatalf("rank %d of %d", r, n)
	}
	// Values whose float32 sum depends on the order: the result must be
	// the rank-order sum, bit for bit, on every rank.
	val := func(q, i int) float32 {
		return []float32{1e8, 1, -1e8, 3.5e-3, 7}[(q+i)%5] * float32(1+i%3)
	}
	buf := make([]float32, 1031)
	for i := range buf {
		buf[i] = val(r, i)
	}
	if err := c.AllReduceSum(buf); err != nil {
		t.Fatal(err)
	}
	for i, got := range buf {
		want := val(0, i)
		for q := 1; q < n; q++ {
			want += val(q, i)
		}
		if got != want {
			t.Fatalf("rank %d: AllReduceSum[%d] = %v, want the rank-order sum %v", r, i, got, want)
		}
	}
	src := []float32{float32(r), -float32(r), 0.5}
	dst := make([]float32, 3*n)
	if err := c.AllGather(dst, src); err != nil {
		t.Fatal(err)
	}
	for q := 0; q < n; q++ {
		if dst[3*q] != float32(q) || dst[3*q+1] != -float32(q) || dst[3*q+2] != 0.5 {
			t.Fatalf("rank %d: AllGather = %v", r, dst)
		}
	}
	if err := c.AllGather(make([]float32, 3), src); err == nil {
		t.Fatal("AllGather into a short dst was accepted")
	}
	for root := 0; root < n; root++ {
		b := []byte{byte(r), 9, byte(r)}
		if err := c.Bcast(b, root); err != nil {
			t.Fatal(err)
		}
		if b[0] != byte(root) || b[1] != 9 || b[2] != byte(root) {
			t.Fatalf("rank %d: Bcast from %d = %v", r, root, b)
		}
	}
	if err := c.Bcast([]byte{1}, n); err == nil {
		t.Fatal("Bcast from a rank past the group was accepted")
	}
	// Empty buffers are no-ops on every rank alike.
	if err := c.AllReduceSum(nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Bcast(nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Calls < int64(3+n) || s.Bytes == 0 {
		t.Fatalf("rank %d: stats %+v", r, s)
	}
}

// faultChild plays the fault GROK_MPI_FAULT names once the tests passed:
// rank 1 stalls (stops itself), dies (SIGKILL) or says why and aborts
// while the others wait in a barrier with a short timeout.
func faultChild() int {
	fault := os.Getenv("GROK_MPI_FAULT")
	if fault == "" {
		return 0
	}
	c := faultComm()
	c.Timeout = 2 * time.Second
	if c.Rank() == 1 {
		switch fault {
		case "abort":
			fmt.Fprintln(os.Stderr, "rank 1: aborting the job, as asked")
			c.Abort(4)
		case "stall":
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		case "die":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		// The signal is delivered asynchronously: never reach the barrier.
		time.Sleep(time.Hour)
	}
	if err := c.Barrier(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "FAULT NOT DETECTED")
	return 0
}

func TestFaultsEndTheJob(t *testing.T) {
	if Launched() {
		t.Skip("the launcher's side")
	}
	for _, fault := range []string{"stall", "die"} {
		start := time.Now()
		out, err := mpirun(t, 3, "^$", "GROK_MPI_FAULT="+fault)
		if err == nil || strings.Contains(out, "FAULT NOT DETECTED") {
			t.Fatalf("%s: the job ended well:\n%s", fault, out)
		}
		if fault == "stall" && !strings.Contains(out, "MPI_Ibarrier did not complete in 2s") {
			t.Fatalf("%s: no timeout message:\n%s", fault, out)
		}
		t.Logf("%s: the job ended in %v: %v", fault, time.Since(start).Round(time.Millisecond), err)
	}
}

// TestAbortKeepsTheMessage: what a rank writes just before it aborts the
// job (why it does) reaches the launcher's output. Hydra ends the job on
// MPI_Abort without forwarding output still in flight, so Abort gives it a
// moment first; several runs, as a lost message is a matter of chance.
func TestAbortKeepsTheMessage(t *testing.T) {
	if Launched() {
		t.Skip("the launcher's side")
	}
	for i := range 6 {
		out, err := mpirun(t, 2, "^$", "GROK_MPI_FAULT=abort")
		if err == nil || !strings.Contains(out, "rank 1: aborting the job, as asked") {
			t.Fatalf("run %d: %v, the message lost:\n%s", i, err, out)
		}
	}
}

// BenchmarkWorld measures each collective's latency between ranks doing
// nothing else. Run it under mpirun with a fixed count, the same on every
// rank (b.N must agree):
//
//	go test -c -tags mpi ./comm/mpi && mpirun -np 2 ./mpi.test -test.run '^$' -test.bench World -test.benchtime 2000x
func BenchmarkWorld(b *testing.B) {
	if !Launched() {
		b.Skip("run under mpirun")
	}
	c, err := Init()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		f    func() error
	}{
		{"AllReduceSum-1536", func() error { return c.AllReduceSum(make([]float32, 1536)) }},
		{"AllReduceSum-6144", func() error { return c.AllReduceSum(make([]float32, 6144)) }},
		{"AllReduceSum-8192", func() error { return c.AllReduceSum(make([]float32, 8192)) }},
		{"AllGather-16384", func() error { return c.AllGather(make([]float32, 16384*c.Size()), make([]float32, 16384)) }},
		{"AllGather-65536", func() error { return c.AllGather(make([]float32, 65536*c.Size()), make([]float32, 65536)) }},
		{"Bcast-32", func() error { return c.Bcast(make([]byte, 32), 0) }},
		{"Barrier", c.Barrier},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ts := make([]time.Duration, 0, b.N)
			for range b.N {
				t0 := time.Now()
				if err := bc.f(); err != nil {
					b.Fatal(err)
				}
				ts = append(ts, time.Since(t0))
			}
			// The median is the protocol's latency; the mean adds the
			// times a rank waited for a peer the OS had descheduled.
			slices.Sort(ts)
			b.ReportMetric(float64(ts[len(ts)/2].Nanoseconds())/1e3, "µs-p50")
			b.ReportMetric(float64(ts[len(ts)*9/10].Nanoseconds())/1e3, "µs-p90")
		})
	}
}

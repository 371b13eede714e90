//go:build mpi

package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
)

// Under the tag mpi, this test binary is also grok: started with
// GROK_TEST_AS_GROK=1 (by mpirun, below) it runs its arguments as the
// command line does.
func TestMain(m *testing.M) {
	if os.Getenv("GROK_TEST_AS_GROK") == "1" {
		faultHook()
		os.Exit(runJob(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// faultHook makes rank 1 stall (SIGSTOP) or die (SIGKILL) once the file
// GROK_TEST_FAULT_FILE appears, so that a test picks the moment.
func faultHook() {
	fault, file := os.Getenv("GROK_TEST_FAULT"), os.Getenv("GROK_TEST_FAULT_FILE")
	if fault == "" || os.Getenv("OMPI_COMM_WORLD_RANK") != "1" {
		return
	}
	go func() {
		for {
			if _, err := os.Stat(file); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		sig := syscall.SIGSTOP
		if fault == "die" {
			sig = syscall.SIGKILL
		}
		syscall.Kill(os.Getpid(), sig)
	}()
}

// mpiCmd returns mpirun running this binary as grok with np ranks (or an
// MPMD line when args holds ":"), env passed to every rank.
func mpiCmd(t *testing.T, np int, env []string, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun is not installed (apt-get install openmpi-bin)")
	}
	env = append(env, "GROK_TEST_AS_GROK=1")
	a := []string{"--allow-run-as-root", "--oversubscribe"}
	for _, e := range env {
		a = append(a, "-x", e)
	}
	a = append(a, "-np", strconv.Itoa(np), os.Args[0])
	for _, s := range args {
		if strings.HasPrefix(s, "-np=") { // the next program of an MPMD line
			a = append(a, ":", "-np", strings.TrimPrefix(s, "-np="), os.Args[0])
			continue
		}
		a = append(a, s)
	}
	cmd := exec.Command("mpirun", a...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// mpiGrok runs grok args under mpirun and returns its output; a run that
// does not end in two minutes is a hang.
func mpiGrok(t *testing.T, np int, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := mpiCmd(t, np, env, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("mpirun -np %d grok %v hung:\n%s%s", np, args, o.String(), e.String())
	}
	return o.String(), e.String(), err
}

func readF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func tokenArgs(t *testing.T, dir string) []string {
	t.Helper()
	var toks map[string][]int
	b, err := os.ReadFile(filepath.Join(dir, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &toks); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, k := range []string{"len7", "len64"} { // a ragged batch
		s := make([]string, len(toks[k]))
		for i, v := range toks[k] {
			s[i] = strconv.Itoa(v)
		}
		args = append(args, "--tokens", strings.Join(s, ","))
	}
	return args
}

// mpiModels are the golden models, one of each weight family.
var mpiModels = []struct{ name, path, tokens string }{
	{"gguf-f32", "../../testdata/grok-tiny/grok-tiny.gguf", "../../testdata/grok-tiny"},
	{"gguf-q8_0", "../../testdata/grok-tiny/grok-tiny-q8_0.gguf", "../../testdata/grok-tiny"},
	{"xai-int8", "../../testdata/xai-ckpt-tiny", "../../testdata/xai-ckpt-tiny"},
	{"gguf-q4_k_m", "../../testdata/grok-k256/grok-k256-Q4_K_M.gguf", "../../testdata/grok-tiny"},
}

// TestMpirunLogits: the logits of a ragged batch, in one pass and token by
// token, under mpirun equal the single process's within 1e-5.
func TestMpirunLogits(t *testing.T) {
	for _, m := range mpiModels {
		for _, mode := range [][]string{nil, {"--incremental"}} {
			dir := t.TempDir()
			args := append(append([]string{"logits", "-m", m.path, "-o", filepath.Join(dir, "one.f32")}, tokenArgs(t, m.tokens)...), mode...)
			if _, e, code := grok(t, args...); code != 0 {
				t.Fatalf("%s: %s", m.name, e)
			}
			want := readF32(t, filepath.Join(dir, "one.f32"))
			for _, np := range []int{2} {
				args[4] = filepath.Join(dir, fmt.Sprintf("np%d.f32", np))
				if o, e, err := mpiGrok(t, np, nil, args...); err != nil {
					t.Fatalf("%s -np %d %v: %v\n%s%s", m.name, np, mode, err, o, e)
				}
				got := readF32(t, args[4])
				if len(got) != len(want) {
					t.Fatalf("%s -np %d: %d logits, want %d", m.name, np, len(got), len(want))
				}
				var worst float64
				for i := range got {
					worst = max(worst, math.Abs(float64(got[i])-float64(want[i])))
				}
				if worst > 1e-5 {
					t.Fatalf("%s -np %d %v: logits differ by %g", m.name, np, mode, worst)
				}
			}
		}
	}
}

// TestMpirunRunGreedy: a greedy continuation under mpirun is the single
// process's, text for text.
func TestMpirunRunGreedy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kjv.gguf")
	if err := os.WriteFile(path, defaultmodel.GGUF, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "-m", path, "--temp", "0", "-n", "48", "-q", "In the beginning"}
	want, e, code := grok(t, args...)
	if code != 0 {
		t.Fatal(e)
	}
	got, e2, err := mpiGrok(t, 2, nil, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, e2)
	}
	if got != want {
		t.Fatalf("mpirun -np 2 grok run:\n got %q\nwant %q", got, want)
	}
}

// TestMpirunRefuses: ranks that opened different models, a rank that
// cannot open its model, and commands that do not run under mpirun all
// end the job with an error naming the cause.
func TestMpirunRefuses(t *testing.T) {
	f32, q8 := mpiModels[0].path, mpiModels[1].path
	for _, tc := range []struct {
		name string
		np   int
		args []string
		want string
	}{
		{"different models", 1, []string{"logits", "-m", f32, "--tokens", "1,2", "-np=1", "logits", "-m", q8, "--tokens", "1,2"},
			"rank 1 has the tensor table, the model files' sizes different"},
		{"missing file", 1, []string{"logits", "-m", f32, "--tokens", "1,2", "-np=1", "logits", "-m", "/nonexistent.gguf", "--tokens", "1,2"},
			"rank 1 could not open the model"},
		{"no model", 2, []string{"logits", "--tokens", "1,2"}, "-m MODEL is required"},
		{"inspect", 2, []string{"inspect", "-m", f32}, "grok inspect does not run under mpirun"},
	} {
		_, e, err := mpiGrok(t, tc.np, nil, tc.args...)
		if err == nil || !strings.Contains(e, tc.want) {
			t.Errorf("%s: %v, want an error with %q:\n%s", tc.name, err, tc.want, e)
		}
	}
}

// TestMpirunFaults: while rank 0 serves (idle between requests), a
// follower that stalls or dies ends the job with an error: the heartbeat's
// barrier times out (GROK_MPI_TIMEOUT) or mpirun sees the rank die.
func TestMpirunFaults(t *testing.T) {
	for _, fault := range []string{"stall", "die"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		trigger := filepath.Join(t.TempDir(), "fault")
		cmd := mpiCmd(t, 2, []string{"GROK_MPI_TIMEOUT=2s", "GROK_TEST_FAULT=" + fault, "GROK_TEST_FAULT_FILE=" + trigger},
			"serve", "-m", mpiModels[0].path, "--addr", addr)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// A completion first: the job works before the fault.
		var body []byte
		for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(50 * time.Millisecond) {
			resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
				strings.NewReader(`{"prompt":[1,5,7],"max_tokens":4,"temperature":0}`))
			if err == nil {
				body = make([]byte, 1<<16)
				n, _ := resp.Body.Read(body)
				body = body[:n]
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
		}
		if !bytes.Contains(body, []byte(`"completion_tokens":4`)) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("%s: no completion before the fault: %s\n%s", fault, body, out.String())
		}
		os.WriteFile(trigger, nil, 0o644)
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s: the job ended well:\n%s", fault, out.String())
			}
			if fault == "stall" && !strings.Contains(out.String(), "did not complete in 2s") {
				t.Fatalf("%s: no timeout message:\n%s", fault, out.String())
			}
		case <-time.After(time.Minute): // a hang, not a measurement
			cmd.Process.Kill()
			<-done
			t.Fatalf("%s: the job did not end after rank 1's fault:\n%s", fault, out.String())
		}
	}
}

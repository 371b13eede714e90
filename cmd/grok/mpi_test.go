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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/internal/mpitest"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/tensor"
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
	if r, _ := mpitest.Rank(os.Getenv); fault == "" || fault == "stall-in-request" || r != 1 {
		return
	}
	go func() {
		for {
			if _, err := os.Stat(file); err == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		sig := syscall.SIGSTOP // "stall"
		if fault == "die" {
			sig = syscall.SIGKILL
		}
		syscall.Kill(os.Getpid(), sig)
	}()
}

// mpiCmd returns the launcher (GROK_MPIRUN, see internal/mpitest)
// running this binary as grok with np ranks (or an MPMD line when args
// holds "-np=N", which starts the next program), env passed to every rank.
func mpiCmd(t *testing.T, np int, env []string, args ...string) *exec.Cmd {
	t.Helper()
	l := mpitest.Launch(t)
	env = append(env, "GROK_TEST_AS_GROK=1")
	apps := []mpitest.App{{NP: np, Argv: []string{os.Args[0]}}}
	for _, s := range args {
		if n, ok := strings.CutPrefix(s, "-np="); ok {
			np, err := strconv.Atoi(n)
			if err != nil {
				t.Fatal(err)
			}
			apps = append(apps, mpitest.App{NP: np, Argv: []string{os.Args[0]}})
			continue
		}
		last := &apps[len(apps)-1]
		last.Argv = append(last.Argv, s)
	}
	return l.Command(env, apps...)
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

// mpiModels are the golden models, one of each weight family, and
// models of 8 kv heads (the golden ones have 2) to split 4 ways.
func mpiModels(t *testing.T) []mpiModel {
	dir := t.TempDir()
	c := fixtures.SmallConfig()
	c.VocabSize, c.EmbSize, c.KeySize, c.NumQHeads, c.NumKVHeads = 203, 64, 16, 16, 8
	c.FFNSize, c.NumExperts, c.NumSelectedExperts = 256, 4, 2
	m := fixtures.Random(c, 11, fixtures.ModerateGains)
	out := []mpiModel{
		{"gguf-f32", "../../testdata/grok-tiny/grok-tiny.gguf", "../../testdata/grok-tiny", []int{2}},
		{"gguf-q8_0", "../../testdata/grok-tiny/grok-tiny-q8_0.gguf", "../../testdata/grok-tiny", []int{2}},
		{"xai-int8", "../../testdata/xai-ckpt-tiny", "../../testdata/xai-ckpt-tiny", []int{2}},
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.Q8_0} {
		path := filepath.Join(dir, fmt.Sprintf("kv8-%v.gguf", dt))
		if err := fixtures.WriteGGUF(path, m, fixtures.GGUFOptions{Type: dt}); err != nil {
			t.Fatal(err)
		}
		out = append(out, mpiModel{fmt.Sprintf("kv8-%v", dt), path, "", []int{2, 4}})
	}
	// A K-quant whose row-parallel inputs (Hq·K = F = 512) are two
	// super-blocks: the golden grok-k256's are one, which no split keeps
	// whole (TestMpirunRefuses).
	kq := fixtures.SmallConfig()
	kq.VocabSize, kq.EmbSize, kq.KeySize, kq.NumQHeads, kq.NumKVHeads = 203, 256, 64, 8, 2
	kq.FFNSize, kq.NumLayers = 512, 1
	f32 := filepath.Join(dir, "kq-f32.gguf")
	if err := fixtures.WriteGGUF(f32, fixtures.Random(kq, 12, fixtures.ModerateGains), fixtures.GGUFOptions{}); err != nil {
		t.Fatal(err)
	}
	q4k := filepath.Join(dir, "kq-q4_k_m.gguf")
	if _, e, code := grok(t, "quantize", f32, q4k, "q4_k_m"); code != 0 {
		t.Fatal(e)
	}
	return append(out, mpiModel{"gguf-q4_k_m", q4k, "", []int{2}})
}

type mpiModel struct {
	name, path, tokens string
	np                 []int
}

// seqs returns the ragged batch the test feeds m: the golden token lists,
// or two made-up ones.
func (m *mpiModel) seqs(t *testing.T) [][]int {
	if m.tokens == "" {
		return [][]int{{5, 17, 42, 3, 9, 200, 1}, {7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}}
	}
	var toks map[string][]int
	b, err := os.ReadFile(filepath.Join(m.tokens, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &toks); err != nil {
		t.Fatal(err)
	}
	return [][]int{toks["len7"], toks["len64"]}
}

func tokenArgs(seqs [][]int) []string {
	var args []string
	for _, seq := range seqs {
		s := make([]string, len(seq))
		for i, v := range seq {
			s[i] = strconv.Itoa(v)
		}
		args = append(args, "--tokens", strings.Join(s, ","))
	}
	return args
}

// inProcess returns the logits of the same shards run in this process
// (loader.Options.TP: model.NewTP), flattened as grok logits writes them.
func inProcess(t *testing.T, path string, np int, seqs [][]int, incremental bool) []float32 {
	t.Helper()
	m, err := loader.Open(path, loader.Options{TP: np})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	res, err := evalLogits(m.LanguageModel, seqs, incremental)
	if err != nil {
		t.Fatal(err)
	}
	var out []float32
	for _, r := range res {
		out = append(out, r...)
	}
	return out
}

// TestMpirunLogits: the logits of a ragged batch, in one pass and token by
// token, under mpirun are bit for bit those of the same split run in one
// process (--tp: the collectives sum in rank order), and within the
// sharded model's tolerance of the unsharded run's.
func TestMpirunLogits(t *testing.T) {
	for _, m := range mpiModels(t) {
		seqs := m.seqs(t)
		for _, incremental := range []bool{false, true} {
			dir := t.TempDir()
			args := append([]string{"logits", "-m", m.path, "-o", filepath.Join(dir, "one.f32")}, tokenArgs(seqs)...)
			if incremental {
				args = append(args, "--incremental")
			}
			if _, e, code := grok(t, args...); code != 0 {
				t.Fatalf("%s: %s", m.name, e)
			}
			whole := readF32(t, filepath.Join(dir, "one.f32"))
			for _, np := range m.np {
				args[4] = filepath.Join(dir, fmt.Sprintf("np%d.f32", np))
				if o, e, err := mpiGrok(t, np, nil, args...); err != nil {
					t.Fatalf("%s -np %d incremental=%v: %v\n%s%s", m.name, np, incremental, err, o, e)
				}
				got := readF32(t, args[4])
				want := inProcess(t, m.path, np, seqs, incremental)
				if len(got) != len(want) || len(got) != len(whole) {
					t.Fatalf("%s -np %d: %d logits, want %d", m.name, np, len(got), len(want))
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s -np %d incremental=%v: logit %d is %v, %v with --tp %d in process", m.name, np, incremental, i, got[i], want[i], np)
					}
				}
				var worst float64
				for i := range got {
					worst = max(worst, math.Abs(float64(got[i])-float64(whole[i])))
				}
				if worst > tpTol {
					t.Fatalf("%s -np %d incremental=%v: logits differ from the unsharded run's by %g", m.name, np, incremental, worst)
				}
				t.Logf("%s -np %d incremental=%v: the same bits as --tp %d; %.2g from the unsharded run", m.name, np, incremental, np, worst)
			}
		}
	}
}

// tpTol is the sharded model's distance from the unsharded one (the
// row-parallel products add their partial sums in another order; see
// model/shard_test.go).
const tpTol = 1e-4

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
	ms := mpiModels(t)
	f32, q8 := ms[0].path, ms[1].path
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
		{"blocks", 2, []string{"logits", "-m", "../../testdata/grok-k256/grok-k256-Q4_K_M.gguf", "--tokens", "1,2"},
			"would split its Q4_K blocks of 256 elements"},
		{"kv heads", 3, []string{"logits", "-m", f32, "--tokens", "1,2"}, "3 shards are more than the model's 2 kv heads"},
		{"--tp", 2, []string{"logits", "-m", f32, "--tp", "2", "--tokens", "1,2"}, "under mpirun the 2 ranks are the shards: --tp 2 does not apply"},
		{"no model", 2, []string{"logits", "--tokens", "1,2"}, "-m MODEL is required"},
		{"inspect", 2, []string{"inspect", "-m", f32}, "grok inspect does not run under mpirun"},
	} {
		_, e, err := mpiGrok(t, tc.np, nil, tc.args...)
		if err == nil || !strings.Contains(e, tc.want) {
			t.Errorf("%s: %v, want an error with %q:\n%s", tc.name, err, tc.want, e)
		}
	}
}

// TestMpirunFaults: while rank 0 serves, a follower that stalls or dies
// ends the job with an error: between requests the heartbeat's barrier
// times out (GROK_MPI_TIMEOUT), during one a collective of the forward
// pass does, and the launcher sees a rank die; no rank outlives the job.
func TestMpirunFaults(t *testing.T) {
	for _, fault := range []string{"stall", "stall-in-request", "die"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		trigger := filepath.Join(t.TempDir(), "fault")
		mark := fmt.Sprintf("%d-%s", os.Getpid(), fault) // names this job's processes
		cmd := mpiCmd(t, 2, []string{"GROK_MPI_TIMEOUT=2s", "GROK_TEST_FAULT=" + fault, "GROK_TEST_FAULT_FILE=" + trigger, "GROK_TEST_MARK=" + mark},
			"serve", "-m", "../../testdata/grok-tiny/grok-tiny.gguf", "--addr", addr)
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
		want := "MPI_Ibarrier did not complete in 2s" // the idle heartbeat's
		if fault == "stall-in-request" {
			// Rank 1 stopped well within a second of the last request
			// (before rank 0's first idle heartbeat), then a request: rank
			// 0 waits in a collective of its first forward pass.
			stopRank1(t, mark)
			go http.Post("http://"+addr+"/v1/completions", "application/json",
				strings.NewReader(`{"prompt":[1,5,7],"max_tokens":8}`))
			want = "MPI_Iallgather (AllReduceSum) did not complete in 2s"
		}
		os.WriteFile(trigger, nil, 0o644)
		start := time.Now()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("%s: the job ended well:\n%s", fault, out.String())
			}
			// After a death the launcher ends the job, each in its own
			// way and words (Hydra kills the other ranks at once, Open
			// MPI's mpirun within seconds); a stall is rank 0's timeout.
			if fault != "die" && !strings.Contains(out.String(), want) {
				t.Fatalf("%s: the job ended %v after the fault (%v) without the message %q:\n%s", fault, time.Since(start).Round(time.Millisecond), err, want, out.String())
			}
			t.Logf("%s: the job ended %v after the fault: %v", fault, time.Since(start).Round(time.Millisecond), err)
			noRankLeft(t, mark)
		case <-time.After(time.Minute): // a hang, not a measurement
			cmd.Process.Kill()
			<-done
			t.Fatalf("%s: the job did not end after rank 1's fault:\n%s", fault, out.String())
		}
	}
}

// TestMpirunServeRepeatsAPrompt: a prompt seen before, which the prefix
// cache starts on rank 0's cached pages (which the other ranks mirror),
// decodes under mpirun as a single process decodes it.
func TestMpirunServeRepeatsAPrompt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kjv.gguf")
	if err := os.WriteFile(path, defaultmodel.GGUF, 0o644); err != nil {
		t.Fatal(err)
	}
	prompt := "In the beginning God created the heaven and the earth. And the earth was without form"
	want, e, code := grok(t, "run", "-m", path, "--temp", "0", "-n", "24", "-q", "--no-display-prompt", prompt)
	if code != 0 {
		t.Fatal(e)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := mpiCmd(t, 2, nil, "serve", "-m", path, "--addr", addr, "--parallel", "1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-done
		}
	}()
	complete := func(p string) (string, int) {
		body, _ := json.Marshal(map[string]any{"prompt": p, "max_tokens": 24, "temperature": 0})
		for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(50 * time.Millisecond) {
			resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				continue
			}
			var r struct {
				Choices []struct{ Text string } `json:"choices"`
			}
			err = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if resp.StatusCode == 503 { // still loading
				continue
			}
			if err != nil || len(r.Choices) == 0 {
				return "", resp.StatusCode
			}
			return r.Choices[0].Text, resp.StatusCode
		}
		t.Fatalf("serve did not answer:\n%s", out.String())
		return "", 0
	}
	// The prompt, another in the same slot, and the prompt again: the
	// prefix cache starts the third on the first's cached pages, which the
	// second overwrote in the slot's table.
	for i, p := range []string{prompt, "And God said, Let there be light: and there was light. And God saw", prompt} {
		got, status := complete(p)
		if status != 200 {
			t.Fatalf("request %d: %d\n%s", i, status, out.String())
		}
		if p == prompt && got != strings.TrimSuffix(want, "\n") {
			t.Fatalf("request %d: %q, want %q (as one process)\n%s", i, got, want, out.String())
		}
	}
}

// TestMpirunBench: grok bench under mpirun reports the shards as ranks
// and the collectives of a decode step: 2 a layer, the embedding's and
// the logits', and the two broadcasts of the call to the other ranks.
func TestMpirunBench(t *testing.T) {
	m := mpiModels(t)[3] // kv8-F32
	o, e, err := mpiGrok(t, 2, nil, "bench", "-m", m.path, "--json", "-r", "1", "-p", "4", "-n", "4", "--bw-mb", "8", "-t", "1")
	if err != nil {
		t.Fatalf("%v\n%s", err, e)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(o), &r); err != nil {
		t.Fatalf("%v: %s", err, o)
	}
	layers := fixtures.SmallConfig().NumLayers
	if r.TP != 2 || !r.Ranks || r.CollectivesPerStep != float64(2*layers+2+2) || r.CommBytesPerStep <= 0 {
		t.Fatalf("bench under mpirun: tp %d ranks %v, %v collectives and %v bytes a step; want 2 ranks and %d collectives",
			r.TP, r.Ranks, r.CollectivesPerStep, r.CommBytesPerStep, 2*layers+4)
	}
}

// jobRanks returns the pids of the ranks of the job whose processes have
// GROK_TEST_MARK=mark, by rank (the launcher's own processes have the
// mark but no rank).
func jobRanks(mark string) map[int]int {
	ranks := map[int]int{}
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		env, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		vars := strings.Split(string(env), "\x00")
		if r, ok := mpitest.Rank(mpitest.Getenv(vars)); ok && slices.Contains(vars, "GROK_TEST_MARK="+mark) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			ranks[r] = pid
		}
	}
	return ranks
}

// stopRank1 stops (SIGSTOP) rank 1 of the job whose processes have
// GROK_TEST_MARK=mark, and returns once it is stopped.
func stopRank1(t *testing.T, mark string) {
	t.Helper()
	pid, ok := jobRanks(mark)[1]
	if !ok {
		t.Fatal("rank 1 not found")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(time.Millisecond) {
		st, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
	}
	t.Fatalf("rank 1 (pid %d) did not stop", pid)
}

// noRankLeft fails t if a rank of the job whose processes have
// GROK_TEST_MARK=mark outlives the launcher (a stopped rank nobody
// killed), and kills it.
func noRankLeft(t *testing.T, mark string) {
	t.Helper()
	var left map[int]int
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(50 * time.Millisecond) {
		if left = jobRanks(mark); len(left) == 0 {
			return
		}
	}
	for _, pid := range left {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	t.Errorf("ranks (rank: pid) %v outlived the launcher", left)
}

// startServe starts cmd (grok serve --addr addr) and returns once its
// model is loaded; the server is interrupted when the test ends.
func startServe(t *testing.T, cmd *exec.Cmd, addr string) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			<-done
		}
	})
	for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(50 * time.Millisecond) {
		// /health, not /v1/models: that answers while the model loads.
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
	}
	t.Fatalf("%v did not answer:\n%s", cmd.Args, out.String())
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// chatTurn is one answer of /v1/chat/completions.
type chatTurn struct {
	content  string
	logprobs []float64
	cached   int
}

func postChat(t *testing.T, addr string, msgs []map[string]string) chatTurn {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 16, "temperature": 0, "logprobs": true})
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Choices []struct {
			Message  struct{ Content string }
			Logprobs struct {
				Content []struct{ Logprob float64 }
			}
		}
		Usage struct {
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || len(r.Choices) != 1 {
		t.Fatalf("POST %s: %d, %v", addr, resp.StatusCode, err)
	}
	turn := chatTurn{content: r.Choices[0].Message.Content, cached: r.Usage.PromptTokensDetails.CachedTokens}
	for _, c := range r.Choices[0].Logprobs.Content {
		turn.logprobs = append(turn.logprobs, c.Logprob)
	}
	return turn
}

// TestMpirunServeChatUsesPrefixCache: a chat of several turns served
// under mpirun -np 2, its prefix cache on, takes each turn's start from
// the cache as one process serving the same split (--tp 2) does, with the
// same answers and logprobs, bit for bit.
func TestMpirunServeChatUsesPrefixCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kjv.gguf")
	if err := os.WriteFile(path, defaultmodel.GGUF, 0o644); err != nil {
		t.Fatal(err)
	}
	mpi, one := freeAddr(t), freeAddr(t)
	startServe(t, mpiCmd(t, 2, nil, "serve", "-m", path, "--addr", mpi, "--parallel", "2"), mpi)
	alone := exec.Command(os.Args[0], "serve", "-m", path, "--addr", one, "--parallel", "2", "--tp", "2")
	alone.Env = append(os.Environ(), "GROK_TEST_AS_GROK=1")
	startServe(t, alone, one)
	// Two users in turn, so that each turn starts in the slot the other
	// user's last turn wrote.
	users := [][]string{
		{"In the beginning God created", "And the earth was without form", "And God said"},
		{"Blessed are the meek", "for they shall inherit", "Blessed are they"},
	}
	hist := make([][]map[string]string, len(users))
	cached := 0
	for turn := range users[0] {
		for u := range users {
			hist[u] = append(hist[u], map[string]string{"role": "user", "content": users[u][turn]})
			got, want := postChat(t, mpi, hist[u]), postChat(t, one, hist[u])
			if got.content != want.content || !slices.Equal(got.logprobs, want.logprobs) || got.cached != want.cached {
				t.Fatalf("user %d turn %d under mpirun: %q, logprobs %v, %d cached tokens; in one process %q, %v, %d",
					u, turn, got.content, got.logprobs, got.cached, want.content, want.logprobs, want.cached)
			}
			if turn > 0 && got.cached == 0 {
				t.Errorf("user %d turn %d: no cached token", u, turn)
			}
			cached += got.cached
			hist[u] = append(hist[u], map[string]string{"role": "assistant", "content": got.content})
		}
	}
	t.Logf("%d prompt tokens taken from the cache under mpirun", cached)
}

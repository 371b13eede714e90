package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// inspectLine returns the fields of the first output line starting with
// label (after indentation), or fails.
func inspectLine(t *testing.T, out, label string) []string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(strings.TrimSpace(l), label) {
			return strings.Fields(strings.TrimPrefix(strings.TrimSpace(l), label))
		}
	}
	t.Fatalf("no %q line in:\n%s", label, out)
	return nil
}

func TestInspectTypeMixFilesMemory(t *testing.T) {
	// Byte parts of grok-tiny cut inside tensors.
	data, err := os.ReadFile(tiny)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cuts := []int{0, 1_000_003, 2_500_001, len(data)}
	for i := 0; i+1 < len(cuts); i++ {
		p := filepath.Join(dir, fmt.Sprintf("grok-tiny.gguf.part%dof%d", i+1, len(cuts)-1))
		if err := os.WriteFile(p, data[cuts[i]:cuts[i+1]], 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name, path string
		args       []string
		mix        []string // "TYPE COUNT" lines in order
		files      string   // the files line, "" if none
		heap       bool     // straddling tensors are reported
		ctx, slots int
	}{
		{name: "single", path: tiny, mix: []string{"F32 26"}, ctx: 256, slots: 1},
		{name: "split", path: "../../testdata/grok-tiny-split/grok-tiny-00003-of-00004.gguf",
			mix: []string{"F32 26"}, files: "4 gguf-split shards", ctx: 256, slots: 1},
		{name: "parts", path: filepath.Join(dir, "grok-tiny.gguf.part2of3"),
			mix: []string{"F32 26"}, files: "3 byte parts", heap: true, ctx: 256, slots: 1},
		{name: "q8_0 parallel", path: "../../testdata/grok-tiny/grok-tiny-q8_0.gguf", args: []string{"--parallel", "4", "-c", "100"},
			mix: []string{"Q8_0 15", "F32 11"}, ctx: 100, slots: 4},
		{name: "k256 Q4_K_M", path: "../../testdata/grok-k256/grok-k256-Q4_K_M.gguf", args: []string{"--parallel", "2"},
			mix: []string{"Q4_K 5", "Q6_K 3", "F32 6"}, ctx: 256, slots: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, e, code := grok(t, append([]string{"inspect", "-m", tc.path}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, e)
			}
			// The type mix, largest first, with bytes that add up.
			mixAt := strings.Index(o, "type mix")
			if mixAt < 0 {
				t.Fatalf("no type mix in:\n%s", o)
			}
			rows := strings.Split(o[mixAt:], "\n")[1:]
			var sum int64
			for i, want := range tc.mix {
				f := strings.Fields(rows[i])
				if len(f) < 3 || f[0]+" "+f[1] != want {
					t.Errorf("type mix row %d = %q, want %q …", i, rows[i], want)
					continue
				}
				var b int64
				fmt.Sscan(f[2], &b)
				sum += b
			}
			if strings.TrimSpace(rows[len(tc.mix)]) != "" {
				t.Errorf("type mix has more rows than %v: %q", tc.mix, rows[len(tc.mix)])
			}
			m, err := loader.Open(tc.path, loader.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			var total int64
			for _, d := range m.Tensors() {
				total += d.Bytes
			}
			if sum != total {
				t.Errorf("type mix sums to %d bytes, tensors hold %d", sum, total)
			}

			if tc.files == "" {
				if strings.Contains(o, "\nfiles") {
					t.Errorf("a single file lists files:\n%s", o)
				}
			} else if got := strings.Join(inspectLine(t, o, "files"), " "); got != tc.files {
				t.Errorf("files line %q, want %q", got, tc.files)
			}
			heap := m.GGUF.AssembledBytes()
			if tc.heap {
				if heap == 0 {
					t.Fatal("the cuts straddle no tensor")
				}
				if got := inspectLine(t, o, "straddling tensors")[0]; got != fmt.Sprint(heap) {
					t.Errorf("straddling bytes %s, want %d", got, heap)
				}
				if got := inspectLine(t, o, "weights (heap)")[0]; got != fmt.Sprint(heap) {
					t.Errorf("heap weights %s, want %d", got, heap)
				}
			}

			mem := inspectLine(t, o, "memory")
			if want := fmt.Sprintf("context %d, parallel %d", tc.ctx, tc.slots); strings.Join(mem, " ") != want {
				t.Errorf("memory line %q, want %q", strings.Join(mem, " "), want)
			}
			if got := inspectLine(t, o, "weights (mapped)")[0]; got != fmt.Sprint(total-heap) {
				t.Errorf("mapped weights %s, want %d", got, total-heap)
			}
			// The CLI's default cache type is f16, as llama.cpp's.
			kv := float64(model.KVPages(tc.slots, tc.ctx)) * model.KVPageBytes(&m.Config, tensor.F16, tensor.F16)
			if got := inspectLine(t, o, "KV memory")[0]; got != fmt.Sprintf("%.0f", kv) {
				t.Errorf("KV memory %s, want %.0f", got, kv)
			}
			if got := inspectLine(t, o, "total")[0]; got != fmt.Sprintf("%.0f", float64(total)+kv) {
				t.Errorf("total %s, want %.0f", got, float64(total)+kv)
			}
		})
	}
}

func TestInspectFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want *regexp.Regexp
	}{
		{[]string{"--parallel", "0"}, 2, regexp.MustCompile(`--parallel must be at least 1`)},
		{[]string{"-c", "-1"}, 2, regexp.MustCompile(`-c must not be negative`)},
		{[]string{"-c", "257"}, 1, regexp.MustCompile(`context 257 exceeds the model's sequence_len 256`)},
	} {
		_, e, code := grok(t, append([]string{"inspect", "-m", tiny}, tc.args...)...)
		if code != tc.code || !tc.want.MatchString(e) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d matching %v", tc.args, code, e, tc.code, tc.want)
		}
	}
}

// grok inspect (and --check) of xai-org/grok-2's layout, experts split 8
// ways with w2's slices on the summation grid, joins nothing: the network
// multiplies the slices where they are mapped and the scan reads them one
// by one, so the loader's warning about joining stays silent.
func TestInspectTPRelease(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := fixtures.Grok2SmallConfig()
	c.FFNSize, c.NumLayers = 8*2048, 1
	m := fixtures.Random(c, 4, fixtures.ModerateGains)
	if err := fixtures.WriteGrok2Safetensors(dir, m, fixtures.Grok2Options{TP: 8}); err != nil {
		t.Fatal(err)
	}
	o, e, code := grok(t, "inspect", "--check", "-m", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	if strings.Contains(e, "joined in memory") || strings.Contains(e, "warning") {
		t.Errorf("inspect joined the experts in memory:\n%s", e)
	}
	if !strings.Contains(o, "model.layers.0.block_sparse_moe.experts.3.w2.weight") || !strings.Contains(o, "every value of the") {
		t.Errorf("inspect --check output:\n%s", o)
	}
}

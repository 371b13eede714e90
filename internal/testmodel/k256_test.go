package testmodel_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"
)

// TestK256Regenerate remakes testdata/grok-k256's quantised files with
// llama.cpp's llama-quantize when LLAMA_QUANTIZE names the binary:
//
//	LLAMA_QUANTIZE=/path/to/llama-quantize go test ./internal/testmodel -run K256Regenerate
//
// It writes the F32 source and the imatrix to a temporary folder and the
// quantisations to K256_OUT (default testdata/grok-k256).
func TestK256Regenerate(t *testing.T) {
	q := os.Getenv("LLAMA_QUANTIZE")
	if q == "" {
		t.Skip("LLAMA_QUANTIZE is not set")
	}
	out := os.Getenv("K256_OUT")
	if out == "" {
		out = "../../testdata/grok-k256"
	}
	tmp := t.TempDir()
	src, imat := filepath.Join(tmp, "grok-k256-f32.gguf"), filepath.Join(tmp, "uniform.imatrix.gguf")
	if err := testmodel.WriteK256(src, filepath.Join(goldenDir, "grok-tiny.gguf")); err != nil {
		t.Fatal(err)
	}
	if err := testmodel.WriteK256Imatrix(imat); err != nil {
		t.Fatal(err)
	}
	if k := os.Getenv("K256_KEEP"); k != "" {
		for _, p := range []string{src, imat} {
			b, _ := os.ReadFile(p)
			os.WriteFile(filepath.Join(k, filepath.Base(p)), b, 0o644)
		}
	}
	for _, r := range testmodel.K256Recipes {
		args := []string{}
		if r.Imatrix {
			args = append(args, "--imatrix", imat)
		}
		n := len(r.Args)
		args = append(append(append(args, r.Args[:n-1]...), src, filepath.Join(out, r.File)), r.Args[n-1])
		cmd := exec.Command(q, args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", r.File, err, b)
		}
	}
}

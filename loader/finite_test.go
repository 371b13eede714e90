package loader_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/formats/safetensors"
	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

// withValue returns a copy of m whose F32 tensor name has value v at index i.
func withValue(m *fixtures.Model, name string, i int, v float32) *fixtures.Model {
	out := *m
	out.Tensors = map[string]*tensor.Tensor{}
	for k, t := range m.Tensors {
		out.Tensors[k] = t
	}
	t := *m.Tensors[name]
	t.Data = append([]byte(nil), t.Data...)
	binary.LittleEndian.PutUint32(t.Data[4*i:], math.Float32bits(v))
	out.Tensors[name] = &t
	return &out
}

// patchGGUF overwrites bytes of a tensor's data in a GGUF file.
func patchGGUF(t *testing.T, path, name string, off int, b ...byte) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := f.Info(name)
	if !ok {
		t.Fatalf("no tensor %q", name)
	}
	at := f.DataOffset + ti.Offset + int64(off)
	f.Close()
	fh, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// A NaN or infinity where it spoils every logit is refused when the file
// opens, naming the tensor; one in a big matrix opens, and CheckFinite
// finds it, in every format. Clean files scan clean, every tensor counted.
func TestCheckFinite(t *testing.T) {
	m := fixtures.Random(fixtures.SmallConfig(), 5, fixtures.ModerateGains)
	nan := float32(math.NaN())
	dir := t.TempDir()
	write := func(name string, mm *fixtures.Model, dt tensor.DType) string {
		p := filepath.Join(dir, name)
		if err := fixtures.WriteGGUF(p, mm, fixtures.GGUFOptions{Type: dt}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	st := func(name string, mm *fixtures.Model) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fixtures.WriteSafetensors(p, mm, fixtures.SafetensorsOptions{DType: "BF16"}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// An xAI checkpoint whose first scale of blk.1.attn_q.weight is +Inf:
	// the pickles store the scales as raw bfloat16, found by their bytes.
	xai := filepath.Join(dir, "xai")
	if err := os.Mkdir(xai, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := fixtures.WriteXAI(xai, m, fixtures.XAIOptions{ModelShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	var pattern []byte
	for _, s := range res.Int8["blk.1.attn_q.weight"].Scales[:16] {
		pattern = binary.LittleEndian.AppendUint16(pattern, s)
	}
	files, _ := filepath.Glob(filepath.Join(xai, "ckpt-0", "tensor*"))
	patched := 0
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, pattern); i >= 0 {
			b[i], b[i+1] = 0x80, 0x7f
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			patched++
		}
	}
	if patched != 1 {
		t.Fatalf("found the scales in %d files", patched)
	}
	// xai-org/grok-2's layout, experts split over 2 TP shards on the
	// summation grid: scanned slice by slice, nothing joined.
	g2 := fixtures.Grok2SmallConfig()
	g2.FFNSize = 4096
	gm := fixtures.Random(g2, 6, fixtures.ModerateGains)
	release := func(name string, mm *fixtures.Model) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := fixtures.WriteGrok2Safetensors(p, mm, fixtures.Grok2Options{DType: "BF16", TP: 2}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	D, F := g2.EmbSize, g2.FFNSize
	q8 := write("q8.gguf", m, tensor.Q8_0)
	patchGGUF(t, q8, "blk.1.attn_v.weight", 5*tensor.Q8BlockBytes, 0x00, 0x7e)
	q8emb := write("q8emb.gguf", m, tensor.Q8_0)
	patchGGUF(t, q8emb, "token_embd.weight", 2*tensor.Q8BlockBytes, 0x00, 0x7e)
	for _, tc := range []struct {
		name, path string
		refused    string // the error Open must give, or ""
		bad        string // the tensor CheckFinite must name, or ""
		detail     string
	}{
		{"clean GGUF", write("clean.gguf", m, tensor.F32), "", "", ""},
		{"clean safetensors", st("clean-st", m), "", "", ""},
		{"clean xAI", "../testdata/xai-ckpt-tiny", "", "", ""},
		{"GGUF, NaN in a norm", write("norm.gguf", withValue(m, "blk.0.attn_output_norm.weight", 3, nan), tensor.F32),
			`tensor "blk.0.attn_output_norm.weight": element 3 is NaN`, "", ""},
		{"GGUF, NaN in a Q8_0 embedding block scale", q8emb,
			`tensor "token_embd.weight": the scale of the Q8_0 block starting at element 64 is NaN`, "", ""},
		{"xAI, Inf in an int8 scale", xai, `tensor "blk.1.attn_q.weight": scales element 0 is +Inf`, "", ""},
		{"GGUF, NaN in an expert matrix", write("exp.gguf", withValue(m, "blk.1.ffn_up_exps.weight", 777, nan), tensor.F32),
			"", "blk.1.ffn_up_exps.weight", "element 777 is NaN"},
		{"GGUF, NaN in a Q8_0 block scale", q8,
			"", "blk.1.attn_v.weight", "the scale of the Q8_0 block starting at element 160 is NaN"},
		{"safetensors, Inf in an expert matrix", st("exp-st", withValue(m, "blk.0.ffn_down_exps.weight", 3*64*128+9, float32(math.Inf(1)))),
			"", "blk.0.ffn_down.3.weight", "element 9 is +Inf"},
		{"Grok-2 release, clean", release("g2", gm), "", "", ""},
		{"Grok-2 release, Inf in w2's second slice", release("g2-w2", withValue(gm, "blk.1.ffn_down_exps.weight", 1*D*F+3*F+2053, float32(math.Inf(1)))),
			"", "blk.1.ffn_down.1.weight", fmt.Sprintf("element %d is +Inf", 3*F+2053)},
		{"Grok-2 release, NaN in w1's second slice", release("g2-w1", withValue(gm, "blk.0.ffn_gate_exps.weight", 2*F*D+2055*D+9, nan)),
			"", "blk.0.ffn_gate.2.weight", fmt.Sprintf("element %d is NaN", 2055*D+9)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lm, err := loader.Open(tc.path, loader.Options{})
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("Open: err = %v, want it to mention %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer lm.Close()
			n, bad := lm.CheckFinite()
			if st, ok := lm.Source.(*safetensors.Model); ok && strings.HasPrefix(tc.name, "Grok-2") && st.AssembledBytes() != 0 {
				t.Errorf("%d bytes joined opening and scanning the release", st.AssembledBytes())
			}
			if n != len(lm.Tensors()) {
				t.Errorf("scanned %d tensors of %d", n, len(lm.Tensors()))
			}
			if tc.bad == "" {
				if len(bad) != 0 {
					t.Errorf("clean file: %v", bad)
				}
				return
			}
			var nf *model.NonFiniteError
			if len(bad) != 1 || !errors.As(bad[0], &nf) || nf.Tensor != tc.bad || !strings.Contains(bad[0].Error(), tc.detail) {
				t.Errorf("CheckFinite = %v, want one error for %s mentioning %q", bad, tc.bad, tc.detail)
			}
		})
	}
}

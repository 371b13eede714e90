package convert

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/tensor"
)

var quantModelOut = flag.String("quant.model", "", "write the F32 models of TestQuantizeKQuantsMatchLlamaCpp to this folder (see testdata/grok-quant/README.md)")

// quantModel is the shape of a generated model: every row a whole number
// of QK_K super-blocks, 4 query heads and 1 key/value head (GQA 4).
type quantModel struct {
	name    string
	experts int
	layers  int
	output  bool // an output.weight of its own (else tied to token_embd, as grok's)
}

// quantModels are the models TestQuantizeKQuantsMatchLlamaCpp quantises:
// grok's eight experts (so the n_expert == 8 rules apply) with tied
// embeddings, and two experts over eight layers with an output matrix (the
// attn_v, attn_output and use_more_bits rules of other models).
var quantModels = []quantModel{{"e8", 8, 2, false}, {"e2", 2, 8, true}}

const (
	qmVocab, qmEmb, qmFFN     = 256, 256, 256
	qmHeads, qmKVHeads, qmKey = 4, 1, 64
)

// writeQuantModel writes the F32 grok model the K-quant tests quantise. Its
// values are built with integer arithmetic and one float32 multiply each
// (an Irwin–Hall sum of four uniforms), so every platform writes the same
// bytes; each tensor's generator is seeded by its name.
func writeQuantModel(path string, m quantModel) error {
	qmExperts, qmLayers := m.experts, m.layers
	w := gguf.NewWriter()
	for _, kv := range []struct {
		k string
		v any
	}{
		{"general.architecture", "grok"},
		{"general.name", "grok-quant-test"},
		{"general.file_type", uint32(0)},
		{"grok.vocab_size", uint32(qmVocab)},
		{"grok.context_length", uint32(256)},
		{"grok.embedding_length", uint32(qmEmb)},
		{"grok.block_count", uint32(qmLayers)},
		{"grok.feed_forward_length", uint32(qmFFN)},
		{"grok.expert_feed_forward_length", uint32(qmFFN)},
		{"grok.attention.head_count", uint32(qmHeads)},
		{"grok.attention.head_count_kv", uint32(qmKVHeads)},
		{"grok.attention.key_length", uint32(qmKey)},
		{"grok.attention.value_length", uint32(qmKey)},
		{"grok.rope.dimension_count", uint32(qmKey)},
		{"grok.rope.freq_base", float32(10000)},
		{"grok.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"grok.expert_count", uint32(qmExperts)},
		{"grok.expert_used_count", uint32(2)},
		{"tokenizer.ggml.model", "none"},
	} {
		if err := w.AddKV(kv.k, kv.v); err != nil {
			return err
		}
	}
	add := func(name string, scale float32, shape ...int) {
		h := fnv.New64a()
		h.Write([]byte(name))
		r := rand.New(rand.NewPCG(0x6b71, h.Sum64()))
		n := 1
		for _, d := range shape {
			n *= d
		}
		x := make([]float32, n)
		for i := range x {
			s := int64(0)
			for k := 0; k < 4; k++ {
				s += int64(r.Uint32() >> 8)
			}
			x[i] = float32(s-1<<25) * scale
			if r.Uint32()%500 == 0 {
				x[i] *= 8 // a few outliers, as real weights have
			}
		}
		data, _ := tensor.EncodeRow(nil, tensor.F32, x)
		w.AddTensor(name, tensor.F32, shape, data)
	}
	const s = 1.0 / (1 << 27) // values of about N(0, 0.07²)
	add("token_embd.weight", s, qmVocab, qmEmb)
	add("output_norm.weight", s, qmEmb)
	if m.output {
		add("output.weight", s, qmVocab, qmEmb)
	}
	for l := 0; l < qmLayers; l++ {
		p := func(n string) string { return fmt.Sprintf("blk.%d.%s.weight", l, n) }
		add(p("attn_norm"), s, qmEmb)
		add(p("attn_q"), s, qmHeads*qmKey, qmEmb)
		add(p("attn_k"), s, qmKVHeads*qmKey, qmEmb)
		add(p("attn_v"), s, qmKVHeads*qmKey, qmEmb)
		add(p("attn_output"), s, qmEmb, qmHeads*qmKey)
		add(p("attn_output_norm"), s, qmEmb)
		add(p("ffn_norm"), s, qmEmb)
		add(p("ffn_gate_inp"), s, qmExperts, qmEmb)
		add(p("ffn_gate_exps"), s, qmExperts, qmFFN, qmEmb)
		add(p("ffn_up_exps"), s, qmExperts, qmFFN, qmEmb)
		add(p("ffn_down_exps"), s, qmExperts, qmEmb, qmFFN)
		add(p("layer_output_norm"), s, qmEmb)
	}
	return w.WriteFile(path)
}

// TestWriteQuantModel writes the model for testdata/grok-quant/make.sh when
// -quant.model is given.
func TestWriteQuantModel(t *testing.T) {
	if *quantModelOut == "" {
		t.Skip("no -quant.model")
	}
	for _, m := range quantModels {
		if err := writeQuantModel(filepath.Join(*quantModelOut, "grok-quant-"+m.name+"-f32.gguf"), m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQuantizeKQuantsMatchLlamaCpp quantises the generated models to every
// block ftype and checks each file against the SHA-256 of llama-quantize's
// output for the same input (testdata/grok-quant/SHA256SUMS): the whole
// file, so the per-tensor types, the quantised bytes, the metadata and the
// layout all agree. With -short only Q2_K and Q4_K_M are checked.
func TestQuantizeKQuantsMatchLlamaCpp(t *testing.T) {
	sums, err := os.ReadFile(filepath.Join(testdata, "grok-quant", "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			want[f[1]] = f[0]
		}
	}
	dir := t.TempDir()
	checked := 0
	for _, m := range quantModels {
		src := filepath.Join(dir, "grok-quant-"+m.name+"-f32.gguf")
		if err := writeQuantModel(src, m); err != nil {
			t.Fatal(err)
		}
		for _, c := range ftypes {
			if !c.dt.Quantized() || (testing.Short() && c.ft != FtypeQ2_K && c.ft != FtypeQ4_K_M) {
				continue
			}
			name := "grok-quant-" + m.name + "-" + c.name + ".gguf"
			sum, ok := want[name]
			if !ok {
				t.Errorf("SHA256SUMS has no %s", name)
				continue
			}
			dst := filepath.Join(dir, name)
			res, err := Quantize(context.Background(), src, dst, c.ft, QuantizeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Warnings) != 0 || res.FileType != uint32(c.ft) {
				t.Errorf("%s: file type %d, warnings %q", name, res.FileType, res.Warnings)
			}
			b, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != sum {
				t.Errorf("%s: SHA-256 %s, llama-quantize's %s", name, got, sum)
			}
			os.Remove(dst)
			checked++
		}
		os.Remove(src)
	}
	if checked == 0 {
		t.Fatal("nothing checked")
	}
}

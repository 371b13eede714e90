package convert

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
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
// layout all agree. The ftypes llama-quantize refuses without an importance
// matrix must be refused naming the tensor and type it named
// (testdata/grok-quant/REFUSALS), in every mode. Of the files, -short
// checks only Q2_K, Q4_K_M and IQ3_S, the race detector (ten times slower,
// and these are single-threaded) only Q2_K and Q4_K_M.
func TestQuantizeKQuantsMatchLlamaCpp(t *testing.T) {
	want := readSums(t)
	refused := readRefusals(t)
	dir := t.TempDir()
	checked, refusals := 0, 0
	for _, m := range quantModels {
		src := filepath.Join(dir, "grok-quant-"+m.name+"-f32.gguf")
		if err := writeQuantModel(src, m); err != nil {
			t.Fatal(err)
		}
		for _, c := range ftypes {
			base := "grok-quant-" + m.name + "-" + c.name
			name := base + ".gguf"
			dst := filepath.Join(dir, name)
			if r, ok := refused[base]; ok {
				checkRefusal(t, src, dst, c.ft, r) // cheap: refused before any quantisation
				refusals++
				continue
			}
			if !c.dt.Quantized() || (testing.Short() && c.ft != FtypeQ2_K && c.ft != FtypeQ4_K_M && c.ft != FtypeIQ3_S) ||
				(raceEnabled && c.ft != FtypeQ2_K && c.ft != FtypeQ4_K_M) {
				continue
			}
			sum, ok := want[name]
			if !ok {
				t.Errorf("SHA256SUMS has no %s", name)
				continue
			}
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
	if checked == 0 || refusals != len(refused)-len(tinyRefused) {
		t.Fatalf("%d files checked, %d of %d refusals", checked, refusals, len(refused))
	}
}

// checkRefusal checks that Quantize refuses src for ft, as llama-quantize
// did without an importance matrix, naming the tensor and target type r it
// named, and writes nothing.
func checkRefusal(t *testing.T, src, dst string, ft Ftype, r [2]string) {
	t.Helper()
	_, err := Quantize(context.Background(), src, dst, ft, QuantizeOptions{})
	if err == nil || !strings.Contains(err.Error(), "needs an importance matrix") ||
		!strings.Contains(err.Error(), "tensor "+r[0]+" type "+strings.ToUpper(r[1])+",") {
		t.Errorf("%v: %v; llama-quantize refuses it for %s (%s)", ft, err, r[0], r[1])
	}
	if _, err := os.Stat(dst); err == nil {
		t.Errorf("%v: refused, yet written", ft)
	}
}

// tinyRefused are the ftypes llama-quantize refuses for grok-tiny (the
// grok-tiny lines of REFUSALS).
var tinyRefused = []Ftype{FtypeQ2_K_S, FtypeIQ2_XXS, FtypeIQ2_XS, FtypeIQ2_S, FtypeIQ2_M, FtypeIQ1_S, FtypeIQ1_M}

// grok-tiny's rows of 128 are not whole super-blocks: quantised to the IQ3
// ftypes, its matrices take llama-quantize's fallbacks (IQ3_S, IQ3_XXS and
// IQ2_S to IQ4_NL, Q4_K to Q5_0, …), and the files are llama-quantize's —
// IQ3_XXS and IQ3_XS included, which llama-quantize writes here because no
// tensor keeps a type that needs an importance matrix. Where one does (the
// ffn_down of the other ftypes of REFUSALS), it is refused as llama-quantize
// refuses it.
func TestQuantizeIQ3FallbacksMatchLlamaCpp(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("quantises four files; -short and race runs rely on TestQuantizeKQuantsMatchLlamaCpp")
	}
	want := readSums(t)
	refused := readRefusals(t)
	src := filepath.Join(testdata, "grok-tiny/grok-tiny.gguf")
	for _, ft := range []Ftype{FtypeIQ3_S, FtypeIQ3_M, FtypeIQ3_XXS, FtypeIQ3_XS} {
		name := "grok-tiny-" + ft.String() + ".gguf"
		dst := filepath.Join(t.TempDir(), name)
		res, err := Quantize(context.Background(), src, dst, ft, QuantizeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fallbacks := 0
		for _, w := range res.Warnings {
			if strings.Contains(w, "falling back to IQ4_NL") {
				fallbacks++
			}
		}
		if fallbacks == 0 {
			t.Errorf("%s: nothing fell back to IQ4_NL: %q", name, res.Warnings)
		}
		b, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != want[name] {
			t.Errorf("%s: SHA-256 %s, llama-quantize's %s", name, got, want[name])
		}
	}
	for _, ft := range tinyRefused {
		r, ok := refused["grok-tiny-"+ft.String()]
		if !ok {
			t.Fatalf("REFUSALS has no grok-tiny %v", ft)
		}
		checkRefusal(t, src, filepath.Join(t.TempDir(), "x.gguf"), ft, r)
	}
}

// readRefusals reads testdata/grok-quant/REFUSALS: per refused output, the
// tensor llama-quantize named and its target type.
func readRefusals(t *testing.T) map[string][2]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, "grok-quant", "REFUSALS"))
	if err != nil {
		t.Fatal(err)
	}
	r := map[string][2]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			r[f[0]] = [2]string{f[1], f[2]}
		}
	}
	return r
}

func readSums(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testdata, "grok-quant", "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			sums[f[1]] = f[0]
		}
	}
	return sums
}

func TestParseSplitSize(t *testing.T) {
	for _, c := range []struct {
		s    string
		want int64
	}{{"1M", 1e6}, {"500M", 5e8}, {"4G", 4e9}, {"0M", 0}, {"-1G", 0}, {"1", 0}, {"1K", 0}, {"1.5G", 0}, {"M", 0}, {"", 0}, {"1m", 0}, {"99999999999999G", 0}} {
		got, err := ParseSplitSize(c.s)
		if (err == nil) != (c.want > 0) || got != c.want {
			t.Errorf("ParseSplitSize(%q) = %d, %v; want %d", c.s, got, err, c.want)
		}
	}
}

// Convert to a mixture writes the tensors Convert to F32 followed by
// Quantize (which is llama-quantize) writes: the same type and bytes for
// every tensor, the same file type, the same fallbacks. Sources: xAI int8,
// hpcai safetensors (BF16) and an F32 GGUF.
func TestConvertMixtureMatchesQuantize(t *testing.T) {
	fx := getFixtures(t)
	for _, src := range []string{filepath.Join(testdata, "xai-ckpt-tiny"), fx.stBF16, fx.gguf} {
		f32, _ := convertTo(t, src, Options{Type: F32})
		types := []Type{Q4_K_M, Q2_K, Q4_0, Q6_K, IQ3_M}
		if raceEnabled {
			types = types[:4] // IQ3's search is single-threaded and slow under the detector
		}
		for _, typ := range types {
			t.Run(filepath.Base(src)+"/"+typ.String(), func(t *testing.T) {
				ft, _ := typ.ftype()
				ref := filepath.Join(t.TempDir(), "ref.gguf")
				qres, err := Quantize(context.Background(), f32, ref, ft, QuantizeOptions{})
				if err != nil {
					t.Fatal(err)
				}
				got, res := convertTo(t, src, Options{Type: typ})
				fallbacks := func(ws []string) (n int) {
					for _, w := range ws {
						if strings.Contains(w, "falling back") {
							n++
						}
					}
					return n
				}
				if res.FileType != uint32(ft) || fallbacks(res.Warnings) != fallbacks(qres.Warnings) {
					t.Errorf("file type %d, %d fallbacks; Quantize: %d, %d", res.FileType, fallbacks(res.Warnings), qres.FileType, fallbacks(qres.Warnings))
				}
				g, w := openGGUF(t, got), openGGUF(t, ref)
				if len(g.Tensors) != len(w.Tensors) {
					t.Fatalf("%d tensors, Quantize %d", len(g.Tensors), len(w.Tensors))
				}
				kinds := map[gguf.GGMLType]int{}
				for _, wi := range w.Tensors {
					gi, ok := g.Info(wi.Name)
					if !ok || gi.Type != wi.Type || !equalDims(gi.Dims, wi.Dims) {
						t.Errorf("%s: %+v, Quantize %v %v", wi.Name, gi, wi.Type, wi.Dims)
						continue
					}
					gb, _ := g.TensorBytes(wi.Name)
					wb, _ := w.TensorBytes(wi.Name)
					if string(gb) != string(wb) {
						t.Errorf("%s (%v): bytes differ from Quantize's", wi.Name, wi.Type)
					}
					kinds[wi.Type]++
				}
				if v, _ := g.Get("general.quantization_version"); v.Data != uint32(QuantizationVersion) {
					t.Errorf("general.quantization_version = %v", v.Data)
				}
				t.Logf("types %v", kinds)
			})
		}
	}
}

// Values that ggml's IQ3 quantisers abort on (squares beyond float32, Inf,
// NaN) fail the quantisation with the tensor named, and leave no file.
func TestQuantizeIQ3Refuses(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []float32{3e19, float32(math.Inf(-1)), float32(math.NaN())} {
		w := gguf.NewWriter()
		w.AddKV("general.architecture", "grok")
		x := make([]float32, 2*256)
		for i := range x {
			x[i] = float32(i%9-4) * 0.01
		}
		x[300] = v
		data, _ := tensor.EncodeRow(nil, tensor.F32, x)
		w.AddTensor("blk.0.attn_q.weight", tensor.F32, []int{2, 256}, data)
		src := filepath.Join(dir, "in.gguf")
		if err := w.WriteFile(src); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, "out.gguf")
		_, err := Quantize(context.Background(), src, dst, FtypeIQ3_S, QuantizeOptions{})
		if err == nil || !strings.Contains(err.Error(), `tensor "blk.0.attn_q.weight"`) || !strings.Contains(err.Error(), "IQ3_S cannot quantise block 1: its values are too large or not finite") {
			t.Errorf("%v: %v", v, err)
		}
		if _, err := os.Stat(dst); err == nil {
			t.Errorf("%v: output written", v)
		}
	}
}

// Values whose scales overflow fp16 (or Inf and NaN) fail the
// quantisation, as llama-quantize's ggml_validate_row_data makes it fail,
// and leave no file.
func TestQuantizeValidates(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		v  float32
		ft Ftype
	}{{1e9, FtypeQ4_K_M}, {1e9, FtypeQ8_0}, {1e6, FtypeF16}, {float32(math.Inf(1)), FtypeQ4_0}, {float32(math.NaN()), FtypeBF16}} {
		w := gguf.NewWriter()
		w.AddKV("general.architecture", "grok")
		x := make([]float32, 2*256)
		x[300] = c.v
		data, _ := tensor.EncodeRow(nil, tensor.F32, x)
		w.AddTensor("blk.0.attn_q.weight", tensor.F32, []int{2, 256}, data)
		src := filepath.Join(dir, "in.gguf")
		if err := w.WriteFile(src); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, "out.gguf")
		_, err := Quantize(context.Background(), src, dst, c.ft, QuantizeOptions{})
		if err == nil || !strings.Contains(err.Error(), "blk.0.attn_q.weight: quantized data validation failed") {
			t.Errorf("%v to %v: %v", c.v, c.ft, err)
		}
		if _, err := os.Stat(dst); err == nil {
			t.Errorf("%v to %v: output written", c.v, c.ft)
		}
	}
}

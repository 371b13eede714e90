package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grok-go/grok/internal/testmodel"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/fixtures"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/tensor"
)

// Lossless conversions reproduce the reference GGUF tensor for tensor, byte
// for byte, and so the logits bit for bit: transposing xAI's [in, out],
// merging safetensors' per-expert tensors, dequantising int8 to F32 (q·s is
// exact in float32) and copying BF16 all lose nothing.
func TestConvertLossless(t *testing.T) {
	f := getFixtures(t)
	for _, tc := range []struct {
		name, src string
		typ       Type
		ref       string // GGUF whose tensors the output must equal
		lossy     bool   // the type rounds the source's values
	}{
		{"gguf f32 → f32", f.gguf, F32, f.gguf, false},
		{"gguf f32 → keep", f.gguf, Keep, f.gguf, false},
		{"gguf bf16 → keep", f.ggufBF16, Keep, f.ggufBF16, false},
		{"gguf f32 → bf16", f.gguf, BF16, f.ggufBF16, true},
		{"safetensors f32 (3 shards, experts merged) → f32", f.stF32, F32, f.gguf, false},
		{"safetensors bf16 → bf16", f.stBF16, BF16, f.ggufBF16, false},
		{"safetensors bf16 → keep", f.stBF16, Keep, f.ggufBF16, false},
		{"xai float32 [in,out] → f32", f.xaiFloat, F32, f.gguf, false},
		{"xai int8 → f32 (dequantised)", f.xaiInt8, F32, f.xaiDeqGGUF, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, res := convertTo(t, tc.src, Options{Type: tc.typ})
			sameTensors(t, dst, tc.ref)
			if d := maxAbsDiff(logitsOf(t, dst), logitsOf(t, tc.ref)); d != 0 {
				t.Errorf("logits differ from the reference by %g", d)
			}
			if d := maxAbsDiff(logitsOf(t, dst), logitsOf(t, tc.src)); d > 1e-5 && !tc.lossy {
				t.Errorf("logits differ from the source's by %g", d)
			}
			// The fixtures' GGUFs carry a vocabulary, the other formats none.
			wantWarn := 1
			if strings.HasSuffix(tc.src, ".gguf") {
				wantWarn = 0
			}
			if len(res.Warnings) != wantWarn {
				t.Errorf("warnings: %q", res.Warnings)
			}
		})
	}
}

// Converting a conversion changes nothing: the second file is the first,
// byte for byte (metadata and vocabulary included).
func TestConvertIdempotent(t *testing.T) {
	f := getFixtures(t)
	for _, typ := range []Type{F32, BF16, Q8_0} {
		first, _ := convertTo(t, f.stF32, Options{Type: typ, Tokenizer: loadVocab(t, f.gguf)})
		second, _ := convertTo(t, first, Options{Type: typ})
		a, _ := os.ReadFile(first)
		b, _ := os.ReadFile(second)
		if string(a) != string(b) {
			t.Errorf("%v: converting the converted file changed it", typ)
		}
	}
}

func loadVocab(t *testing.T, path string) loader.Tokenizer {
	t.Helper()
	v, err := LoadVocab(path)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The metadata are exactly the keys of semantics §9 (plus add_space_prefix,
// and quantization_version for quantised files), the config reads back
// equal, and the vocabulary is the source's.
func TestConvertMetadata(t *testing.T) {
	f := getFixtures(t)
	src := open(t, f.gguf)
	want := []string{
		"general.architecture", "general.name", "grok.context_length", "grok.embedding_length",
		"grok.block_count", "grok.feed_forward_length", "grok.expert_feed_forward_length",
		"grok.attention.head_count", "grok.attention.head_count_kv", "grok.attention.key_length",
		"grok.attention.value_length", "grok.rope.dimension_count", "grok.rope.freq_base",
		"grok.attention.layer_norm_rms_epsilon", "grok.expert_count", "grok.expert_used_count",
		"grok.embedding_scale", "grok.logit_scale", "grok.attention.output_scale",
		"grok.attn_logit_softcapping", "grok.router_logit_softcapping", "grok.vocab_size",
		"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
		"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
		"tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
		"tokenizer.ggml.add_space_prefix",
	}
	for _, tc := range []struct {
		name, src string
		typ       Type
		ftype     uint32
	}{
		{"gguf f32", f.gguf, F32, 0},
		{"gguf f16", f.gguf, F16, 1},
		{"safetensors bf16 keep", f.stBF16, Keep, 32},
		{"xai int8 keep", f.xaiInt8, Keep, 7},
		{"xai int8 q8_0", f.xaiInt8, Q8_0, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, res := convertTo(t, tc.src, Options{Type: tc.typ, Tokenizer: src.Tokenizer})
			g := openGGUF(t, dst)
			var keys []string
			for _, kv := range g.Metadata {
				keys = append(keys, kv.Key)
			}
			w := slices.Clone(want)
			if tc.ftype == 7 {
				w = append(w, "general.quantization_version")
			}
			w = append(w, "general.file_type")
			if !slices.Equal(keys, w) {
				t.Errorf("keys\n got %q\nwant %q", keys, w)
			}
			checks := map[string]any{
				"general.architecture": "grok", "grok.attn_logit_softcapping": float32(30),
				"grok.router_logit_softcapping": float32(30), "general.file_type": tc.ftype,
				"tokenizer.ggml.model": "llama", "tokenizer.ggml.add_bos_token": false,
				"tokenizer.ggml.add_eos_token": false, "tokenizer.ggml.add_space_prefix": true,
				"grok.expert_feed_forward_length": uint32(128), "grok.vocab_size": uint32(300),
				"tokenizer.ggml.bos_token_id": uint32(1), "tokenizer.ggml.unknown_token_id": uint32(3),
			}
			if tc.ftype == 7 {
				checks["general.quantization_version"] = uint32(2)
			}
			for k, v := range checks {
				if got, _ := g.Get(k); got.Data != v {
					t.Errorf("%s = %v (%T), want %v (%T)", k, got.Data, got.Data, v, v)
				}
			}
			if res.FileType != tc.ftype {
				t.Errorf("Result.FileType %d, want %d", res.FileType, tc.ftype)
			}
			cfg, err := loader.ConfigFromGGUF(g)
			if err != nil {
				t.Fatal(err)
			}
			if cfg != f.model.Config {
				t.Errorf("config reads back as\n%+v\nwant\n%+v", cfg, f.model.Config)
			}
			v := f.model.Vocab
			toks, _ := g.Strings("tokenizer.ggml.tokens")
			scores, _ := g.Float32s("tokenizer.ggml.scores")
			types, _ := g.Int32s("tokenizer.ggml.token_type")
			if !slices.Equal(toks, v.Tokens) || !slices.Equal(scores, v.Scores) || !slices.Equal(types, v.Types) {
				t.Error("vocabulary differs from the source's")
			}
			// Norms and the router stay F32 whatever the type.
			for _, ti := range g.Tensors {
				if loader.KeepsF32(ti.Name) && ti.Type != gguf.GGMLTypeF32 {
					t.Errorf("%s is %v", ti.Name, ti.Type)
				}
			}
			if tc.typ == Q8_0 {
				if ti, _ := g.Info("token_embd.weight"); ti.Type != gguf.GGMLTypeQ8_0 {
					t.Errorf("token_embd is %v, want Q8_0 (as llama-quantize)", ti.Type)
				}
			}
		})
	}
}

// Q8_0 and F16 conversions of the moderate-gain model stay within a bound
// set by the weight rounding. Q8_0 rounds each weight by at most d/2 =
// amax/254 of its block of 32 (for Gaussian weights an RMS error of about
// 0.6 % of their standard deviation), F16 by at most 2^-11 relative (RMS
// ≈ 0.03 %): Q8_0's weight error is ~20× F16's, and this two-layer model
// amplifies either about threefold into the logits. Bounds on what the
// file's weights compute (decoded, multiplied in float32): max |Δ| ≤ 5 %
// of the largest |logit| for Q8_0 (measured 1.9 %: 0.097 of 5.1), ≤ 0.25 %
// for F16 (measured 0.08 %). The engine's Q8_0 kernels may add their own
// activation rounding (kernels.ExactQuant); loaded directly, the file must
// still be within the Q8_0 bound.
func TestConvertQuantisedBounds(t *testing.T) {
	f := getFixtures(t)
	want := logitsOf(t, f.gguf)
	scale := maxAbs(want)
	for _, tc := range []struct {
		typ   Type
		bound float64 // relative to the largest logit
	}{{Q8_0, 0.05}, {F16, 2.5e-3}} {
		dst, _ := convertTo(t, f.gguf, Options{Type: tc.typ})
		d := maxAbsDiff(dequantLogits(t, dst), want)
		t.Logf("%v: max |Δ| = %.3g (%.3g%% of max |logit| %.3g)", tc.typ, d, 100*d/scale, scale)
		if d > tc.bound*scale || d == 0 {
			t.Errorf("%v: max |Δ| = %g, want in (0, %g]", tc.typ, d, tc.bound*scale)
		}
		direct := maxAbsDiff(logitsOf(t, dst), want)
		t.Logf("%v: loaded with the engine's kernels: max |Δ| = %.3g", tc.typ, direct)
		if direct > 0.05*scale {
			t.Errorf("%v: loaded, max |Δ| = %g, want ≤ %g", tc.typ, direct, 0.05*scale)
		}
	}
}

// Every source layout quantises to the same bytes: Q8_0 blocks of the
// canonical rows, whether they come merged, per expert, or transposed.
func TestConvertQ8_0SameFromEverySource(t *testing.T) {
	f := getFixtures(t)
	ref, _ := convertTo(t, f.gguf, Options{Type: Q8_0})
	for _, src := range []string{f.stF32, f.xaiFloat} {
		dst, _ := convertTo(t, src, Options{Type: Q8_0})
		sameTensors(t, dst, ref)
	}
	// And grok quantize of the F32 GGUF writes the same Q8_0 data.
	q := filepath.Join(t.TempDir(), "q.gguf")
	if _, err := Quantize(context.Background(), f.gguf, q, FtypeQ8_0, QuantizeOptions{}); err != nil {
		t.Fatal(err)
	}
	a, b := openGGUF(t, q), openGGUF(t, ref)
	for _, ti := range b.Tensors {
		x, _ := a.TensorBytes(ti.Name)
		y, _ := b.TensorBytes(ti.Name)
		if string(x) != string(y) {
			t.Errorf("%s: quantize and convert disagree", ti.Name)
		}
	}
}

// xAI's int8 weights become Q8_0 with the int8 values and the scales kept:
// block b of output row o holds d = fp16(scale of o's shard) and q = the
// int8 of inputs 32b…32b+31 of column o. The logits equal the
// checkpoint's up to fp32 rounding (the kernels sum in another order).
func TestConvertXAIInt8Keep(t *testing.T) {
	f := getFixtures(t)
	want := logitsOf(t, f.xaiInt8)
	for _, typ := range []Type{Keep, Q8_0} {
		dst, res := convertTo(t, f.xaiInt8, Options{Type: typ})
		if len(res.Warnings) != 1 { // only "no tokenizer"
			t.Errorf("%v: warnings %q", typ, res.Warnings)
		}
		g := openGGUF(t, dst)
		checked := 0
		for name, q := range f.xaiInt8Res.Int8 {
			ti, ok := g.Info(name)
			if !ok || ti.Type != gguf.GGMLTypeQ8_0 {
				t.Fatalf("%v: %s: %v", typ, name, ti)
			}
			data, _ := g.TensorBytes(name)
			n := len(q.Shape)
			in, out := q.Shape[n-2], q.Shape[n-1]
			mats := len(q.Weight) / (in * out)
			blocks := in / tensor.Q8BlockSize
			for e := 0; e < mats; e++ {
				for o := 0; o < out; o++ {
					for b := 0; b < blocks; b++ {
						blk := data[((e*out+o)*blocks+b)*tensor.Q8BlockBytes:][:tensor.Q8BlockBytes]
						if d := binary.LittleEndian.Uint16(blk); d != tensor.FloatToHalf(q.Scale(e, b*32, o)) {
							t.Fatalf("%v: %s expert %d row %d block %d: d %#04x, want fp16 of %g", typ, name, e, o, b, d, q.Scale(e, b*32, o))
						}
						for j := 0; j < tensor.Q8BlockSize; j++ {
							if got := int8(blk[2+j]); got != q.At(e, b*32+j, o) {
								t.Fatalf("%v: %s expert %d row %d input %d: q %d, want %d", typ, name, e, o, b*32+j, got, q.At(e, b*32+j, o))
							}
						}
						checked++
					}
				}
			}
		}
		t.Logf("%v: %d Q8_0 blocks hold the int8 values and scales exactly", typ, checked)
		if typ != Keep {
			continue // q8_0 also quantises the F32 embedding
		}
		if ti, _ := g.Info("token_embd.weight"); ti.Type != gguf.GGMLTypeF32 {
			t.Errorf("keep: token_embd is %v, want F32 as stored", ti.Type)
		}
		// The file's weights compute the checkpoint's model: equal up to
		// fp32 rounding (the sums run in another order).
		if d := maxAbsDiff(dequantLogits(t, dst), want); d > 1e-4 {
			t.Errorf("keep: logits differ from the xAI checkpoint's by %g", d)
		} else {
			t.Logf("keep: max |Δ| vs the xAI checkpoint = %.3g", d)
		}
		// Loaded directly, the engine's Q8_0 kernels may round the
		// activations to int8 (kernels.ExactQuant, as llama.cpp does).
		d := maxAbsDiff(logitsOf(t, dst), want)
		t.Logf("keep: loaded with the engine's kernels: max |Δ| = %.3g", d)
		if d > 0.05*maxAbs(want) {
			t.Errorf("keep: loaded, logits differ from the xAI checkpoint's by %g", d)
		}
	}
}

// When Q8_0 blocks would straddle scale shards (model_shards 8 on 64 and
// 128 rows) or a scale has no exact fp16, keep refuses (and writes
// nothing) and q8_0 requantises with a warning.
func TestConvertXAIInt8NotExact(t *testing.T) {
	f := getFixtures(t)
	// A checkpoint whose blk.0.attn_q column 0 is tiny: its scale is below
	// fp16's smallest subnormal.
	m := fixtures.Random(fixtures.SmallConfig(), 1, fixtures.ModerateGains)
	q := m.Values("blk.0.attn_q.weight")
	for i := 0; i < m.Config.EmbSize; i++ {
		q[i] *= 1e-7
	}
	m.Tensors["blk.0.attn_q.weight"] = fixtures.F32Tensor("blk.0.attn_q.weight", m.Tensors["blk.0.attn_q.weight"].Shape, q)
	tiny := t.TempDir()
	if _, err := fixtures.WriteXAI(tiny, m, fixtures.XAIOptions{ModelShards: 2}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, src string
		why       []string // tensors and reasons in the error/warnings
	}{
		{"shards cut blocks", f.xaiStraddle, []string{"blk.0.attn_output.weight", "cut through Q8_0 blocks"}},
		{"scale not in fp16", tiny, []string{"blk.0.attn_q.weight", "not exactly representable in fp16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := open(t, tc.src)
			dir := t.TempDir()
			dst := filepath.Join(dir, "out.gguf")
			_, err := Convert(context.Background(), src, dst, Options{Type: Keep})
			if err == nil {
				t.Fatal("keep accepted")
			}
			for _, w := range tc.why {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("failed conversion left %v", ents)
			}
			res, err := Convert(context.Background(), src, dst, Options{Type: Q8_0})
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(res.Warnings, "\n")
			for _, w := range append(tc.why, "requantised") {
				if !strings.Contains(all, w) {
					t.Errorf("warnings %q do not mention %q", all, w)
				}
			}
			// Requantising stays close to the checkpoint.
			want := forward(t, src.LanguageModel, testTokens)
			if d := maxAbsDiff(dequantLogits(t, dst), want); d > 0.05*maxAbs(want) {
				t.Errorf("requantised logits differ by %g", d)
			}
		})
	}
}

// The vendored fixtures of shared/testdata convert to GGUF files that
// compute their expected logits (the independent float64 reference, 1e-3
// as in their READMEs): xAI int8 dequantised to F32, hpcai BF16 kept.
func TestConvertVendoredFixtures(t *testing.T) {
	vocab := loadVocab(t, filepath.Join(testdata, "grok-tiny/grok-tiny.gguf"))
	for _, tc := range []struct {
		dir string
		typ Type
	}{
		{"xai-ckpt-tiny", F32},
		{"hf-safetensors-tiny", Keep},
		{"hf-safetensors-tiny", F32},
	} {
		t.Run(tc.dir+"/"+tc.typ.String(), func(t *testing.T) {
			dir := filepath.Join(testdata, tc.dir)
			dst, res := convertTo(t, dir, Options{Type: tc.typ, Tokenizer: vocab})
			if len(res.Warnings) != 0 {
				t.Errorf("warnings: %q", res.Warnings)
			}
			m := open(t, dst)
			if m.Tokenizer == nil || m.Tokenizer.VocabSize() != 512 {
				t.Fatal("vocabulary not embedded")
			}
			toks := testmodel.ReadTokens(t, dir)
			for _, name := range []string{"len7", "len64"} {
				want := testmodel.ReadLogits(t, filepath.Join(dir, "logits_"+name+".f32"))
				d := maxAbsDiff(forward(t, m.LanguageModel, toks[name]), want)
				if d > 1e-3 {
					t.Errorf("%s: max |Δ| = %g, want ≤ 1e-3", name, d)
				}
				t.Logf("%s: max |Δ| = %.3g", name, d)
			}
		})
	}
}

// A vocabulary from a tokenizer.model encodes as the tokenizer.model does
// once stored in GGUF (the demo model's tokenizer and Grok-1's own), and a
// smaller vocabulary is padded to the model's size as llama.cpp's converter
// pads it.
func TestVocabFromTokenizerModel(t *testing.T) {
	models := []string{"../tokenizer/testdata/grok-tiny-kjv/tokenizer.model"}
	if !testing.Short() && !raceEnabled {
		// 131072 pieces, built twice: seconds.
		models = append(models, "../tokenizer/testdata/tokenizer.model")
	}
	texts := []string{"Hello, world!", "  two  spaces", "12345 <|separator|> ünïcödé 漢字 🙂\n\tend", "", "x",
		"In the beginning God created the heaven and the earth."}
	cfg := fixtures.SmallConfig()
	for _, path := range models {
		tok, err := LoadVocab(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg.VocabSize = tok.VocabSize()
		j := &job{}
		kvs, err := j.vocabKVs(tok, &cfg)
		if err != nil {
			t.Fatal(err)
		}
		w := gguf.NewWriter()
		for _, p := range kvs {
			if err := w.AddKV(p.Key, p.Value); err != nil {
				t.Fatal(err)
			}
		}
		file := filepath.Join(t.TempDir(), "vocab.gguf")
		if err := w.WriteFile(file); err != nil {
			t.Fatal(err)
		}
		back, err := LoadVocab(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			if a, b := tok.Encode(s), back.Encode(s); !slices.Equal(a, b) {
				t.Errorf("%s: %q: tokenizer.model gives %v, the GGUF vocabulary %v", path, s, a, b)
			}
		}
		if len(j.res.Warnings) != 0 {
			t.Errorf("%s: warnings: %q", path, j.res.Warnings)
		}
	}

	kjv, err := LoadVocab(models[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg.VocabSize = kjv.VocabSize() + 3
	j := &job{}
	kvs, err := j.vocabKVs(kjv, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	toks := kvs[1].Value.([]string)
	types := kvs[3].Value.([]int32)
	if len(toks) != cfg.VocabSize || toks[len(toks)-1] != "[PAD3]" || types[len(types)-1] != 5 {
		t.Errorf("padding: %d tokens ending %q type %d", len(toks), toks[len(toks)-1], types[len(types)-1])
	}
	if len(j.res.Warnings) != 1 || !strings.Contains(j.res.Warnings[0], "padded") {
		t.Errorf("warnings: %q", j.res.Warnings)
	}
	cfg.VocabSize = kjv.VocabSize() - 1
	if _, err := (&job{}).vocabKVs(kjv, &cfg); err == nil {
		t.Error("a vocabulary larger than the model's accepted")
	}
}

func TestConvertErrors(t *testing.T) {
	f := getFixtures(t)
	m := open(t, f.gguf)
	dir := t.TempDir()
	for _, tc := range []struct {
		dst, want string
	}{
		{filepath.Join(dir, "missing", "out.gguf"), "output folder"},
		{dir, "is a folder"},
		{f.gguf, "is the input file"},
		{"", "no output path"},
	} {
		if _, err := Convert(context.Background(), m, tc.dst, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Convert to %q: %v, want it to mention %q", tc.dst, err, tc.want)
		}
	}
	if _, err := Convert(context.Background(), m, filepath.Join(dir, "x.gguf"), Options{Type: Type(42)}); err == nil {
		t.Error("unknown type accepted")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed conversions left %v", ents)
	}
	for _, s := range []string{"iq2_xxs", "", "f64", "15"} {
		if _, err := ParseType(s); err == nil {
			t.Errorf("ParseType(%q) accepted", s)
		}
	}
	for s, want := range map[string]Type{"F32": F32, "q8_0": Q8_0, "Keep": Keep, "bf16": BF16, "f16": F16,
		"q4_k": Q4_K_M, "Q4_K_M": Q4_K_M, "q2_k": Q2_K, "Q6_K": Q6_K, "q5_k_s": Q5_K_S, "q4_0": Q4_0,
		"iq3_s": IQ3_S, "IQ3_M": IQ3_M, "iq3_xxs": IQ3_XXS, "iq3_xs": IQ3_XS} {
		if got, err := ParseType(s); err != nil || got != want {
			t.Errorf("ParseType(%q) = %v, %v", s, got, err)
		}
	}
}

// A cancelled conversion stops, fails and leaves no file, not even the
// temporary one.
func TestConvertCancelled(t *testing.T) {
	f := getFixtures(t)
	m := open(t, f.xaiInt8)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Convert(ctx, m, filepath.Join(dir, "out.gguf"), Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Convert: %v, want context.Canceled", err)
	}
	if _, err := Quantize(ctx, f.gguf, filepath.Join(dir, "q.gguf"), FtypeQ8_0, QuantizeOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Quantize: %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("cancelled conversions left %v", ents)
	}
}

// A dense model (num_experts ≤ 1, ffn_gate/up/down) converts too.
func TestConvertDense(t *testing.T) {
	cfg := fixtures.SmallConfig()
	cfg.NumExperts, cfg.NumSelectedExperts = 0, 0
	m := fixtures.Random(cfg, 5, fixtures.ModerateGains)
	src := filepath.Join(t.TempDir(), "dense.gguf")
	if err := fixtures.WriteGGUF(src, m, fixtures.GGUFOptions{}); err != nil {
		t.Fatal(err)
	}
	dst, _ := convertTo(t, src, Options{Type: F32})
	sameTensors(t, dst, src)
	q, _ := convertTo(t, src, Options{Type: Q8_0})
	want := logitsOf(t, src)
	if d := maxAbsDiff(dequantLogits(t, q), want); d > 0.05*maxAbs(want) {
		t.Errorf("dense Q8_0: max |Δ| = %g", d)
	}
}

// A killed conversion's temporary file (hidden, beside the output, and no
// longer locked by a live writer) is removed by the next conversion to the
// same output; temporary files of other outputs stay.
func TestConvertRemovesStaleTemporaryFiles(t *testing.T) {
	f := getFixtures(t)
	m := open(t, f.xaiInt8)
	dir := t.TempDir()
	stale := []string{".out.gguf.tmp4242", ".q.gguf.tmp77"}
	keep := ".other.gguf.tmp1"
	for _, n := range append(stale, keep) {
		if err := os.WriteFile(filepath.Join(dir, n), make([]byte, 1000), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Convert(context.Background(), m, filepath.Join(dir, "out.gguf"), Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Quantize(context.Background(), f.gguf, filepath.Join(dir, "q.gguf"), FtypeQ8_0, QuantizeOptions{}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{keep, "out.gguf", "q.gguf"}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("folder holds %v, want %v", names, want)
	}
}

package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// fixture is shared/testdata/hf-safetensors-tiny, vendored.
const fixture = "../../testdata/hf-safetensors-tiny"

// TestOpenFixture checks the tensor table of the shared fixture (two shards
// and an index, hpcai-tech names; its README lists the tensors).
func TestOpenFixture(t *testing.T) {
	for _, path := range []string{fixture, filepath.Join(fixture, IndexFileName)} {
		m, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		c := m.Config()
		if c == nil || c.VocabSize != 512 || c.EmbSize != 128 || c.KeySize != 16 || c.NumQHeads != 8 || c.NumKVHeads != 2 ||
			c.NumLayers != 2 || c.NumExperts != 4 || c.NumSelectedExperts != 2 || c.FFNSize != 256 || c.RopeBase != 10000 ||
			c.MaxAttnValue != 30 || c.AttnOutputMultiplier != 0.20000000298023224 || c.EmbeddingMultiplierScale != 8 ||
			c.OutputMultiplierScale != 0.5773502588272095 || c.SequenceLen != 256 || c.RMSEps != 9.999999747378752e-06 ||
			c.PadToken != 0 || c.BOSToken != 1 || c.EOSToken != 2 || !c.TieWordEmbeddings || !slices.Equal(c.Defaulted, []string{"rope_theta"}) {
			t.Errorf("config %+v", c)
		}
		type row struct {
			canon, raw, dtype string
			shape             []int
			file              int
		}
		rows := []row{
			{"token_embd.weight", "model.embed_tokens.weight", "BF16", []int{512, 128}, 1},
			{"output_norm.weight", "model.norm.scale", "F32", []int{128}, 2},
		}
		for l := 0; l < 2; l++ {
			f := func(shard1 bool) int {
				if l == 0 && shard1 {
					return 1
				}
				return 2
			}
			p, b := fmt.Sprintf("model.layers.%d.", l), fmt.Sprintf("blk.%d.", l)
			rows = append(rows,
				row{b + "attn_q.weight", p + "attn.q_proj.weight", "BF16", []int{128, 128}, f(true)},
				row{b + "attn_k.weight", p + "attn.k_proj.weight", "BF16", []int{32, 128}, f(true)},
				row{b + "attn_v.weight", p + "attn.v_proj.weight", "BF16", []int{32, 128}, f(true)},
				row{b + "attn_output.weight", p + "attn.o_proj.weight", "BF16", []int{128, 128}, f(true)},
				row{b + "ffn_gate_inp.weight", p + "moe_block.gate.weight", "F32", []int{4, 128}, f(true)},
				row{b + "attn_norm.weight", p + "pre_attn_norm.scale", "F32", []int{128}, 2},
				row{b + "attn_output_norm.weight", p + "post_attn_norm.scale", "F32", []int{128}, 2},
				row{b + "ffn_norm.weight", p + "pre_moe_norm.scale", "F32", []int{128}, 2},
				row{b + "layer_output_norm.weight", p + "post_moe_norm.scale", "F32", []int{128}, 2},
			)
			for e := 0; e < 4; e++ {
				x := fmt.Sprintf("moe_block.experts.%d.", e)
				rows = append(rows,
					row{fmt.Sprintf("%sffn_gate.%d.weight", b, e), p + x + "linear.weight", "BF16", []int{256, 128}, f(e < 3)},
					row{fmt.Sprintf("%sffn_up.%d.weight", b, e), p + x + "linear_v.weight", "BF16", []int{256, 128}, f(true)},
					row{fmt.Sprintf("%sffn_down.%d.weight", b, e), p + x + "linear_1.weight", "BF16", []int{128, 256}, f(true)},
				)
			}
		}
		infos := m.Tensors()
		byName := make(map[string]TensorInfo)
		for _, in := range infos {
			byName[in.Name] = in
		}
		if len(rows) != 44 || len(infos) != 44 || len(m.Names()) != 44 {
			t.Fatalf("%d rows, %d tensors, %d names; want 44", len(rows), len(infos), len(m.Names()))
		}
		for _, r := range rows {
			in := byName[r.raw]
			file := fmt.Sprintf("model-%05d-of-00002.safetensors", r.file)
			if in.Canonical != r.canon || in.DType != r.dtype || !slices.Equal(in.Shape, r.shape) || in.File != file {
				t.Errorf("%s: %+v, want %s %s %v %s", r.raw, in, r.canon, r.dtype, r.shape, file)
			}
			tt, ok := m.Lookup(r.canon)
			if !ok {
				t.Fatalf("Lookup(%s) failed", r.canon)
			}
			want := map[string]tensor.DType{"BF16": tensor.BF16, "F32": tensor.F32}[r.dtype]
			if tt.Name != r.canon || tt.Type != want || !slices.Equal(tt.Shape, r.shape) || tt.Transposed || tt.Scales != nil {
				t.Errorf("%s: tensor %v %v %v transposed=%v", r.canon, tt.Name, tt.Type, tt.Shape, tt.Transposed)
			}
			if err := tt.Check(); err != nil {
				t.Error(err)
			}
			raw, err := m.Raw(r.raw)
			if err != nil || &raw.Data[0] != &tt.Data[0] {
				t.Errorf("Raw(%s): %v", r.raw, err)
			}
		}
		if _, ok := m.Lookup("output.weight"); ok {
			t.Error("output.weight without lm_head")
		}
		norm, _ := m.Lookup("output_norm.weight")
		if v, err := norm.Float32s(); err != nil || len(v) != 128 {
			t.Errorf("output_norm: %v", err)
		}
	}
}

// TestNameSchemes builds a tiny model in each naming scheme (hpcai,
// keyfan, Mixtral-style) and checks every canonical name finds its tensor.
func TestNameSchemes(t *testing.T) {
	for scheme, label := range []string{"hpcai", "keyfan", "mixtral"} {
		t.Run(label, func(t *testing.T) {
			dir := t.TempDir()
			ts := schemeTensors(scheme)
			lm := stTensor{"lm_head.weight", "BF16", []int{10, 8}, fillBytes(160, 99)}
			writeFile(t, dir, SingleFileName, buildFile(append(sortedTensors(ts), lm)))
			writeFile(t, dir, ConfigFileName, []byte(tinyConfig(`, "tie_word_embeddings": false`)))
			m, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for canon, st := range ts {
				tt, ok := m.Lookup(canon)
				if !ok {
					t.Errorf("Lookup(%s) failed (file name %s)", canon, st.name)
					continue
				}
				if !bytes.Equal(tt.Data, st.data) || !slices.Equal(tt.Shape, st.shape) || tt.Transposed {
					t.Errorf("%s: wrong tensor (file name %s)", canon, st.name)
				}
			}
			if out, ok := m.Lookup("output.weight"); !ok || !bytes.Equal(out.Data, lm.data) {
				t.Error("lm_head.weight not served as output.weight with untied embeddings")
			}
			if got := len(m.Names()); got != len(ts)+1 {
				t.Errorf("%d names, want %d", got, len(ts)+1)
			}
		})
	}
}

// TestOpenSingleFile opens a bare .safetensors path without config.json:
// no shape checks, lm_head served.
func TestOpenSingleFile(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "weights.safetensors", buildFile([]stTensor{
		{"lm_head.weight", "F16", []int{2, 3}, fillBytes(12, 1)},
		{"model.norm.weight", "F32", []int{5}, fillBytes(20, 2)},
		{"unrelated.buffer", "I8", []int{4}, fillBytes(4, 3)},
		{"scalar", "F32", []int{}, fillBytes(4, 4)},
		{"empty", "F32", []int{0, 3}, nil},
	}))
	m, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Config() != nil {
		t.Error("config without config.json")
	}
	if tt, ok := m.Lookup("output.weight"); !ok || tt.Type != tensor.F16 {
		t.Errorf("output.weight: %v", tt)
	}
	if tt, ok := m.Lookup("output_norm.weight"); !ok || !slices.Equal(tt.Shape, []int{5}) {
		t.Errorf("output_norm.weight: %v", tt)
	}
	if tt, err := m.Raw("unrelated.buffer"); err != nil || tt.Type != tensor.I8 {
		t.Errorf("Raw(unrelated.buffer): %v %v", tt, err)
	}
	if tt, err := m.Raw("scalar"); err != nil || len(tt.Data) != 4 || len(tt.Shape) != 0 {
		t.Errorf("Raw(scalar): %v %v", tt, err)
	}
	if tt, err := m.Raw("empty"); err != nil || len(tt.Data) != 0 {
		t.Errorf("Raw(empty): %v %v", tt, err)
	}
	if _, err := m.Raw("nope"); err == nil {
		t.Error("Raw(nope) succeeded")
	}
	if _, err := m.Tensor("blk.0.attn_q.weight"); err == nil || !strings.Contains(err.Error(), "no tensor maps to") {
		t.Errorf("Tensor(absent): %v", err)
	}
	if err := m.Close(); err != nil {
		t.Error(err)
	}
}

// TestUnusableDType lists a tensor of a dtype the engine does not compute
// with, and refuses to hand it out.
func TestUnusableDType(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "m.safetensors", buildFile([]stTensor{
		{"model.norm.scale", "F64", []int{2}, fillBytes(16, 1)},
		{"step", "I64", []int{}, fillBytes(8, 2)},
		{"mask", "BOOL", []int{3}, fillBytes(3, 3)},
	}))
	m, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := m.Tensors(); len(got) != 3 || got[1].DType != "F64" || got[1].Canonical != "output_norm.weight" {
		t.Errorf("Tensors() = %+v", got)
	}
	if _, ok := m.Lookup("output_norm.weight"); ok {
		t.Error("Lookup of an F64 tensor succeeded")
	}
	if _, err := m.Tensor("output_norm.weight"); err == nil || !strings.Contains(err.Error(), "dtype F64") {
		t.Errorf("Tensor: %v", err)
	}
	if _, err := m.Raw("step"); err == nil || !strings.Contains(err.Error(), "dtype I64") {
		t.Errorf("Raw: %v", err)
	}
}

// TestOpenErrors checks files and folders that must not open.
func TestOpenErrors(t *testing.T) {
	hpcai := schemeTensors(0)
	good := buildFile(sortedTensors(hpcai))
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string // returns the path to open
		want  string
	}{
		{"no such path", func(t *testing.T, dir string) string { return filepath.Join(dir, "nope") }, "no such file"},
		{"empty folder", func(t *testing.T, dir string) string { return dir }, "holds neither"},
		{"shape disagrees with config", func(t *testing.T, dir string) string {
			writeFile(t, dir, SingleFileName, good)
			writeFile(t, dir, ConfigFileName, []byte(strings.Replace(tinyConfig(""), `"intermediate_size": 12`, `"intermediate_size": 16`, 1)))
			return dir
		}, "model.layers.0.moe_block.experts.0.linear.weight\" (blk.0.ffn_gate.0.weight) has shape [12 8], config.json implies [16 8]"},
		{"layer beyond config", func(t *testing.T, dir string) string {
			writeFile(t, dir, SingleFileName, good)
			writeFile(t, dir, ConfigFileName, []byte(strings.Replace(tinyConfig(""), `"num_hidden_layers": 2`, `"num_hidden_layers": 1`, 1)))
			return dir
		}, "is for layer 1, but config.json has 1 layers"},
		{"expert beyond config", func(t *testing.T, dir string) string {
			writeFile(t, dir, SingleFileName, good)
			writeFile(t, dir, ConfigFileName, []byte(strings.Replace(tinyConfig(""), `"num_experts": 2`, `"num_experts": 1`, 1)))
			return dir
		}, "is for expert 1, but config.json has 1 experts"},
		{"more layers than the files hold", func(t *testing.T, dir string) string {
			writeFile(t, dir, SingleFileName, good)
			writeFile(t, dir, ConfigFileName, []byte(strings.Replace(tinyConfig(""), `"num_hidden_layers": 2`, `"num_hidden_layers": 16777216`, 1)))
			return dir
		}, "num_hidden_layers = 16777216, but the files hold tensors for 2 layers"},
		{"one layer more than the files hold", func(t *testing.T, dir string) string {
			writeFile(t, dir, SingleFileName, good)
			writeFile(t, dir, ConfigFileName, []byte(strings.Replace(tinyConfig(""), `"num_hidden_layers": 2`, `"num_hidden_layers": 3`, 1)))
			return dir
		}, "num_hidden_layers = 3, but the files hold tensors for 2 layers"},
		{"two names for one tensor", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "m.safetensors", buildFile([]stTensor{
				{"model.norm.scale", "F32", []int{1}, fillBytes(4, 1)},
				{"model.norm.weight", "F32", []int{1}, fillBytes(4, 2)},
			}))
		}, `"model.norm.scale" and "model.norm.weight" both map to output_norm.weight`},
		{"bad config", func(t *testing.T, dir string) string {
			writeFile(t, dir, SingleFileName, good)
			writeFile(t, dir, ConfigFileName, []byte(`{"hidden_size": 8}`))
			return dir
		}, "missing vocab_size"},
		{"index names a shard outside the folder", func(t *testing.T, dir string) string {
			writeFile(t, dir, IndexFileName, []byte(`{"weight_map": {"model.norm.scale": "../../etc/passwd"}}`))
			return dir
		}, "is not a file name"},
		{"index names a missing shard", func(t *testing.T, dir string) string {
			writeFile(t, dir, IndexFileName, []byte(`{"weight_map": {"model.norm.scale": "model-1.safetensors"}}`))
			return dir
		}, "no such file"},
		{"index maps to the wrong shard", func(t *testing.T, dir string) string {
			writeFile(t, dir, "a.safetensors", buildFile([]stTensor{{"x", "F32", []int{1}, fillBytes(4, 1)}}))
			writeFile(t, dir, IndexFileName, []byte(`{"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}}`))
			return dir
		}, `weight_map puts "y" in a.safetensors, which has no such tensor`},
		{"empty index", func(t *testing.T, dir string) string {
			writeFile(t, dir, IndexFileName, []byte(`{"metadata": {}}`))
			return dir
		}, "empty or missing weight_map"},
		{"index not JSON", func(t *testing.T, dir string) string {
			return writeFile(t, dir, "x.index.json", []byte(`{"weight_map": [`))
		}, "x.index.json"},
		{"broken shard", func(t *testing.T, dir string) string {
			writeFile(t, dir, "a.safetensors", []byte{1, 2, 3})
			writeFile(t, dir, IndexFileName, []byte(`{"weight_map": {"x": "a.safetensors"}}`))
			return dir
		}, "a.safetensors: file is 3 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := Open(tc.setup(t, dir))
			if err == nil {
				m.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

// TestIndexSelectsShard takes each tensor from the shard the index names,
// even when another shard has a tensor of the same name.
func TestIndexSelectsShard(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.safetensors", buildFile([]stTensor{{"model.norm.scale", "F32", []int{1}, fillBytes(4, 1)}, {"stale", "F32", []int{1}, fillBytes(4, 2)}}))
	writeFile(t, dir, "b.safetensors", buildFile([]stTensor{{"model.norm.scale", "F32", []int{1}, fillBytes(4, 3)}}))
	idx, _ := json.Marshal(map[string]any{"weight_map": map[string]string{"model.norm.scale": "b.safetensors"}})
	writeFile(t, dir, IndexFileName, idx)
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tt, _ := m.Lookup("output_norm.weight")
	if !bytes.Equal(tt.Data, fillBytes(4, 3)) {
		t.Error("tensor not taken from the shard the index names")
	}
	if len(m.Tensors()) != 1 {
		t.Errorf("tensors outside the index are listed: %+v", m.Tensors())
	}
}

func TestMatchPattern(t *testing.T) {
	for _, tc := range []struct {
		raw, canon string
	}{
		{"model.layers.0.attn.q_proj.weight", "blk.0.attn_q.weight"},
		{"model.layers.63.moe_block.experts.7.linear_1.weight", "blk.63.ffn_down.7.weight"},
		{"transformer.decoder_layer.12.moe.3.linear_v.weight", "blk.12.ffn_up.3.weight"},
		{"model.layers.5.block_sparse_moe.experts.2.w2.weight", "blk.5.ffn_down.2.weight"},
		{"model.layers.5.block_sparse_moe.gate.weight", "blk.5.ffn_gate_inp.weight"},
		{"transformer.decoder_layer.1.router.weight", "blk.1.ffn_gate_inp.weight"},
		{"model.layers.1.post_moe_norm.weight", "blk.1.layer_output_norm.weight"},
		{"transformer.in_out_embed.weight", "token_embd.weight"},
		{"model.layers.01.attn.q_proj.weight", ""},       // leading zero
		{"model.layers.99999999.attn.q_proj.weight", ""}, // absurd index
		{"model.layers..attn.q_proj.weight", ""},
		{"model.layers.1.attn.q_proj.weight.extra", ""},
		{"model.layers.1.attn.q_proj.bias", ""},
		{"model.layers.-1.attn.q_proj.weight", ""},
	} {
		cn, ok := canonical(tc.raw)
		if ok != (tc.canon != "") || cn.name != tc.canon {
			t.Errorf("canonical(%q) = %q %v, want %q", tc.raw, cn.name, ok, tc.canon)
		}
	}
}

func TestParseConfig(t *testing.T) {
	keyfan := `{"architectures": ["GrokForCausalLM"], "model_type": "grok", "attn_output_multiplier": 0.08838834764831845,
		"bos_token_id": 1, "embedding_multiplier_scale": 78.38367176906169, "eos_token_id": 2, "hidden_act": "gelu_new",
		"hidden_size": 6144, "intermediate_size": 32768, "max_attn_value": 30.0, "max_position_embeddings": 8192,
		"num_attention_heads": 48, "num_experts_per_tok": 2, "num_hidden_layers": 64, "num_key_value_heads": 8,
		"num_local_experts": 8, "output_multiplier_scale": 0.5773502691896257, "pad_token_id": 0, "rms_norm_eps": 1e-05,
		"rope_theta": 10000.0, "sliding_window": null, "tie_word_embeddings": true, "vocab_size": 131072}`
	c, err := ParseConfig([]byte(keyfan))
	if err != nil {
		t.Fatal(err)
	}
	if c.NumExperts != 8 || c.KeySize != 128 || c.EmbSize != 6144 || c.NumKVHeads != 8 || c.RopeBase != 10000 ||
		c.EmbeddingMultiplierScale != 78.38367176906169 || c.SequenceLen != 8192 || len(c.Defaulted) != 0 || c.ModelType != "grok" {
		t.Errorf("keyfan config: %+v", c)
	}
	// Grok-2 (xai-org/grok-2's config.json keys, as SGLang reads them):
	// intermediate_size is the dense MLP, the experts' width
	// moe_intermediate_size; the soft-caps and the temperature are read,
	// lm_head is untied without a tie_word_embeddings key.
	grok2 := `{"architectures": ["Grok1ForCausalLM"], "embedding_multiplier_scale": 90.50966799187809,
		"output_multiplier_scale": 0.5, "vocab_size": 131072, "hidden_size": 8192, "intermediate_size": 32768,
		"moe_intermediate_size": 16384, "max_position_embeddings": 131072, "num_experts_per_tok": 2,
		"num_local_experts": 8, "residual_moe": true, "num_attention_heads": 64, "num_key_value_heads": 8,
		"num_hidden_layers": 64, "head_dim": 128, "rms_norm_eps": 1e-05, "final_logit_softcapping": 50,
		"attn_logit_softcapping": 30.0, "router_logit_softcapping": 30.0, "rope_theta": 208533496,
		"attn_temperature_len": 1024, "sliding_window_size": -1, "global_attn_every_n": 1, "model_type": "git",
		"torch_dtype": "bfloat16", "rope_type": "original", "original_max_position_embeddings": 8192,
		"scaling_factor": 16.0, "extrapolation_factor": 1.0, "attn_factor": 1.0, "beta_fast": 8, "beta_slow": 1,
		"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}`
	if c, err = ParseConfig([]byte(grok2)); err != nil {
		t.Fatal(err)
	}
	if !c.ResidualMoE || c.FFNSize != 16384 || c.DenseFFNSize != 32768 || c.RouterLogitCap != 30 || c.FinalLogitCap != 50 ||
		c.AttnTemperatureLen != 1024 || c.MaxAttnValue != 30 || c.TieWordEmbeddings || c.KeySize != 128 ||
		!slices.Equal(c.Defaulted, []string{"attn_output_multiplier"}) {
		t.Errorf("Grok-2 config: %+v", c)
	}
	for _, tc := range []struct{ edit, want string }{
		{`"moe_intermediate_size": 16384, `, "missing moe_intermediate_size"},
		{`"rope_type": "original"`, `rope_type "yarn" is not supported`},
		{`"final_logit_softcapping": 50`, "must not be negative"},
	} {
		bad := strings.Replace(grok2, tc.edit, "", 1)
		switch tc.edit[1] {
		case 'r':
			bad = strings.Replace(grok2, tc.edit, `"rope_type": "yarn"`, 1)
		case 'f':
			bad = strings.Replace(grok2, tc.edit, `"final_logit_softcapping": -1`, 1)
		}
		if _, err := ParseConfig([]byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.edit, err, tc.want)
		}
	}
	// Mixtral-style: head_dim, num_local_experts, an EOS list, no Grok
	// multipliers (defaulted and reported).
	c, err = ParseConfig([]byte(`{"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
		"num_key_value_heads": 2, "head_dim": 32, "vocab_size": 100, "num_local_experts": 4, "eos_token_id": [7, 8],
		"pad_token_id": null, "rope_theta": 208533496}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.KeySize != 32 || c.NumExperts != 4 || c.EOSToken != 7 || c.PadToken != 0 || c.RopeBase != 208533496 ||
		math.Abs(c.AttnOutputMultiplier-1/math.Sqrt(32)) > 1e-15 ||
		!slices.Contains(c.Defaulted, "embedding_multiplier_scale") || !slices.Contains(c.Defaulted, "pad_token_id") {
		t.Errorf("Mixtral-style config: %+v", c)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"hidden_size": 8}`, "missing vocab_size"},
		{tinyConfig(`, "num_local_experts": 3`), "num_experts 2 and num_local_experts 3 disagree"},
		{strings.Replace(tinyConfig(""), `"num_experts": 2, `, "", 1), "missing num_experts"},
		{strings.Replace(tinyConfig(""), `"num_key_value_heads": 1`, `"num_key_value_heads": 3`, 1), "not divisible by num_key_value_heads 3"},
		{strings.Replace(tinyConfig(""), `"num_attention_heads": 2`, `"num_attention_heads": 3`, 1), "not divisible by num_attention_heads 3"},
		{strings.Replace(tinyConfig(""), `"hidden_size": 8`, `"hidden_size": -8`, 1), "hidden_size must be in"},
		{tinyConfig(`, "eos_token_id": "x"`), "eos_token_id"},
		{`[1]`, "config"},
	} {
		if _, err := ParseConfig([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%s): %v, want %q", tc.json, err, tc.want)
		}
	}
}

// readTestFile is os.ReadFile that fails the test.
func readTestFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

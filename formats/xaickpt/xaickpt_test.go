package xaickpt

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/grok-go/grok/tensor"
)

// fixture is shared/testdata/xai-ckpt-tiny, vendored.
const fixture = "../../testdata/xai-ckpt-tiny"

// TestOpenFixture checks the tensor table of the shared fixture (its README
// lists the files).
func TestOpenFixture(t *testing.T) {
	c, err := Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Preset() {
		t.Error("fixture config.json was not used")
	}
	cfg := c.Config()
	if cfg.VocabSize != 512 || cfg.EmbSize != 128 || cfg.KeySize != 16 || cfg.NumQHeads != 8 || cfg.NumKVHeads != 2 ||
		cfg.NumLayers != 2 || cfg.NumExperts != 4 || cfg.NumSelectedExperts != 2 || cfg.FFNSize != 256 ||
		cfg.ModelShards != 8 || cfg.AttnOutputMultiplier != 0.20000000298023224 || cfg.RMSEps != 9.999999747378752e-06 {
		t.Errorf("config %+v", cfg)
	}
	type row struct {
		file, path, name string
		typ              tensor.DType
		shape, scales    []int
		transposed       bool
	}
	rows := []row{
		{"tensor00000_000", "language_model/in_out_embed", "token_embd.weight", tensor.F32, []int{512, 128}, nil, false},
		{"tensor00001_000", "language_model/rms_norm", "output_norm.weight", tensor.F32, []int{128}, nil, false},
	}
	for l := 0; l < 2; l++ {
		p := fmt.Sprintf("transformer/decoder_layer_%d/", l)
		b := fmt.Sprintf("blk.%d.", l)
		f := func(j int) string { return fileName(2 + 12*l + j) }
		rows = append(rows,
			row{f(0), p + "moe/linear", b + "ffn_gate_exps.weight", tensor.I8, []int{4, 128, 256}, []int{4, 1, 256}, true},
			row{f(1), p + "moe/linear_1", b + "ffn_down_exps.weight", tensor.I8, []int{4, 256, 128}, []int{4, 8, 128}, true},
			row{f(2), p + "moe/linear_v", b + "ffn_up_exps.weight", tensor.I8, []int{4, 128, 256}, []int{4, 1, 256}, true},
			row{f(3), p + "multi_head_attention/key", b + "attn_k.weight", tensor.I8, []int{128, 32}, []int{1, 32}, true},
			row{f(4), p + "multi_head_attention/linear", b + "attn_output.weight", tensor.I8, []int{128, 128}, []int{8, 128}, true},
			row{f(5), p + "multi_head_attention/query", b + "attn_q.weight", tensor.I8, []int{128, 128}, []int{1, 128}, true},
			row{f(6), p + "multi_head_attention/value", b + "attn_v.weight", tensor.I8, []int{128, 32}, []int{1, 32}, true},
			row{f(7), p + "rms_norm", b + "attn_norm.weight", tensor.F32, []int{128}, nil, false},
			row{f(8), p + "rms_norm_1", b + "attn_output_norm.weight", tensor.F32, []int{128}, nil, false},
			row{f(9), p + "rms_norm_2", b + "ffn_norm.weight", tensor.F32, []int{128}, nil, false},
			row{f(10), p + "rms_norm_3", b + "layer_output_norm.weight", tensor.F32, []int{128}, nil, false},
			row{f(11), p + "router", b + "ffn_gate_inp.weight", tensor.F32, []int{128, 4}, nil, true},
		)
	}
	params := c.Params()
	if len(params) != len(rows) {
		t.Fatalf("%d params, want %d", len(params), len(rows))
	}
	for i, r := range rows {
		p := params[i]
		if p.File != r.file || p.Path != r.path || p.Name != r.name || p.Protocol != 4 {
			t.Errorf("param %d = %+v, want %s %s %s", i, p, r.file, r.path, r.name)
		}
		tt, ok := c.Lookup(r.name)
		if !ok {
			t.Fatalf("Lookup(%s) failed", r.name)
		}
		if tt.Type != r.typ || !slices.Equal(tt.Shape, r.shape) || tt.Transposed != r.transposed {
			t.Errorf("%s: %v %v transposed=%v, want %v %v %v", r.name, tt.Type, tt.Shape, tt.Transposed, r.typ, r.shape, r.transposed)
		}
		if err := tt.Check(); err != nil {
			t.Error(err)
		}
		if r.scales == nil {
			if tt.Scales != nil {
				t.Errorf("%s has scales", r.name)
			}
			continue
		}
		if tt.Scales == nil || tt.Scales.Type != tensor.BF16 || !slices.Equal(tt.Scales.Shape, r.scales) {
			t.Errorf("%s: scales %+v, want BF16 %v", r.name, tt.Scales, r.scales)
			continue
		}
		if err := tt.Scales.Check(); err != nil {
			t.Error(err)
		}
		if _, err := tt.Float32s(); err != nil {
			t.Errorf("%s: %v", r.name, err)
		}
	}
	if got := len(c.Names()); got != 26 {
		t.Errorf("%d names, want 26", got)
	}
	// Per-expert views are slices of the merged tensors.
	e, ok := c.Lookup("blk.1.ffn_down.3.weight")
	all, _ := c.Lookup("blk.1.ffn_down_exps.weight")
	if !ok || !slices.Equal(e.Shape, []int{256, 128}) || !slices.Equal(e.Scales.Shape, []int{8, 128}) ||
		&e.Data[0] != &all.Data[3*256*128] || &e.Scales.Data[0] != &all.Scales.Data[3*8*128*2] {
		t.Errorf("expert view wrong: %v %+v", ok, e)
	}
	for _, bad := range []string{"blk.1.ffn_down.4.weight", "blk.1.ffn_down.03.weight", "blk.2.ffn_gate.0.weight", "blk.0.ffn_gate.0.bias", "nonsense"} {
		if _, ok := c.Lookup(bad); ok {
			t.Errorf("Lookup(%q) succeeded", bad)
		}
	}
	// Lookup hands out copies: changing one does not change the next.
	tt, _ := c.Lookup("blk.0.attn_q.weight")
	tt.Shape[0], tt.Scales.Shape[0] = 99, 99
	if tt2, _ := c.Lookup("blk.0.attn_q.weight"); tt2.Shape[0] != 128 || tt2.Scales.Shape[0] != 1 {
		t.Error("Lookup returned shared shapes")
	}
}

// TestOpenCkptDir opens the ckpt-0 folder itself, with config.json in its
// parent.
func TestOpenCkptDir(t *testing.T) {
	c, err := Open(filepath.Join(fixture, CkptDirName))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Preset() || c.Config().NumLayers != 2 {
		t.Errorf("config not found in the parent: preset=%v %+v", c.Preset(), c.Config())
	}
}

// TestFileOrder checks the order derived from the config against the facts
// of the design note (the Hugging Face file sizes of the real release).
func TestFileOrder(t *testing.T) {
	g := Grok1Config()
	ps := params(&g)
	if len(ps) != 770 {
		t.Fatalf("Grok-1 has %d files, want 770", len(ps))
	}
	sizes := func(p param) (int, int) {
		n, _ := tensor.Elements(p.Shape)
		if p.Quantized {
			return n, 0
		}
		return 4 * n, 0
	}
	for _, tc := range []struct {
		i     int
		path  string
		bytes int
	}{
		{0, "language_model/in_out_embed", 3221225472},
		{1, "language_model/rms_norm", 24576},
		{2, "transformer/decoder_layer_0/moe/linear", 1610612736},
		{3, "transformer/decoder_layer_0/moe/linear_1", 1610612736},
		{5, "transformer/decoder_layer_0/multi_head_attention/key", 6291456},
		{6, "transformer/decoder_layer_0/multi_head_attention/linear", 37748736},
		{8, "transformer/decoder_layer_0/multi_head_attention/value", 6291456},
		{14, "transformer/decoder_layer_1/moe/linear", 1610612736},
		{26, "transformer/decoder_layer_10/moe/linear", 1610612736},
		{117, "transformer/decoder_layer_17/rms_norm", 24576},
		{129, "transformer/decoder_layer_18/rms_norm", 24576},
		{519, "transformer/decoder_layer_48/moe/linear_1", 1610612736},
		{713, "transformer/decoder_layer_62/multi_head_attention/key", 6291456},
		{769, "transformer/decoder_layer_9/router", 196608},
	} {
		p := ps[tc.i]
		if b, _ := sizes(p); p.Path != tc.path || b != tc.bytes {
			t.Errorf("file %d: %s (%d bytes), want %s (%d)", tc.i, p.Path, b, tc.path, tc.bytes)
		}
	}
	// (The design note's 2 + 12·layer + j counts layers in string order:
	// file 519 is the 44th layer in that order, decoder_layer_48.)
	// Layers come in string order: 0, 1, 10, 11, …, 19, 2, 20, …
	var layers []string
	for _, p := range ps[2:] {
		l := strings.Split(p.Path, "/")[1]
		if len(layers) == 0 || layers[len(layers)-1] != l {
			layers = append(layers, l)
		}
	}
	if !sort.StringsAreSorted(layers) || len(layers) != 64 || layers[2] != "decoder_layer_10" || layers[12] != "decoder_layer_2" {
		t.Errorf("layer order %v", layers)
	}
	// Scales of the row-parallel layers have S = model_shards rows.
	if p := ps[6]; !slices.Equal(p.ScaleShape, []int{8, 6144}) {
		t.Errorf("attention linear scales %v", p.ScaleShape)
	}
	if p := ps[3]; !slices.Equal(p.ScaleShape, []int{8, 8, 6144}) {
		t.Errorf("moe linear_1 scales %v", p.ScaleShape)
	}
	if p := ps[2]; !slices.Equal(p.ScaleShape, []int{8, 1, 32768}) {
		t.Errorf("moe linear scales %v", p.ScaleShape)
	}
}

// smallConfig has 12 layers, so the string order of layers differs from the
// numeric one, and S = 4.
func smallConfig() *Config {
	return &Config{
		VocabSize: 32, EmbSize: 16, KeySize: 4, NumQHeads: 4, NumKVHeads: 2, NumLayers: 12,
		NumExperts: 4, NumSelectedExperts: 2, FFNSize: 24,
		AttnOutputMultiplier: 0.5, EmbeddingMultiplierScale: 4, OutputMultiplierScale: 0.25,
		PadToken: 0, EOSToken: 2, SequenceLen: 64, RopeBase: 10000, RMSEps: 1e-5, ModelShards: 4,
	}
}

// testParam is one file of a test checkpoint, enumerated independently of
// params(): the Haiku paths of the model, sorted as JAX sorts dict keys.
type testParam struct {
	path          string
	quant         bool
	shape, scales []int
}

func testParams(c *Config) []testParam {
	D, F, E, S, HQ, HKV := c.EmbSize, c.FFNSize, c.NumExperts, c.ModelShards, c.NumQHeads*c.KeySize, c.NumKVHeads*c.KeySize
	m := map[string]testParam{
		"language_model/in_out_embed": {shape: []int{c.VocabSize, D}},
		"language_model/rms_norm":     {shape: []int{D}},
	}
	for l := range c.NumLayers {
		p := fmt.Sprintf("transformer/decoder_layer_%d/", l)
		m[p+"multi_head_attention/query"] = testParam{quant: true, shape: []int{D, HQ}, scales: []int{1, HQ}}
		m[p+"multi_head_attention/key"] = testParam{quant: true, shape: []int{D, HKV}, scales: []int{1, HKV}}
		m[p+"multi_head_attention/value"] = testParam{quant: true, shape: []int{D, HKV}, scales: []int{1, HKV}}
		m[p+"multi_head_attention/linear"] = testParam{quant: true, shape: []int{HQ, D}, scales: []int{S, D}}
		for _, n := range []string{"rms_norm", "rms_norm_1", "rms_norm_2", "rms_norm_3"} {
			m[p+n] = testParam{shape: []int{D}}
		}
		if E > 1 {
			m[p+"moe/linear"] = testParam{quant: true, shape: []int{E, D, F}, scales: []int{E, 1, F}}
			m[p+"moe/linear_v"] = testParam{quant: true, shape: []int{E, D, F}, scales: []int{E, 1, F}}
			m[p+"moe/linear_1"] = testParam{quant: true, shape: []int{E, F, D}, scales: []int{E, S, D}}
			m[p+"router"] = testParam{shape: []int{D, E}}
		} else {
			m[p+"linear"] = testParam{quant: true, shape: []int{D, F}, scales: []int{1, F}}
			m[p+"linear_v"] = testParam{quant: true, shape: []int{D, F}, scales: []int{1, F}}
			m[p+"linear_1"] = testParam{quant: true, shape: []int{F, D}, scales: []int{S, D}}
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]testParam, len(keys))
	for i, k := range keys {
		out[i] = m[k]
		out[i].path = k
	}
	return out
}

// writeOpts varies how writeCkpt writes a checkpoint.
type writeOpts struct {
	proto  int
	numpy2 bool
	module string // QuantizedWeight8bit's module
	// edit may replace the object written for a file, or return nil to skip it.
	edit func(i int, p testParam, obj any) any
}

// written is what writeCkpt put in a file.
type written struct {
	weight, scales []byte
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// writeCkpt writes a random checkpoint for c into dir/ckpt-0 and c as
// dir/config.json, and returns the bytes written per Haiku path.
func writeCkpt(t *testing.T, dir string, c *Config, o writeOpts) map[string]written {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(o.proto), 7))
	ckpt := filepath.Join(dir, CkptDirName)
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, dir, c)
	out := make(map[string]written)
	for i, p := range testParams(c) {
		var obj any
		var w written
		if p.quant {
			w.weight = make([]byte, prod(p.shape))
			for j := range w.weight {
				w.weight[j] = byte(rng.IntN(255) - 127)
			}
			for range prod(p.scales) {
				s := tensor.FloatToBF16((0.5 + rng.Float32()) / 127)
				w.scales = binary.LittleEndian.AppendUint16(w.scales, s)
			}
			obj = qw8{
				weight: npArray{code: "i1", order: "|", shape: p.shape, data: w.weight},
				scales: npArray{code: "u2", order: "<", shape: p.scales, data: w.scales, readonly: true},
				module: o.module,
			}
		} else {
			for range prod(p.shape) {
				w.weight = binary.LittleEndian.AppendUint32(w.weight, math.Float32bits(rng.Float32()*2-1))
			}
			obj = npArray{code: "f4", order: "<", shape: p.shape, data: w.weight}
		}
		if o.edit != nil {
			obj = o.edit(i, p, obj)
		}
		if obj == nil {
			continue
		}
		out[p.path] = w
		if err := os.WriteFile(filepath.Join(ckpt, fileName(i)), dumpPickle(o.proto, obj, o.numpy2), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// writeConfig writes c as config.json with model.py's key names.
func writeConfig(t *testing.T, dir string, c *Config) {
	t.Helper()
	m := map[string]any{
		"vocab_size": c.VocabSize, "emb_size": c.EmbSize, "key_size": c.KeySize,
		"num_q_heads": c.NumQHeads, "num_kv_heads": c.NumKVHeads, "num_layers": c.NumLayers,
		"num_experts": c.NumExperts, "num_selected_experts": c.NumSelectedExperts, "ffn_size": c.FFNSize,
		"attn_output_multiplier": c.AttnOutputMultiplier, "embedding_multiplier_scale": c.EmbeddingMultiplierScale,
		"output_multiplier_scale": c.OutputMultiplierScale, "pad_token": c.PadToken, "eos_token": c.EOSToken,
		"sequence_len": c.SequenceLen, "rope_base": c.RopeBase, "rms_eps": c.RMSEps, "model_shards": c.ModelShards,
		"some_future_key": []int{1, 2},
	}
	if c.WideningFactor != 0 {
		m["widening_factor"] = c.WideningFactor
	}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, ConfigFileName), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRoundTrip writes random checkpoints with the numpy-exact writer under
// protocols 3, 4 and 5 and both numpy module spellings, and reads every
// tensor back.
func TestRoundTrip(t *testing.T) {
	dense := smallConfig()
	dense.NumExperts, dense.NumSelectedExperts, dense.NumLayers = 1, 1, 2
	for _, tc := range []struct {
		name string
		cfg  *Config
		o    writeOpts
	}{
		{"p3", smallConfig(), writeOpts{proto: 3}},
		{"p4", smallConfig(), writeOpts{proto: 4}},
		{"p5", smallConfig(), writeOpts{proto: 5}},
		{"p4 numpy2 model.QuantizedWeight8bit", smallConfig(), writeOpts{proto: 4, numpy2: true, module: "model"}},
		{"p5 numpy2", smallConfig(), writeOpts{proto: 5, numpy2: true}},
		{"dense p4", dense, writeOpts{proto: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			want := writeCkpt(t, dir, tc.cfg, tc.o)
			c, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tps := testParams(tc.cfg)
			ps := c.Params()
			if len(ps) != len(tps) {
				t.Fatalf("%d params, want %d", len(ps), len(tps))
			}
			for i, p := range ps {
				tp := tps[i]
				if p.Path != tp.path || p.File != fileName(i) || p.Protocol != tc.o.proto {
					t.Errorf("param %d: %+v, want %s", i, p, tp.path)
				}
				tt, ok := c.Lookup(p.Name)
				if !ok {
					t.Fatalf("Lookup(%s) failed", p.Name)
				}
				w := want[tp.path]
				if string(tt.Data) != string(w.weight) || !slices.Equal(tt.Shape, tp.shape) {
					t.Errorf("%s: data or shape %v differ from what was written (%v)", p.Name, tt.Shape, tp.shape)
				}
				if tp.quant {
					if tt.Type != tensor.I8 || tt.Scales == nil || string(tt.Scales.Data) != string(w.scales) || !slices.Equal(tt.Scales.Shape, tp.scales) || !tt.Transposed {
						t.Errorf("%s: quantised tensor %+v wrong", p.Name, tt)
					}
				} else if tt.Type != tensor.F32 || tt.Scales != nil || tt.Transposed != (len(tp.shape) == 2 && tp.path != "language_model/in_out_embed") {
					t.Errorf("%s: float tensor %v %v transposed=%v", p.Name, tt.Type, tt.Shape, tt.Transposed)
				}
			}
			if tc.cfg.NumExperts <= 1 {
				for _, n := range []string{"blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight"} {
					if _, ok := c.Lookup(n); !ok {
						t.Errorf("dense model lacks %s", n)
					}
				}
			}
		})
	}
}

// TestDequantPerShard checks I8 dequantisation with per-shard scales
// through tensor.Float32s against a hand computation:
// W[r, c] = int8[r, c] · scales[r / (rows/S), c].
func TestDequantPerShard(t *testing.T) {
	// 4 rows, 2 columns, S = 2: rows 0-1 use scales row 0, rows 2-3 row 1.
	w := []int8{1, -2, 3, 4, -5, 6, 7, -128}
	scales := []float32{0.5, 2, 0.25, -1} // exactly representable in bf16
	want := []float32{
		1 * 0.5, -2 * 2,
		3 * 0.5, 4 * 2,
		-5 * 0.25, 6 * -1,
		7 * 0.25, -128 * -1,
	}
	var sb []byte
	for _, s := range scales {
		sb = binary.LittleEndian.AppendUint16(sb, tensor.FloatToBF16(s))
	}
	wb := make([]byte, len(w))
	for i, v := range w {
		wb[i] = byte(v)
	}
	tt := &tensor.Tensor{Name: "w", Type: tensor.I8, Shape: []int{4, 2}, Data: wb, Transposed: true,
		Scales: &tensor.Tensor{Name: "s", Type: tensor.BF16, Shape: []int{2, 2}, Data: sb}}
	got, err := tt.Float32s()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("dequantised %v, want %v", got, want)
	}

	// The same rule on a row-parallel tensor read from a checkpoint.
	dir := t.TempDir()
	cfg := smallConfig()
	writeCkpt(t, dir, cfg, writeOpts{proto: 5})
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range []string{"blk.3.attn_output.weight", "blk.11.ffn_down_exps.weight", "blk.0.attn_q.weight"} {
		tt, _ := c.Lookup(name)
		got, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		R, C := tt.Shape[len(tt.Shape)-2], tt.Shape[len(tt.Shape)-1]
		S := tt.Scales.Shape[len(tt.Scales.Shape)-2]
		for i, v := range got {
			m, r, col := i/(R*C), i/C%R, i%C
			s := tensor.BF16ToFloat(binary.LittleEndian.Uint16(tt.Scales.Data[2*((m*S+r/(R/S))*C+col):]))
			if want := float32(int8(tt.Data[i])) * s; v != want {
				t.Fatalf("%s[%d] = %v, want %v", name, i, v, want)
			}
		}
	}
}

// TestUnquantisedProjection accepts a projection stored as a float32 array.
func TestUnquantisedProjection(t *testing.T) {
	dir := t.TempDir()
	cfg := smallConfig()
	cfg.NumLayers = 1
	writeCkpt(t, dir, cfg, writeOpts{proto: 4, edit: func(i int, p testParam, obj any) any {
		if strings.HasSuffix(p.path, "multi_head_attention/query") {
			return npArray{code: "f4", order: "<", shape: p.shape, data: detBytes(4 * prod(p.shape))}
		}
		return obj
	}})
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tt, _ := c.Lookup("blk.0.attn_q.weight")
	if tt.Type != tensor.F32 || tt.Scales != nil || !tt.Transposed || !slices.Equal(tt.Shape, []int{16, 16}) {
		t.Errorf("unquantised query: %v %v scales=%v transposed=%v", tt.Type, tt.Shape, tt.Scales, tt.Transposed)
	}
}

// TestOpenErrors checks that broken checkpoints fail with an error naming
// the file and parameter (or the config key) at fault.
func TestOpenErrors(t *testing.T) {
	const q = 7 // file index of decoder_layer_0/multi_head_attention/query in smallConfig
	tests := []struct {
		name  string
		cfg   func(c *Config)
		o     writeOpts
		after func(t *testing.T, dir string)
		want  []string
	}{
		{name: "missing file", o: writeOpts{edit: func(i int, p testParam, obj any) any {
			if i == 5 {
				return nil
			}
			return obj
		}}, want: []string{"missing tensor00005_000", "decoder_layer_0/multi_head_attention/key"}},
		{name: "extra file", after: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, CkptDirName, fileName(2+12*12)), nil, 0o644)
		}, want: []string{"tensor00146_000", "implies only 146 files"}},
		{name: "other host shard", after: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, CkptDirName, "tensor00000_001"), nil, 0o644)
		}, want: []string{"host shard 001"}},
		{name: "config mismatch ffn_size", after: func(t *testing.T, dir string) {
			c := smallConfig()
			c.FFNSize = 32
			writeConfig(t, dir, c)
		}, want: []string{"tensor00002_000", "decoder_layer_0/moe/linear", "the int8 weight [4 16 32] (the config's shape) is pickled with shape [4 16 24]"}},
		{name: "config mismatch model_shards", after: func(t *testing.T, dir string) {
			c := smallConfig()
			c.ModelShards = 2
			writeConfig(t, dir, c)
		}, want: []string{"tensor00003_000", "decoder_layer_0/moe/linear_1", "bfloat16 scales [4 2 16]"}},
		{name: "config with more layers", after: func(t *testing.T, dir string) {
			c := smallConfig()
			c.NumLayers = 13
			writeConfig(t, dir, c)
		}, want: []string{"num_layers = 13 (158 tensor files)", "holds 146 tensor files (12 layers)"}},
		{name: "config with one file missing", after: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, CkptDirName, fileName(7)))
		}, want: []string{"missing tensor00007_000"}},
		{name: "wrong payload size", o: writeOpts{edit: func(i int, p testParam, obj any) any {
			if i == q {
				o := obj.(qw8)
				o.weight.data = o.weight.data[1:]
				return o
			}
			return obj
		}}, want: []string{"tensor00007_000", "multi_head_attention/query", "array shape [16 16] of i1 needs 256 bytes, but its data has 255"}},
		{name: "quantised norm", o: writeOpts{edit: func(i int, p testParam, obj any) any {
			if strings.HasSuffix(p.path, "decoder_layer_0/rms_norm_2") {
				return qw8{weight: npArray{code: "i1", order: "|", shape: []int{16}, data: detBytes(16)}, scales: npArray{code: "u2", order: "<", shape: []int{1}, data: detBytes(2)}}
			}
			return obj
		}}, want: []string{"decoder_layer_0/rms_norm_2", "holds a QuantizedWeight8bit"}},
		{name: "float norm of wrong size", o: writeOpts{edit: func(i int, p testParam, obj any) any {
			if p.path == "language_model/rms_norm" {
				return npArray{code: "f4", order: "<", shape: []int{15}, data: detBytes(60)}
			}
			return obj
		}}, want: []string{"tensor00001_000", "language_model/rms_norm", "the float array [16] (the config's shape) is pickled with shape [15]"}},
		{name: "weight dtype", o: writeOpts{edit: func(i int, p testParam, obj any) any {
			if i == q {
				o := obj.(qw8)
				o.weight.code = "u1"
				return o
			}
			return obj
		}}, want: []string{"tensor00007_000", `int8 weight [16 16] has numpy dtype "u1"`}},
		{name: "scales dtype float16", o: writeOpts{edit: func(i int, p testParam, obj any) any {
			if i == q {
				o := obj.(qw8)
				o.scales.code = "f2"
				return o
			}
			return obj
		}}, want: []string{"tensor00007_000", `scales [1 16] has numpy dtype "f2"`}},
		{name: "big-endian norm", o: writeOpts{edit: func(i int, p testParam, obj any) any {
			if p.path == "language_model/rms_norm" {
				a := obj.(npArray)
				a.order = ">"
				return a
			}
			return obj
		}}, want: []string{"tensor00001_000", "big-endian"}},
		{name: "fortran weight", o: writeOpts{edit: func(i int, p testParam, obj any) any {
			if i == q {
				o := obj.(qw8)
				o.weight.fortran = true
				return o
			}
			return obj
		}}, want: []string{"tensor00007_000", "Fortran"}},
		{name: "hostile file", after: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, CkptDirName, fileName(9)), hostile("os", "system", byte(opStackGlobal), byte(opStop)), 0o644)
		}, want: []string{"tensor00009_000", "global os.system is not allowed"}},
		{name: "truncated file", after: func(t *testing.T, dir string) {
			p := filepath.Join(dir, CkptDirName, fileName(0))
			data, _ := os.ReadFile(p)
			os.WriteFile(p, data[:len(data)-1], 0o644)
		}, want: []string{"tensor00000_000", "language_model/in_out_embed", "truncated"}},
		{name: "empty file", after: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, CkptDirName, fileName(3)), nil, 0o644)
		}, want: []string{"tensor00003_000", "truncated"}},
		{name: "no config, not Grok-1", after: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, ConfigFileName))
		}, want: []string{"no config.json", "holds 146 tensor files, not Grok-1's 770"}},
		{name: "widening_factor disagrees", after: func(t *testing.T, dir string) {
			c := smallConfig()
			c.WideningFactor = 4
			writeConfig(t, dir, c)
		}, want: []string{"widening_factor 4 gives ffn_size 48, but ffn_size is 24"}},
		{name: "no checkpoint", after: func(t *testing.T, dir string) {
			os.RemoveAll(filepath.Join(dir, CkptDirName))
		}, want: []string{"holds neither ckpt-0/ nor tensor00000_000"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := tc.o
			if o.proto == 0 {
				o.proto = 4
			}
			writeCkpt(t, dir, smallConfig(), o)
			if tc.after != nil {
				tc.after(t, dir)
			}
			c, err := Open(dir)
			if err == nil {
				c.Close()
				t.Fatal("Open succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A config.json declaring the most layers LoadConfig allows beside a small
// checkpoint is refused, naming num_layers, before the parameter list of
// those layers is built (41 MB for 4096 layers).
func TestManyLayersRefusedCheaply(t *testing.T) {
	dir := t.TempDir()
	writeCkpt(t, dir, smallConfig(), writeOpts{proto: 4})
	c := smallConfig()
	c.NumLayers = 4096
	writeConfig(t, dir, c)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ck, err := Open(dir)
	runtime.ReadMemStats(&after)
	if err == nil {
		ck.Close()
		t.Fatal("Open succeeded")
	}
	if !strings.Contains(err.Error(), "num_layers = 4096") {
		t.Errorf("error %q does not name num_layers", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("refusing allocated %d bytes", got)
	}
}

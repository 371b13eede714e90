package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/internal/testmodel"
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

func benchJSON(t *testing.T, args ...string) benchResult {
	t.Helper()
	out, e, code := grok(t, append([]string{"bench", "--json", "--bw-mb", "8", "-r", "1"}, args...)...)
	if code != 0 {
		t.Fatalf("grok bench %v: exit %d: %s", args, code, e)
	}
	var r benchResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("bench --json printed %q: %v", out, err)
	}
	return r
}

// On the embedded model, bench reports positive speeds, the weight bytes the
// model itself counts, and a roofline ratio that is their product over the
// bandwidth.
func TestBenchEmbedded(t *testing.T) {
	r := benchJSON(t, "-p", "6", "-n", "3")
	m, err := loader.FromGGUFBytes(defaultmodel.GGUF, defaultmodel.Name)
	if err != nil {
		t.Fatal(err)
	}
	want := m.DecodeStepBytes()
	if r.BytesPerToken != want.Total || r.Bytes != want {
		t.Errorf("bytes per token %d (%+v), want %d (%+v)", r.BytesPerToken, r.Bytes, want.Total, want)
	}
	c := m.Config
	// The embedded model is F16 throughout but for norms and router.
	perLayer := int64(c.EmbSize)*int64(2*c.NumQHeads*c.KeySize+2*c.NumKVHeads*c.KeySize)*2 +
		int64(c.NumSelectedExperts)*3*int64(c.EmbSize)*int64(c.FFNSize)*2
	if got := want.Attention + want.Experts; got != int64(c.NumLayers)*perLayer {
		t.Errorf("attention + experts = %d bytes, want %d", got, int64(c.NumLayers)*perLayer)
	}
	if r.PrefillTokS <= 0 || r.DecodeTokS <= 0 || r.BandwidthGBs <= 0 || r.PairedRatio <= 0 || r.Params <= 0 || r.MappedMB <= 0 {
		t.Errorf("non-positive figures: %+v", r)
	}
	if r.Prompt != 6 || r.Gen != 3 || r.Reps != 1 || len(r.DecodeRuns) != 1 {
		t.Errorf("settings not reported: %+v", r)
	}
	if want := float64(r.BytesPerToken) * r.DecodeTokS / 1e9 / r.BandwidthGBs; math.Abs(r.RooflineRatio-want) > 1e-9*want {
		t.Errorf("roofline ratio %g, want %g", r.RooflineRatio, want)
	}
	// The kernel bound times every product type the model has (F16, and
	// the F32 routers), and the ratio is decode over the lower bound.
	if _, f16 := r.KernelGBs["F16"]; !f16 || r.KernelGBs["F32"] <= 0 || len(r.KernelGBs) != 2 || r.KernelBoundTokS <= 0 {
		t.Errorf("kernel bound %g tok/s from rates %v, want F16 and F32", r.KernelBoundTokS, r.KernelGBs)
	}
	if want := r.DecodeTokS / min(r.BandwidthGBs*1e9/float64(r.BytesPerToken), r.KernelBoundTokS); math.Abs(r.KernelBoundRatio-want) > 1e-9*want {
		t.Errorf("kernel bound ratio %g, want %g", r.KernelBoundRatio, want)
	}
	if r.Type != "F16" {
		t.Errorf("type %q, want F16", r.Type)
	}
	if r.Kernels != kernels.Variant() {
		t.Errorf("kernels %q, want the active %q", r.Kernels, kernels.Variant())
	}
	if r.KV != "f16/f16" {
		t.Errorf("KV memory %q, want run's default f16/f16", r.KV)
	}
	if g := benchJSON(t, "-p", "2", "-n", "2", "-ctk", "bf16", "--cache-type-v", "q8_0"); g.KV != "bf16/q8_0" || g.DecodeTokS <= 0 {
		t.Errorf("-ctk bf16 -ctv q8_0: KV memory %q at %g tok/s", g.KV, g.DecodeTokS)
	}
	// --kernels runs the named level, and only for that command.
	before := kernels.Variant()
	if g := benchJSON(t, "-p", "2", "-n", "2", "--kernels", "Go"); g.Kernels != "Go" || g.DecodeTokS <= 0 {
		t.Errorf("--kernels Go: ran %q at %g tok/s", g.Kernels, g.DecodeTokS)
	}
	if kernels.Variant() != before {
		t.Errorf("after --kernels Go the active level is %q, was %q", kernels.Variant(), before)
	}

	// The text form names every figure.
	out, e, code := grok(t, "bench", "-p", "4", "-n", "2", "-r", "1", "--bw-mb", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, w := range []string{"prefill", "decode", "tok/s", "read per decoded token", "roofline", "RSS", "exact decode bound"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// make-model (and its alias bench --make-model) writes a model that loads, with the requested type for the
// matrices (token_embd included) and F32 norms and router, and the F32 and
// Q8_0 files of one seed hold the same model.
func TestBenchMakeModel(t *testing.T) {
	dir := t.TempDir()
	paths := map[string]string{}
	for _, typ := range []string{"f32", "q8_0"} {
		p := filepath.Join(dir, typ+".gguf")
		paths[typ] = p
		args := []string{"make-model", p, "--type", typ, "--config", "tiny"}
		if typ == "q8_0" {
			args = []string{"bench", "--make-model", p, "--type", typ, "--config", "tiny"}
		}
		if _, e, code := grok(t, args...); code != 0 {
			t.Fatalf("--make-model --type %s: exit %d: %s", typ, code, e)
		}
	}
	m32, err := loader.Open(paths["f32"], loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m32.Close()
	m8, err := loader.Open(paths["q8_0"], loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m8.Close()
	if m8.Config != benchConfigs["tiny"] {
		t.Errorf("config %+v, want %+v", m8.Config, benchConfigs["tiny"])
	}
	for _, d := range m8.Tensors() {
		want := "Q8_0"
		if strings.HasSuffix(d.Name, "norm.weight") || strings.Contains(d.Name, "ffn_gate_inp") {
			want = "F32"
		}
		if d.Type != want {
			t.Errorf("%s is %s, want %s", d.Name, d.Type, want)
		}
	}
	toks := []int{5, 6, 7, 8, 9, 10}
	l32, err := testmodel.FullLogits(m32.LanguageModel, toks)
	if err != nil {
		t.Fatal(err)
	}
	l8, err := testmodel.FullLogits(m8.LanguageModel, toks)
	if err != nil {
		t.Fatal(err)
	}
	var peak float64
	for _, v := range l32 {
		peak = max(peak, math.Abs(float64(v)))
	}
	if d := testmodel.MaxAbsDiff(l32, l8); d > 0.05*peak || peak == 0 {
		t.Errorf("Q8_0 vs F32 logits: max |Δ| %g with max |logit| %g", d, peak)
	}

	r := benchJSON(t, "-m", paths["q8_0"], "-p", "8", "-n", "4")
	if r.Type != "Q8_0" || r.Bytes.ExpertsPerLayer != 2 {
		t.Errorf("bench of the Q8_0 model: type %s, %d experts per layer", r.Type, r.Bytes.ExpertsPerLayer)
	}
	if !(r.WeightsReadGBs > 0) {
		t.Errorf("bench of a GGUF file reports no read pass over its weights (weights_read_gb_s %v)", r.WeightsReadGBs)
	}
	if s := r.WeightsHugeShare; runtime.GOOS == "linux" && (s == nil || *s < 0 || *s > 1) {
		t.Errorf("bench on Linux reports no share of 2 MiB pages in [0, 1] (weights_huge_share %v)", s)
	}

	// The fast prefill against the int16 peak, where Q8_0 multiplies in
	// integers on this machine (else no such figure).
	rf := benchJSON(t, "-m", paths["q8_0"], "-p", "8", "-n", "2", "--precision", "both")
	if kernels.FastTypes(tensor.Q8_0) {
		want := rf.PrefillGFLOPToken * rf.FastPrefillTokS / rf.Int16PeakGOPs
		if !(rf.Int16PeakGOPs > 0) || rf.FastPeakRatio != want {
			t.Errorf("--precision both: int16 peak %g GOP/s, fast ratio %g, want %g", rf.Int16PeakGOPs, rf.FastPeakRatio, want)
		}
	} else if rf.Int16PeakGOPs != 0 || rf.FastPeakRatio != 0 {
		t.Errorf("--precision both without integer products: int16 peak %g, ratio %g", rf.Int16PeakGOPs, rf.FastPeakRatio)
	}

	// Several sequences together: aggregate tok/s, no roofline.
	rb := benchJSON(t, "-m", paths["q8_0"], "-p", "5", "-n", "3", "-b", "3")
	if rb.Batch != 3 || rb.DecodeTokS <= 0 || rb.PrefillTokS <= 0 || rb.RooflineRatio != 0 || rb.PairedRatio != 0 {
		t.Errorf("bench -b 3: batch %d, prefill %g, decode %g tok/s, roofline %g (paired %g)", rb.Batch, rb.PrefillTokS, rb.DecodeTokS, rb.RooflineRatio, rb.PairedRatio)
	}
	// A decoded token runs the last feed-forward and the unembedding that a
	// prompt of 5 runs for its last token only.
	if rb.DecodeGFLOPToken <= rb.PrefillGFLOPToken {
		t.Errorf("bench -b 3: %g GFLOP a decoded token, not above the prefill's %g", rb.DecodeGFLOPToken, rb.PrefillGFLOPToken)
	}
	if want := rb.PrefillGFLOPToken * rb.PrefillTokS / rb.DecodeGFLOPToken / rb.SingleTokS; rb.SingleTokS <= 0 || rb.ComputeCeiling != want {
		t.Errorf("bench -b 3: compute ceiling %g, want prefill %g GFLOP/s over %g GFLOP a token / one stream %g", rb.ComputeCeiling, rb.PrefillGFLOPToken*rb.PrefillTokS, rb.DecodeGFLOPToken, rb.SingleTokS)
	}
	if r.Batch != 1 {
		t.Errorf("bench without -b reports batch %d", r.Batch)
	}
}

func TestBenchErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bench", "-p", "0"}, 2, "must be positive"},
		{[]string{"bench", "-b", "0"}, 2, "must be positive"},
		{[]string{"bench", "--kernels", "AVX9"}, 2, `no variant "AVX9"`},
		{[]string{"bench", "--kv-memory", "1000"}, 2, "bench sizes the KV memory"},
		{[]string{"bench", "-p", "100000"}, 2, "exceeds the model's context"},
		{[]string{"bench", "extra"}, 2, "unexpected argument"},
		{[]string{"bench", "--precision", "int4"}, 2, "--precision"},
		{[]string{"run", "--precision", "int4", "x"}, 2, "want exact or fast"},
		{[]string{"serve", "--precision", "int4"}, 2, "want exact or fast"},
		{[]string{"logits", "--precision", "int4", "--tokens", "1"}, 2, "want exact or fast"},
		{[]string{"bench", "--make-model", "x.gguf", "--type", "q4_k"}, 2, "--type"},
		{[]string{"bench", "--make-model", "x.gguf", "--type", "bf16"}, 2, "--type must be"},
		{[]string{"bench", "--make-model", "x.gguf", "--config", "huge"}, 2, "unknown --config"},
		{[]string{"make-model"}, 2, "one output PATH"},
		{[]string{"make-model", "x.gguf", "--type", "bf16"}, 2, "--type must be"},
	} {
		_, e, code := grok(t, tc.args...)
		if code != tc.code || !strings.Contains(e, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", tc.args, code, e, tc.code, tc.want)
		}
	}
}

// The bandwidth probe's loops read every element once per pass (their sums
// are checked), and copy and triad leave the buffer readable again.
func TestReadMeter(t *testing.T) {
	for _, threads := range []int{1, 3} {
		pool := parallel.New(threads)
		m := newReadMeter(pool, 3<<20+12345)
		if g := m.best(2); g <= 0 || m.broken {
			t.Fatalf("%d threads: best = %g, broken %v", threads, g, m.broken)
		}
		m.crossCheck(1)
		if m.copyGBs <= 0 || m.triadGBs <= 0 {
			t.Errorf("copy %g, triad %g GB/s", m.copyGBs, m.triadGBs)
		}
		if g := m.best(1); g <= 0 || m.broken {
			t.Errorf("%d threads: after copy and triad the read sums are wrong", threads)
		}
		if m.rowsGBs <= 0 || m.bestGBs != max(m.wideGBs, m.rowsGBs, m.scalarGBs) {
			t.Errorf("best %g is not the best loop's (%g, %g, %g)", m.bestGBs, m.wideGBs, m.rowsGBs, m.scalarGBs)
		}
		m.free()
		pool.Close()
	}
}

// --layers overrides the configuration's layer count.
func TestMakeModelLayers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	if _, e, code := grok(t, "make-model", p, "--config", "tiny", "--layers", "3", "--type", "f32"); code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	m, err := loader.Open(p, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	want := benchConfigs["tiny"]
	want.NumLayers = 3
	if m.Config != want {
		t.Errorf("config %+v, want %+v", m.Config, want)
	}
	if _, e, code := grok(t, "make-model", p, "--layers", "-1"); code != 2 || !strings.Contains(e, "--layers") {
		t.Errorf("--layers -1: exit %d, %q", code, e)
	}
}

// The routing ceiling: one sequence gains nothing; B sequences of top-2 of
// 8 read 8·(1−(3/4)^B) experts a layer where one reads 2.
func TestRoutingCeiling(t *testing.T) {
	c := &model.Config{NumExperts: 8, NumSelectedExperts: 2}
	// 100 bytes shared, 200 of experts (2 a layer), a 1-byte embedding row.
	b := model.StepBytes{Attention: 100, Experts: 200, Embedding: 1, Total: 301, ExpertsPerLayer: 2}
	for _, tc := range []struct {
		B    int
		want float64
	}{
		{1, 1},
		{8, 8 * 301 / (100 + 100*8*(1-math.Pow(0.75, 8)) + 8)},
		{2, 2 * 301 / (100 + 100*8*(1-0.5625) + 2)},
	} {
		if got := routingCeiling(b, c, tc.B); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("B=%d: %g, want %g", tc.B, got, tc.want)
		}
	}
	dense := &model.Config{NumExperts: 1}
	if got := routingCeiling(model.StepBytes{Experts: 200, Total: 200, ExpertsPerLayer: 1}, dense, 4); got != 4 {
		t.Errorf("dense, 4 streams: %g, want 4", got)
	}
}

// make-model --config tiny-grok2 (medium-grok2's features at test size)
// writes a Grok-2 model: it loads back with every Grok-2 field of its
// config (dense MLP, soft-caps, temperature, untied output), and bench
// measures it, counting the dense MLP's bytes.
func TestBenchMakeModelGrok2(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g2.gguf")
	if _, e, code := grok(t, "make-model", p, "--config", "tiny-grok2", "--type", "q8_0"); code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	m, err := loader.Open(p, loader.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if want := benchConfigs["tiny-grok2"]; m.Config != want {
		t.Errorf("config %+v, want %+v", m.Config, want)
	}
	if len(m.Warnings) != 0 {
		t.Errorf("warnings %q", m.Warnings)
	}
	b := m.DecodeStepBytes()
	if b.DenseMLP == 0 || &m.Unembed.W.Data[0] == &m.Embed.W.Data[0] {
		t.Errorf("dense MLP bytes %d, unembedding tied: %v", b.DenseMLP, &m.Unembed.W.Data[0] == &m.Embed.W.Data[0])
	}
	o, e, code := grok(t, "bench", "-m", p, "-p", "4", "-n", "3", "-r", "1", "--bw-mb", "8")
	if code != 0 || !strings.Contains(o, "roofline") {
		t.Errorf("bench: exit %d: %s %s", code, o, e)
	}
}

// TestProbeWeightsNotOnAShard: a rank's shard (mpirun) skips the read of
// the whole mapped file, which would page in every other rank's slices.
func TestProbeWeightsNotOnAShard(t *testing.T) {
	cs, err := comm.NewLocal(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  loader.Options
		want bool
	}{
		{"whole", loader.Options{}, true},
		{"in-process shards", loader.Options{TP: 2}, true},
		{"a rank's shard", loader.Options{Comm: cs[1]}, false},
	} {
		m, err := loader.Open(tiny, tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		if got := probeWeights(m, tiny); got != tc.want {
			t.Errorf("%s: probeWeights = %v, want %v", tc.name, got, tc.want)
		}
		m.Close()
	}
}

// bench --precision both times a fast prefill beside each exact one and
// says what ran; the embedded model's F16 weights have no integer path, so
// it says fast ran exact.
func TestBenchPrecisionBoth(t *testing.T) {
	r := benchJSON(t, "-p", "6", "-n", "2", "--precision", "both")
	if r.Precision != "both" || len(r.FastPrefillRuns) != 1 || r.FastPrefillTokS <= 0 || r.FastRatio <= 0 {
		t.Errorf("precision %q, fast runs %v, fast %g tok/s, ratio %g", r.Precision, r.FastPrefillRuns, r.FastPrefillTokS, r.FastRatio)
	}
	if !strings.Contains(r.PrecisionRan, "ran exact") || !strings.Contains(r.PrecisionRan, "F16") {
		t.Errorf("precision_ran %q does not say the F16 products ran exact", r.PrecisionRan)
	}
	if r.Int16PeakGOPs != 0 || r.FastPeakRatio != 0 {
		t.Errorf("no integer products ran, yet an int16 peak %g GOP/s and ratio %g", r.Int16PeakGOPs, r.FastPeakRatio)
	}
	out, e, code := grok(t, "bench", "-p", "4", "-n", "2", "-r", "1", "--bw-mb", "8", "--precision", "both")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	for _, w := range []string{"precision fast requested", "prefill   4 tokens exact", "prefill   4 tokens fast", "fast/exact"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

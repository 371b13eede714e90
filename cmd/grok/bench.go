package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/internal/defaultmodel"
	"github.com/grok-go/grok/internal/mmap"
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

func init() {
	register(command{
		name:    "bench",
		usage:   "[-m MODEL] [-p 128] [-n 32] [-b 1] [-t THREADS] [-r REPS] [--json]",
		summary: "measure prefill and decode speed against the memory-bandwidth roofline",
		run:     runBench,
	})
}

// benchResult is what `grok bench` measures; --json prints it as is.
type benchResult struct {
	Model    string  `json:"model"`
	Type     string  `json:"type"` // the type of most weight bytes
	Params   int64   `json:"params"`
	MappedMB float64 `json:"mapped_mb"` // model file size, or its tensors' bytes for a folder (mapped, not copied)
	LoadS    float64 `json:"load_s"`
	RSSMB    float64 `json:"rss_mb"`           // resident after load
	RSSRunMB float64 `json:"rss_after_run_mb"` // resident after the runs: the weights paged in

	Threads int    `json:"threads"`
	Kernels string `json:"kernels"`  // the SIMD level that ran (--kernels)
	KV      string `json:"kv_types"` // the KV memory's key/value element types (-ctk/-ctv)
	Prompt  int    `json:"prompt_tokens"`
	Gen     int    `json:"gen_tokens"`
	Reps    int    `json:"reps"`
	// Batch is the number of sequences prefilled and decoded together
	// (-b); the tok/s figures are then aggregates over all of them, and
	// the roofline ratio, whose bytes per token assume one sequence, is
	// left out.
	Batch int `json:"batch"`

	PrefillTokS float64   `json:"prefill_tok_s"` // median of reps
	DecodeTokS  float64   `json:"decode_tok_s"`  // median of reps
	PrefillRuns []float64 `json:"prefill_tok_s_runs"`
	// Precision is the prefill's (--precision: exact, fast or both) and
	// PrecisionRan what it ran on these weights and kernels. With both, the
	// prefill figures above are exact's and each round also times a fast
	// prefill of the same prompt right after it.
	Precision       string    `json:"precision"`
	PrecisionRan    string    `json:"precision_ran"`
	FastPrefillTokS float64   `json:"fast_prefill_tok_s,omitempty"`
	FastPrefillRuns []float64 `json:"fast_prefill_tok_s_runs,omitempty"`
	FastRatio       float64   `json:"fast_over_exact,omitempty"` // median over rounds of each round's ratio
	// With -b > 1: one sequence decoded alone in each round, the batch's
	// aggregate over it, and the ceiling routing puts on that ratio.
	SingleTokS     float64   `json:"single_decode_tok_s,omitempty"`
	SingleRuns     []float64 `json:"single_decode_tok_s_runs,omitempty"`
	BatchSpeedup   float64   `json:"batch_speedup,omitempty"`
	RoutingCeiling float64   `json:"routing_ceiling,omitempty"`
	// ComputeCeiling bounds the same ratio by arithmetic: the FLOP rate of
	// the batch's (exact) prefill, where the same products run with many
	// tokens a tile, over a decoded token's FLOPs (DecodeGFLOPToken: every
	// layer's feed-forward and the whole unembedding, which a prefill runs
	// for its last token only), over one stream's decode. A batch whose
	// experts get a few tokens each cannot multiply faster than that.
	ComputeCeiling   float64   `json:"compute_ceiling,omitempty"`
	DecodeGFLOPToken float64   `json:"decode_gflop_per_token,omitempty"`
	DecodeRuns       []float64 `json:"decode_tok_s_runs"`
	DecodeAllocs     float64   `json:"decode_allocs_per_token"`

	// Weight bytes read per decoded token: attention, router, the
	// num_selected_experts experts each token actually runs, norms, one
	// embedding row and the whole unembedding.
	BytesPerToken int64           `json:"bytes_per_token"`
	Bytes         model.StepBytes `json:"bytes_breakdown"`
	AchievedGBs   float64         `json:"achieved_gb_s"`  // bytes/token × decode tok/s
	BandwidthGBs  float64         `json:"bandwidth_gb_s"` // streaming read, same threads, same run, best pass
	// WeightsReadGBs is the same read loop over the model's mapped tensor
	// bytes (GGUF only), best of two passes after the runs. Well below
	// BandwidthGBs, it means the page cache serves this file's pages slowly
	// (seen on these VMs for a file fresh from a writer; a copy was fast).
	WeightsReadGBs float64 `json:"weights_read_gb_s,omitempty"`
	// WeightsHugeShare is the share of those bytes mapped with 2 MiB pages
	// (Linux, /proc/self/smaps): a file whose pages came into the page
	// cache in small folios reads slower (bench/README.md).
	WeightsHugeShare *float64 `json:"weights_huge_share,omitempty"`
	BandwidthMB      int      `json:"bandwidth_buffer_mb"`
	// The probe's loops (bandwidth.go): the read loops whose better best
	// pass is BandwidthGBs, and copy and triad in STREAM's byte counts.
	ReadWideGBs   float64 `json:"read_wide_gb_s"`
	ReadScalarGBs float64 `json:"read_scalar_gb_s"`
	ReadRowsGBs   float64 `json:"read_rows_gb_s"`
	CopyGBs       float64 `json:"copy_gb_s"`
	TriadGBs      float64 `json:"triad_gb_s"`
	RooflineRatio float64 `json:"roofline_ratio"` // achieved / bandwidth
	// The prefill's float32 work against the FMA peak of the same threads
	// in the same run (peak.go): what exact-precision prefill can reach.
	PrefillGFLOPToken float64 `json:"prefill_gflop_per_token"`
	PrefillGFLOPs     float64 `json:"prefill_gflop_s"`
	FMAPeakGFLOPs     float64 `json:"fma_peak_gflop_s"`
	PrefillPeakRatio  float64 `json:"prefill_peak_ratio"`
	// The fast prefill's work (the same FLOPs a token) against the int16
	// peak of the same threads (VPDPWSSD, 2 operations a product), where
	// a fast prefill ran integer products.
	Int16PeakGOPs float64 `json:"int16_peak_gop_s,omitempty"`
	FastPeakRatio float64 `json:"fast_prefill_peak_ratio,omitempty"`
	// PairedRatio is the median over reps of each rep's decode GB/s over
	// the best read pass next to it: steadier than RooflineRatio when other
	// processes load the machine unevenly.
	PairedRatio float64 `json:"roofline_ratio_paired"`
	// KernelBoundTokS is the decode rate the exact kernels allow with no
	// weight waiting on memory (kernelbound.go): each product type's
	// one-token kernels on rows in L2, all threads at once (KernelGBs, by
	// type), weighed by the bytes a token reads of it. Decode is bound by
	// the lower of it and the roofline; KernelBoundRatio is decode over
	// that lower one. Not measured for a batch, a split model, or weights
	// stored [in, out] (xAI's int8 checkpoint).
	KernelBoundTokS  float64            `json:"kernel_bound_tok_s,omitempty"`
	KernelGBs        map[string]float64 `json:"kernel_gb_s,omitempty"`
	KernelBoundRatio float64            `json:"kernel_bound_ratio,omitempty"`

	// With --tp N > 1 or under mpirun: the shards (Ranks: one per MPI
	// rank, else in process), and per decode step (one token of each
	// sequence) the collectives rank 0 made (under mpirun also the
	// broadcast of each call to the other ranks), their payload bytes, the
	// time spent in them (waiting for the other shards included) and its
	// share of the decode time; CommLatencyUs is that time per collective.
	TP                 int       `json:"tp,omitempty"`
	Ranks              bool      `json:"tp_mpi_ranks,omitempty"`
	CollectivesPerStep float64   `json:"collectives_per_step,omitempty"`
	CommBytesPerStep   float64   `json:"comm_bytes_per_step,omitempty"`
	CommMsPerStep      float64   `json:"comm_ms_per_step,omitempty"`
	CommShare          float64   `json:"comm_share_of_decode,omitempty"`
	CommLatencyUs      float64   `json:"comm_us_per_collective,omitempty"`
	CommShareRuns      []float64 `json:"comm_share_runs,omitempty"`

	GoVersion string `json:"go_version"`
	Revision  string `json:"vcs_revision,omitempty"` // of the binary: which kernels ran
	Modified  bool   `json:"vcs_modified,omitempty"`
	CPU       string `json:"cpu,omitempty"`
}

func runBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", "[-m MODEL] [-p 128] [-n 32] [-b 1] [-t THREADS] [-r REPS] [--json]", stderr)
	mf := addModelFlags(fs)
	addTPFlag(fs, mf)
	p := fs.Int("p", 128, "prompt tokens of the prefill (one Forward call)")
	n := fs.Int("n", 32, "tokens decoded one at a time after the prefill")
	threads := fs.Int("t", 0, "threads (0 = all cores)")
	reps := fs.Int("r", 5, "repetitions; speeds are their median")
	batch := fs.Int("b", 1, "sequences prefilled and decoded together (continuous batching's steps); tok/s are then aggregates")
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	bwMB := fs.Int("bw-mb", 1024, "size of the buffer the memory bandwidth is measured on, in MiB (far above the last-level cache)")
	seed := fs.Uint64("seed", 1, "random seed of the prompt tokens")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed runs to this file (no paired roofline ratio then)")
	makeModel := fs.String("make-model", "", "same as `grok make-model PATH` (with --type, --config and --seed)")
	typ := fs.String("type", "f16", "with --make-model: weight type")
	config := fs.String("config", "medium", "with --make-model: the model's configuration")
	layers := fs.Int("layers", 0, "with --make-model: decoder layers (0 = the configuration's)")
	kv := addKVFlags(fs)
	variant := fs.String("kernels", "", "kernel level to run: "+strings.Join(kernels.Variants(), ", ")+" (default: the best this CPU runs)")
	prec := fs.String("precision", "exact", "prefill arithmetic: exact, fast (int16 activations, integer products for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K–Q6_K, the codebook i-quants and [out, in] int8 weights) or both (each round times an exact and a fast prefill); decode, the last layer's feed-forward and the unembedding are exact")
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if *makeModel != "" {
		return writeBenchModel(*makeModel, *config, *typ, *layers, *seed, stderr)
	}
	precision, ok := kernels.ParsePrecision(*prec)
	both := *prec == "both"
	if !ok && !both {
		return usagef("--precision: want exact, fast or both, not %q", *prec)
	}
	if kv.memory.text != "" {
		return usagef("--kv-memory: bench sizes the KV memory to -b sequences of -p + -n tokens")
	}
	if *p < 1 || *n < 1 || *reps < 1 || *bwMB < 1 || *threads < 0 || *batch < 1 {
		return usagef("-p, -n, -r, -b and --bw-mb must be positive and -t not negative")
	}

	if *variant != "" {
		prev := kernels.Variant()
		if err := kernels.SetVariant(*variant); err != nil {
			return usagef("--kernels: %v", err)
		}
		defer kernels.SetVariant(prev) // the command runs in tests' processes too
	}
	setThreads(*threads)
	pool := parallel.Default()
	res := benchResult{Threads: pool.Threads(), Prompt: *p, Gen: *n, Reps: *reps, Batch: *batch, BandwidthMB: *bwMB,
		GoVersion: runtime.Version(), CPU: cpuName(), Kernels: kernels.Variant()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				res.Revision = s.Value
			case "vcs.modified":
				res.Modified = s.Value == "true"
			}
		}
	}

	start := time.Now()
	m, err := openModelOrDefault(mf, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	res.LoadS = time.Since(start).Seconds()
	res.RSSMB = rssMB()
	res.Model = *mf.path
	if res.Model == "" {
		res.Model = defaultmodel.Name + " (embedded)"
		res.MappedMB = float64(len(defaultmodel.GGUF)) / 1e6
	} else if st, err := os.Stat(res.Model); err == nil && !st.IsDir() {
		res.MappedMB = float64(st.Size()) / 1e6
	}
	describeWeights(&res, m)

	lm := m.LanguageModel
	c := &lm.Config
	lm.Precision = precision
	res.Precision, res.PrecisionRan = *prec, precisionNote(precision, lm)
	if both {
		res.PrecisionRan = precisionNote(kernels.Fast, lm)
	}
	if *p+*n > c.SequenceLen {
		return usagef("-p + -n = %d exceeds the model's context of %d", *p+*n, c.SequenceLen)
	}
	res.KV = kv.ktype.String() + "/" + kv.vtype.String()
	if err := benchRuns(&res, m, benchOpts{p: *p, n: *n, reps: *reps, batch: *batch, bwMB: *bwMB, both: both, kt: kv.ktype.t, vt: kv.vtype.t,
		seed: *seed, cpuProfile: *cpuProfile, mapped: probeWeights(m, *mf.path)}, pool); err != nil {
		return err
	}

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	printBench(stdout, &res, c)
	return nil
}

// probeWeights reports whether bench times a read of the whole mapped
// file: for a GGUF file this process holds whole, not for the embedded
// model or one rank's shard (which must touch only its own slices).
func probeWeights(m *loader.Model, path string) bool {
	return m.GGUF != nil && path != "" && m.Sharding().Size == 1
}

// benchOpts are the measurement's settings (grok bench's flags).
type benchOpts struct {
	p, n, reps, batch, bwMB int
	seed                    uint64
	cpuProfile              string
	kt, vt                  tensor.DType // the KV memory's element types (-ctk, -ctv)
	mapped                  bool         // probeWeights: read the whole mapped file before the runs, time a read after
	both                    bool         // each round also times a fast prefill after the exact one
}

// benchRuns times o.reps prefills of o.p tokens and o.n decode steps each,
// for o.batch sequences at once, with read-bandwidth passes between them,
// and fills in res's speeds, allocations and roofline figures.
func benchRuns(res *benchResult, m *loader.Model, o benchOpts, pool *parallel.Pool) error {
	lm := m.LanguageModel
	c := &lm.Config
	B := o.batch
	mem, err := lm.NewPagedKVMemory(model.KVOptions{Slots: B, SeqLen: o.p + o.n, KType: o.kt, VType: o.vt})
	if err != nil {
		return err
	}
	cc := lm.Collectives() // nil unsharded
	var commStep comm.Stats
	var commSum comm.Stats
	rng := rand.New(rand.NewPCG(o.seed, 0))
	tok := func() int { return 1 + rng.IntN(c.VocabSize-1) } // never the pad token
	// Each sequence (slot) has its own random prompt and continuation.
	in := make([]model.Input, B)
	step := make([]model.Input, B)
	gen := make([][]int, B)
	for b := range in {
		prompt := make([]int, o.p)
		for i := range prompt {
			prompt[i] = tok()
		}
		gen[b] = make([]int, o.n)
		for i := range gen[b] {
			gen[b][i] = tok()
		}
		in[b] = model.Input{Slot: b, Tokens: prompt}
		step[b] = model.Input{Slot: b, Tokens: []int{0}}
	}
	// runN does one prefill and the decode steps of the first nb sequences,
	// returning their times and the heap allocations of the decode steps.
	runN := func(steps, nb int) (prefill, decode time.Duration, allocs uint64, err error) {
		for b := 0; b < nb; b++ {
			mem.Reset(b)
		}
		t0 := time.Now()
		if _, err = lm.Forward(mem, in[:nb]); err != nil {
			return
		}
		prefill = time.Since(t0)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mallocs := ms.Mallocs
		if cc != nil {
			cc.Reset()
		}
		t0 = time.Now()
		for i := 0; i < steps; i++ {
			for b := range step[:nb] {
				step[b].Tokens[0] = gen[b][i]
			}
			if _, err = lm.Forward(mem, step[:nb]); err != nil {
				return
			}
		}
		decode = time.Since(t0)
		if cc != nil {
			commStep = cc.Stats()
		}
		runtime.ReadMemStats(&ms)
		return prefill, decode, ms.Mallocs - mallocs, nil
	}
	run := func(steps int) (time.Duration, time.Duration, uint64, error) { return runN(steps, B) }
	// The read bandwidth is measured in passes between the timed runs, on
	// the same threads: its best pass is the machine's roofline, and each
	// run is also compared with the passes next to it, which cancels most
	// of what other processes on a shared machine do to both.
	meter := newReadMeter(pool, o.bwMB<<20)
	defer meter.free()
	bwPrev := meter.best(2)
	peak := fmaPeakGFLOPs(pool, 3)
	fastTypes, _ := fastSplit(lm)
	ranInt := res.Precision != "exact" && len(fastTypes) > 0 // a fast prefill multiplies in integers
	var intPeak float64
	if ranInt {
		intPeak = intPeakGOPs(pool, 3)
	}

	// Warm-up: every mapped weight page read once (a few decode steps reach
	// only their experts, so the first repetition would fault in, or read
	// from disk, the others), then a short run that sizes the workspace.
	if o.mapped {
		readViews(pool, tensorViews(m.GGUF), 1)
	}
	if _, _, _, err := run(min(o.n, 4)); err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var allocs uint64
	var paired, ratios []float64
	res.Bytes = lm.DecodeStepBytes()
	res.BytesPerToken = res.Bytes.Total
	for r := 0; r < o.reps; r++ {
		pt, dt, a, err := run(o.n)
		if err != nil {
			return err
		}
		allocs += a
		if cc != nil {
			commSum.Calls += commStep.Calls
			commSum.Bytes += commStep.Bytes
			commSum.Time += commStep.Time
			res.CommShareRuns = append(res.CommShareRuns, commStep.Time.Seconds()/dt.Seconds())
		}
		res.PrefillRuns = append(res.PrefillRuns, float64(B*o.p)/pt.Seconds())
		if o.both {
			lm.Precision = kernels.Fast
			for b := 0; b < B; b++ {
				mem.Reset(b)
			}
			t0 := time.Now()
			_, err := lm.Forward(mem, in)
			lm.Precision = kernels.Exact
			if err != nil {
				return err
			}
			fast := float64(B*o.p) / time.Since(t0).Seconds()
			res.FastPrefillRuns = append(res.FastPrefillRuns, fast)
			ratios = append(ratios, fast/res.PrefillRuns[len(res.PrefillRuns)-1])
		}
		res.DecodeRuns = append(res.DecodeRuns, float64(B*o.n)/dt.Seconds())
		if B > 1 {
			// One sequence alone in the same round: what the batch is worth.
			_, dt1, _, err := runN(o.n, 1)
			if err != nil {
				return err
			}
			res.SingleRuns = append(res.SingleRuns, float64(o.n)/dt1.Seconds())
		}
		if o.cpuProfile != "" || B > 1 {
			continue // keep the read passes out of the profile; no roofline for batches
		}
		bw := meter.best(2)
		if near := max(bwPrev, bw); near > 0 {
			paired = append(paired, float64(res.BytesPerToken)*float64(o.n)/dt.Seconds()/1e9/near)
		}
		bwPrev = bw
	}
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if o.cpuProfile != "" {
		meter.best(2)
	}
	peak = max(peak, fmaPeakGFLOPs(pool, 3))
	if ranInt {
		intPeak = max(intPeak, intPeakGOPs(pool, 3))
	}
	meter.crossCheck(2)
	if meter.broken {
		return errors.New("bench: the bandwidth probe's sums came out wrong (a lost range in the pool)")
	}
	res.BandwidthGBs = meter.bestGBs
	res.ReadWideGBs, res.ReadRowsGBs, res.ReadScalarGBs = meter.wideGBs, meter.rowsGBs, meter.scalarGBs
	res.CopyGBs, res.TriadGBs = meter.copyGBs, meter.triadGBs
	meter.free()
	if o.mapped {
		views := tensorViews(m.GGUF)
		res.WeightsReadGBs = weightsReadGBs(pool, views)
		if s, ok := mmap.HugeShare(views); ok {
			res.WeightsHugeShare = &s
		}
	}
	res.RSSRunMB = rssMB()
	res.PrefillTokS = median(res.PrefillRuns)
	if o.both {
		res.FastPrefillTokS, res.FastRatio = median(res.FastPrefillRuns), median(ratios)
	}
	res.DecodeTokS = median(res.DecodeRuns)
	res.PrefillGFLOPToken = lm.PrefillFLOPs(o.p) / 1e9
	res.PrefillGFLOPs = res.PrefillGFLOPToken * res.PrefillTokS
	res.FMAPeakGFLOPs = peak
	if peak > 0 {
		res.PrefillPeakRatio = res.PrefillGFLOPs / peak
	}
	if intPeak > 0 {
		fast := res.PrefillTokS
		if o.both {
			fast = res.FastPrefillTokS
		}
		res.Int16PeakGOPs, res.FastPeakRatio = intPeak, res.PrefillGFLOPToken*fast/intPeak
	}
	res.DecodeAllocs = float64(allocs) / float64(o.reps*B*o.n)
	if cc != nil {
		res.TP = len(lm.Shards())
		if sh := lm.Sharding(); sh.Size > 1 {
			res.TP, res.Ranks = sh.Size, true
		}
		steps := float64(o.reps * o.n)
		res.CollectivesPerStep = float64(commSum.Calls) / steps
		res.CommBytesPerStep = float64(commSum.Bytes) / steps
		res.CommMsPerStep = commSum.Time.Seconds() * 1e3 / steps
		res.CommShare = median(res.CommShareRuns)
		if commSum.Calls > 0 {
			res.CommLatencyUs = commSum.Time.Seconds() * 1e6 / float64(commSum.Calls)
		}
	}
	if B == 1 {
		res.AchievedGBs = float64(res.BytesPerToken) * res.DecodeTokS / 1e9
		if res.BandwidthGBs > 0 {
			res.RooflineRatio = res.AchievedGBs / res.BandwidthGBs
		}
	}
	if len(paired) > 0 {
		res.PairedRatio = median(paired)
	}
	if B == 1 && lm.Shards() == nil && lm.Sharding().Size <= 1 && res.DecodeTokS > 0 {
		res.KernelBoundTokS, res.KernelGBs = kernelBound(pool, lm.DecodeStepProducts())
		if res.KernelBoundTokS > 0 && res.BytesPerToken > 0 {
			wall := res.BandwidthGBs * 1e9 / float64(res.BytesPerToken)
			res.KernelBoundRatio = res.DecodeTokS / min(wall, res.KernelBoundTokS)
		}
	}
	if B > 1 {
		res.SingleTokS = median(res.SingleRuns)
		res.BatchSpeedup = res.DecodeTokS / res.SingleTokS
		res.RoutingCeiling = routingCeiling(res.Bytes, c, B)
		// The decoded tokens' mean position: after the prompt, half the steps.
		res.DecodeGFLOPToken = lm.DecodeFLOPs(o.p+o.n/2) / 1e9
		res.ComputeCeiling = res.PrefillGFLOPToken * res.PrefillTokS / res.DecodeGFLOPToken / res.SingleTokS
	}
	return nil
}

// routingCeiling is the most a decode step of B sequences can gain over B
// steps of one, when decode is bound by reading weights and each token picks
// its k of E experts uniformly: the step reads the shared weights once, one
// embedding row per sequence, and E·(1−(1−k/E)^B) experts a layer, where
// one sequence reads k.
func routingCeiling(b model.StepBytes, c *model.Config, B int) float64 {
	one := float64(b.Total)
	experts := float64(b.Experts)
	if k, E := b.ExpertsPerLayer, c.NumExperts; E > 1 && k > 0 {
		perExpert := experts / float64(k)
		experts = perExpert * float64(E) * (1 - math.Pow(1-float64(k)/float64(E), float64(B)))
	}
	batch := one - float64(b.Experts) + experts + float64(B-1)*float64(b.Embedding)
	return float64(B) * one / batch
}

// describeWeights fills in res's parameter count, main weight type and
// mapped size from m's tensors.
func describeWeights(res *benchResult, m *loader.Model) {
	byType := map[string]int64{}
	var tensorBytes int64
	for _, t := range m.Tensors() {
		byType[t.Type] += t.Bytes
		tensorBytes += t.Bytes
		e := int64(1)
		for _, d := range t.Shape {
			e *= int64(d)
		}
		res.Params += e
	}
	for t, b := range byType {
		if res.Type == "" || b > byType[res.Type] {
			res.Type = t
		}
	}
	if res.MappedMB == 0 { // a folder of files (safetensors, xAI checkpoint)
		res.MappedMB = float64(tensorBytes) / 1e6
	}
}

// printBench writes res as text.
func printBench(w io.Writer, r *benchResult, c *model.Config) {
	mb := func(b int64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
	fmt.Fprintf(w, "model     %s: %s, %.1f M parameters, %.1f MB mapped; loaded in %.2f s\n",
		r.Model, r.Type, float64(r.Params)/1e6, r.MappedMB, r.LoadS)
	fmt.Fprintf(w, "memory    RSS %.1f MB after load, %.1f MB after the runs (mapped weights paged in)\n", r.RSSMB, r.RSSRunMB)
	fmt.Fprintf(w, "threads   %d (GOMAXPROCS %d, %s), %s kernels, KV memory %s\n", r.Threads, runtime.GOMAXPROCS(0), r.GoVersion, r.Kernels, r.KV)
	switch {
	case r.TP > 1 && r.Ranks:
		fmt.Fprintf(w, "shards    %d on the model axis, one per MPI rank, %d threads each\n", r.TP, r.Threads)
	case r.TP > 1:
		fmt.Fprintf(w, "shards    %d on the model axis, in process, %d threads each\n", r.TP, max(1, r.Threads/r.TP))
	}
	of := ""
	if r.Batch > 1 {
		of = fmt.Sprintf(" × %d sequences together (aggregate)", r.Batch)
	}
	fmt.Fprintf(w, "precision %s\n", r.PrecisionRan)
	pre := ""
	if r.FastPrefillTokS > 0 {
		pre = " exact"
	}
	fmt.Fprintf(w, "prefill   %d tokens%s%s: %.1f tok/s (median of %d: %s)\n", r.Prompt, of, pre, r.PrefillTokS, r.Reps, runsList(r.PrefillRuns))
	if r.FastPrefillTokS > 0 {
		fmt.Fprintf(w, "prefill   %d tokens%s fast: %.1f tok/s (median of %d: %s); fast/exact %.2f× (median of the rounds' ratios)\n",
			r.Prompt, of, r.FastPrefillTokS, r.Reps, runsList(r.FastPrefillRuns), r.FastRatio)
	}
	fmt.Fprintf(w, "compute   prefill%s %.1f GFLOP/s (%.3f GFLOP a token) / float32 FMA peak %.1f GFLOP/s (register-only FMAs, same threads, same run) = %.2f\n",
		pre, r.PrefillGFLOPs, r.PrefillGFLOPToken, r.FMAPeakGFLOPs, r.PrefillPeakRatio)
	if r.Int16PeakGOPs > 0 {
		fmt.Fprintf(w, "compute   prefill fast %.1f GOP/s / int16 peak %.1f GOP/s (register-only VPDPWSSDs, same threads, same run) = %.2f\n",
			r.FastPeakRatio*r.Int16PeakGOPs, r.Int16PeakGOPs, r.FastPeakRatio)
	}
	fmt.Fprintf(w, "decode    %d tokens%s: %.2f tok/s (median of %d: %s), %.2f allocations/token\n", r.Gen, of, r.DecodeTokS, r.Reps, runsList(r.DecodeRuns), r.DecodeAllocs)
	if r.TP > 1 {
		fmt.Fprintf(w, "comm      per decode step: %.0f collectives, %.1f KB payload, %.3f ms in them = %.1f %% of decode (median of %d: %s); %.1f µs a collective\n",
			r.CollectivesPerStep, r.CommBytesPerStep/1e3, r.CommMsPerStep, 100*r.CommShare, r.Reps, pctList(r.CommShareRuns), r.CommLatencyUs)
	}
	b := r.Bytes
	fmt.Fprintf(w, "bytes     %s read per decoded token: attention %s, %d of %d experts/layer %s, router %s, norms %s, unembedding %s, embedding row %s\n",
		mb(b.Total), mb(b.Attention), b.ExpertsPerLayer, max(c.NumExperts, 1), mb(b.Experts), mb(b.Router), mb(b.Norms), mb(b.Unembed), mb(b.Embedding))
	if r.Batch > 1 {
		fmt.Fprintf(w, "roofline  not computed for a batch (its tokens share weights, and route to more experts); read bandwidth %.2f GB/s\n", r.BandwidthGBs)
		fmt.Fprintf(w, "batch     %d streams: %.2f× one stream (%.2f tok/s alone, same rounds); routing ceiling %.2f× (uniform top-%d routing) → %.0f %% of it\n",
			r.Batch, r.BatchSpeedup, r.SingleTokS, r.RoutingCeiling, c.NumSelectedExperts, 100*r.BatchSpeedup/r.RoutingCeiling)
		fmt.Fprintf(w, "batch     compute ceiling %.2f× (the batch's prefill GFLOP/s over %.3f GFLOP a decoded token, over one stream's decode) → %.0f %% of the lower ceiling\n",
			r.ComputeCeiling, r.DecodeGFLOPToken, 100*r.BatchSpeedup/min(r.RoutingCeiling, r.ComputeCeiling))
	} else {
		fmt.Fprintf(w, "roofline  %.2f GB/s achieved / %.2f GB/s read bandwidth (best pass over a %d MiB buffer, %d threads) = %.2f",
			r.AchievedGBs, r.BandwidthGBs, r.BandwidthMB, r.Threads, r.RooflineRatio)
		if r.PairedRatio > 0 {
			fmt.Fprintf(w, "; paired with the passes beside each run: %.2f", r.PairedRatio)
		}
		fmt.Fprintln(w)
		if r.RooflineRatio > 1 {
			fmt.Fprintf(w, "warning   decode read weights faster than the probe read its buffer: the probe under-reads this machine\n")
		}
		if r.KernelBoundTokS > 0 {
			var ts []string
			for t := range r.KernelGBs {
				ts = append(ts, t)
			}
			slices.Sort(ts)
			for i, t := range ts {
				ts[i] = fmt.Sprintf("%s %.1f", t, r.KernelGBs[t])
			}
			fmt.Fprintf(w, "kernels   exact decode bound %.1f tok/s with no weight waiting on memory (each type's one-token products on rows in L2, all threads: %s GB/s) → decode at %.2f of the lower of it and the roofline\n",
				r.KernelBoundTokS, strings.Join(ts, ", "), r.KernelBoundRatio)
		}
	}
	fmt.Fprintf(w, "memory    read %.2f GB/s wide (%d streams a thread), %.2f as matrix rows, %.2f scalar; copy %.2f, triad %.2f GB/s (STREAM's byte counts)\n",
		r.ReadWideGBs, readStreams, r.ReadRowsGBs, r.ReadScalarGBs, r.CopyGBs, r.TriadGBs)
	if r.WeightsReadGBs > 0 {
		huge := ""
		if r.WeightsHugeShare != nil {
			huge = fmt.Sprintf("; %.0f %% of them mapped with 2 MiB pages", 100**r.WeightsHugeShare)
		}
		fmt.Fprintf(w, "weights   the same read loop over the mapped tensors: %.2f GB/s (%.2f of the buffer's)%s\n", r.WeightsReadGBs, r.WeightsReadGBs/r.BandwidthGBs, huge)
		// Only weights far beyond the caches measure the memory; small
		// ones read fast or, with the loop's per-tensor overhead, slow.
		if r.WeightsReadGBs < 0.6*r.BandwidthGBs && r.MappedMB >= float64(r.BandwidthMB) {
			why := ""
			if s := r.WeightsHugeShare; s != nil && *s < 0.5 {
				why = " (in 4 KiB pages: read back after it leaves the page cache, grok's mapping brings it in 2 MiB pages)"
			}
			fmt.Fprintf(w, "warning   the page cache serves this file's pages slowly%s, so decode cannot reach the roofline; a fresh copy of the file (cp) has been fast on these machines\n", why)
		}
	}
}

// tensorViews returns the mapped bytes of every tensor of f.
func tensorViews(f *gguf.File) [][]byte {
	var bs [][]byte
	for _, ti := range f.Tensors {
		if b, ok := f.TensorBytes(ti.Name); ok {
			bs = append(bs, b)
		}
	}
	return bs
}

// weightsReadGBs runs the read meter's loop over every tensor view (the
// mapped GGUF file's, tensorViews), twice, and returns the better pass in
// GB/s.
func weightsReadGBs(pool *parallel.Pool, views [][]byte) float64 {
	return readViews(pool, views, 2)
}

// readViews is weightsReadGBs with passes passes.
func readViews(pool *parallel.Pool, views [][]byte, passes int) float64 {
	var bufs [][]uint64
	var total int
	for _, b := range views {
		if len(b) < 8 || uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
			continue
		}
		bufs = append(bufs, unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8))
		total += len(b) / 8 * 8
	}
	if total == 0 {
		return 0
	}
	t := readTask{sums: make([]uint64, 8*pool.Threads())}
	best := time.Duration(1<<63 - 1)
	for range passes {
		t0 := time.Now()
		for _, b := range bufs {
			t.buf = b
			pool.Run(len(b), 1024, &t)
		}
		best = min(best, time.Since(t0))
	}
	return float64(total) / best.Seconds() / 1e9
}

func runsList(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, " ")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rssMB returns the process's resident set (VmRSS) in MB, or 0 where
// /proc/self/status does not exist.
func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb * 1024 / 1e6
		}
	}
	return 0
}

// cpuName returns the CPU model from /proc/cpuinfo, or "".
func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// pctList is runsList of fractions, as percentages.
func pctList(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(100*x, 'f', 1, 64)
	}
	return strings.Join(s, " ")
}

package main

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/grok-go/grok/formats/gguf"
	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/tensor"
)

func init() {
	register(command{
		name:    "make-model",
		usage:   makeModelUsage,
		summary: "write a random benchmark model (GGUF) of a given configuration and weight type",
		run:     runMakeModel,
	})
}

const makeModelUsage = "PATH [--config medium|medium-grok2|grok-1|tiny|tiny-grok2] [--layers N] [--type f32|f16|q8_0] [--seed 1]"

func runMakeModel(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("make-model", makeModelUsage, stderr)
	typ := fs.String("type", "f16", "weight type of the matrices: f32, f16 or q8_0")
	config := fs.String("config", "medium", "medium (the reference figures' model), medium-grok2 (medium as Grok-2), grok-1 (the real shapes), tiny or tiny-grok2")
	layers := fs.Int("layers", 0, "decoder layers (0 = the configuration's; grok-1 has 64)")
	seed := fs.Uint64("seed", 1, "random seed of the weights")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want one output PATH")
	}
	if *layers < 0 {
		return usagef("--layers must not be negative")
	}
	return writeBenchModel(pos[0], *config, *typ, *layers, *seed, stderr)
}

// writeBenchModel is make-model's work, shared with bench --make-model.
func writeBenchModel(path, config, typ string, layers int, seed uint64, stderr io.Writer) error {
	dt, err := parseBenchType(typ)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := makeBenchModel(path, config, dt, layers, seed); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s (%s, %s) in %v\n", path, config, dt, time.Since(start).Round(time.Millisecond))
	return nil
}

// benchConfigs are the random models `grok make-model` writes.
// "medium" is the model bench/README.md's figures (ours and llama.cpp's)
// were measured on, "medium-grok2" its Grok-2 counterpart; "tiny" and
// "tiny-grok2" are for tests.
var benchConfigs = map[string]model.Config{
	"medium": {
		VocabSize: 32768, EmbSize: 1536, KeySize: 128, NumQHeads: 12, NumKVHeads: 2, NumLayers: 4,
		FFNSize: 4096, NumExperts: 8, NumSelectedExperts: 2, SequenceLen: 4096,
		AttnOutputMultiplier: 0.08838834764831845, EmbeddingMultiplierScale: 78.38367176906169,
		OutputMultiplierScale: 0.5773502691896257, AttnLogitCap: 30,
		PadToken: 0, EOSToken: 2, RopeBase: 10000, RMSEps: 1e-5,
	},
	// medium with Grok-2's features (semantics §G): a dense MLP beside the
	// experts, router and final soft-caps, attention temperature, an
	// untied output, Grok-2's RoPE base and multipliers, and its widths'
	// proportions (experts 2·D, dense MLP 4·D).
	"medium-grok2": {
		VocabSize: 32768, EmbSize: 1536, KeySize: 128, NumQHeads: 12, NumKVHeads: 2, NumLayers: 4,
		FFNSize: 3072, NumExperts: 8, NumSelectedExperts: 2, SequenceLen: 4096,
		AttnOutputMultiplier: 0.08838834764831845, EmbeddingMultiplierScale: 90.50966799187809,
		OutputMultiplierScale: 0.5, AttnLogitCap: 30,
		PadToken: 0, EOSToken: 2, RopeBase: 208533496, RMSEps: 1e-5,
		DenseFFNSize: 6144, RouterLogitCap: 30, FinalLogitCap: 50, AttnTemperatureLen: 1024, UntiedOutput: true,
	},
	// One file of real Grok-1 shapes; --layers 1 makes the one-layer model
	// whose prefill and decode the speed issue measures (11.5 GB in F16).
	"grok-1": {
		VocabSize: 131072, EmbSize: 6144, KeySize: 128, NumQHeads: 48, NumKVHeads: 8, NumLayers: 64,
		FFNSize: 32768, NumExperts: 8, NumSelectedExperts: 2, SequenceLen: 8192,
		AttnOutputMultiplier: 0.08838834764831845, EmbeddingMultiplierScale: 78.38367176906169,
		OutputMultiplierScale: 0.5773502691896257, AttnLogitCap: 30,
		PadToken: 0, EOSToken: 2, RopeBase: 10000, RMSEps: 1e-5,
	},
	"tiny": {
		VocabSize: 512, EmbSize: 64, KeySize: 16, NumQHeads: 4, NumKVHeads: 2, NumLayers: 2,
		FFNSize: 128, NumExperts: 4, NumSelectedExperts: 2, SequenceLen: 256,
		AttnOutputMultiplier: 0.25, EmbeddingMultiplierScale: 8,
		OutputMultiplierScale: 0.5773502691896257, AttnLogitCap: 30,
		PadToken: 0, EOSToken: 2, RopeBase: 10000, RMSEps: 1e-5,
	},
	"tiny-grok2": {
		VocabSize: 512, EmbSize: 64, KeySize: 16, NumQHeads: 4, NumKVHeads: 2, NumLayers: 2,
		FFNSize: 128, NumExperts: 4, NumSelectedExperts: 2, SequenceLen: 256,
		AttnOutputMultiplier: 0.25, EmbeddingMultiplierScale: 8,
		OutputMultiplierScale: 0.5, AttnLogitCap: 30,
		PadToken: 0, EOSToken: 2, RopeBase: 208533496, RMSEps: 1e-5,
		DenseFFNSize: 256, RouterLogitCap: 30, FinalLogitCap: 50, AttnTemperatureLen: 8, UntiedOutput: true,
	},
}

// makeBenchModel writes a random model of config name to path with its
// matrices in dt, as reference-figures.md describes the "medium" model:
// embeddings N(0, (1/embedding_multiplier)²), matrices N(0, 1/fan_in), norm
// scales U(0.8, 1.2). Like llama-quantize, it converts every matrix,
// token_embd included, and keeps the norms and the router in F32.
//
// Each tensor's values come from its own generator, seeded by the tensor's
// name and seed, so the F32, F16 and Q8_0 files of one seed hold the same
// model at three precisions. Tensors are generated row by row while the file
// is written, so memory use stays at one row.
func makeBenchModel(path, config string, dt tensor.DType, layers int, seed uint64) error {
	c, ok := benchConfigs[config]
	if !ok {
		return usagef("unknown --config %q (medium, medium-grok2, grok-1, tiny or tiny-grok2)", config)
	}
	if layers > 0 {
		c.NumLayers = layers
	}
	if dt != tensor.F32 && dt != tensor.F16 && dt != tensor.Q8_0 {
		return usagef("--type must be f32, f16 or q8_0, not %v", dt)
	}
	ft := loader.FileType(dt)
	w := gguf.NewWriter()
	kvs := append(loader.GGUFMetadata("grok-bench-"+config, &c),
		loader.MetaKV{Key: "general.file_type", Value: ft},
		// No vocabulary: llama.cpp's "none" model makes dummy tokens, and
		// the benchmark feeds token ids.
		loader.MetaKV{Key: "tokenizer.ggml.model", Value: "none"},
		loader.MetaKV{Key: "tokenizer.ggml.padding_token_id", Value: uint32(c.PadToken)},
		loader.MetaKV{Key: "tokenizer.ggml.eos_token_id", Value: uint32(c.EOSToken)})
	if dt == tensor.Q8_0 {
		kvs = append(kvs, loader.MetaKV{Key: "general.quantization_version", Value: uint32(2)})
	}
	for _, kv := range kvs {
		if err := w.AddKV(kv.Key, kv.Value); err != nil {
			return err
		}
	}

	// add queues a tensor of shape [rows..., cols] whose rows are drawn by
	// gen, stored as typ.
	add := func(name string, typ tensor.DType, shape []int, gen func(rng *rand.Rand, row []float32)) error {
		size, err := tensor.ByteSize(typ, shape)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		cols := shape[len(shape)-1]
		rows := 1
		for _, d := range shape[:len(shape)-1] {
			rows *= d
		}
		return w.AddTensorFunc(name, typ, shape, int64(size), func(out io.Writer) error {
			rng := rand.New(rand.NewPCG(seed, nameHash(name)))
			row := make([]float32, cols)
			var buf []byte
			for r := 0; r < rows; r++ {
				gen(rng, row)
				var err error
				if buf, err = tensor.EncodeRow(buf[:0], typ, row); err != nil {
					return err
				}
				if _, err := out.Write(buf); err != nil {
					return err
				}
			}
			return nil
		})
	}
	normal := func(std float64) func(*rand.Rand, []float32) {
		return func(rng *rand.Rand, row []float32) {
			for i := range row {
				row[i] = float32(rng.NormFloat64() * std)
			}
		}
	}
	uniform := func(rng *rand.Rand, row []float32) {
		for i := range row {
			row[i] = float32(0.8 + 0.4*rng.Float64())
		}
	}
	D, K, F, E := c.EmbSize, c.KeySize, c.FFNSize, c.NumExperts
	qd, kd := c.NumQHeads*K, c.NumKVHeads*K
	mat := func(name string, shape ...int) error {
		return add(name, dt, shape, normal(1/math.Sqrt(float64(shape[len(shape)-1]))))
	}
	if err := add("token_embd.weight", dt, []int{c.VocabSize, D}, normal(1/float64(c.EmbeddingMultiplierScale))); err != nil {
		return err
	}
	if err := add("output_norm.weight", tensor.F32, []int{D}, uniform); err != nil {
		return err
	}
	if c.UntiedOutput {
		if err := add("output.weight", dt, []int{c.VocabSize, D}, normal(1/math.Sqrt(float64(D)))); err != nil {
			return err
		}
	}
	Fd := c.DenseFFNSize // the dense MLP beside the experts, or a dense model's
	if Fd == 0 {
		Fd = F
	}
	for l := 0; l < c.NumLayers; l++ {
		for _, s := range loader.LayerTensors(&c) {
			name := fmt.Sprintf("blk.%d.%s.weight", l, s)
			var err error
			switch s {
			case "attn_norm", "attn_output_norm", "ffn_norm", "layer_output_norm", "post_ffw_norm":
				err = add(name, tensor.F32, []int{D}, uniform)
			case "attn_q":
				err = mat(name, qd, D)
			case "attn_k", "attn_v":
				err = mat(name, kd, D)
			case "attn_output":
				err = mat(name, D, qd)
			case "ffn_gate_inp":
				err = add(name, tensor.F32, []int{E, D}, normal(1/math.Sqrt(float64(D))))
			case "ffn_gate_exps", "ffn_up_exps":
				err = mat(name, E, F, D)
			case "ffn_down_exps":
				err = mat(name, E, D, F)
			case "ffn_gate", "ffn_up":
				err = mat(name, Fd, D)
			case "ffn_down":
				err = mat(name, D, Fd)
			default:
				err = fmt.Errorf("make-model: no generator for %s", name)
			}
			if err != nil {
				return err
			}
		}
	}
	return w.WriteFile(path)
}

// nameHash seeds a tensor's generator from its name.
func nameHash(name string) uint64 {
	h := fnv.New64a()
	io.WriteString(h, name)
	return h.Sum64()
}

// parseBenchType reads --type: f32, f16 or q8_0 (any case).
func parseBenchType(s string) (tensor.DType, error) {
	dt, err := tensor.ParseDType(strings.ReplaceAll(s, "-", "_"))
	if err != nil {
		return 0, usagef("--type %q: want f32, f16 or q8_0", s)
	}
	return dt, nil
}

package model

import (
	"errors"
	"fmt"

	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/parallel"
	"github.com/grok-go/grok/tensor"
)

// LanguageModel is model.py's LanguageModel (1194-1275): embedding lookup ×
// embedding_multiplier_scale, the Transformer, a final RMSNorm, and the tied
// unembedding × output_multiplier_scale. Grok-2 is the same model with an
// untied unembedding and the logits soft-capped at Config.FinalLogitCap
// (semantics §G2).
//
// A LanguageModel's weights are read-only and may be shared; Forward uses a
// workspace owned by the model and must not be called concurrently.
type LanguageModel struct {
	Config      Config
	Embed       Linear // in_out_embed as a V×D matrix: rows are token embeddings
	Unembed     Linear // V×D: the embedding again (tied) unless the file has output.weight
	RMSNorm     RMSNorm
	Transformer Transformer

	// Precision is the arithmetic of the weight products of prefill: of
	// every input of more than one token (kernels.Precision; Exact by
	// default), in every layer but the last's feed-forward, which runs,
	// like the unembedding, only for the rows whose logits are wanted and
	// always exact. Inputs of one token (decode steps) are always exact.
	// Each token is quantised alone under Fast, so its logits do not
	// depend on the other inputs of the call.
	Precision kernels.Precision

	// Pool runs Forward's matrix products and attention on several threads
	// (nil: parallel.Default()). The logits do not depend on its size.
	Pool *parallel.Pool

	// Hook, when set, is told of each Forward call once its inputs are
	// checked and before anything is computed or written (not for
	// NewTP's model, whose shards are in process). Rank 0 of a job whose
	// shards are separate processes uses it to send the call to the other
	// ranks (package cluster), so that the runner above stays the same.
	Hook ForwardHook

	ws    workspace
	shard *shardState // a shard of the model axis (NewShard), else nil
	tp    *tpGroup    // the shards NewTP runs in process, else nil
}

// New builds the model for cfg over the tensors of src, checking every
// shape against the config and the values of the tensors a single NaN or
// infinity would spoil every logit through (see checkedAtLoad); a
// *NonFiniteError names each bad one. The weights are referenced, not copied.
func New(cfg Config, src TensorSource) (*LanguageModel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return build(cfg, src, nil)
}

// build is New, or NewShard's shard when sh is set: cfg is the whole
// model's, every tensor is checked against it, and sh then keeps the
// shard's slices.
func build(cfg Config, src TensorSource, sh *shardState) (*LanguageModel, error) {
	c := &cfg
	D, V := c.EmbSize, c.VocabSize
	lm := &LanguageModel{Config: cfg}
	if sh != nil {
		lm.Config, lm.shard = ShardConfig(cfg, sh.n), sh
		src, V = vocabSource{src: src, sh: sh}, sh.vhi-sh.vlo
	}
	fs := &finiteSource{src: src, seen: map[string]bool{}}
	src = fs
	var err error
	if lm.Embed, err = loadLinear(src, "token_embd.weight", V, D); err != nil {
		return nil, err
	}
	if lm.Embed.W.Transposed || lm.Embed.W.Type == tensor.I8 {
		return nil, fmt.Errorf("model: token_embd.weight must be a plain [vocab, emb] matrix")
	}
	lm.Unembed = lm.Embed
	if _, ok := src.Lookup("output.weight"); ok || c.UntiedOutput {
		if lm.Unembed, err = loadLinear(src, "output.weight", V, D); err != nil {
			return nil, err
		}
	}
	if lm.RMSNorm, err = loadRMSNorm(src, "output_norm.weight", D, c.RMSEps); err != nil {
		return nil, err
	}
	// Layers are appended as they load rather than allocated from
	// num_layers: a count the source cannot back then fails at its first
	// missing layer, having cost only the layers that exist.
	for i := 0; i < c.NumLayers; i++ {
		var d DecoderLayer
		if err := loadLayer(&d, src, c, i, sh); err != nil {
			if _, ok := src.Lookup(fmt.Sprintf("blk.%d.attn_norm.weight", i)); !ok && i > 0 {
				return nil, fmt.Errorf("model: num_layers is %d, but the weights stop after layer %d: %w", c.NumLayers, i-1, err)
			}
			return nil, err
		}
		lm.Transformer.Layers = append(lm.Transformer.Layers, d)
	}
	// A NaN in a norm, the router, the embedding or a scale makes every
	// logit NaN: refuse the weights, naming each bad tensor.
	if err := errors.Join(fs.bad...); err != nil {
		return nil, err
	}
	return lm, nil
}

func loadLayer(d *DecoderLayer, src TensorSource, c *Config, i int, sh *shardState) error {
	D, K, F, E := c.EmbSize, c.KeySize, c.FFNSize, c.NumExperts
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", i, s) }
	var err error
	norms := []struct {
		dst  *RMSNorm
		name string
	}{{&d.RMSNorm, "attn_norm"}, {&d.RMSNorm1, "attn_output_norm"}, {&d.RMSNorm2, "ffn_norm"}, {&d.RMSNorm3, "layer_output_norm"}}
	for _, n := range norms {
		nm := name(n.name)
		if _, ok := src.Lookup(nm); !ok && n.name == "layer_output_norm" {
			nm = name("post_ffw_norm") // llama.cpp's alternative name for rms_norm_3
		}
		if *n.dst, err = loadRMSNorm(src, nm, D, c.RMSEps); err != nil {
			return err
		}
	}
	a := &d.Attention
	heads, kvHeads := c.NumQHeads, c.NumKVHeads
	if sh != nil {
		heads, kvHeads = heads/sh.n, kvHeads/sh.n
	}
	*a = MultiHeadAttention{
		Rotary:    RotaryEmbedding{KeySize: K, Base: c.RopeBase, Yarn: c.Yarn},
		NumQHeads: heads, NumKVHeads: kvHeads, KeySize: K,
		AttnOutputMultiplier: c.AttnOutputMultiplier, AttnLogitCap: c.AttnLogitCap,
		TemperatureLen: c.AttnTemperatureLen,
	}
	for _, p := range []struct {
		dst     *Linear
		name    string
		out, in int
		byIn    bool // row-parallel: a shard keeps its query heads' inputs
	}{
		{&a.Query, "attn_q", c.NumQHeads * K, D, false},
		{&a.Key, "attn_k", c.NumKVHeads * K, D, false},
		{&a.Value, "attn_v", c.NumKVHeads * K, D, false},
		{&a.Linear, "attn_output", D, c.NumQHeads * K, true},
	} {
		if *p.dst, err = loadLinear(src, name(p.name), p.out, p.in); err != nil {
			return err
		}
		if err := sh.splitOne(name(p.name), p.dst, p.byIn); err != nil {
			return err
		}
	}
	if E <= 1 {
		d.Dense, err = loadDense(src, i, F, D, sh)
		return err
	}
	m := &MoELayer{Router: Router{TopK: c.NumSelectedExperts, LogitCap: c.RouterLogitCap}}
	if c.DenseFFNSize > 0 {
		if m.Residual, err = loadDense(src, i, c.DenseFFNSize, D, sh); err != nil {
			return err
		}
	} else {
		// A dense MLP beside the experts is Grok-2's: weights that have one
		// must not run as Grok-1 because the config forgot it.
		for _, dense := range []string{"ffn_gate", "ffn_up", "ffn_down"} {
			if _, ok := src.Lookup(name(dense)); ok {
				return fmt.Errorf("model: tensor %q is a dense MLP beside the experts (Grok-2's residual MoE), but the config has dense_ffn_size 0", name(dense))
			}
		}
	}
	if m.Router.W, err = loadLinear(src, name("ffn_gate_inp"), E, D); err != nil {
		return err
	}
	if m.Linear, err = loadExperts(src, i, "gate", E, F, D); err != nil {
		return err
	}
	if m.LinearV, err = loadExperts(src, i, "up", E, F, D); err != nil {
		return err
	}
	if m.Linear1, err = loadExperts(src, i, "down", E, D, F); err != nil {
		return err
	}
	if err := sh.columns(name("ffn_gate_exps"), m.Linear); err != nil {
		return err
	}
	if err := sh.columns(name("ffn_up_exps"), m.LinearV); err != nil {
		return err
	}
	if err := sh.rows(name("ffn_down_exps"), m.Linear1); err != nil {
		return err
	}
	d.MoE = m
	return nil
}

// loadDense reads the gated MLP blk.N.ffn_{gate,up,down} of hidden width F:
// the whole feed-forward block of a dense model, or Grok-2's MLP beside
// the experts.
func loadDense(src TensorSource, i, F, D int, sh *shardState) (*DenseBlock, error) {
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", i, s) }
	d := &DenseBlock{}
	var err error
	if d.Linear, err = loadLinear(src, name("ffn_gate"), F, D); err != nil {
		return nil, err
	}
	if d.LinearV, err = loadLinear(src, name("ffn_up"), F, D); err != nil {
		return nil, err
	}
	if d.Linear1, err = loadLinear(src, name("ffn_down"), D, F); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		l    *Linear
		name string
		byIn bool
	}{{&d.Linear, "ffn_gate", false}, {&d.LinearV, "ffn_up", false}, {&d.Linear1, "ffn_down", true}} {
		if err := sh.splitOne(name(p.name), p.l, p.byIn); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Input is one sequence's share of a batched forward call: the tokens to
// append to memory slot Slot, and whether logits are wanted for every one of
// them (AllLogits) or only for the last.
type Input struct {
	Slot      int
	Tokens    []int
	AllLogits bool
}

// ForwardHook sees the Forward calls of a model (LanguageModel.Hook).
type ForwardHook interface {
	// BeginForward is called with Forward's arguments before it computes;
	// an error makes Forward return it with nothing written to mem.
	BeginForward(mem *KVMemory, inputs []Input) error
	// EndForward is called when a Forward that BeginForward let run returns.
	EndForward()
}

// Forward appends each input's tokens to its memory slot and returns their
// logits: for each input in order, len(Tokens) rows if AllLogits else one row,
// each of VocabSize floats. The returned slice is owned by the model and
// valid until the next call. Inputs must name distinct slots. On error
// nothing is written to the memory; ErrNoPages means the pool lacks the
// free pages the call needs (KVMemory.PagesNeeded).
func (lm *LanguageModel) Forward(mem *KVMemory, inputs []Input) ([]float32, error) {
	if lm.tp != nil {
		return lm.tp.forward(lm, mem, inputs)
	}
	c := &lm.Config
	if mem.KVHeads != c.NumKVHeads || mem.KeySize != c.KeySize || mem.layers != c.NumLayers {
		lm.abort()
		return nil, fmt.Errorf("model: KV memory was made for another model")
	}
	// Bad inputs are refused alike by every rank of a shard group (the
	// same calls leave every rank's memory at the same steps), before any
	// collective: the group carries on.
	N, rows, err := checkInputs(c, mem, inputs)
	if err != nil || N == 0 {
		return nil, err
	}
	if lm.Hook != nil {
		if err := lm.Hook.BeginForward(mem, inputs); err != nil {
			return nil, err
		}
		defer lm.Hook.EndForward()
	}
	logits, err := lm.forward(mem, inputs, N, rows)
	if err != nil {
		lm.abort()
	}
	return logits, err
}

// abort ends a shard's group after a failure of this rank alone: the
// other ranks may be waiting in a collective it will not make.
func (lm *LanguageModel) abort() {
	if lm.shard != nil {
		lm.shard.comm.Abort(1)
	}
}

// checkInputs checks a call's inputs against the config and the memory
// and counts its rows (N) and logit rows.
func checkInputs(c *Config, mem *KVMemory, inputs []Input) (N, rows int, err error) {
	for i, in := range inputs {
		if in.Slot < 0 || in.Slot >= mem.Slots {
			return 0, 0, fmt.Errorf("model: input %d: slot %d out of range [0, %d)", i, in.Slot, mem.Slots)
		}
		for j := 0; j < i; j++ {
			if inputs[j].Slot == in.Slot {
				return 0, 0, fmt.Errorf("model: inputs %d and %d both use slot %d", j, i, in.Slot)
			}
		}
		if len(in.Tokens) == 0 {
			return 0, 0, fmt.Errorf("model: input %d has no tokens", i)
		}
		end := mem.step[in.Slot] + len(in.Tokens)
		if end > mem.SeqLen {
			return 0, 0, fmt.Errorf("model: input %d: %d tokens after %d would exceed the context of %d", i, len(in.Tokens), mem.step[in.Slot], mem.SeqLen)
		}
		for _, t := range in.Tokens {
			if t < 0 || t >= c.VocabSize {
				return 0, 0, fmt.Errorf("model: input %d: token id %d outside the vocabulary [0, %d)", i, t, c.VocabSize)
			}
		}
		N += len(in.Tokens)
		if in.AllLogits {
			rows += len(in.Tokens)
		} else {
			rows++
		}
	}
	return N, rows, nil
}

func (lm *LanguageModel) forward(mem *KVMemory, inputs []Input, N, rows int) ([]float32, error) {
	c := &lm.Config
	if !mem.grouped {
		// A NewTP group's shards share one page book; the group takes
		// their pages (tp.go).
		if err := mem.preparePages(inputs); err != nil {
			return nil, err
		}
	}
	ws := &lm.ws
	ws.pool = lm.Pool
	if ws.pool == nil {
		ws.pool = parallel.Default()
	}
	defer func() { ws.pool, ws.comm, ws.commErr, ws.fast = nil, nil, nil, nil }()
	vlo, vhi := 0, c.VocabSize
	if lm.shard != nil {
		ws.comm, vlo, vhi = lm.shard.comm, lm.shard.vlo, lm.shard.vhi
	}
	ws.ensure(c, N, mem.SeqLen, ws.pool.Threads())
	D := c.EmbSize
	h := ws.h[:N*D]
	ws.seqs = ws.seqs[:0]
	ws.outRows = ws.outRows[:0]
	anyFast := false
	r := 0
	for i, in := range inputs {
		fast := lm.Precision == kernels.Fast && len(in.Tokens) > 1
		anyFast = anyFast || fast
		start := mem.step[in.Slot]
		ws.seqs = append(ws.seqs, attnSeq{row: r, n: len(in.Tokens), slot: in.Slot, start: start})
		for t, tok := range in.Tokens {
			ws.rowSeq[r+t] = i
			ws.rowFast[r+t] = fast
			// model.py 1225: input_mask = tokens > pad_token, a key mask only.
			if !mem.grouped {
				mem.setKeyOK(in.Slot, start+t, tok > c.PadToken)
			}
			e := h[(r+t)*D : (r+t+1)*D]
			if tok < vlo || tok >= vhi {
				clear(e) // another shard's row: the reduce below adds it
			} else if err := kernels.EmbeddingRow(e, lm.Embed.W.Type, lm.Embed.W.Data, tok-vlo); err != nil {
				return nil, err
			}
			for j := range e {
				e[j] *= c.EmbeddingMultiplierScale
			}
			if in.AllLogits || t == len(in.Tokens)-1 {
				ws.outRows = append(ws.outRows, r+t)
			}
		}
		r += len(in.Tokens)
	}
	ws.reduce(h)
	ws.ropeTabJob = ropeTableTask{ws: ws, rot: &lm.Transformer.Layers[0].Attention.Rotary}
	ws.pool.Run(N, 1, &ws.ropeTabJob)
	ws.ropeTabJob = ropeTableTask{}
	ws.fast = nil
	if anyFast {
		ws.fast = ws.rowFast[:N]
	}
	layers := lm.Transformer.Layers
	last := len(layers) - 1 // Config requires num_layers > 0
	for l := range layers[:last] {
		layers[l].Forward(h, N, l, ws.seqs, mem, ws)
	}
	layers[last].attend(h, N, last, ws.seqs, mem, ws)
	// The last feed-forward only for the rows whose logits are wanted,
	// moved to the front of h in order (llama.cpp's graphs do the same):
	// the others' outputs would feed nothing, their keys and values written
	// by attend. Each row is computed on its own, so the kept rows have the
	// bits of a full pass.
	for i, row := range ws.outRows {
		if row != i { // row > i: rows ascend
			copy(h[i*D:(i+1)*D], h[row*D:(row+1)*D])
		}
	}
	// It runs exact, as the unembedding does, for every row: when
	// generating it has one row a sequence, where the fast products'
	// widening of whole matrices costs more than it saves, and a row's
	// precision must not depend on how many rows there are.
	ws.fast = nil
	layers[last].feedForward(h, rows, ws)
	if ws.commErr != nil {
		return nil, ws.commErr
	}
	// Final norm and unembedding for the same rows, now the first of h.
	xn := ws.xn[:rows*D]
	lm.RMSNorm.Forward(xn, h, rows)
	var logits []float32
	if lm.shard != nil {
		var err error
		if logits, err = lm.gatherLogits(xn, rows); err != nil {
			return nil, err
		}
	} else {
		logits = ws.ensureLogits(rows, c.VocabSize)
		ws.matmulCapped(xn, rows, c.OutputMultiplierScale, c.FinalLogitCap, []*Linear{&lm.Unembed}, logits)
	}
	if !mem.grouped {
		for _, s := range ws.seqs {
			mem.step[s.slot] = s.start + s.n
		}
	}
	return logits, nil
}

// Mats lists the model's weight matrices that Forward multiplies by (the
// attention projections, experts, dense blocks and the unembedding; not
// the router), for tools that describe the products a run makes.
func (lm *LanguageModel) Mats() []*kernels.Mat {
	var ms []*kernels.Mat
	ffn := func(d *DenseBlock) {
		if d != nil {
			ms = append(ms, &d.Linear.W, &d.LinearV.W, &d.Linear1.W)
		}
	}
	for i := range lm.Transformer.Layers {
		d := &lm.Transformer.Layers[i]
		a := &d.Attention
		ms = append(ms, &a.Query.W, &a.Key.W, &a.Value.W, &a.Linear.W)
		if d.MoE != nil {
			for e := range d.MoE.Linear {
				ms = append(ms, &d.MoE.Linear[e].W, &d.MoE.LinearV[e].W, &d.MoE.Linear1[e].W)
			}
			ffn(d.MoE.Residual)
		}
		ffn(d.Dense)
	}
	return append(ms, &lm.Unembed.W)
}

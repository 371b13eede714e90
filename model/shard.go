package model

import (
	"errors"
	"fmt"
	"slices"

	"github.com/grok-go/grok/comm"
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/tensor"
)

// Tensor parallelism: the seed's "model" mesh axis (§4.1, §4.4). A model
// of N shards is N LanguageModels, one per rank of a comm.Comm group, each
// holding a slice of every large matrix as a view into the file:
//
//   - q, k, v: column-parallel by kv head: rank r owns kv heads
//     [r·Hkv/N, (r+1)·Hkv/N), their G query heads each, and those heads'
//     KV memory; the attention output projection is row-parallel over the
//     same query heads, and one AllReduceSum adds the partial outputs.
//   - every expert's linear and linear_v (and Grok-2's dense MLP, or a
//     dense model's block) column-parallel over the hidden units F/N,
//     linear_1 row-parallel; one AllReduceSum per layer after the experts'
//     weighted sum (the dense MLP joins it).
//   - the embedding and unembedding by vocabulary rows: each rank embeds
//     the tokens it owns (zero for the others) and one AllReduceSum gives
//     every rank the embeddings (exact: a sum of one value and zeros); the
//     unembedding's logits are gathered (AllGather), so every rank returns
//     the full vocabulary.
//   - the router and the norms are replicated; every rank computes them on
//     the same bits, so all ranks route alike.
//
// A shard is a LanguageModel whose Config is the shard's (NumQHeads,
// NumKVHeads, FFNSize, DenseFFNSize divided by N; VocabSize whole, since
// Forward returns every logit), so NewKVMemory(&shard.Config, …) holds
// only its own kv heads. Forward must be called on every rank with the
// same inputs, in the same order; the collectives run inside it.

// shardState is a shard's place in its group and its gather buffers.
type shardState struct {
	comm     comm.Comm
	rank, n  int
	full     Config
	vlo, vhi int // the vocabulary rows this rank owns
	vper     int // rows per rank in the gather (the last rank's may be fewer)

	// rel, if set, lets go of mapped pages: strided slices are then
	// copied (packed) and the pages they came from released at once, see
	// PageReleaser.
	rel PageReleaser
	// pack: copy every strided slice into memory of its own.
	pack bool

	local, send, gathered []float32
}

// PageReleaser is implemented by a TensorSource whose tensors may be views
// of a mapped file (the loader's sources). A slice of a matrix along the
// axis its stored rows run (a row-parallel slice of [out, in], a
// column-parallel one of [in, out]) shares every page with the other
// shards' slices when its rows are a page or so long, so reading it puts
// the whole matrix in this process's resident memory. NewShard therefore
// copies such slices into memory of its own and releases the matrix's
// pages: a rank's resident memory is then its share, not most of the file.
type PageReleaser interface {
	// Mapped reports whether b lies in mapped file pages ReleasePages
	// may drop (never for memory of the Go heap).
	Mapped(b []byte) bool
	// ReleasePages drops the whole pages within b from the process's
	// resident memory; they read back unchanged if touched again.
	ReleasePages(b []byte)
}

// Sharding describes a model's place on the model axis.
type Sharding struct {
	Rank, Size int
	// Full is the whole model's config (the shard's own Config has its
	// share of the heads and hidden units).
	Full Config
}

// Sharding returns the model's rank and group size on the model axis and
// the whole model's config: rank 0 of 1 for an unsharded model (and for
// NewTP's model, which presents the whole model).
func (lm *LanguageModel) Sharding() Sharding {
	if lm.shard == nil {
		return Sharding{Rank: 0, Size: 1, Full: lm.Config}
	}
	return Sharding{Rank: lm.shard.rank, Size: lm.shard.n, Full: lm.shard.full}
}

// ShardConfig returns the config of one of n shards of c: its share of the
// query and kv heads and of the hidden units; the vocabulary stays whole.
func ShardConfig(c Config, n int) Config {
	s := c
	s.NumQHeads /= n
	s.NumKVHeads /= n
	s.FFNSize /= n
	s.DenseFFNSize /= n
	return s
}

// vocabSplit returns the rows per rank of a vocabulary of V rows over n
// ranks: every rank but the last owns per rows, the last the rest.
func vocabSplit(V, n int) (per int) { return (V + n - 1) / n }

// CheckShards reports why the model of c cannot be split into n shards on
// the model axis, or nil. It needs only the config: run it before opening
// the weights. CheckShardTensors adds the checks that need each tensor's
// type (quantisation blocks and int8 scale shards).
func CheckShards(c *Config, n int) error {
	if n < 1 {
		return fmt.Errorf("model: the model axis needs at least 1 shard, got %d", n)
	}
	if n == 1 {
		return nil
	}
	var errs []error
	if n > c.NumKVHeads {
		errs = append(errs, fmt.Errorf("%d shards are more than the model's %d kv heads (num_kv_heads): a shard owns whole kv heads", n, c.NumKVHeads))
	} else if c.NumKVHeads%n != 0 {
		errs = append(errs, fmt.Errorf("%d shards do not divide the model's %d kv heads (num_kv_heads)", n, c.NumKVHeads))
	}
	if c.FFNSize%n != 0 {
		errs = append(errs, fmt.Errorf("%d shards do not divide the experts' hidden size ffn_size %d", n, c.FFNSize))
	}
	if c.DenseFFNSize%n != 0 {
		errs = append(errs, fmt.Errorf("%d shards do not divide the dense MLP's hidden size %d", n, c.DenseFFNSize))
	}
	if per := vocabSplit(c.VocabSize, n); (n-1)*per >= c.VocabSize {
		errs = append(errs, fmt.Errorf("a vocabulary of %d rows does not split into %d shards", c.VocabSize, n))
	}
	if err := errors.Join(errs...); err != nil {
		return &ShardError{N: n, Err: err}
	}
	return nil
}

// ShardError is the refusal of a number of shards on the model axis.
type ShardError struct {
	N   int   // the shards asked for
	Err error // why: each reason, joined
}

func (e *ShardError) Error() string {
	return fmt.Sprintf("model: cannot split the model into %d shards: %v", e.N, e.Err)
}

func (e *ShardError) Unwrap() error { return e.Err }

// rowParallel lists the row-parallel matrices of layer i (their input axis
// is split, so their quant blocks and int8 scale shards must not be), with
// the input width each is split over.
func rowParallel(c *Config, i int) []struct {
	names []string
	in    int
} {
	name := func(s string) string { return fmt.Sprintf("blk.%d.%s.weight", i, s) }
	F := c.FFNSize
	down := []string{name("ffn_down_exps")}
	for e := 0; e < c.NumExperts; e++ {
		down = append(down, fmt.Sprintf("blk.%d.ffn_down.%d.weight", i, e))
	}
	out := []struct {
		names []string
		in    int
	}{{[]string{name("attn_output")}, c.NumQHeads * c.KeySize}, {down, F}}
	if c.NumExperts <= 1 {
		out = append(out, struct {
			names []string
			in    int
		}{[]string{name("ffn_down")}, F})
	} else if c.DenseFFNSize > 0 {
		out = append(out, struct {
			names []string
			in    int
		}{[]string{name("ffn_down")}, c.DenseFFNSize})
	}
	return out
}

// CheckShardTensors reports, for every row-parallel matrix of src whose
// quantisation blocks or int8 scale shards a split into n shards would
// cut, the tensor, n and the block size; nil if none. It reads only the
// tensors' types and shapes, not their data.
func CheckShardTensors(c *Config, src TensorSource, n int) error {
	if n <= 1 {
		return nil
	}
	var errs []error
	for i := 0; i < c.NumLayers; i++ {
		for _, rp := range rowParallel(c, i) {
			for _, nm := range rp.names {
				var t *tensor.Tensor
				ok := false
				if parts, _, split, err := splitOf(src, nm); split && err == nil {
					// Its pieces' type says it: looking it up whole would
					// join them.
					t, ok = &tensor.Tensor{Name: nm, Type: parts[0].Type, Scales: parts[0].Scales}, true
				} else {
					t, ok = src.Lookup(nm)
				}
				if !ok {
					continue
				}
				if err := checkSplit(t, rp.in, n); err != nil {
					errs = append(errs, err)
				}
			}
		}
		if len(errs) >= 4 {
			break // the same refusal for every layer: a few say it
		}
	}
	if err := errors.Join(errs...); err != nil {
		return &ShardError{N: n, Err: err}
	}
	return nil
}

// checkSplit checks that n equal parts of a row-parallel tensor's input
// axis of width in fall on its block or scale-shard boundaries.
func checkSplit(t *tensor.Tensor, in, n int) error {
	unit, what := 1, ""
	switch {
	case t.Type == tensor.I8 && t.Scales != nil:
		ss := t.Scales.Shape
		if len(ss) >= 2 && ss[len(ss)-2] > 0 {
			unit, what = in/ss[len(ss)-2], fmt.Sprintf("int8 scale shards (%d of them)", ss[len(ss)-2])
		}
	case t.Type.Quantized():
		unit, what = t.Type.BlockSize(), t.Type.String()+" blocks"
	}
	if unit <= 1 || (in/n)%unit == 0 && in%n == 0 {
		return nil
	}
	hint := fmt.Sprintf("the number of shards must divide %d", in/unit)
	if in/unit == 1 {
		hint = "its inputs are one block, which no split keeps whole"
	}
	return fmt.Errorf("tensor %q: %d shards of its %d inputs (%d each) would split its %s of %d elements along the input axis (%s)", t.Name, n, in, in/n, what, unit, hint)
}

// NewShard builds rank c.Rank()'s shard of the model of cfg over src, for
// a group of c.Size() shards (see the top of shard.go). Bad shard counts
// and splits that would cut a quantisation block are refused before any
// weight is read. The shard's matrices are views of its own slices of
// src's tensors only.
func NewShard(cfg Config, src TensorSource, c comm.Comm) (*LanguageModel, error) {
	return newShard(cfg, src, c, true, false)
}

// newShard is NewShard; release says whether strided slices of a
// PageReleaser's mapped tensors are copied and their pages released (not
// in process, where the shards share the mapping), pack whether every
// strided slice is copied (a placed shard's, into memory its thread
// first touches).
func newShard(cfg Config, src TensorSource, c comm.Comm, release, pack bool) (*LanguageModel, error) {
	n, r := c.Size(), c.Rank()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := CheckShards(&cfg, n); err != nil {
		return nil, err
	}
	if err := CheckShardTensors(&cfg, src, n); err != nil {
		return nil, err
	}
	per := vocabSplit(cfg.VocabSize, n)
	sh := &shardState{comm: c, rank: r, n: n, full: cfg, vlo: r * per, vhi: min(cfg.VocabSize, (r+1)*per), vper: per}
	if release {
		sh.rel, _ = src.(PageReleaser)
	}
	sh.pack = pack
	return build(cfg, src, sh)
}

// packed copies a strided matrix's rows into memory of its own.
func packed(m kernels.Mat) kernels.Mat {
	rows, cols := m.Out, m.In
	if m.Transposed {
		rows, cols = m.In, m.Out
	}
	rb, _ := m.Type.RowBytes(cols)
	data := make([]byte, rows*rb)
	for r := 0; r < rows; r++ {
		copy(data[r*rb:(r+1)*rb], m.Data[r*m.Stride:r*m.Stride+rb])
	}
	m.Data, m.Stride = data, 0
	return m
}

// vocabSource hands out the rank's rows of the embedding and unembedding
// as tensors of their own, so that the finite scan at load (finiteSource)
// reads only those rows.
type vocabSource struct {
	src TensorSource
	sh  *shardState
}

func (s vocabSource) Lookup(name string) (*tensor.Tensor, bool) {
	t, ok := s.src.Lookup(name)
	if !ok || name != "token_embd.weight" && name != "output.weight" {
		return t, ok
	}
	V, D := s.sh.full.VocabSize, s.sh.full.EmbSize
	rb, err := t.Type.RowBytes(D)
	if err != nil || t.Transposed || t.Scales != nil || !slices.Equal(t.Shape, []int{V, D}) || len(t.Data) != V*rb {
		return t, ok // New refuses it with the reason
	}
	part := *t
	part.Shape = []int{s.sh.vhi - s.sh.vlo, D}
	part.Data = t.Data[s.sh.vlo*rb : s.sh.vhi*rb : s.sh.vhi*rb]
	return &part, true
}

// Split serves the wrapped source's pieces: the embedding and unembedding
// it cuts are never stored in pieces.
func (s vocabSource) Split(name string) ([]*tensor.Tensor, int, bool, error) {
	return splitOf(s.src, name)
}

// columns keeps outputs [r·out/n, (r+1)·out/n) of each matrix
// (column-parallel); rows keeps inputs likewise (row-parallel). Both
// leave the matrices of an unsharded model (sh nil) as they are.
func (sh *shardState) columns(name string, ls []Linear) error {
	return sh.split(name, ls, false)
}

func (sh *shardState) rows(name string, ls []Linear) error {
	return sh.split(name, ls, true)
}

func (sh *shardState) splitOne(name string, l *Linear, byIn bool) error {
	ls := []Linear{*l}
	err := sh.split(name, ls, byIn)
	*l = ls[0]
	return err
}

func (sh *shardState) split(name string, ls []Linear, byIn bool) error {
	if sh == nil || sh.n == 1 {
		return nil
	}
	for e := range ls {
		m := &ls[e].W
		total := m.Out
		if byIn {
			total = m.In
		}
		lo, hi := sh.rank*total/sh.n, (sh.rank+1)*total/sh.n
		var s kernels.Mat
		var err error
		if byIn {
			s, err = m.SliceIn(lo, hi)
		} else {
			s, err = m.SliceOut(lo, hi)
		}
		var se *kernels.SplitError
		if errors.As(err, &se) {
			return &ShardError{N: sh.n, Err: fmt.Errorf("tensor %q: shard %d's inputs [%d, %d) would split its %s of %d elements", name, sh.rank, lo, hi, se.What, se.Unit)}
		}
		if err != nil {
			return fmt.Errorf("model: tensor %q, shard %d of %d: %w", name, sh.rank, sh.n, err)
		}
		if sh.rel != nil && s.Stride != 0 && sh.rel.Mapped(m.Data) {
			// Nothing else refers to the whole matrix: its pages can go
			// as soon as the slice is copied, which keeps the peak at load
			// near the share too.
			s = packed(s)
			sh.rel.ReleasePages(m.Data)
		} else if sh.pack && s.Stride != 0 {
			s = packed(s)
		}
		*m = s
	}
	return nil
}

// reduce sums buf over the shards (no-op unsharded). The first failure is
// kept, and the collectives after it are skipped; Forward returns it.
func (ws *workspace) reduce(buf []float32) {
	if ws.comm == nil || ws.commErr != nil {
		return
	}
	ws.commErr = ws.comm.AllReduceSum(buf)
}

// gatherLogits unembeds the rank's vocabulary rows of xn (rows×D) and
// gathers every rank's, returning rows×V logits on every rank.
func (lm *LanguageModel) gatherLogits(xn []float32, rows int) ([]float32, error) {
	sh, ws, c := lm.shard, &lm.ws, &lm.Config
	V, Vs, per := c.VocabSize, sh.vhi-sh.vlo, sh.vper
	grow := func(b []float32, n int) []float32 {
		if cap(b) < n {
			return make([]float32, n)
		}
		return b[:n]
	}
	sh.local = grow(sh.local, rows*Vs)
	ws.matmulCapped(xn, rows, c.OutputMultiplierScale, c.FinalLogitCap, []*Linear{&lm.Unembed}, sh.local)
	sh.send = grow(sh.send, rows*per)
	for i := 0; i < rows; i++ {
		copy(sh.send[i*per:i*per+Vs], sh.local[i*Vs:(i+1)*Vs])
	}
	sh.gathered = grow(sh.gathered, sh.n*rows*per)
	if err := sh.comm.AllGather(sh.gathered, sh.send); err != nil {
		return nil, err
	}
	logits := ws.ensureLogits(rows, V)
	for q := 0; q < sh.n; q++ {
		lo := q * per
		w := min(V, lo+per) - lo
		for i := 0; i < rows; i++ {
			copy(logits[i*V+lo:i*V+lo+w], sh.gathered[(q*rows+i)*per:])
		}
	}
	return logits, nil
}

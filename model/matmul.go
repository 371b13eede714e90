package model

import (
	"github.com/grok-go/grok/kernels"
	"github.com/grok-go/grok/parallel"
)

// How a forward call is split across threads.
//
// The seed shards every matrix along its "model" mesh axis (semantics §2.3):
// q, k, v and the experts' linear and linear_v are column-parallel (each
// device owns a block of output columns), while the attention output
// projection, linear_1 and the unembedding (the embedding is split along
// D, the axis the logits sum over) are row-parallel (each device owns a
// block of input rows and the partial outputs are summed with a psum). On one shared-memory machine every thread can read the whole
// activation vector, so here every matrix is split by output: each thread
// computes a disjoint, contiguous range of outputs and reads exactly the
// weight rows of that range. Both splits read each weight byte once per
// step, which is what bounds decoding (it streams the weights from memory);
// the output split also needs no partial sums and no reduction, and so each
// output is one dot product computed by one thread in a fixed order —
// the logits are the same bits for any number of threads.
//
// Ranges are aligned to parallel.DefaultAlign (16) outputs: one cache line
// of each output row, a whole number of SIMD vectors.
//
// One exception: xAI's int8 matrices are stored [in, out], so a range of
// outputs is a short run out of every weight row. Decode steps split them
// by row blocks instead (kernels.Mat.Blocks: 256 input rows, contiguous in
// memory): one loop computes every block's partial product, a second sums
// the blocks of each output in block order. The order of the sums is fixed
// by the blocks, not by the threads, so these logits too are the same bits
// for any number of threads.
//
// Attention is split by (sequence, kv head, block of query tokens): a kv
// head's keys and values are read by the thread that owns it, for its G
// query heads. RoPE and the KV-memory write are split by token before it.
//
// In the MoE only the selected experts run, each once per call over all the
// tokens routed to it (its weights are read once per call); within an
// expert, linear and linear_v (with the gelu product) form one loop over F
// and linear_1 a second over D.

// matScratch is the threaded products' part of the workspace.
type matScratch struct {
	matJob matTask
	// The fast precision's quantised inputs: of matmul's products, and
	// the quantisation loop.
	qMat     kernels.FastActs
	quantJob quantTask
	// Products by row blocks (decoding int8 [in, out] layers): the
	// partials' buffers, by slot, and the loop computing them.
	bparts   [][][]float32
	blockJob blockTask
}

// matTask computes y = x·Wᵀ for up to three matrices that share the input x,
// as one loop over their outputs laid end to end. Each matrix starts at a
// multiple of the alignment in that index space, so that its ranges are
// aligned to its own first output.
type matTask struct {
	m     int // matrices in use
	mats  [3]*kernels.Mat
	dsts  [3][]float32
	parts [3][][]float32 // if set, each matrix's row-block partials to combine
	offs  [4]int         // start of matrix j in the loop's index space; offs[m] = end
	x     []float32
	n     int
	fast  []bool            // per row of x: fast precision (nil: all exact)
	q     *kernels.FastActs // x quantised for the fast rows, or nil
	scale float32           // if not 0, outputs are multiplied by it (the unembedding)
	// softcap, if not 0, caps the scaled outputs at cap·tanh(y/cap) in the
	// same pass (Grok-2's final logit soft-cap).
	softcap float32
}

func (t *matTask) Run(_, lo, hi int) {
	for j := 0; j < t.m; j++ {
		a, b := max(lo, t.offs[j]), min(hi, t.offs[j]+t.mats[j].Out)
		if a >= b {
			continue
		}
		a, b = a-t.offs[j], b-t.offs[j]
		if t.parts[j] != nil {
			kernels.CombineBlocks(t.dsts[j], t.parts[j], t.n, t.mats[j], a, b)
		} else {
			mulRows(t.dsts[j], t.x, t.n, t.mats[j], a, b, t.fast, t.q)
		}
		if t.softcap != 0 {
			capRange(t.dsts[j], t.mats[j].Out, t.n, a, b, t.scale, t.softcap)
		} else {
			scaleRange(t.dsts[j], t.mats[j].Out, t.n, a, b, t.scale)
		}
	}
}

// mulRows is kernels.MatMulRows with a precision per row of x (fast[i]:
// row i at kernels.Fast; nil: every row exact), each run of rows of one
// precision a product of its own; the fast runs read x as q quantised it
// (quantizeFast), or, with q nil, quantise their rows themselves. A row's
// bits depend only on its own precision, never on its neighbours' (both
// precisions are batch-invariant).
func mulRows(dst, x []float32, n int, m *kernels.Mat, lo, hi int, fast []bool, q *kernels.FastActs) {
	if fast == nil {
		kernels.MatMulRows(dst, x, n, m, lo, hi)
		return
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && fast[j] == fast[i] {
			j++
		}
		switch {
		case !fast[i] || !kernels.UsesFast(m):
			kernels.MatMulRows(dst[i*m.Out:], x[i*m.In:j*m.In], j-i, m, lo, hi)
		case q != nil:
			kernels.MatMulRowsFast(dst, q, i, j, m, lo, hi)
		default:
			kernels.MatMulRowsP(dst[i*m.Out:], x[i*m.In:j*m.In], j-i, m, lo, hi, kernels.Fast)
		}
		i = j
	}
}

// quantizeFast quantises the fast rows of x (n×In) into q on the pool, for
// the products with any of mats that will read it, and returns q; nil if
// no row is fast or no matrix multiplies in integers (then mulRows needs
// no q).
func (ws *workspace) quantizeFast(q *kernels.FastActs, x []float32, n, In int, fast []bool, mats ...*kernels.Mat) *kernels.FastActs {
	if fast == nil {
		return nil
	}
	uses := false
	for _, m := range mats {
		uses = uses || kernels.UsesFast(m)
	}
	if !uses {
		return nil
	}
	q.Prepare(n, In)
	t := &ws.quantJob
	*t = quantTask{q: q, x: x, fast: fast}
	ws.pool.Run(n, kernels.FastGroup, t)
	*t = quantTask{}
	return q
}

// quantTask quantises the fast rows of a range for quantizeFast.
type quantTask struct {
	q    *kernels.FastActs
	x    []float32
	fast []bool
}

func (t *quantTask) Run(_, lo, hi int) {
	for i := lo; i < hi; {
		if !t.fast[i] {
			i++
			continue
		}
		j := i + 1
		for j < hi && t.fast[j] {
			j++
		}
		t.q.QuantizeRows(t.x, i, j)
		i = j
	}
}

// alignUp rounds n up to a multiple of parallel.DefaultAlign.
func alignUp(n int) int {
	const a = parallel.DefaultAlign
	return (n + a - 1) / a * a
}

// matmul computes dst_j = x·W_jᵀ for each matrix on the pool, scaling the
// outputs by scale unless it is 0. Each dst_j is n×Out_j.
func (ws *workspace) matmul(x []float32, n int, scale float32, mats []*Linear, dsts ...[]float32) {
	ws.matmulCapped(x, n, scale, 0, mats, dsts...)
}

// matmulCapped is matmul with the outputs then soft-capped at softcap
// (0: not capped).
func (ws *workspace) matmulCapped(x []float32, n int, scale, softcap float32, mats []*Linear, dsts ...[]float32) {
	t := &ws.matJob
	t.m, t.x, t.n, t.scale, t.softcap = len(mats), x, n, scale, softcap
	t.fast = ws.fast
	off := 0
	blocked := true
	for j, l := range mats {
		t.mats[j], t.dsts[j], t.offs[j] = &l.W, dsts[j], off
		off = alignUp(off + l.W.Out)
		blocked = blocked && ws.blocked(&l.W, n)
	}
	t.offs[t.m] = off
	t.q = ws.quantizeFast(&ws.qMat, x, n, t.mats[0].In, ws.fast, t.mats[:t.m]...)
	align := ws.align(mats[0].W.Transposed, n, off)
	if blocked {
		// Block partials first, then the loop over outputs combines them.
		bt := &ws.blockJob
		for j := range mats {
			t.parts[j] = ws.blockParts(j, t.mats[j].Blocks(), n*t.mats[j].Out, 0)
			bt.add(t.mats[j], x, n, t.parts[j])
		}
		ws.runBlocks()
		align = parallel.DefaultAlign
	}
	ws.pool.Run(off, align, t)
	*t = matTask{} // keep no references to the call's data
}

// maxBlockRows is the most rows a product runs block by block rather than
// split by output: decode steps (of up to 16 sequences). Prefill, with many
// rows, is bound by arithmetic, not by how the weights stream.
const maxBlockRows = 16

// align returns the range alignment of a loop over out outputs of n rows.
// It is parallel.DefaultAlign, except for [in, out] matrices in decoding:
// there a range of outputs is a run out of every weight row, so each
// thread gets one range, as wide as possible — the whole of a matrix when
// the loop spans several (two experts, two threads: one expert each,
// streamed front to back).
func (ws *workspace) align(inOut bool, n, out int) int {
	if !inOut || n > maxBlockRows {
		return parallel.DefaultAlign
	}
	th := ws.pool.Threads()
	return alignUp((out + th - 1) / th)
}

// blocked reports whether the product of n rows with m runs row block by
// row block (kernels.MatMulBlock): int8 [in, out] matrices (xAI's layout)
// in decoding, on a pool of 2 to B threads, B the matrix's blocks. Each
// thread then streams whole blocks, contiguous runs of weights, where a
// range of outputs would be a short run out of every row; with more
// threads than blocks some would be idle, so the product keeps the split
// by outputs.
func (ws *workspace) blocked(m *kernels.Mat, n int) bool {
	th := ws.pool.Threads()
	return m.Blocks() > 1 && n <= maxBlockRows && th > 1 && th <= m.Blocks()
}

// blockParts returns slot i's buffers for B block partials of size each,
// growing them to room for bound if needed (an expert's share of its
// group's rows, at most maxBlockRows, is sized for all of them, so that a
// decode batch grows them once, not whenever one expert draws more of its
// tokens). A product's partials live until its combining loop has run;
// the MoE's slots 2i and 2i+1 (the up products of the group's i-th
// expert) are reused for its linear_1 (slot i) only after.
func (ws *workspace) blockParts(i, B, size, bound int) [][]float32 {
	for len(ws.bparts) <= i {
		ws.bparts = append(ws.bparts, nil)
	}
	for len(ws.bparts[i]) < B {
		ws.bparts[i] = append(ws.bparts[i], nil)
	}
	b := ws.bparts[i][:B]
	for s := range b {
		if cap(b[s]) < size {
			b[s] = make([]float32, max(size, bound))
		}
		b[s] = b[s][:size]
	}
	return b
}

// runBlocks computes the partials of every product added to ws.blockJob,
// one loop over all their blocks, and empties it.
func (ws *workspace) runBlocks() {
	t := &ws.blockJob
	ws.pool.Run(t.units, 1, t)
	clear(t.prods)
	t.prods, t.units = t.prods[:0], 0
}

// blockTask computes row-block partial products (kernels.MatMulBlock) of
// several products as one loop over their blocks laid end to end.
type blockTask struct {
	prods []blockProd
	units int // blocks of all prods
}

// blockProd is one product of a blockTask: the partials of x (n rows)
// times m.
type blockProd struct {
	m     *kernels.Mat
	x     []float32
	n     int
	parts [][]float32
}

func (t *blockTask) add(m *kernels.Mat, x []float32, n int, parts [][]float32) {
	t.prods = append(t.prods, blockProd{m: m, x: x, n: n, parts: parts})
	t.units += m.Blocks()
}

func (t *blockTask) Run(_, lo, hi int) {
	j, base := 0, 0
	for u := lo; u < hi; u++ {
		for u-base >= t.prods[j].m.Blocks() {
			base += t.prods[j].m.Blocks()
			j++
		}
		p := &t.prods[j]
		kernels.MatMulBlock(p.parts[u-base], p.x, p.n, p.m, u-base)
	}
}

// capRange replaces outputs [lo, hi) of n rows of out by c·tanh(s·y/c)
// (s = 1 if 0).
func capRange(dst []float32, out, n, lo, hi int, s, c float32) {
	if s == 0 {
		s = 1
	}
	for i := 0; i < n; i++ {
		kernels.Softcap(dst[i*out+lo:i*out+hi], s, c)
	}
}

// scaleRange multiplies outputs [lo, hi) of n rows of out by s, unless s
// is 0 (no scale).
func scaleRange(dst []float32, out, n, lo, hi int, s float32) {
	if s == 0 {
		return
	}
	for i := 0; i < n; i++ {
		row := dst[i*out+lo : i*out+hi]
		for c := range row {
			row[c] *= s
		}
	}
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/grok-go/grok/loader"
	"github.com/grok-go/grok/model"
	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/server"
)

func init() {
	register(command{
		name:    "inspect",
		usage:   "[-m MODEL] [-c N] [--parallel N] [--check]",
		summary: "print a model's config, parameter count, GGUF metadata, tensor table, type mix, files and the memory a run needs; --check scans every weight for NaN/Inf",
		run:     runInspect,
	})
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect", "[-m MODEL] [-c N] [--parallel N] [--check]", stderr)
	mf := addModelFlags(fs)
	check := fs.Bool("check", false, "scan every tensor for NaN and infinities (reads the whole model); exit 1 if any has one")
	ctxLen := fs.Int("c", 0, "context per slot for the memory estimate (0 = the model's, capped to what fits in memory as run and serve do)")
	slots := fs.Int("parallel", 1, "slots (sequences decoded together) for the memory estimate")
	kvf := addKVFlags(fs)
	if err := parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if *slots < 1 {
		return usagef("--parallel must be at least 1")
	}
	if *ctxLen < 0 {
		return usagef("-c must not be negative")
	}
	m, err := openModelOrDefault(mf, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	c := m.Config
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "model\t%s (%s)\n", m.Path, m.Format)
	for _, kv := range []struct {
		k string
		v any
	}{
		{"vocab_size", c.VocabSize}, {"emb_size", c.EmbSize}, {"key_size", c.KeySize},
		{"num_q_heads", c.NumQHeads}, {"num_kv_heads", c.NumKVHeads}, {"num_layers", c.NumLayers},
		{"ffn_size", c.FFNSize}, {"num_experts", c.NumExperts}, {"num_selected_experts", c.NumSelectedExperts},
		{"attn_output_multiplier", c.AttnOutputMultiplier}, {"embedding_multiplier_scale", c.EmbeddingMultiplierScale},
		{"output_multiplier_scale", c.OutputMultiplierScale}, {"attn_logit_cap", c.AttnLogitCap},
		{"pad_token", c.PadToken}, {"eos_token", c.EOSToken}, {"sequence_len", c.SequenceLen},
		{"rope_base", c.RopeBase}, {"rms_eps", c.RMSEps},
	} {
		fmt.Fprintf(w, "%s\t%v\n", kv.k, kv.v)
	}
	if y := c.Yarn; y.On() {
		fmt.Fprintf(w, "rope_scaling\tyarn (factor %g, original context %d, ext_factor %g, attn_factor %g, beta_fast %g, beta_slow %g)\n",
			y.Factor, y.OrigContext, y.ExtFactor, y.AttnFactor, y.BetaFast, y.BetaSlow)
	}
	var params int64
	for _, t := range m.Tensors() {
		params += elements(t.Shape)
	}
	fmt.Fprintf(w, "parameters\t%d (%s)\n", params, server.ParameterSize(params))
	writeMetadata(w, m)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "tensor\ttype\tshape")
	var total int64
	for _, t := range m.Tensors() {
		fmt.Fprintf(w, "%s\t%s\t%v\n", t.Name, t.Type, t.Shape)
		total += t.Bytes
	}
	fmt.Fprintf(w, "\n%d tensors, %.1f MB\n", len(m.Tensors()), float64(total)/1e6)
	writeTypeMix(w, m.Tensors(), total)
	writeFiles(w, m)
	eo := runner.Options{Slots: *slots, Context: *ctxLen}
	kvf.apply(&eo)
	if err := writeMemory(w, m, total, eo); err != nil {
		return err
	}
	if err := w.Flush(); err != nil || !*check {
		return err
	}
	// Loading already refused a bad norm, router, embedding or scale; this
	// reads the matrices it leaves alone.
	n, bad := m.CheckFinite()
	for _, err := range bad {
		fmt.Fprintf(stdout, "NaN/Inf: %v\n", strings.TrimPrefix(err.Error(), "model: "))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d tensors hold NaN or infinite values", len(bad), n)
	}
	fmt.Fprintf(stdout, "check: every value of the %d tensors is finite\n", n)
	return nil
}

// writeTypeMix prints, per tensor type, how many tensors and bytes the
// model holds, largest share first: what a quantisation actually kept.
func writeTypeMix(w io.Writer, ts []loader.TensorDesc, total int64) {
	type mix struct {
		typ   string
		n     int
		bytes int64
	}
	var ms []mix
	for _, t := range ts {
		i := slices.IndexFunc(ms, func(m mix) bool { return m.typ == t.Type })
		if i < 0 {
			ms = append(ms, mix{typ: t.Type})
			i = len(ms) - 1
		}
		ms[i].n++
		ms[i].bytes += t.Bytes
	}
	slices.SortStableFunc(ms, func(a, b mix) int {
		if a.bytes != b.bytes {
			return compareInt64(b.bytes, a.bytes)
		}
		return strings.Compare(a.typ, b.typ)
	})
	fmt.Fprintln(w, "\ntype mix\ttensors\tbytes\tshare")
	for _, m := range ms {
		share := 0.0
		if total > 0 {
			share = 100 * float64(m.bytes) / float64(total)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%.1f %%\n", m.typ, m.n, m.bytes, share)
	}
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// writeFiles lists the gguf-split shards or byte parts a GGUF model was
// opened from, and the heap bytes of tensors that straddle two parts (the
// only weights not served straight from the mapping).
func writeFiles(w io.Writer, m *loader.Model) {
	if m.GGUF == nil {
		return
	}
	kind, paths := "gguf-split shards", m.GGUF.Shards()
	if len(paths) == 0 {
		kind, paths = "byte parts", m.GGUF.Parts()
	}
	if len(paths) == 0 {
		return
	}
	fmt.Fprintf(w, "\nfiles\t%d %s\n", len(paths), kind)
	for _, p := range paths {
		size := "?"
		if st, err := os.Stat(p); err == nil {
			size = fmt.Sprint(st.Size())
		}
		fmt.Fprintf(w, "  %s\t%s bytes\n", filepath.Base(p), size)
	}
	if len(m.GGUF.Parts()) > 0 {
		fmt.Fprintf(w, "straddling tensors\t%d bytes copied to the heap (tensors cut between two parts)\n", m.GGUF.AssembledBytes())
	}
}

// writeMemory prints what a run of the model needs: the weights (mapped
// from the file, plus any straddling tensors on the heap) and the KV memory
// that runner.New allocates for the same options (o: slots, context, the
// KV memory's types and size), its context chosen as run and serve choose
// it when none is given.
func writeMemory(w io.Writer, m *loader.Model, weights int64, o runner.Options) error {
	c := &m.Config
	note := ""
	plan, err := runner.PlanKV(c, o)
	var me *runner.MemoryError
	if errors.As(err, &me) && o.Context == 0 && o.KVMemory == 0 && o.KVTokens == 0 {
		return fmt.Errorf("not even one page of KV memory for %d slots fits in half of the available memory", o.Slots)
	}
	if err != nil {
		return err
	}
	if o.Context == 0 && plan.Context < c.SequenceLen {
		if o.KVMemory > 0 || o.KVTokens > 0 {
			note = fmt.Sprintf(" (capped from sequence_len %d to the KV memory)", c.SequenceLen)
		} else {
			note = fmt.Sprintf(" (capped from sequence_len %d to fit half of the available memory)", c.SequenceLen)
		}
	}
	kv := plan.Bytes
	heap := int64(0)
	if m.GGUF != nil {
		heap = m.GGUF.AssembledBytes()
	}
	fmt.Fprintf(w, "\nmemory\tcontext %d%s, parallel %d\n", plan.Context, note, o.Slots)
	fmt.Fprintf(w, "  weights (mapped)\t%d bytes\t%.1f MB\n", weights-heap, float64(weights-heap)/1e6)
	if heap > 0 {
		fmt.Fprintf(w, "  weights (heap)\t%d bytes\t%.1f MB\n", heap, float64(heap)/1e6)
	}
	fmt.Fprintf(w, "  KV memory\t%.0f bytes\t%.1f MB: %d tokens in pages of %d, keys %s, values %s\n", kv, kv/1e6,
		plan.Pages*model.PageRows, model.PageRows, strings.ToLower(plan.KType.String()), strings.ToLower(plan.VType.String()))
	fmt.Fprintf(w, "  total\t%.0f bytes\t%.1f MB (plus the forward pass's workspace)\n", float64(weights)+kv, (float64(weights)+kv)/1e6)
	return nil
}

// writeMetadata lists a GGUF's key/value metadata in file order, long
// arrays (the vocabulary) abbreviated to their length and type.
func writeMetadata(w io.Writer, m *loader.Model) {
	if m.GGUF == nil {
		return
	}
	fmt.Fprintf(w, "\nmetadata\t%d keys\n", len(m.GGUF.Metadata))
	for _, kv := range m.GGUF.Metadata {
		v := kv.Value.String()
		if len(v) > 120 {
			v = v[:117] + "..."
		}
		fmt.Fprintf(w, "  %s\t%s\n", kv.Key, strings.ReplaceAll(v, "\n", `\n`))
	}
}

package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func init() {
	register(command{
		name:    "inspect",
		usage:   "-m MODEL [--check]",
		summary: "print a model's config and tensor table; --check scans every weight for NaN/Inf",
		run:     runInspect,
	})
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect", "-m MODEL [--check]", stderr)
	mf := addModelFlags(fs)
	check := fs.Bool("check", false, "scan every tensor for NaN and infinities (reads the whole model); exit 1 if any has one")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	m, err := mf.open(stderr)
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
	fmt.Fprintln(w)
	fmt.Fprintln(w, "tensor\ttype\tshape")
	var total int64
	for _, t := range m.Tensors() {
		fmt.Fprintf(w, "%s\t%s\t%v\n", t.Name, t.Type, t.Shape)
		total += t.Bytes
	}
	fmt.Fprintf(w, "\n%d tensors, %.1f MB\n", len(m.Tensors()), float64(total)/1e6)
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

package main

import (
	"fmt"
	"io"
	"text/tabwriter"
)

func init() {
	register(command{
		name:    "inspect",
		usage:   "-m MODEL",
		summary: "print a model's config and tensor table",
		run:     runInspect,
	})
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("inspect", "-m MODEL", stderr)
	mf := addModelFlags(fs)
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
	return w.Flush()
}

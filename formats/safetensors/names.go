package safetensors

import (
	"fmt"
	"strings"
)

// nameTable is the name mapping, and the only place it is written down:
// Lookup serves the canonical GGUF names of model/weights.go (llama.cpp's
// `grok` architecture) and finds each under the names of the three Hugging
// Face spellings of Grok-1 (docs/xai-checkpoint.md, "Hugging
// Face safetensors naming"). Columns: canonical name; hpcai-tech/grok-1
// (Grok1ModelForCausalLM); keyfan/grok-1-hf (GrokForCausalLM); Mixtral-style
// (SGLang's grok.py, Grok-2); and the [out, in] shape config.json implies.
// {N} is the layer, {E} the expert, both plain decimal.
//
// All three store PyTorch Linear weights as [out, in], which is the
// canonical layout, so no tensor is Transposed. The experts are separate
// 2-D tensors and are offered one by one (blk.N.ffn_gate.E.weight), which
// model/weights.go accepts in place of the merged ffn_*_exps; xAI's
// linear/linear_v/linear_1 are the gelu (gate), linear (up) and output
// (down) branches, Mixtral's w1/w3/w2. lm_head.weight becomes output.weight
// only when config.json is absent or has tie_word_embeddings false: with
// tied embeddings transformers ignores it. hpcai names its norms `.scale`;
// the `.weight` form vLLM renames them to is the Mixtral-style column, so
// both load.
var nameTable = []nameRow{
	{"token_embd.weight", [3]string{"model.embed_tokens.weight", "transformer.in_out_embed.weight", "model.embed_tokens.weight"}, shapeVD},
	{"output.weight", [3]string{"lm_head.weight", "lm_head.weight", "lm_head.weight"}, shapeVD},
	{"output_norm.weight", [3]string{"model.norm.scale", "transformer.rms_norm.weight", "model.norm.weight"}, shapeD},
	{"blk.{N}.attn_norm.weight", [3]string{"model.layers.{N}.pre_attn_norm.scale", "transformer.decoder_layer.{N}.rms_norm.weight", "model.layers.{N}.pre_attn_norm.weight"}, shapeD},
	{"blk.{N}.attn_q.weight", [3]string{"model.layers.{N}.attn.q_proj.weight", "transformer.decoder_layer.{N}.multi_head_attention.query.weight", "model.layers.{N}.self_attn.q_proj.weight"}, shapeQ},
	{"blk.{N}.attn_k.weight", [3]string{"model.layers.{N}.attn.k_proj.weight", "transformer.decoder_layer.{N}.multi_head_attention.key.weight", "model.layers.{N}.self_attn.k_proj.weight"}, shapeKV},
	{"blk.{N}.attn_v.weight", [3]string{"model.layers.{N}.attn.v_proj.weight", "transformer.decoder_layer.{N}.multi_head_attention.value.weight", "model.layers.{N}.self_attn.v_proj.weight"}, shapeKV},
	{"blk.{N}.attn_output.weight", [3]string{"model.layers.{N}.attn.o_proj.weight", "transformer.decoder_layer.{N}.multi_head_attention.linear.weight", "model.layers.{N}.self_attn.o_proj.weight"}, shapeO},
	{"blk.{N}.attn_output_norm.weight", [3]string{"model.layers.{N}.post_attn_norm.scale", "transformer.decoder_layer.{N}.rms_norm_1.weight", "model.layers.{N}.post_attn_norm.weight"}, shapeD},
	{"blk.{N}.ffn_norm.weight", [3]string{"model.layers.{N}.pre_moe_norm.scale", "transformer.decoder_layer.{N}.rms_norm_2.weight", "model.layers.{N}.pre_moe_norm.weight"}, shapeD},
	{"blk.{N}.ffn_gate_inp.weight", [3]string{"model.layers.{N}.moe_block.gate.weight", "transformer.decoder_layer.{N}.router.weight", "model.layers.{N}.block_sparse_moe.gate.weight"}, shapeRouter},
	{"blk.{N}.ffn_gate.{E}.weight", [3]string{"model.layers.{N}.moe_block.experts.{E}.linear.weight", "transformer.decoder_layer.{N}.moe.{E}.linear.weight", "model.layers.{N}.block_sparse_moe.experts.{E}.w1.weight"}, shapeFD},
	{"blk.{N}.ffn_up.{E}.weight", [3]string{"model.layers.{N}.moe_block.experts.{E}.linear_v.weight", "transformer.decoder_layer.{N}.moe.{E}.linear_v.weight", "model.layers.{N}.block_sparse_moe.experts.{E}.w3.weight"}, shapeFD},
	{"blk.{N}.ffn_down.{E}.weight", [3]string{"model.layers.{N}.moe_block.experts.{E}.linear_1.weight", "transformer.decoder_layer.{N}.moe.{E}.linear_1.weight", "model.layers.{N}.block_sparse_moe.experts.{E}.w2.weight"}, shapeDF},
	// Grok-2's dense MLP beside the experts (residual_moe), in its own
	// naming only (SGLang's Grok1MLP gate_proj/up_proj/down_proj).
	{"blk.{N}.ffn_gate.weight", [3]string{"model.layers.{N}.mlp.gate_proj.weight", "model.layers.{N}.mlp.gate_proj.weight", "model.layers.{N}.mlp.gate_proj.weight"}, shapeDenseFD},
	{"blk.{N}.ffn_up.weight", [3]string{"model.layers.{N}.mlp.up_proj.weight", "model.layers.{N}.mlp.up_proj.weight", "model.layers.{N}.mlp.up_proj.weight"}, shapeDenseFD},
	{"blk.{N}.ffn_down.weight", [3]string{"model.layers.{N}.mlp.down_proj.weight", "model.layers.{N}.mlp.down_proj.weight", "model.layers.{N}.mlp.down_proj.weight"}, shapeDenseDF},
	{"blk.{N}.layer_output_norm.weight", [3]string{"model.layers.{N}.post_moe_norm.scale", "transformer.decoder_layer.{N}.rms_norm_3.weight", "model.layers.{N}.post_moe_norm.weight"}, shapeD},
}

// nameRow is one line of nameTable: a canonical name pattern, its
// spellings in the hpcai, keyfan and Mixtral-style conversions, and the
// shape config.json implies for it.
type nameRow struct {
	canon   string
	sources [3]string
	shape   func(c *Config) []int
}

func shapeVD(c *Config) []int      { return []int{c.VocabSize, c.EmbSize} }
func shapeD(c *Config) []int       { return []int{c.EmbSize} }
func shapeQ(c *Config) []int       { return []int{c.NumQHeads * c.KeySize, c.EmbSize} }
func shapeKV(c *Config) []int      { return []int{c.NumKVHeads * c.KeySize, c.EmbSize} }
func shapeO(c *Config) []int       { return []int{c.EmbSize, c.NumQHeads * c.KeySize} }
func shapeRouter(c *Config) []int  { return []int{c.NumExperts, c.EmbSize} }
func shapeFD(c *Config) []int      { return []int{c.FFNSize, c.EmbSize} }
func shapeDF(c *Config) []int      { return []int{c.EmbSize, c.FFNSize} }
func shapeDenseFD(c *Config) []int { return []int{c.DenseFFNSize, c.EmbSize} }
func shapeDenseDF(c *Config) []int { return []int{c.EmbSize, c.DenseFFNSize} }

// tpAxis is the axis along which xai-org/grok-2's tensor-parallel shards
// split an expert matrix (semantics §G5; llama.cpp's converter concatenates
// them so): w1 and w3 ([F, D]) by rows, w2 ([D, F]) by columns. -1 for a
// tensor the release does not split.
func (r *nameRow) tpAxis() int {
	switch r.canon {
	case "blk.{N}.ffn_gate.{E}.weight", "blk.{N}.ffn_up.{E}.weight":
		return 0
	case "blk.{N}.ffn_down.{E}.weight":
		return 1
	}
	return -1
}

// canonicalName is the result of matching a file's tensor name against
// nameTable.
type canonicalName struct {
	name          string
	row           *nameRow
	layer, expert int // -1 where the pattern has no such placeholder
}

// maxIndex bounds layer and expert numbers so that parsing cannot overflow.
const maxIndex = 1 << 20

// canonical returns the canonical name of a file's tensor name, if nameTable
// knows it.
func canonical(raw string) (canonicalName, bool) {
	for i := range nameTable {
		row := &nameTable[i]
		for _, src := range row.sources {
			vals, ok := matchPattern(src, raw)
			if !ok {
				continue
			}
			cn := canonicalName{row: row, layer: vals['N'], expert: vals['E']}
			cn.name = fill(row.canon, vals)
			return cn, true
		}
	}
	return canonicalName{}, false
}

// matchPattern matches name against a pattern whose {X} placeholders stand
// for decimal numbers without leading zeros (so "01" and "1" cannot both
// name layer 1). It returns the numbers by placeholder letter; letters that
// do not occur are -1.
func matchPattern(pattern, name string) (map[byte]int, bool) {
	vals := map[byte]int{'N': -1, 'E': -1}
	for {
		i := strings.IndexByte(pattern, '{')
		if i < 0 {
			return vals, pattern == name
		}
		if !strings.HasPrefix(name, pattern[:i]) {
			return nil, false
		}
		name = name[i:]
		key := pattern[i+1]
		pattern = pattern[i+3:] // skip "{X}"
		n := 0
		for n < len(name) && name[n] >= '0' && name[n] <= '9' {
			n++
		}
		if n == 0 || n > 7 || (n > 1 && name[0] == '0') {
			return nil, false
		}
		v := 0
		for _, c := range name[:n] {
			v = v*10 + int(c-'0')
		}
		if v >= maxIndex {
			return nil, false
		}
		vals[key] = v
		name = name[n:]
	}
}

// fill substitutes the placeholders of a canonical pattern.
func fill(pattern string, vals map[byte]int) string {
	for k, v := range vals {
		if v >= 0 {
			pattern = strings.ReplaceAll(pattern, "{"+string(k)+"}", fmt.Sprint(v))
		}
	}
	return pattern
}

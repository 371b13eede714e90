package main

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/tensor"
)

// kvFlags are the KV memory's flags, spelled as llama.cpp spells them
// (-ctk/--cache-type-k, -ctv/--cache-type-v), and --kv-memory for the
// pool of pages all slots share.
type kvFlags struct {
	ktype, vtype kvType
	memory       kvSize
}

func addKVFlags(fs *flag.FlagSet) *kvFlags {
	k := &kvFlags{ktype: kvType{tensor.F16}, vtype: kvType{tensor.F16}}
	for _, n := range []string{"ctk", "cache-type-k"} {
		fs.Var(&k.ktype, n, "element type of the KV memory's keys: f32, f16, bf16 or q8_0 (llama.cpp's -ctk)")
	}
	for _, n := range []string{"ctv", "cache-type-v"} {
		fs.Var(&k.vtype, n, "element type of the KV memory's values: f32, f16, bf16 or q8_0 (llama.cpp's -ctv)")
	}
	fs.Var(&k.memory, "kv-memory", "size of the KV memory's pool of pages, shared by all slots: bytes (8GiB, 512MB) or tokens (65536); "+
		"default: every slot's whole context, capped to half of the available memory")
	return k
}

// apply sets o's KV memory fields.
func (k *kvFlags) apply(o *runner.Options) {
	o.KType, o.VType = k.ktype.t, k.vtype.t
	o.KVMemory, o.KVTokens = k.memory.bytes, k.memory.tokens
}

// kvType is a -ctk/-ctv value.
type kvType struct{ t tensor.DType }

func (v *kvType) String() string {
	if v == nil {
		return ""
	}
	return strings.ToLower(v.t.String())
}

func (v *kvType) Set(s string) error {
	t, err := tensor.ParseDType(s)
	if err != nil || (t != tensor.F32 && t != tensor.F16 && t != tensor.BF16 && t != tensor.Q8_0) {
		return fmt.Errorf("%q is not a KV memory type: f32, f16, bf16 or q8_0", s)
	}
	v.t = t
	return nil
}

// kvSize is a --kv-memory value: bytes with a unit, or a token count.
type kvSize struct {
	bytes  int64
	tokens int
	text   string
}

func (v *kvSize) String() string {
	if v == nil {
		return ""
	}
	return v.text
}

// Set parses "8GiB", "1.5GB", "512M" (units of 1000 or, with i, 1024;
// a bare K/M/G/T is binary, as llama.cpp and ollama read memory sizes) or
// a plain number of tokens.
func (v *kvSize) Set(s string) error {
	t := strings.TrimSpace(s)
	if n, err := strconv.Atoi(t); err == nil {
		if n <= 0 {
			return fmt.Errorf("--kv-memory %s: the token count must be positive", s)
		}
		*v = kvSize{tokens: n, text: s}
		return nil
	}
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return fmt.Errorf("--kv-memory %q: want bytes with a unit (8GiB, 512MB) or a number of tokens", s)
	}
	num, err := strconv.ParseFloat(t[:i], 64)
	if err != nil {
		return fmt.Errorf("--kv-memory %q: %v", s, err)
	}
	units := map[string]float64{
		"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	}
	u, ok := units[strings.ToLower(strings.TrimSpace(t[i:]))]
	if !ok {
		return fmt.Errorf("--kv-memory %q: unknown unit %q (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s, t[i:])
	}
	b := num * u
	if b < 1 || b > math.MaxInt64/2 {
		return fmt.Errorf("--kv-memory %q is out of range", s)
	}
	*v = kvSize{bytes: int64(b), text: s}
	return nil
}

// kvSummary describes a KV memory plan in one line.
func kvSummary(p runner.KVPlan) string {
	return fmt.Sprintf("%d tokens in %d pages, keys %s, values %s, %.1f MB",
		p.Tokens(), p.Pages, strings.ToLower(p.KType.String()), strings.ToLower(p.VType.String()), p.Bytes/1e6)
}

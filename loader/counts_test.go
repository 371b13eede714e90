package loader

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// allocDuring returns the bytes allocated while f runs.
func allocDuring(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// A count in the metadata that the tensors do not back is refused naming its
// key, and refusing it costs a small multiple of the file's size, even for
// a block_count of 2^31-1 in a 3.7 MB file.
func TestGGUFCountsRefusedBeforeAllocating(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   map[string]any
		want []string
	}{
		{"block_count 2^31-1", map[string]any{"grok.block_count": uint32(1<<31 - 1)}, []string{"grok.block_count = 2147483647", "2 layers", "blk.1."}},
		{"block_count 10^7", map[string]any{"grok.block_count": uint32(10_000_000)}, []string{"grok.block_count = 10000000", "2 layers"}},
		{"block_count one too many", map[string]any{"grok.block_count": uint32(3)}, []string{"grok.block_count = 3", "2 layers"}},
		{"block_count one too few", map[string]any{"grok.block_count": uint32(1)}, []string{"grok.block_count = 1", "2 layers"}},
		{"expert_count 2^31-1", map[string]any{"grok.expert_count": uint32(1<<31 - 1), "grok.expert_used_count": uint32(2)}, []string{"grok.expert_count = 2147483647", "blk.0.ffn_gate_inp.weight has shape [4 128]"}},
		{"head_count", map[string]any{"grok.attention.head_count": uint32(1 << 20), "grok.attention.head_count_kv": uint32(1 << 20)}, []string{"grok.attention.head_count × key_length", "blk.0.attn_q.weight"}},
		{"vocab_size", map[string]any{"grok.vocab_size": uint32(1<<31 - 1)}, []string{"grok.vocab_size = 2147483647", "token_embd.weight has shape [512 128]"}},
		{"ffn size", map[string]any{"grok.expert_feed_forward_length": uint32(1 << 30)}, []string{"grok.expert_feed_forward_length = 1073741824", "blk.0.ffn_gate_exps.weight"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := rewrite(t, tc.kv, "", "")
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			var openErr error
			alloc := allocDuring(func() {
				m, err := Open(path, Options{})
				if err == nil {
					m.Close()
				}
				openErr = err
			})
			if openErr == nil {
				t.Fatal("opened")
			}
			for _, w := range tc.want {
				if !strings.Contains(openErr.Error(), w) {
					t.Errorf("err = %v, want it to mention %q", openErr, w)
				}
			}
			t.Logf("%d-byte file: %d bytes allocated while refusing it: %v", st.Size(), alloc, openErr)
			if limit := uint64(2 * st.Size()); alloc > limit {
				t.Errorf("refusing a %d-byte file allocated %d bytes, more than %d", st.Size(), alloc, limit)
			}
		})
	}
}

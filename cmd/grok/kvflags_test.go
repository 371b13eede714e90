package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestKVSizeFlag(t *testing.T) {
	for _, tc := range []struct {
		in     string
		bytes  int64
		tokens int
		err    string
	}{
		{"65536", 0, 65536, ""},
		{"8GiB", 8 << 30, 0, ""},
		{"8G", 8 << 30, 0, ""},
		{"1.5GB", 1500000000, 0, ""},
		{"512 MiB", 512 << 20, 0, ""},
		{"100kb", 100000, 0, ""},
		{"0", 0, 0, "must be positive"},
		{"-5", 0, 0, "must be positive"},
		{"8XB", 0, 0, "unknown unit"},
		{"GiB", 0, 0, "want bytes with a unit"},
		{"1e30GB", 0, 0, "unknown unit"},
		{"99999999999TiB", 0, 0, "out of range"},
	} {
		var v kvSize
		err := v.Set(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || v.bytes != tc.bytes || v.tokens != tc.tokens {
			t.Errorf("%q: %d bytes, %d tokens, %v; want %d, %d", tc.in, v.bytes, v.tokens, err, tc.bytes, tc.tokens)
		}
	}
}

// The KV memory's flags as llama.cpp spells them reach the engine (run
// generates with them) and inspect's estimate; bad values are usage errors.
func TestKVFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want *regexp.Regexp
	}{
		// The embedded demo model (key size 32) can store q8_0.
		{[]string{"inspect", "-ctk", "q8_0", "--cache-type-v", "bf16", "--kv-memory", "100"},
			0, regexp.MustCompile(`context 112 \(capped from sequence_len 256 to the KV memory\), parallel 1[\s\S]*KV memory +\d+ bytes .*112 tokens in pages of 16, keys q8_0, values bf16`)},
		{[]string{"run", "-n", "3", "--temp", "0", "-q", "-ctv", "q8_0", "--kv-memory", "1MiB", "In the beginning"},
			0, regexp.MustCompile(`^In the beginning`)},
		{[]string{"run", "-m", tiny, "-ctk", "q8_0", "x"}, 1, regexp.MustCompile(`q8_0 KV memory needs a key size that is a multiple of 32, not 16`)},
		{[]string{"run", "-m", tiny, "-ctk", "q4_0", "x"}, 2, regexp.MustCompile(`"q4_0" is not a KV memory type`)},
		{[]string{"serve", "-m", tiny, "--kv-memory", "lots"}, 2, regexp.MustCompile(`--kv-memory "lots"`)},
		{[]string{"run", "-m", tiny, "--kv-memory", "1KB", "x"}, 1, regexp.MustCompile(`holds not one page`)},
	} {
		o, e, code := grok(t, tc.args...)
		out := o
		if tc.code != 0 {
			out = e
		}
		if code != tc.code || !tc.want.MatchString(out) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d matching %v", tc.args, code, o, e, tc.code, tc.want)
		}
	}
}

package runner

import (
	"errors"
	"fmt"
	"time"

	"github.com/grok-go/grok/sampler"
)

// Options configures an Engine.
type Options struct {
	// Slots is how many sequences decode together in one batch (default 1).
	Slots int
	// Context is the KV memory rows per slot: prompt plus generated tokens
	// (maximum: the model's sequence_len). The default is the model's
	// sequence_len, capped so that the KV memory takes at most half of
	// MemoryLimit: a file may declare a context far larger than the machine.
	Context int
	// MemoryLimit is the memory the KV memory may take, in bytes: New fails
	// with a *MemoryError if an explicit Context needs more. 0 means the
	// memory the system has available now (internal/sysmem), or no limit
	// where the system does not say.
	MemoryLimit int64
	// MaxQueue bounds the requests waiting for a slot (default 64); Submit
	// returns ErrQueueFull beyond it.
	MaxQueue int
	// NoPromptCache turns off the reuse of a slot's KV memory: by default a
	// request goes to the free slot whose remembered tokens share the
	// longest prefix with its prompt, and only the rest of the prompt is
	// prefilled (llama.cpp's cache_prompt). The logits are the same bits
	// either way, since incremental decoding equals one full pass.
	NoPromptCache bool
	// PrefillChunk caps the prompt tokens one sequence feeds per step, so a
	// long prompt does not stall the others' decoding (default 256).
	PrefillChunk int

	// BeforeStep, when set, runs in the engine's loop before every forward
	// pass (never while the engine is idle). It is for tests, which use it
	// to pause the loop at a known point or to pace it so that a request
	// lasts long enough to be cancelled whatever the kernels' speed. It must
	// not call the engine.
	BeforeStep func()
}

// MemoryError reports a KV memory larger than the memory there is.
type MemoryError struct {
	Slots, Context int
	Need           float64 // bytes
	Available      float64 // bytes: Options.MemoryLimit or what the system had (half, for a default context)
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("runner: a KV memory of %d slot(s) × %d tokens needs %.3g GB, but only %.3g GB of memory is available",
		e.Slots, e.Context, e.Need/1e9, e.Available/1e9)
}

// ErrQueueFull is returned by Submit when every slot is busy and the queue is full.
var ErrQueueFull = errors.New("runner: too many requests waiting")

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("runner: engine is closed")

// Request is one generation job.
type Request struct {
	Prompt    []int          // token ids, no BOS added (runners.py encodes without one)
	MaxTokens int            // new tokens at most; 0 = until the context is full
	Sampling  sampler.Params // temperature 0 = greedy
	Stop      []string       // stop strings: output ends before the first match
	IgnoreEOS bool           // keep generating through EOS, as runners.py does
	// TruncatePrompt keeps the last tokens of a prompt that does not fit
	// (runners.py's pad_to_size left truncation) instead of failing.
	TruncatePrompt bool
	// Logprobs makes TokenInfo report the model's own distribution: the
	// log-softmax of the raw logits, before penalties, temperature and
	// filters, with the TopLogprobs (at most sampler.MaxTopLogprobs) most
	// likely tokens. This is what API clients expect (and vLLM's default):
	// the sampler's distribution is a point mass under greedy decoding,
	// which says nothing. Without it TokenInfo carries the sampler's figures.
	Logprobs    bool
	TopLogprobs int
}

// Finish reasons, in OpenAI's vocabulary where it has one.
const (
	FinishStop      = "stop"      // EOS or a stop string
	FinishLength    = "length"    // max tokens or the context is full
	FinishCancelled = "cancelled" // the client went away or Cancel was called
	FinishError     = "error"
)

// TokenInfo describes one sampled token.
type TokenInfo struct {
	ID int
	// Text is what the token added to the decoded output (empty without a
	// tokenizer). Concatenated over a request's tokens it is the whole
	// generated text before stop strings cut it: a byte-fallback token
	// that leaves a character incomplete has empty Text, and the token that
	// completes the character carries all of it.
	Text    string
	Logprob float32
	// Top is copied; at most Request.TopLogprobs entries with
	// Request.Logprobs, else at most Sampling.TopLogprobs.
	Top []sampler.TokenProb
}

// Usage counts a request's tokens and times its phases.
type Usage struct {
	PromptTokens, CompletionTokens int
	Truncated                      int // prompt tokens dropped by TruncatePrompt
	// CachedTokens is the prompt's first tokens found in the slot's KV
	// memory from an earlier request and not prefilled again.
	CachedTokens            int
	Queued, Prefill, Decode time.Duration // waiting, prompt until first token, after it
}

// Event is what a Stream delivers: newly released text and the tokens of one
// step, or the end of the request.
type Event struct {
	Text   string
	Tokens []TokenInfo
	Done   bool
	Finish string // set when Done
	Err    error  // set when Finish is FinishError
	Usage  Usage  // complete when Done
}

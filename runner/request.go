package runner

import (
	"errors"
	"fmt"
	"github.com/grok-go/grok/kernels"
	"time"

	"github.com/grok-go/grok/sampler"
	"github.com/grok-go/grok/tensor"
)

// Options configures an Engine.
type Options struct {
	// Slots is how many sequences decode together in one batch (default 1).
	Slots int
	// Context is the most tokens of one request: prompt plus generated
	// (maximum: the model's sequence_len). The default is the model's
	// sequence_len, capped to the KV memory when KVMemory or KVTokens is
	// set, else so that Slots × Context of KV memory takes at most half of
	// MemoryLimit: a file may declare a context far larger than the machine.
	Context int
	// KVMemory (bytes) or KVTokens (tokens; set at most one) sizes the KV
	// memory's pool of pages, shared by all slots. The default holds Slots
	// × Context tokens, so that every slot can fill its context at once; a
	// smaller pool makes requests wait for pages (and preempts the newest
	// when running ones outgrow it), a larger one keeps more prefixes
	// cached.
	KVMemory int64
	KVTokens int
	// KType and VType are the element types of the KV memory's keys and
	// values: tensor.F32 (the zero value), F16, BF16 or Q8_0 (key size a
	// multiple of 32). Attention is exact float32 attention over the
	// stored values, decoded.
	KType, VType tensor.DType
	// MemoryLimit is the memory the KV memory may take, in bytes: New fails
	// with a *MemoryError if an explicit Context or pool needs more. 0
	// means the memory the system has available now (internal/sysmem), or
	// no limit where the system does not say.
	MemoryLimit int64
	// MaxQueue bounds the requests waiting for a slot (default 64); Submit
	// returns ErrQueueFull beyond it.
	MaxQueue int
	// NoPromptCache turns off the prefix cache: by default the KV pages
	// of every prompt and finished request stay in a radix tree of token
	// prefixes until the pool needs them, and a request whose prompt
	// starts with a cached prefix prefills only the rest, whatever its
	// slot (llama.cpp's cache_prompt, SGLang's RadixAttention). The logits
	// are the same bits either way, since incremental decoding equals one
	// full pass.
	NoPromptCache bool
	// PrefillChunk caps the prompt tokens one sequence feeds per step, so a
	// long prompt does not stall the others' decoding (default 256).
	PrefillChunk int
	// Precision is the arithmetic of prefill (model.LanguageModel's
	// Precision; the default, kernels.Exact, keeps every result the
	// bits of one full exact pass). Under kernels.Fast a prompt's logits
	// depend on how it was chunked into prefill steps and on what the
	// prompt cache held (a cached prefix was computed in the precision of
	// its own step), though never on the other sequences of a batch.
	Precision kernels.Precision

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
	Tokens         int     // the pool asked for by Options.KVMemory or KVTokens (then Slots and Context are 0)
	Need           float64 // bytes
	Available      float64 // bytes: Options.MemoryLimit or what the system had (half, for a default context)
}

func (e *MemoryError) Error() string {
	if e.Tokens > 0 {
		return fmt.Sprintf("runner: a KV memory of %d tokens needs %.3g GB, but only %.3g GB of memory is available",
			e.Tokens, e.Need/1e9, e.Available/1e9)
	}
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
	// NoPromptCache makes this request prefill its whole prompt instead of
	// taking a cached prefix (llama.cpp's cache_prompt: false); its pages
	// still go to the cache. The bits are the same either way.
	NoPromptCache bool
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
	// CachedTokens is the prompt's first tokens found in the prefix
	// cache (from earlier requests) and not prefilled again.
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

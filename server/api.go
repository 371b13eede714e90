package server

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
)

// This file holds the wire types of the OpenAI API subset the server speaks:
// the request bodies as they are decoded (pointers where OpenAI tells an
// absent field from a zero one) and the response objects, field for field
// and with OpenAI's object names.

// samplingFields are the request fields that /v1/completions and
// /v1/chat/completions share.
type samplingFields struct {
	Model            string          `json:"model"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"` // string, array of strings or null
	N                *int            `json:"n"`
	Stream           *bool           `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	LogitBias        json.RawMessage `json:"logit_bias"`

	// Extensions, spelt as vLLM and llama.cpp's servers spell them.
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	RepeatLastN       *int     `json:"repeat_last_n"`
	IgnoreEOS         *bool    `json:"ignore_eos"`
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingFields
	Prompt    json.RawMessage `json:"prompt"` // string, [string], [int] or [[int]]
	MaxTokens *int            `json:"max_tokens"`
	Logprobs  *int            `json:"logprobs"`
	Echo      *bool           `json:"echo"`
	Suffix    *string         `json:"suffix"`
	BestOf    *int            `json:"best_of"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingFields
	Messages            []chatMessageIn `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	// Truncate (an extension, ollama's name; default true) lets a chat
	// too long for the context lose its oldest turns; false refuses it.
	Truncate       *bool           `json:"truncate"`
	Tools          json.RawMessage `json:"tools"`
	Functions      json.RawMessage `json:"functions"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

type chatMessageIn struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // string, array of content parts, or null
}

// usage is OpenAI's CompletionUsage.
type usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// promptTokensDetails is OpenAI's breakdown of the prompt tokens: those
// found in the KV memory from an earlier request (the prompt cache).
type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// nullUsage is what a stream chunk carries in "usage" when the client asked
// for usage (stream_options.include_usage): null in every chunk but the
// last. Without that option the field is absent, as from OpenAI.
var nullUsage = json.RawMessage("null")

// completion is OpenAI's Completion object ("text_completion"), both the
// whole response and, streamed, each chunk.
type completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   any                `json:"usage,omitempty"` // *usage, nullUsage or nil
}

type completionChoice struct {
	Text         string              `json:"text"`
	Index        int                 `json:"index"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// completionLogprobs is the legacy completions logprobs object. TextOffset
// counts characters (Unicode code points) from the start of the choice's
// text, the echoed prompt included.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// chatCompletion is OpenAI's ChatCompletion ("chat.completion").
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usage        `json:"usage"`
}

type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatMessage   `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

type chatMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

// chatChunk is OpenAI's ChatCompletionChunk ("chat.completion.chunk").
type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   any               `json:"usage,omitempty"` // *usage, nullUsage or nil
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type chatLogprobs struct {
	Content []chatTokenLogprob `json:"content"`
	Refusal []chatTokenLogprob `json:"refusal"`
}

// chatTokenLogprob is one token of logprobs.content. Bytes is []int, not
// []byte, because OpenAI sends a JSON array of numbers and encoding/json
// would write a []byte as base64.
type chatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// modelObject is OpenAI's Model.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

// apiError is an error in OpenAI's shape, with the HTTP status that goes
// with it.
type apiError struct {
	status     int
	retryAfter int  // seconds; sets Retry-After when > 0
	noRetry    bool // sets x-should-retry: false (the official SDKs retry 408, 429 and 5xx)

	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// invalid is a 400 invalid_request_error about param (which may be "").
func invalid(param, format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, Type: "invalid_request_error",
		Param: strPtr(param), Message: fmt.Sprintf(format, a...)}
}

func modelNotFound(name string) *apiError {
	return &apiError{status: http.StatusNotFound, Type: "invalid_request_error", Param: strPtr("model"),
		Code: strPtr("model_not_found"), Message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", name)}
}

func unavailable(retryAfter int, format string, a ...any) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, retryAfter: retryAfter, Type: "server_error",
		Message: fmt.Sprintf(format, a...)}
}

// writeError writes e as {"error": {...}}.
func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	if e.retryAfter > 0 {
		h.Set("Retry-After", fmt.Sprint(e.retryAfter))
	}
	if e.noRetry {
		h.Set("x-should-retry", "false")
	}
	writeJSON(w, e.status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// writeJSON writes v with status. A value that cannot be encoded is a bug;
// the panic reaches the recover middleware, which answers 500.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("server: encoding a %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// jsonLogprob makes a log-probability encodable: JSON has no -Inf, and
// OpenAI reports "practically impossible" as -9999.
func jsonLogprob(f float32) float64 {
	if math.IsInf(float64(f), 0) || math.IsNaN(float64(f)) || f < -9999 {
		return -9999
	}
	return float64(f)
}

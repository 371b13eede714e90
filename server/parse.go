package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"

	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/sampler"
)

// Limits on what a request may ask for.
const (
	// maxStops bounds the stop strings: the stop matcher compares every one
	// with the text held back at each token.
	maxStops = 16
	// maxStopLen bounds one stop string, for the same reason.
	maxStopLen = 256
	// defaultCompletionTokens is max_tokens when a /v1/completions request
	// leaves it out: OpenAI's default for that endpoint. Chat requests
	// default to the rest of the context, also as OpenAI does.
	defaultCompletionTokens = 16
)

// apiKind is the API a request came in by: it decides the shape of the
// answer and of its errors.
type apiKind int

const (
	kindOpenAI apiKind = iota
	kindOllama         // /api/generate, /api/chat
	kindLlama          // llama.cpp's /completion
)

// job is a parsed, validated generation request, common to all endpoints.
type job struct {
	req          runner.Request
	stream       bool
	includeUsage bool
	logprobs     bool // report logprobs
	echo         string
	chat         bool
	kind         apiKind
	// ollama: /api/generate (not chat) returns the context ids.
	ollamaGenerate bool
	ollamaModel    string // the name the request gave, which answers echo
	// llama.cpp: the settings echoed in generation_settings, and whether
	// the answer lists its token ids.
	llama        *llamaSettings
	returnTokens bool
}

// writeError writes e in the shape of the job's API.
func (j *job) writeError(w http.ResponseWriter, e *apiError) {
	if j.kind == kindOllama {
		writeOllamaError(w, e)
		return
	}
	writeError(w, e)
}

// decodeBody unmarshals a JSON object into v, turning encoding/json's
// errors into messages that name the offending field.
func decodeBody(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalid("", "The request body is empty; expected a JSON object.")
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		// The shared fields come from an embedded struct, whose Go name
		// encoding/json puts in the path.
		te.Field = strings.TrimPrefix(te.Field, "samplingFields.")
		if te.Field == "" {
			return invalid("", "The request body must be a JSON object, not a JSON %s.", te.Value)
		}
		return invalid(te.Field, "Invalid type for '%s': expected %s, but got %s.", te.Field, jsonKind(te.Type), jsonValue(te.Value))
	case errors.As(err, &se):
		return invalid("", "We could not parse the JSON body of your request: %v (at byte %d).", se, se.Offset)
	}
	return invalid("", "We could not parse the JSON body of your request: %v.", err)
}

// jsonKind names a Go type as the JSON value it decodes from.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}

// jsonValue describes what encoding/json found ("string", "number 1.5").
func jsonValue(v string) string {
	if strings.HasPrefix(v, "number") {
		return "a " + v
	}
	switch v {
	case "array", "object":
		return "an " + v
	}
	return "a " + v
}

// isNull reports whether a raw field is absent or null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// parseStop reads "stop": a string or an array of strings.
func parseStop(raw json.RawMessage) ([]string, *apiError) {
	if isNull(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return checkStops([]string{one})
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, invalid("stop", "Invalid type for 'stop': expected a string or an array of strings.")
	}
	return checkStops(many)
}

func checkStops(stops []string) ([]string, *apiError) {
	if len(stops) > maxStops {
		return nil, invalid("stop", "'stop' has %d sequences; at most %d are supported.", len(stops), maxStops)
	}
	out := stops[:0]
	for _, s := range stops {
		if len(s) > maxStopLen {
			return nil, invalid("stop", "A stop sequence is %d bytes long; at most %d are supported.", len(s), maxStopLen)
		}
		if s != "" { // an empty stop sequence would end every request at once
			out = append(out, s)
		}
	}
	return out, nil
}

// sampling validates the shared fields and fills j's sampling settings and
// stream flags. Ranges are OpenAI's where it defines them.
func (f *samplingFields) sampling(j *job) *apiError {
	if f.N != nil && *f.N != 1 {
		return invalid("n", "n=%d is not supported: this server generates one choice per request (n must be 1).", *f.N)
	}
	if !isNull(f.LogitBias) && string(bytes.TrimSpace(f.LogitBias)) != "{}" {
		return invalid("logit_bias", "logit_bias is not supported by this server.")
	}
	p := sampler.Params{Temperature: 1} // OpenAI's default temperature
	inRange := func(name string, v *float64, lo, hi float64) (float32, *apiError) {
		if v == nil {
			return 0, nil
		}
		if !(*v >= lo && *v <= hi) {
			return 0, invalid(name, "%s=%v is out of range: it must lie in [%v, %v].", name, *v, lo, hi)
		}
		return float32(*v), nil
	}
	var e *apiError
	if f.Temperature != nil {
		if p.Temperature, e = inRange("temperature", f.Temperature, 0, 2); e != nil {
			return e
		}
	}
	if p.TopP, e = inRange("top_p", f.TopP, 0, 1); e != nil {
		return e
	}
	if f.TopP != nil && *f.TopP == 0 {
		// The nucleus of mass 0 is the most likely token alone; the
		// sampler reads top_p 0 as "off", so say greedy directly.
		p.Temperature = 0
	}
	if p.MinP, e = inRange("min_p", f.MinP, 0, 1); e != nil {
		return e
	}
	if p.PresencePenalty, e = inRange("presence_penalty", f.PresencePenalty, -2, 2); e != nil {
		return e
	}
	if p.FrequencyPenalty, e = inRange("frequency_penalty", f.FrequencyPenalty, -2, 2); e != nil {
		return e
	}
	if f.RepetitionPenalty != nil {
		if p.RepeatPenalty, e = inRange("repetition_penalty", f.RepetitionPenalty, math.SmallestNonzeroFloat32, 100); e != nil {
			return invalid("repetition_penalty", "repetition_penalty=%v is out of range: it must be > 0 (1 = off) and at most 100.", *f.RepetitionPenalty)
		}
	}
	if f.TopK != nil {
		switch k := *f.TopK; {
		case k == -1: // vLLM's spelling of "off"
		case k < 0:
			return invalid("top_k", "top_k=%d is out of range: it must be >= 0 (0 or -1 = off).", k)
		default:
			p.TopK = k
		}
	}
	if f.RepeatLastN != nil {
		if *f.RepeatLastN < -1 {
			return invalid("repeat_last_n", "repeat_last_n=%d is out of range: it must be >= -1 (-1 = the whole history).", *f.RepeatLastN)
		}
		p.RepeatLastN = *f.RepeatLastN
	}
	if f.Seed != nil {
		p.Seed = uint64(*f.Seed)
	} else {
		p.Seed = rand.Uint64()
	}
	if err := p.Validate(); err != nil { // the ranges above should make this unreachable
		return invalid("", "%v", err)
	}
	stops, e := parseStop(f.Stop)
	if e != nil {
		return e
	}
	j.req.Sampling = p
	j.req.Stop = stops
	j.req.IgnoreEOS = f.IgnoreEOS != nil && *f.IgnoreEOS
	j.stream = f.Stream != nil && *f.Stream
	j.includeUsage = j.stream && f.StreamOptions != nil && f.StreamOptions.IncludeUsage != nil && *f.StreamOptions.IncludeUsage
	return nil
}

// checkModel accepts the served id or no model at all.
func (s *Server) checkModel(name string) *apiError {
	if name != "" && name != s.opts.ModelID {
		return modelNotFound(name)
	}
	return nil
}

// maxTokens settles the number of new tokens: the request's (which must
// fit in the context with the prompt) or the default, cut to what fits.
func maxTokens(param string, asked *int, def, promptLen, ctxLen int) (int, *apiError) {
	if asked == nil {
		n := ctxLen - promptLen
		if def > 0 {
			n = min(def, n)
		}
		if n < 1 {
			return 0, invalid("prompt", "This model's maximum context length is %d tokens. However, your prompt has %d tokens, which leaves no room for the completion. Please reduce the length of the prompt.", ctxLen, promptLen)
		}
		return n, nil
	}
	n := *asked
	if n < 1 {
		return 0, invalid(param, "%s=%d is out of range: it must be at least 1.", param, n)
	}
	if promptLen+n > ctxLen {
		return 0, invalid(param, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the length of the prompt or of the completion.", ctxLen, promptLen+n, promptLen, n)
	}
	return n, nil
}

// parsePrompt reads "prompt": a string, an array of token ids, or a
// one-element array of either. The boolean is true when the prompt was
// token ids (no text to echo from the request itself).
func parsePrompt(raw json.RawMessage) (text string, ids []int, e *apiError) {
	if isNull(raw) {
		return "", nil, invalid("prompt", "You must provide a prompt.")
	}
	if json.Unmarshal(raw, &text) == nil {
		return text, nil, nil
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(raw, &arr); err != nil {
		return "", nil, invalid("prompt", "Invalid type for 'prompt': expected a string, an array of token ids, or an array with one string or one array of token ids.")
	}
	if len(arr) == 0 {
		return "", nil, invalid("prompt", "'prompt' is an empty array.")
	}
	if first := bytes.TrimSpace(arr[0]); len(first) > 0 && (first[0] == '"' || first[0] == '[') {
		if len(arr) > 1 {
			return "", nil, invalid("prompt", "'prompt' holds %d prompts; this server takes one prompt per request (send them as separate requests).", len(arr))
		}
		return parsePrompt(arr[0])
	}
	if err := json.Unmarshal(raw, &ids); err != nil {
		return "", nil, invalid("prompt", "Invalid 'prompt': an array of token ids must hold integers only.")
	}
	if ids == nil {
		ids = []int{}
	}
	return "", ids, nil
}

// messageText reads a message's content: a string, null, or an array of
// text parts.
func messageText(param string, raw json.RawMessage) (string, *apiError) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", invalid(param+".content", "Invalid type for '%s.content': expected a string or an array of content parts.", param)
	}
	var b strings.Builder
	for k, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return "", invalid(fmt.Sprintf("%s.content[%d]", param, k), "Content part of type %q is not supported: this server takes text only.", p.Type)
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

package server

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/grok-go/grok/runner"
	"github.com/grok-go/grok/sampler"
)

// This file holds llama.cpp's own routes (tools/server/README.md in the
// llama.cpp repository): /completion, /tokenize, /detokenize,
// /apply-template, /props and /slots, with llama.cpp's field names and
// defaults. Their errors are OpenAI-shaped, as llama.cpp's are.

// llamaCompletionRequest is the body of POST /completion.
type llamaCompletionRequest struct {
	Prompt            json.RawMessage `json:"prompt"`
	NPredict          *int            `json:"n_predict"`
	Temperature       *float64        `json:"temperature"`
	TopK              *int            `json:"top_k"`
	TopP              *float64        `json:"top_p"`
	MinP              *float64        `json:"min_p"`
	RepeatPenalty     *float64        `json:"repeat_penalty"`
	RepeatLastN       *int            `json:"repeat_last_n"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	Seed              *int64          `json:"seed"`
	Stop              json.RawMessage `json:"stop"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	NProbs            int             `json:"n_probs"`
	Stream            bool            `json:"stream"`
	ReturnTokens      bool            `json:"return_tokens"`
	CachePrompt       *bool           `json:"cache_prompt"` // false: prefill the whole prompt (runner.Request.NoPromptCache)
	TypicalP          *float64        `json:"typical_p"`
	Mirostat          int             `json:"mirostat"`
	Grammar           string          `json:"grammar"`
	JSONSchema        json.RawMessage `json:"json_schema"`
	LogitBias         json.RawMessage `json:"logit_bias"`
	PostSamplingProbs bool            `json:"post_sampling_probs"`
}

// llamaSettings is generation_settings: the request's settings after
// defaults, as llama.cpp echoes them.
type llamaSettings struct {
	NCtx             int      `json:"n_ctx"`
	NPredict         int      `json:"n_predict"`
	Model            string   `json:"model"`
	Seed             uint64   `json:"seed"`
	Temperature      float64  `json:"temperature"`
	TopK             int      `json:"top_k"`
	TopP             float64  `json:"top_p"`
	MinP             float64  `json:"min_p"`
	RepeatLastN      int      `json:"repeat_last_n"`
	RepeatPenalty    float64  `json:"repeat_penalty"`
	PresencePenalty  float64  `json:"presence_penalty"`
	FrequencyPenalty float64  `json:"frequency_penalty"`
	Stop             []string `json:"stop"`
	IgnoreEOS        bool     `json:"ignore_eos"`
	NProbs           int      `json:"n_probs"`
	Stream           bool     `json:"stream"`
	CachePrompt      bool     `json:"cache_prompt"`
	promptText       string
}

// llamaDefaults are llama.cpp's server defaults.
func llamaDefaults() llamaSettings {
	return llamaSettings{NPredict: -1, Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05, RepeatLastN: 64,
		RepeatPenalty: 1, Stop: []string{}, CachePrompt: true}
}

type llamaTimings struct {
	CacheN              int     `json:"cache_n"`  // prompt tokens taken from the prefix cache
	PromptN             int     `json:"prompt_n"` // prompt tokens prefilled
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

// llamaProb is one entry of completion_probabilities.
type llamaProb struct {
	ID          int            `json:"id"`
	Token       string         `json:"token"`
	Logprob     float64        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs []llamaTopProb `json:"top_logprobs"`
}

type llamaTopProb struct {
	ID      int     `json:"id"`
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// llamaResult is /completion's answer, or one event of its stream (which
// carries content, tokens, stop and the probabilities until the last).
type llamaResult struct {
	Content       string      `json:"content"`
	Tokens        []int       `json:"tokens"`
	IDSlot        int         `json:"id_slot"`
	Stop          bool        `json:"stop"`
	Probabilities []llamaProb `json:"completion_probabilities,omitempty"`

	Model              string         `json:"model,omitempty"`
	TokensPredicted    *int           `json:"tokens_predicted,omitempty"`
	TokensEvaluated    *int           `json:"tokens_evaluated,omitempty"`
	GenerationSettings *llamaSettings `json:"generation_settings,omitempty"`
	Prompt             *string        `json:"prompt,omitempty"`
	HasNewLine         *bool          `json:"has_new_line,omitempty"`
	Truncated          *bool          `json:"truncated,omitempty"`
	StopType           string         `json:"stop_type,omitempty"`
	StoppingWord       *string        `json:"stopping_word,omitempty"`
	TokensCached       *int           `json:"tokens_cached,omitempty"`
	Timings            *llamaTimings  `json:"timings,omitempty"`
}

// parseLlamaPrompt reads llama.cpp's prompt: a string, token ids, or ids
// and strings mixed in one array. Several prompts are refused.
func parseLlamaPrompt(raw json.RawMessage, encode func(string) []int, vocab int) ([]int, *apiError) {
	if isNull(raw) {
		return nil, invalid("prompt", "\"prompt\" is required.")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return encode(text), nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, invalid("prompt", "Invalid type for 'prompt': expected a string, or an array of token ids and strings.")
	}
	if len(parts) == 1 {
		if p := bytes.TrimSpace(parts[0]); len(p) > 0 && (p[0] == '[' || p[0] == '"') {
			return parseLlamaPrompt(parts[0], encode, vocab)
		}
	}
	strs := 0
	var ids []int
	for _, p := range parts {
		var id int
		if json.Unmarshal(p, &id) == nil {
			if id < 0 || id >= vocab {
				return nil, invalid("prompt", "Token id %d in 'prompt' is outside the vocabulary [0, %d).", id, vocab)
			}
			ids = append(ids, id)
			continue
		}
		var s string
		if json.Unmarshal(p, &s) != nil {
			return nil, invalid("prompt", "'prompt' holds several prompts or an element that is neither a token id nor a string; this server takes one prompt per request.")
		}
		strs++
		ids = append(ids, encode(s)...)
	}
	if strs > 1 && strs == len(parts) {
		return nil, invalid("prompt", "'prompt' holds %d prompts; this server takes one prompt per request (send them as separate requests).", strs)
	}
	return ids, nil
}

// sampling fills j from the request over llama.cpp's defaults.
func (q *llamaCompletionRequest) sampling(j *job, set *llamaSettings) *apiError {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case q.Temperature != nil && !finite(*q.Temperature):
		return invalid("temperature", "temperature must be a finite number (<= 0 = greedy).")
	case q.TopP != nil && !(*q.TopP >= 0 && *q.TopP <= 1):
		return invalid("top_p", "top_p=%v must lie in [0, 1].", *q.TopP)
	case q.MinP != nil && !(*q.MinP >= 0 && *q.MinP <= 1):
		return invalid("min_p", "min_p=%v must lie in [0, 1].", *q.MinP)
	case q.RepeatPenalty != nil && !(finite(*q.RepeatPenalty) && *q.RepeatPenalty >= 0):
		return invalid("repeat_penalty", "repeat_penalty=%v must be a number >= 0 (1 = off).", *q.RepeatPenalty)
	case q.RepeatLastN != nil && *q.RepeatLastN < -1:
		return invalid("repeat_last_n", "repeat_last_n=%d must be >= -1 (0 = off, -1 = the context).", *q.RepeatLastN)
	case q.PresencePenalty != nil && !finite(*q.PresencePenalty), q.FrequencyPenalty != nil && !finite(*q.FrequencyPenalty):
		return invalid("presence_penalty", "presence_penalty and frequency_penalty must be finite numbers.")
	case q.NProbs < 0 || q.NProbs > sampler.MaxTopLogprobs:
		return invalid("n_probs", "n_probs=%d is out of range: it must lie in [0, %d].", q.NProbs, sampler.MaxTopLogprobs)
	case q.PostSamplingProbs:
		return invalid("post_sampling_probs", "post_sampling_probs is not supported: the probabilities are the model's own (before sampling).")
	case q.Mirostat != 0:
		return invalid("mirostat", "mirostat=%d is not supported (only 0).", q.Mirostat)
	case q.TypicalP != nil && *q.TypicalP > 0 && *q.TypicalP < 1:
		return invalid("typical_p", "typical_p=%v is not supported (only 1, off).", *q.TypicalP)
	case q.Grammar != "", !isNull(q.JSONSchema):
		return invalid("grammar", "grammar and json_schema are not supported by this server.")
	case !isNull(q.LogitBias) && !bytes.Equal(bytes.TrimSpace(q.LogitBias), []byte("[]")) && !bytes.Equal(bytes.TrimSpace(q.LogitBias), []byte("{}")):
		return invalid("logit_bias", "logit_bias is not supported by this server.")
	}
	set2 := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set2(&set.Temperature, q.Temperature)
	set2(&set.TopP, q.TopP)
	set2(&set.MinP, q.MinP)
	set2(&set.RepeatPenalty, q.RepeatPenalty)
	set2(&set.PresencePenalty, q.PresencePenalty)
	set2(&set.FrequencyPenalty, q.FrequencyPenalty)
	if q.TopK != nil {
		set.TopK = *q.TopK
	}
	if q.RepeatLastN != nil {
		set.RepeatLastN = *q.RepeatLastN
	}
	// -1 (and llama.cpp's LLAMA_DEFAULT_SEED, 2^32-1) is a random seed.
	if q.Seed != nil && *q.Seed >= 0 && *q.Seed != math.MaxUint32 {
		set.Seed = uint64(*q.Seed)
	} else {
		set.Seed = rand.Uint64()
	}
	p := sampler.Params{Temperature: float32(max(set.Temperature, 0)), TopK: max(set.TopK, 0), TopP: float32(set.TopP),
		MinP: float32(set.MinP), RepeatPenalty: float32(set.RepeatPenalty), PresencePenalty: float32(set.PresencePenalty),
		FrequencyPenalty: float32(set.FrequencyPenalty), RepeatLastN: set.RepeatLastN, Seed: set.Seed}
	if set.TopP == 0 {
		p.Temperature = 0
	}
	if set.RepeatLastN == 0 { // a window of 0 turns the penalties off
		p.RepeatPenalty, p.PresencePenalty, p.FrequencyPenalty, p.RepeatLastN = 0, 0, 0, 64
	}
	if err := p.Validate(); err != nil {
		return invalid("", "%v", err)
	}
	stops, e := parseStop(q.Stop)
	if e != nil {
		return e
	}
	set.Stop = append([]string{}, stops...)
	set.IgnoreEOS, set.NProbs, set.Stream = q.IgnoreEOS, q.NProbs, q.Stream
	if q.CachePrompt != nil {
		set.CachePrompt = *q.CachePrompt
	}
	j.req.NoPromptCache = !set.CachePrompt
	j.req.Sampling, j.req.Stop, j.req.IgnoreEOS = p, stops, q.IgnoreEOS
	j.stream, j.returnTokens = q.Stream, q.ReturnTokens
	if q.NProbs > 0 {
		j.logprobs, j.req.Logprobs, j.req.TopLogprobs = true, true, q.NProbs
	}
	return nil
}

func (s *Server) handleLlamaCompletion(w http.ResponseWriter, r *http.Request) {
	var req llamaCompletionRequest
	b := s.acceptAs(w, r, &req, nil, kindLlama)
	if b == nil {
		return
	}
	defer s.release()
	set := llamaDefaults()
	set.NCtx, set.Model = b.ctx, s.opts.ModelID
	j := job{kind: kindLlama, llama: &set}
	if e := req.sampling(&j, &set); e != nil {
		writeError(w, e)
		return
	}
	ids, e := parseLlamaPrompt(req.Prompt, b.tok.Encode, b.tok.VocabSize())
	if e != nil {
		writeError(w, e)
		return
	}
	if len(ids) == 0 {
		ids = []int{b.tok.BOS()}
	}
	if len(ids) >= b.ctx {
		writeError(w, invalid("prompt", "The prompt has %d tokens; the context holds %d (prompt and completion together).", len(ids), b.ctx))
		return
	}
	set.promptText, _ = b.tok.Decode(ids)
	j.req.Prompt = ids
	if req.NPredict != nil {
		set.NPredict = *req.NPredict
	}
	room := b.ctx - len(ids)
	switch n := set.NPredict; {
	case n == 0:
		// llama.cpp: no token is generated. There is no cache for the
		// prompt to be evaluated into, so nothing runs at all.
		g := &gen{b: b, j: &j, arrived: time.Now(), model: s.opts.ModelID}
		ev := runner.Event{Done: true, Finish: runner.FinishLength, Usage: runner.Usage{PromptTokens: len(ids)}}
		if j.stream {
			out := newStreamOut(w, g)
			out.finish(g, ev, nil)
			return
		}
		writeJSON(w, http.StatusOK, g.llamaFinal(ev, true))
		return
	case n < 0:
		j.req.MaxTokens = room
	default:
		j.req.MaxTokens = min(n, room)
	}
	s.generate(w, r, b, &j)
}

// llamaProbs renders tokens as completion_probabilities.
func (g *gen) llamaProbs(toks []pendingToken) []llamaProb {
	out := make([]llamaProb, 0, len(toks))
	for _, t := range toks {
		text := t.Text
		if text == "" {
			text = g.b.tokenText(t.ID)
		}
		p := llamaProb{ID: t.ID, Token: text, Logprob: jsonLogprob(t.Logprob), Bytes: g.b.tokenBytes(t.ID, t.Text),
			TopLogprobs: make([]llamaTopProb, 0, len(t.Top))}
		for _, a := range t.Top {
			at := g.b.tokenText(a.Token)
			p.TopLogprobs = append(p.TopLogprobs, llamaTopProb{ID: a.Token, Token: at, Logprob: jsonLogprob(a.Logprob), Bytes: g.b.tokenBytes(a.Token, at)})
		}
		out = append(out, p)
	}
	return out
}

// llamaFinal is the whole answer, or (whole false) the last event of a
// stream, with the content already sent left out.
func (g *gen) llamaFinal(last runner.Event, whole bool) llamaResult {
	u := last.Usage
	set := g.j.llama
	stopType, word := "limit", ""
	if last.Finish == runner.FinishStop {
		stopType = "eos"
		if !g.sawEOS {
			stopType = "word"
			raw := g.raw.String()
			if g.released <= len(raw) {
				for _, s := range g.j.req.Stop {
					if strings.HasPrefix(raw[g.released:], s) {
						word = s
						break
					}
				}
			}
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	per := func(d time.Duration, n int) (float64, float64) {
		if n <= 0 || d <= 0 {
			return 0, 0
		}
		return ms(d) / float64(n), float64(n) / d.Seconds()
	}
	prefilled := u.PromptTokens - u.CachedTokens
	t := &llamaTimings{CacheN: u.CachedTokens, PromptN: prefilled, PromptMS: ms(u.Prefill), PredictedN: u.CompletionTokens, PredictedMS: ms(u.Decode)}
	t.PromptPerTokenMS, t.PromptPerSecond = per(u.Prefill, prefilled)
	t.PredictedPerTokenMS, t.PredictedPerSecond = per(u.Decode, u.CompletionTokens-1)
	content := ""
	if whole {
		content = g.text.String()
	}
	tokens := []int{}
	if whole && g.j.returnTokens {
		tokens = append(tokens, g.ids...)
	}
	f := false
	// llama.cpp's n_past: the tokens the KV memory holds for the request.
	held := max(u.PromptTokens+u.CompletionTokens-1, 0)
	nl := strings.Contains(content, "\n")
	prompt := set.promptText
	res := llamaResult{Content: content, Tokens: tokens, IDSlot: -1, Stop: true, Model: g.model,
		TokensPredicted: &u.CompletionTokens, TokensEvaluated: &u.PromptTokens, GenerationSettings: set,
		Prompt: &prompt, HasNewLine: &nl, Truncated: &f, StopType: stopType, StoppingWord: &word,
		TokensCached: &held, Timings: t}
	if whole && g.j.logprobs {
		res.Probabilities = g.llamaProbs(g.all)
	}
	return res
}

// llamaSSE is /completion's stream: server-sent events of llamaResult,
// without OpenAI's [DONE].
type llamaSSE struct{ *sse }

func (e *llamaSSE) start(g *gen) {}

func (e *llamaSSE) delta(g *gen, text string, toks []pendingToken) bool {
	res := llamaResult{Content: text, Tokens: append([]int{}, g.evIDs...), IDSlot: -1}
	if g.j.logprobs {
		res.Probabilities = g.llamaProbs(toks)
	}
	return e.send(res)
}

func (e *llamaSSE) finish(g *gen, last runner.Event, _ *usage) { e.send(g.llamaFinal(last, false)) }

func (e *llamaSSE) fail(ae *apiError) { e.sse.fail(ae) }

type tokenizeRequest struct {
	Content    string `json:"content"`
	AddSpecial bool   `json:"add_special"`
	WithPieces bool   `json:"with_pieces"`
}

// tokenPiece is one token of /tokenize with with_pieces: its text, or
// its bytes when they are not valid UTF-8 (a lone byte-fallback piece).
type tokenPiece struct {
	ID    int `json:"id"`
	Piece any `json:"piece"`
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	b := s.acceptAs(w, r, &req, nil, kindLlama)
	if b == nil {
		return
	}
	defer s.release()
	ids := b.tok.Encode(req.Content)
	if req.AddSpecial && b.tok.BOS() >= 0 {
		ids = append([]int{b.tok.BOS()}, ids...)
	}
	if !req.WithPieces {
		if ids == nil {
			ids = []int{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"tokens": ids})
		return
	}
	out := make([]tokenPiece, len(ids))
	for i, id := range ids {
		var piece any = b.tokenText(id)
		if id < len(b.isByte) && b.isByte[id] {
			piece = string(rune(b.byteOf[id]))
			if c := b.byteOf[id]; c >= 0x80 { // not UTF-8 by itself
				piece = []int{int(c)}
			}
		}
		out[i] = tokenPiece{ID: id, Piece: piece}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tokens []int `json:"tokens"`
	}
	b := s.acceptAs(w, r, &req, nil, kindLlama)
	if b == nil {
		return
	}
	defer s.release()
	for _, id := range req.Tokens {
		if id < 0 || id >= b.tok.VocabSize() {
			writeError(w, invalid("tokens", "Token id %d is outside the vocabulary [0, %d).", id, b.tok.VocabSize()))
			return
		}
	}
	text, err := b.tok.Decode(req.Tokens)
	if err != nil {
		writeError(w, invalid("tokens", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": text})
}

func (s *Server) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []chatMessageIn `json:"messages"`
	}
	b := s.acceptAs(w, r, &req, nil, kindLlama)
	if b == nil {
		return
	}
	defer s.release()
	msgs, e := chatMessages(req.Messages)
	if e == nil {
		var prompt string
		if prompt, e = b.renderChat(msgs); e == nil {
			writeJSON(w, http.StatusOK, map[string]string{"prompt": prompt})
			return
		}
	}
	writeError(w, e)
}

// slotState is one entry of /slots (and /props' default_generation_settings).
type slotState struct {
	ID           int           `json:"id"`
	IDTask       int           `json:"id_task"`
	NCtx         int           `json:"n_ctx"`
	Speculative  bool          `json:"speculative"`
	IsProcessing bool          `json:"is_processing"`
	Params       llamaSettings `json:"params"`
}

// loadedBackend returns the backend, or answers 503 while loading.
func (s *Server) loadedBackend(w http.ResponseWriter) *backend {
	b := s.be.Load()
	if b == nil {
		writeError(w, unavailable(5, "The model is still loading; try again shortly."))
	}
	return b
}

func (s *Server) handleProps(w http.ResponseWriter, r *http.Request) {
	b := s.loadedBackend(w)
	if b == nil {
		return
	}
	set := llamaDefaults()
	set.NCtx, set.Model = b.ctx, s.opts.ModelID
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": slotState{IDTask: -1, NCtx: b.ctx, Params: set},
		"total_slots":                 b.eng.Slots(),
		"model_path":                  b.info.Path,
		"model_alias":                 s.opts.ModelID,
		"chat_template":               b.chat.Source(),
		"modalities":                  map[string]bool{"vision": false, "audio": false},
		"build_info":                  "grok " + s.opts.Version,
		"is_sleeping":                 false,
		"kv_memory":                   kvState(b.eng),
	})
}

// kvState describes the engine's KV memory for /props (grok's own field):
// its pool of pages, their element types, and how many are free or held
// by the prefix cache now.
func kvState(e *runner.Engine) map[string]any {
	p, st := e.KV(), e.Stats()
	return map[string]any{
		"tokens": p.Tokens(), "pages": p.Pages, "page_tokens": runner.PageTokens, "bytes": int64(p.Bytes),
		"cache_type_k": strings.ToLower(p.KType.String()), "cache_type_v": strings.ToLower(p.VType.String()),
		"free_pages": st.KVPagesFree, "cached_pages": st.KVPagesCached,
	}
}

// handleSlots lists the slots. The engine counts its busy slots but does
// not say which they are, so the first Active ones are shown processing.
func (s *Server) handleSlots(w http.ResponseWriter, r *http.Request) {
	b := s.loadedBackend(w)
	if b == nil {
		return
	}
	st := b.eng.Stats()
	set := llamaDefaults()
	set.NCtx, set.Model = b.ctx, s.opts.ModelID
	out := make([]slotState, st.Slots)
	for i := range out {
		out[i] = slotState{ID: i, IDTask: -1, NCtx: b.ctx, IsProcessing: i < st.Active, Params: set}
	}
	writeJSON(w, http.StatusOK, out)
}

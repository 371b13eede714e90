package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/grok-go/grok/runner"
)

// The official OpenAI Go client talks to the server: completions and chat,
// whole and streamed, with logprobs and usage; its typed errors carry the
// server's status and code.
func TestOpenAIClient(t *testing.T) {
	ts := newTestServer(t, runner.Options{Slots: 4}, Options{})
	client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := ctxTimeout(t, time.Minute)

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Data) != 1 || page.Data[0].ID != modelName || page.Data[0].Object != "model" {
			t.Errorf("models: %+v", page.Data)
		}
		m, err := client.Models.Get(ctx, modelName)
		if err != nil || m.ID != modelName {
			t.Errorf("model: %+v %v", m, err)
		}
	})

	cp := openai.CompletionNewParams{
		Model:       modelName,
		Prompt:      openai.CompletionNewParamsPromptUnion{OfString: openai.String("In the beginning God")},
		MaxTokens:   openai.Int(10),
		Temperature: openai.Float(0),
		Logprobs:    openai.Int(3),
	}
	var whole string
	t.Run("completion", func(t *testing.T) {
		c, err := client.Completions.New(ctx, cp)
		if err != nil {
			t.Fatal(err)
		}
		if c.Object != "text_completion" || !strings.HasPrefix(c.ID, "cmpl-") || c.Model != modelName || c.Created == 0 {
			t.Errorf("completion header: %+v", c)
		}
		ch := c.Choices[0]
		whole = ch.Text
		if whole == "" || ch.FinishReason != "length" || c.Usage.CompletionTokens != 10 || c.Usage.TotalTokens != c.Usage.PromptTokens+10 {
			t.Errorf("completion: %q %q %+v", whole, ch.FinishReason, c.Usage)
		}
		lp := ch.Logprobs
		if len(lp.Tokens) != 10 || len(lp.TokenLogprobs) != 10 || len(lp.TopLogprobs) != 10 || len(lp.TextOffset) != 10 {
			t.Fatalf("logprobs: %+v", lp)
		}
		if strings.Join(lp.Tokens, "") != whole {
			t.Errorf("tokens %q do not make the text %q", lp.Tokens, whole)
		}
		for i, top := range lp.TopLogprobs {
			// Greedy: the sampled token is the most likely one.
			best := -1e9
			for _, v := range top {
				best = max(best, v)
			}
			if len(top) != 3 || top[lp.Tokens[i]] != lp.TokenLogprobs[i] || best != lp.TokenLogprobs[i] {
				t.Errorf("token %d %q (%v): top %v", i, lp.Tokens[i], lp.TokenLogprobs[i], top)
			}
		}
	})

	t.Run("completion stream", func(t *testing.T) {
		p := cp
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		st := client.Completions.NewStreaming(ctx, p)
		var text strings.Builder
		var finish string
		var usage openai.CompletionUsage
		var ntok int
		for st.Next() {
			c := st.Current()
			if c.Object != "text_completion" {
				t.Errorf("chunk object %q", c.Object)
			}
			for _, ch := range c.Choices {
				text.WriteString(ch.Text)
				ntok += len(ch.Logprobs.Tokens)
				if ch.FinishReason != "" {
					finish = string(ch.FinishReason)
				}
			}
			if c.JSON.Usage.Valid() && c.Usage.TotalTokens > 0 {
				usage = c.Usage
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if text.String() != whole || finish != "length" || ntok != 10 || usage.CompletionTokens != 10 {
			t.Errorf("stream: %q (%s, %d tokens, usage %+v), whole: %q", text.String(), finish, ntok, usage, whole)
		}
	})

	chat := openai.ChatCompletionNewParams{
		Model: modelName,
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Thou art a scribe."),
			openai.UserMessage("Who made the heaven and the earth?"),
		},
		MaxCompletionTokens: openai.Int(12),
		Temperature:         openai.Float(0),
		Logprobs:            openai.Bool(true),
		TopLogprobs:         openai.Int(2),
	}
	var answer string
	t.Run("chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, chat)
		if err != nil {
			t.Fatal(err)
		}
		if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Model != modelName {
			t.Errorf("chat header: %+v", c)
		}
		ch := c.Choices[0]
		answer = ch.Message.Content
		if answer == "" || strings.HasPrefix(answer, " ") || ch.Message.Role != "assistant" || c.Usage.CompletionTokens == 0 {
			t.Errorf("chat: %q role %q usage %+v", answer, ch.Message.Role, c.Usage)
		}
		if ch.FinishReason != "length" && ch.FinishReason != "stop" {
			t.Errorf("finish %q", ch.FinishReason)
		}
		var joined strings.Builder
		for _, tl := range ch.Logprobs.Content {
			joined.WriteString(tl.Token)
			if len(tl.TopLogprobs) != 2 || tl.TopLogprobs[0].Logprob != tl.Logprob || len(tl.Bytes) == 0 {
				t.Errorf("token %+v", tl)
			}
		}
		if strings.TrimLeft(joined.String(), " ") != answer {
			t.Errorf("logprobs tokens %q, content %q", joined.String(), answer)
		}
	})

	t.Run("chat stream", func(t *testing.T) {
		p := chat
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		st := client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		first := true
		for st.Next() {
			c := st.Current()
			if c.Object != "chat.completion.chunk" {
				t.Errorf("chunk object %q", c.Object)
			}
			if first && (len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant") {
				t.Errorf("first chunk %+v", c)
			}
			first = false
			acc.AddChunk(c)
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		got := acc.Choices[0].Message.Content
		if got != answer || acc.Usage.CompletionTokens == 0 || len(acc.Choices[0].Logprobs.Content) == 0 {
			t.Errorf("stream %q (usage %+v), whole %q", got, acc.Usage, answer)
		}
	})

	t.Run("errors", func(t *testing.T) {
		p := cp
		p.Model = "gpt-9"
		_, err := client.Completions.New(ctx, p)
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Code != "model_not_found" {
			t.Errorf("unknown model: %v", err)
		}
		p = cp
		p.N = openai.Int(2)
		_, err = client.Completions.New(ctx, p)
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "n" || ae.Type != "invalid_request_error" {
			t.Errorf("n=2: %v", err)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		// A client-side cancel mid-stream frees the slot.
		cctx, cancel := context.WithCancel(ctx)
		p := cp
		p.MaxTokens = openai.Int(200)
		st := client.Completions.NewStreaming(cctx, p, option.WithJSONSet("ignore_eos", true))
		if !st.Next() {
			t.Fatalf("no first chunk: %v", st.Err())
		}
		cancel()
		for st.Next() {
		}
		st.Close()
		waitFor(t, 5*time.Second, "the slot to be freed", func() bool { return ts.eng.Stats().Active == 0 })
	})
}

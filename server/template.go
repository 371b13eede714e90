package server

import (
	"errors"
	"fmt"
	"strings"

	"github.com/grok-go/grok/chattemplate"
)

// SpecialPieces is what TemplateTokens needs of a tokenizer: the BOS and
// EOS ids (-1: none) and the text of a piece.
type SpecialPieces interface {
	BOS() int
	EOS() int
	VocabSize() int
	Piece(id int) string
}

// TemplateTokens are the special token texts a chat template is rendered
// with (bos_token, eos_token): those of the tokenizer's BOS and EOS pieces.
func TemplateTokens(tok SpecialPieces) chattemplate.Tokens {
	var t chattemplate.Tokens
	if id := tok.BOS(); id >= 0 && id < tok.VocabSize() {
		t.BOS = tok.Piece(id)
	}
	if id := tok.EOS(); id >= 0 && id < tok.VocabSize() {
		t.EOS = tok.Piece(id)
	}
	return t
}

// modelTemplate is the template chat requests are rendered with: the
// Model's Template, else the file's ChatTemplate (a broken one is an error
// at load, not a silent fallback: prompts in the wrong format give wrong
// answers), else the plain template.
func modelTemplate(m Model, tok SpecialPieces) (*chattemplate.Template, error) {
	switch {
	case m.Template != nil:
		return m.Template, nil
	case m.ChatTemplate != "":
		t, err := chattemplate.Parse("tokenizer.chat_template", m.ChatTemplate, TemplateTokens(tok))
		if err != nil {
			return nil, fmt.Errorf("%w (choose another with --chat-template NAME: %s)", err, strings.Join(chattemplate.Names(), ", "))
		}
		return t, nil
	}
	return chattemplate.Builtin("plain", TemplateTokens(tok))
}

// chatMessages validates the messages and reads their text. developer
// messages are system messages and function messages tool messages, as
// the templates know them.
func chatMessages(msgs []chatMessageIn) ([]chattemplate.Message, *apiError) {
	if len(msgs) == 0 {
		return nil, invalid("messages", "'messages' must hold at least one message.")
	}
	out := make([]chattemplate.Message, len(msgs))
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		role := m.Role
		switch role {
		case "system", "user", "assistant", "tool":
		case "developer":
			role = "system"
		case "function":
			role = "tool"
		case "":
			return nil, invalid(param+".role", "Missing 'role' in %s.", param)
		default:
			return nil, invalid(param+".role", "Invalid role %q in %s: expected system, developer, user, assistant or tool.", m.Role, param)
		}
		content, e := messageText(param, m.Content)
		if e != nil {
			return nil, e
		}
		out[i] = chattemplate.Message{Role: role, Content: content}
	}
	return out, nil
}

// renderChat renders msgs with the model's template.
func (b *backend) renderChat(msgs []chattemplate.Message) (string, *apiError) {
	p, err := b.chat.Render(msgs, true)
	if err != nil {
		return "", templateError(err)
	}
	return p, nil
}

func templateError(err error) *apiError {
	if errors.Is(err, chattemplate.ErrTemplate) {
		return invalid("messages", "The model's chat template refused the conversation: %v", err)
	}
	return invalid("messages", "%v", err)
}

// encodeChat tokenizes a rendered prompt. A leading bos_token is the BOS
// id, not its text: the tokenizer reads control pieces' text as text.
func (b *backend) encodeChat(prompt string) []int {
	if bos := b.chat.Tokens().BOS; bos != "" && b.tok.BOS() >= 0 && strings.HasPrefix(prompt, bos) {
		return append([]int{b.tok.BOS()}, b.tok.Encode(prompt[len(bos):])...)
	}
	return b.tok.Encode(prompt)
}

// chatPromptIDs renders msgs and tokenizes them into j's prompt, adding
// the template's end-of-turn stops. With truncate, a conversation that
// leaves less than reserve tokens of the context for the answer loses its
// oldest whole turns (never the leading system messages or the last turn)
// until it leaves that much; if even that is too long, it is refused when
// must names the request's max-tokens field (a length the answer must
// have room for), else kept as long as it leaves one token. Without truncate the prompt is kept whole, and the
// caller's max-tokens check refuses it if it does not fit.
func (s *Server) chatPromptIDs(b *backend, j *job, msgs []chattemplate.Message, truncate bool, reserve int, must string) *apiError {
	limit := b.ctx - max(1, min(reserve, b.ctx))
	if !truncate {
		limit = int(^uint(0) >> 1)
	}
	f, err := b.chat.Fit(msgs, limit, b.encodeChat)
	if err != nil {
		return templateError(err)
	}
	if !f.Fits && (must != "" || len(f.IDs) >= b.ctx) {
		param := "messages"
		if must != "" && len(f.IDs) < b.ctx {
			param = must // the prompt fits; the answer asked for does not
		}
		return invalid(param, "This model's maximum context length is %d tokens. With only the system messages and the last turn kept, the prompt has %d tokens, which leaves %s. Shorten the last message or the system prompt.",
			b.ctx, len(f.IDs), roomText(b.ctx-len(f.IDs), reserve, must != ""))
	}
	if f.Dropped > 0 {
		s.log.Info("chat truncated to fit the context", "dropped_messages", f.Dropped, "dropped_tokens", f.DroppedTokens, "prompt_tokens", len(f.IDs), "context", b.ctx)
	}
	j.req.Prompt = f.IDs
	j.req.Stop = append(j.req.Stop, b.chat.Stops()...)
	return nil
}

func roomText(room, reserve int, must bool) string {
	switch {
	case room < 1:
		return "no room for the answer"
	case must:
		return fmt.Sprintf("room for %d tokens of answer, fewer than the %d asked for", room, reserve)
	}
	return fmt.Sprintf("room for %d tokens of answer", room)
}

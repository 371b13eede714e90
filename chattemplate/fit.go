package chattemplate

import (
	"fmt"
)

// Fitted is a conversation rendered and tokenized to fit a context.
type Fitted struct {
	Prompt string
	IDs    []int
	// Dropped counts the oldest messages left out, and DroppedTokens the
	// prompt tokens that saved.
	Dropped, DroppedTokens int
	// Fits is false when even the shortest prompt (the leading system
	// messages and the last turn) has more than the limit's tokens; the
	// prompt and ids are then that shortest one.
	Fits bool
}

// TooLongError reports a conversation whose prompt does not fit.
type TooLongError struct {
	Tokens, Limit int
	Truncated     bool // whether turns were dropped to try to fit
}

func (e *TooLongError) Error() string {
	if e.Truncated {
		return fmt.Sprintf("the conversation does not fit: with only the system messages and the last turn kept, the prompt has %d tokens, more than the %d that leave room for the answer", e.Tokens, e.Limit)
	}
	return fmt.Sprintf("the conversation's prompt has %d tokens, more than the %d that leave room for the answer", e.Tokens, e.Limit)
}

// turnStarts returns where msgs' turns begin: the first message after the
// leading system (and developer) messages, then every user message after
// it. The leading system messages belong to no turn and are never dropped.
func turnStarts(msgs []Message) (system int, starts []int) {
	for system < len(msgs) && (msgs[system].Role == "system" || msgs[system].Role == "developer") {
		system++
	}
	for i := system; i < len(msgs); i++ {
		if i == system || msgs[i].Role == "user" {
			starts = append(starts, i)
		}
	}
	return system, starts
}

// Fit renders msgs (with the generation prompt) and tokenizes the prompt
// with tokenize. If it has more than limit tokens, it drops the fewest
// whole oldest turns (a user message and the answers after it) that make it
// fit, keeping the leading system messages and the last turn, so that the
// roles still alternate as templates require. The search is a bisection:
// O(log turns) renders. An error is the template's (ErrTemplate).
func (t *Template) Fit(msgs []Message, limit int, tokenize func(string) []int) (Fitted, error) {
	render := func(drop int) (Fitted, error) {
		kept := msgs
		system, starts := turnStarts(msgs)
		dropped := 0
		if drop > 0 {
			dropped = starts[drop] - system
			kept = append(append(make([]Message, 0, len(msgs)-dropped), msgs[:system]...), msgs[starts[drop]:]...)
		}
		p, err := t.Render(kept, true)
		if err != nil {
			return Fitted{}, err
		}
		ids := tokenize(p)
		return Fitted{Prompt: p, IDs: ids, Dropped: dropped, Fits: len(ids) <= limit}, nil
	}
	full, err := render(0)
	if err != nil || full.Fits {
		return full, err
	}
	_, starts := turnStarts(msgs)
	// Invariant: dropping lo turns does not fit; dropping hi does, or hi
	// is the most that can be dropped.
	lo, hi := 0, len(starts)-1
	if hi <= 0 {
		return full, nil
	}
	best, err := render(hi)
	if err != nil {
		return Fitted{}, err
	}
	if best.Fits {
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			f, err := render(mid)
			if err != nil {
				return Fitted{}, err
			}
			if f.Fits {
				hi, best = mid, f
			} else {
				lo = mid
			}
		}
	}
	best.DroppedTokens = len(full.IDs) - len(best.IDs)
	return best, nil
}

package runner

import (
	"context"
	"errors"

	"github.com/grok-go/grok/internal/sysmem"
	"github.com/grok-go/grok/model"
)

// NewGroup starts one engine per model — replicas of one network, each on
// threads of its own (the mesh's data axis, `grok serve --dp M`) — behind
// one Engine: Submit places each request on the replica with the most room
// (free slots, then free KV pages), and Stats, Slots and KV add the
// replicas' up. opts.Slots, KVMemory, KVTokens and MemoryLimit are the
// whole group's, shared out evenly (every replica gets at least one slot).
// A request's tokens do not depend on its replica: each is the same model,
// and a token's bits do not depend on its batch.
func NewGroup(lms []*model.LanguageModel, tok Tokenizer, opts Options) (*Engine, error) {
	if len(lms) == 0 {
		return nil, errors.New("runner: a group of no models")
	}
	if len(lms) == 1 {
		return New(lms[0], tok, opts)
	}
	M := int64(len(lms))
	o := opts
	o.Slots = int(max(1, (int64(max(opts.Slots, 1))+M-1)/M))
	o.KVMemory /= M
	o.KVTokens = int(int64(o.KVTokens) / M)
	if o.MemoryLimit <= 0 {
		if avail, ok := sysmem.Available(); ok {
			o.MemoryLimit = avail
		}
	}
	o.MemoryLimit /= M
	g := &Engine{tok: tok, opts: opts}
	for _, lm := range lms {
		e, err := New(lm, tok, o)
		if err != nil {
			g.closeGroup()
			return nil, err
		}
		g.group = append(g.group, e)
	}
	e0 := g.group[0]
	g.lm, g.eos, g.opts.Context = e0.lm, e0.eos, e0.opts.Context
	g.opts.Slots = o.Slots * len(lms)
	g.plan = e0.plan
	g.plan.Pages, g.plan.Bytes = 0, 0
	for _, e := range g.group {
		g.plan.Pages += e.plan.Pages
		g.plan.Bytes += e.plan.Bytes
	}
	return g, nil
}

// closeGroup closes the replicas started so far.
func (g *Engine) closeGroup() {
	for _, e := range g.group {
		e.Close()
	}
}

// place returns the replica with the most free slots (slots less the
// requests it accepted and has not ended: counted at Submit, so that
// requests placed at once see each other), then the most free KV pages;
// the first on ties.
func (g *Engine) place() *Engine {
	var best *Engine
	var bestFree, bestPages int64
	for _, e := range g.group {
		ended := e.finished.Load() + e.cancelled.Load()
		free := int64(e.opts.Slots) - (e.requests.Load() - ended)
		pages := e.pagesFree.Load()
		if best == nil || free > bestFree || free == bestFree && pages > bestPages {
			best, bestFree, bestPages = e, free, pages
		}
	}
	return best
}

// submitGroup is Submit for a group: the request goes to place's replica.
func (g *Engine) submitGroup(ctx context.Context, req Request) (*Stream, error) {
	return g.place().Submit(ctx, req)
}

// statsGroup adds the replicas' Stats up.
func (g *Engine) statsGroup() Stats {
	var s Stats
	for _, e := range g.group {
		r := e.Stats()
		s.Requests += r.Requests
		s.Finished += r.Finished
		s.Cancelled += r.Cancelled
		s.Rejected += r.Rejected
		s.PromptTokens += r.PromptTokens
		s.GeneratedTokens += r.GeneratedTokens
		s.CachedTokens += r.CachedTokens
		s.PrefillTokens += r.PrefillTokens
		s.Preempted += r.Preempted
		s.Steps += r.Steps
		s.BatchRows += r.BatchRows
		s.ForwardTime += r.ForwardTime
		s.Queued += r.Queued
		s.Active += r.Active
		s.Slots += r.Slots
		s.KVPages += r.KVPages
		s.KVPagesFree += r.KVPagesFree
		s.KVPagesCached += r.KVPagesCached
	}
	return s
}

// Replicas is the number of engines behind e: NewGroup's models, or 1.
func (e *Engine) Replicas() int { return max(1, len(e.group)) }

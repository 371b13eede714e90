package runner

import (
	"slices"

	"github.com/grok-go/grok/model"
)

// prefixCache is a radix tree of page-aligned token prefixes over the KV
// memory's pages, in the spirit of SGLang's RadixAttention: each node is
// one page, holding the keys and values of its tokens given the tokens of
// the path above it. A full page (model.PageRows tokens) may have
// children; a partial page (fewer tokens: the end of a finished sequence)
// is a leaf. The tree holds one reference to each node's page, so a page
// outlives the sequence that wrote it; a sequence that starts with a
// cached prefix attaches its full pages read-only and gets a copy of a
// page it matches only in part (the memory copies it before writing), so
// reuse is exact to the token. Pages no sequence references are evicted,
// least recently used first, when the pool runs short.
//
// Since incremental decoding equals one full pass bit for bit, a page's
// contents are the same whichever sequence computed them: attaching it
// changes no logit (TestPrefixCacheSameBits).
//
// The cache belongs to the engine's loop goroutine.
type prefixCache struct {
	mem    *model.KVMemory
	root   pnode
	clock  int64
	byPage map[int]*pnode
}

type pageKey [model.PageRows]int32

// pnode is one page of the tree.
type pnode struct {
	parent  *pnode
	toks    []int // the page's tokens: PageRows, or fewer for a partial leaf
	page    int
	full    map[pageKey]*pnode // children that are full pages
	partial []*pnode           // children that are partial pages
	used    int64              // clock of the last match or insert through it
}

func newPrefixCache(mem *model.KVMemory) *prefixCache {
	return &prefixCache{mem: mem, byPage: map[int]*pnode{}}
}

func keyOf(toks []int) pageKey {
	var k pageKey
	for i, t := range toks {
		k[i] = int32(t)
	}
	return k
}

// children calls f on every child of n until f returns false.
func (n *pnode) children(f func(*pnode) bool) {
	for _, c := range n.full {
		if !f(c) {
			return
		}
	}
	for _, c := range n.partial {
		if !f(c) {
			return
		}
	}
}

func (n *pnode) leaf() bool { return len(n.full) == 0 && len(n.partial) == 0 }

// match returns the pages holding the longest cached prefix of toks, at
// most limit tokens long, and its length n: pages[i] holds rows
// [i·PageRows, (i+1)·PageRows), the last one perhaps only its first rows.
func (c *prefixCache) match(toks []int, limit int) (pages []int, n int) {
	c.clock++
	cur := &c.root
	for {
		rest := toks[n:]
		if len(rest) >= model.PageRows {
			if ch := cur.full[keyOf(rest[:model.PageRows])]; ch != nil {
				ch.used = c.clock
				pages = append(pages, ch.page)
				n += model.PageRows
				cur = ch
				continue
			}
		}
		// The prefix ends in this page: the child sharing most tokens.
		var best *pnode
		bl := 0
		cur.children(func(ch *pnode) bool {
			if l := commonPrefix(ch.toks, rest); l > bl {
				best, bl = ch, l
			}
			return true
		})
		if best != nil {
			best.used = c.clock
			pages = append(pages, best.page)
			n += bl
		}
		break
	}
	if n > limit {
		n = max(limit, 0)
		pages = pages[:(n+model.PageRows-1)/model.PageRows]
	}
	return pages, n
}

// insert records the pages of slot, which hold toks, in the tree: full
// pages always, the last partial one with partial set (when the sequence
// is done: a running one still writes into it). A page whose tokens the
// tree already holds from another sequence replaces the slot's own copy
// (ReplacePage), so that one copy stays.
func (c *prefixCache) insert(toks []int, slot int, partial bool) {
	c.clock++
	table := c.mem.PageTable(slot)
	cur := &c.root
	for i := 0; i*model.PageRows < len(toks); i++ {
		chunk := toks[i*model.PageRows : min((i+1)*model.PageRows, len(toks))]
		if len(chunk) < model.PageRows {
			if partial {
				c.insertPartial(cur, chunk, table[i])
			}
			return
		}
		k := keyOf(chunk)
		ch := cur.full[k]
		if ch == nil {
			ch = &pnode{parent: cur, toks: slices.Clone(chunk), page: table[i]}
			c.mem.Retain(ch.page)
			if cur.full == nil {
				cur.full = map[pageKey]*pnode{}
			}
			cur.full[k] = ch
			c.byPage[ch.page] = ch
			// A partial page that is a prefix of this one says nothing more.
			cur.partial = slices.DeleteFunc(cur.partial, func(p *pnode) bool {
				if commonPrefix(p.toks, chunk) == len(p.toks) {
					c.drop(p)
					return true
				}
				return false
			})
		} else if ch.page != table[i] {
			c.mem.ReplacePage(slot, i, ch.page)
		}
		ch.used = c.clock
		cur = ch
	}
}

// insertPartial adds a partial page under cur unless a child already
// holds its tokens, dropping shorter partial pages it extends.
func (c *prefixCache) insertPartial(cur *pnode, chunk []int, page int) {
	covered := false
	cur.children(func(ch *pnode) bool {
		if commonPrefix(ch.toks, chunk) == len(chunk) {
			ch.used = c.clock
			covered = true
		}
		return !covered
	})
	if covered {
		return
	}
	cur.partial = slices.DeleteFunc(cur.partial, func(p *pnode) bool {
		if commonPrefix(p.toks, chunk) == len(p.toks) {
			c.drop(p)
			return true
		}
		return false
	})
	c.mem.Retain(page)
	n := &pnode{parent: cur, toks: slices.Clone(chunk), page: page, used: c.clock}
	cur.partial = append(cur.partial, n)
	c.byPage[page] = n
}

// drop releases a leaf's page; the caller unlinks it.
func (c *prefixCache) drop(n *pnode) {
	c.mem.Release(n.page)
	delete(c.byPage, n.page)
}

// unlink removes leaf n from its parent and releases its page.
func (c *prefixCache) unlink(n *pnode) {
	p := n.parent
	if len(n.toks) == model.PageRows && p.full[keyOf(n.toks)] == n {
		delete(p.full, keyOf(n.toks))
	} else {
		p.partial = slices.DeleteFunc(p.partial, func(x *pnode) bool { return x == n })
	}
	c.drop(n)
}

// evictable returns how many pages evicting could free: the nodes that
// only the tree references, with every node below them.
func (c *prefixCache) evictable() int {
	var walk func(n *pnode) (count int, all bool)
	walk = func(n *pnode) (int, bool) {
		count, all := 0, true
		n.children(func(ch *pnode) bool {
			k, a := walk(ch)
			count += k
			all = all && a
			return true
		})
		if n != &c.root && all && c.mem.Refs(n.page) == 1 {
			return count + 1, true
		}
		return count, false
	}
	n, _ := walk(&c.root)
	return n
}

// evict frees pages, least recently used leaves first, until the memory
// has want free pages or nothing more can go; it reports whether it got
// there. A node whose last child goes becomes a leaf and takes its place
// among the candidates by its own age.
func (c *prefixCache) evict(want int) bool {
	if c.mem.FreePages() >= want {
		return true
	}
	evictable := func(n *pnode) bool { return n != &c.root && n.leaf() && c.mem.Refs(n.page) == 1 }
	var leaves []*pnode // most recently used first, so the oldest is last
	var walk func(n *pnode)
	walk = func(n *pnode) {
		n.children(func(ch *pnode) bool {
			walk(ch)
			return true
		})
		if evictable(n) {
			leaves = append(leaves, n)
		}
	}
	walk(&c.root)
	newerFirst := func(a, b *pnode) int { return int(b.used - a.used) }
	slices.SortFunc(leaves, newerFirst)
	for c.mem.FreePages() < want {
		if len(leaves) == 0 {
			return false
		}
		n := leaves[len(leaves)-1]
		leaves = leaves[:len(leaves)-1]
		c.unlink(n)
		if p := n.parent; evictable(p) {
			i, _ := slices.BinarySearchFunc(leaves, p, newerFirst)
			leaves = slices.Insert(leaves, i, p)
		}
	}
	return true
}

// size returns the pages the tree holds.
func (c *prefixCache) size() int { return len(c.byPage) }

// giveUp drops page p from the tree if it is a leaf that only the tree and
// one slot hold, so that the slot may write into it without a copy; it
// reports whether it did. A full pool uses it where a copy of the page a
// request continues (the previous chat turn's last page) has no room.
func (c *prefixCache) giveUp(p int) bool {
	n := c.byPage[p]
	if n == nil || !n.leaf() || c.mem.Refs(p) != 2 {
		return false
	}
	c.unlink(n)
	return true
}

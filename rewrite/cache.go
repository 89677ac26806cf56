package rewrite

import (
	"hash/maphash"
	"sync"
)

// The cache remembers slow-path decisions, keyed by the statement text and
// everything else the decision depends on: schema, lexing flags, character
// set safety, server, and COM_QUERY versus COM_STMT_PREPARE (the policy is
// the Engine's own). Lookups do not allocate: the map is indexed with
// string(sql), which Go does not copy for a lookup.
//
// Eviction is two-generational per shard: new entries go to the current
// map; when it is half full it becomes the old map and the previous old map
// is dropped; a hit in the old map moves the entry forward. Recently used
// statements survive, the total stays under the bound.

const (
	cacheShards  = 16
	maxCachedLen = 64 << 10 // longer texts are rarely repeated
)

type cache struct {
	seed   maphash.Seed
	half   int // entries per shard generation
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu       sync.RWMutex
	cur, old map[string][]cacheEntry
	n        int
}

type cacheCtx struct {
	schema  string
	ansi    Tri
	nbe     Tri
	unsafe  bool
	srv     Server
	prepare bool
}

type cacheEntry struct {
	ctx cacheCtx
	d   Decision
}

func newCache(entries int) *cache {
	c := &cache{seed: maphash.MakeSeed()}
	c.half = entries / cacheShards / 2
	if c.half < 1 {
		c.half = 1
	}
	for i := range c.shards {
		c.shards[i].cur = make(map[string][]cacheEntry)
		c.shards[i].old = make(map[string][]cacheEntry)
	}
	return c
}

func ctxOf(srv Server, s *Session, prepare bool) cacheCtx {
	return cacheCtx{schema: s.Schema, ansi: s.ANSIQuotes, nbe: s.NoBackslashEscapes, unsafe: s.UnsafeCharset,
		srv: srv, prepare: prepare}
}

func find(list []cacheEntry, ctx *cacheCtx) (Decision, bool) {
	for i := range list {
		if list[i].ctx == *ctx {
			return list[i].d, true
		}
	}
	return Decision{}, false
}

func (c *cache) shard(sql []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, sql)%cacheShards]
}

func (c *cache) get(sql []byte, srv Server, s *Session, prepare bool) (Decision, bool) {
	if c == nil || len(sql) > maxCachedLen {
		return Decision{}, false
	}
	ctx := ctxOf(srv, s, prepare)
	sh := c.shard(sql)
	sh.mu.RLock()
	d, ok := find(sh.cur[string(sql)], &ctx)
	if ok {
		sh.mu.RUnlock()
		return d, true
	}
	d, ok = find(sh.old[string(sql)], &ctx)
	sh.mu.RUnlock()
	if ok {
		c.put(sql, srv, s, prepare, d)
	}
	return d, ok
}

func (c *cache) put(sql []byte, srv Server, s *Session, prepare bool, d Decision) {
	if c == nil || len(sql) > maxCachedLen {
		return
	}
	ctx := ctxOf(srv, s, prepare)
	sh := c.shard(sql)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := find(sh.cur[string(sql)], &ctx); ok {
		return
	}
	if sh.n >= c.half {
		sh.old = sh.cur
		sh.cur = make(map[string][]cacheEntry, c.half)
		sh.n = 0
	}
	key := string(sql)
	sh.cur[key] = append(sh.cur[key], cacheEntry{ctx: ctx, d: d})
	sh.n++
}

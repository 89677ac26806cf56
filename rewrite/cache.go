package rewrite

import (
	"hash/maphash"
	"sync"
)

// The cache remembers slow-path decisions, keyed by the statement text and
// everything else the decision depends on: schema, lexing flags, character
// set safety, server, and COM_QUERY versus COM_STMT_PREPARE (the policy is
// the Engine's own). The shape cache (shape.go) uses the same structure,
// keyed by a statement's shape instead of its text. Lookups do not
// allocate: the map is indexed with string(key), which Go does not copy
// for a lookup.
//
// Eviction is two-generational per shard: new entries go to the current
// map; when it is half full it becomes the old map and the previous old map
// is dropped; a hit in the old map moves the entry forward. Recently used
// statements survive, the total stays under the bound.

const (
	cacheShards  = 16
	maxCachedLen = 64 << 10 // longer texts are rarely repeated
)

type cache[V any] struct {
	seed   maphash.Seed
	half   int // entries per shard generation
	shards [cacheShards]cacheShard[V]
}

type cacheShard[V any] struct {
	mu       sync.RWMutex
	cur, old map[string][]cacheEntry[V]
	n        int
}

type cacheCtx struct {
	schema  string
	ansi    Tri
	nbe     Tri
	unsafe  bool
	oracle  Tri
	utf8    bool
	remap   bool
	srv     Server
	prepare bool
	absent  uint64 // the engine's marks of absent objects (fresh.go)
}

type cacheEntry[V any] struct {
	ctx cacheCtx
	v   V
}

func newCache[V any](entries int) *cache[V] {
	c := &cache[V]{seed: maphash.MakeSeed()}
	c.half = entries / cacheShards / 2
	if c.half < 1 {
		c.half = 1
	}
	for i := range c.shards {
		c.shards[i].cur = make(map[string][]cacheEntry[V])
		c.shards[i].old = make(map[string][]cacheEntry[V])
	}
	return c
}

func ctxOf(srv Server, s *Session, prepare bool) cacheCtx {
	return cacheCtx{schema: s.Schema, ansi: s.ANSIQuotes, nbe: s.NoBackslashEscapes, unsafe: s.UnsafeCharset,
		oracle: s.Oracle, utf8: s.NamesUTF8, remap: s.ASCIIRemap, srv: srv, prepare: prepare}
}

func find[V any](list []cacheEntry[V], ctx *cacheCtx) (V, bool) {
	for i := range list {
		if list[i].ctx == *ctx {
			return list[i].v, true
		}
	}
	var zero V
	return zero, false
}

func (c *cache[V]) shard(key []byte) *cacheShard[V] {
	return &c.shards[maphash.Bytes(c.seed, key)%cacheShards]
}

func (c *cache[V]) get(key []byte, ctx *cacheCtx) (V, bool) {
	if c == nil || len(key) > maxCachedLen {
		var zero V
		return zero, false
	}
	sh := c.shard(key)
	sh.mu.RLock()
	v, ok := find(sh.cur[string(key)], ctx)
	if ok {
		sh.mu.RUnlock()
		return v, true
	}
	v, ok = find(sh.old[string(key)], ctx)
	sh.mu.RUnlock()
	if ok {
		c.put(key, ctx, v)
	}
	return v, ok
}

func (c *cache[V]) put(key []byte, ctx *cacheCtx, v V) {
	if c == nil || len(key) > maxCachedLen {
		return
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := find(sh.cur[string(key)], ctx); ok {
		return
	}
	if sh.n >= c.half {
		sh.old = sh.cur
		sh.cur = make(map[string][]cacheEntry[V], c.half)
		sh.n = 0
	}
	k := string(key)
	sh.cur[k] = append(sh.cur[k], cacheEntry[V]{ctx: *ctx, v: v})
	sh.n++
}

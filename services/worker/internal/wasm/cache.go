package wasm

import (
	"context"
	"slices"
	"sync"

	"github.com/tetratelabs/wazero"
)

// cache keeps compiled modules by digest, at most max of them, and which digest each
// (tenant, path) ran last. When a path's digest changes (a new version) the old digest's
// compiled module is evicted, once no call holds it and no other path uses it; past max
// the least recently used one is.
type cache struct {
	mu      sync.Mutex
	max     int
	tick    uint64
	entries map[string]*entry
	current map[string]string // tenant\x00path -> digest
}

// entry is one compiled module.
type entry struct {
	digest   string
	compiled wazero.CompiledModule
	refs     int
	used     uint64
	evicted  bool
}

func newCache(n int) *cache {
	return &cache{max: n, entries: map[string]*entry{}, current: map[string]string{}}
}

// acquire returns the compiled module of digest, held, or nil; it records digest as the
// path's current one.
func (c *cache) acquire(digest, key string) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[digest]
	if e == nil {
		return nil
	}
	c.tick++
	e.refs++
	e.used = c.tick
	c.setCurrent(key, digest)
	return e
}

// add keeps a newly compiled module (or, when another call compiled it first, closes
// this one and holds that) and returns it held.
func (c *cache) add(digest, key string, compiled wazero.CompiledModule) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick++
	if e := c.entries[digest]; e != nil {
		_ = compiled.Close(context.Background())
		e.refs++
		e.used = c.tick
		c.setCurrent(key, digest)
		return e
	}
	e := &entry{digest: digest, compiled: compiled, refs: 1, used: c.tick}
	c.entries[digest] = e
	c.setCurrent(key, digest)
	for len(c.entries) > c.max {
		var lru *entry
		for _, x := range c.entries {
			if x != e && (lru == nil || x.used < lru.used) {
				lru = x
			}
		}
		if lru == nil {
			break
		}
		c.evict(lru)
	}
	return e
}

// setCurrent records digest as key's and evicts the digest key ran before, when no
// other path uses it.
func (c *cache) setCurrent(key, digest string) {
	old, ok := c.current[key]
	c.current[key] = digest
	if !ok || old == digest {
		return
	}
	for _, d := range c.current {
		if d == old {
			return
		}
	}
	if e := c.entries[old]; e != nil {
		c.evict(e)
	}
}

// evict drops e from the cache; its compiled module is closed once no call holds it.
func (c *cache) evict(e *entry) {
	delete(c.entries, e.digest)
	for k, d := range c.current {
		if d == e.digest {
			delete(c.current, k)
		}
	}
	e.evicted = true
	if e.refs == 0 {
		_ = e.compiled.Close(context.Background())
	}
}

// release lets go of a held entry.
func (c *cache) release(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs == 0 && e.evicted {
		_ = e.compiled.Close(context.Background())
	}
}

// digests returns the cached digests, sorted.
func (c *cache) digests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.entries))
	for d := range c.entries {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

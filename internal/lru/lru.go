// Package lru is a map bounded in size (least recently used out first)
// whose entries go stale a TTL after they were put: the registry caches of
// imagedata and imageverify.
package lru

import (
	"container/list"
	"sync"
	"time"
)

// Cache is safe for concurrent use.
type Cache[V any] struct {
	mu    sync.Mutex
	size  int
	ttl   time.Duration
	order *list.List // of *entry[V], most recently used first
	items map[string]*list.Element
}

type entry[V any] struct {
	key     string
	val     V
	expires time.Time
}

// New returns a cache of at most size entries, fresh for ttl.
func New[V any](size int, ttl time.Duration) *Cache[V] {
	return &Cache[V]{size: size, ttl: ttl, order: list.New(), items: make(map[string]*list.Element)}
}

// Get returns the value of key, whether it was there at all, and whether
// it is still fresh at now. A stale entry is kept (its value may still
// serve, e.g. a tag's last digest to compare with) until put again or
// evicted.
func (c *Cache[V]) Get(key string, now time.Time) (v V, found, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return v, false, false
	}
	c.order.MoveToFront(el)
	e := el.Value.(*entry[V])
	return e.val, true, now.Before(e.expires)
}

// Put sets key to v, fresh for the TTL from now, evicting the least
// recently used entries beyond the size.
func (c *Cache[V]) Put(key string, v V, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*entry[V])
		e.val, e.expires = v, now.Add(c.ttl)
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&entry[V]{key: key, val: v, expires: now.Add(c.ttl)})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*entry[V]).key)
	}
}

// Len is the number of entries, stale ones included.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

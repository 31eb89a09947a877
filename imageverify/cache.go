package imageverify

import (
	"container/list"
	"sync"
	"time"
)

// lru is a map bounded in size (least recently used out first) whose
// entries expire ttl after they were put. Safe for concurrent use.
type lru[V any] struct {
	mu    sync.Mutex
	size  int
	ttl   time.Duration
	order *list.List
	items map[string]*list.Element
}

type lruEntry[V any] struct {
	key     string
	val     V
	expires time.Time
}

func newLRU[V any](size int, ttl time.Duration) *lru[V] {
	return &lru[V]{size: size, ttl: ttl, order: list.New(), items: make(map[string]*list.Element)}
}

func (c *lru[V]) get(key string, now time.Time) (v V, found, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return v, false, false
	}
	c.order.MoveToFront(el)
	e := el.Value.(*lruEntry[V])
	return e.val, true, now.Before(e.expires)
}

func (c *lru[V]) put(key string, v V, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*lruEntry[V])
		e.val, e.expires = v, now.Add(c.ttl)
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&lruEntry[V]{key: key, val: v, expires: now.Add(c.ttl)})
	for c.order.Len() > c.size {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*lruEntry[V]).key)
	}
}

package lru

import (
	"testing"
	"time"
)

func TestCache(t *testing.T) {
	t0 := time.Unix(1000, 0)
	c := New[int](2, time.Minute)
	c.Put("a", 1, t0)
	c.Put("b", 2, t0)
	if v, found, fresh := c.Get("a", t0.Add(30*time.Second)); v != 1 || !found || !fresh {
		t.Fatalf("a: %d %v %v", v, found, fresh)
	}
	// b is now the least recently used: c evicts it.
	c.Put("c", 3, t0)
	if _, found, _ := c.Get("b", t0); found {
		t.Fatal("b not evicted")
	}
	if c.Len() != 2 {
		t.Fatalf("len %d", c.Len())
	}
	// Stale but kept.
	if v, found, fresh := c.Get("a", t0.Add(2*time.Minute)); v != 1 || !found || fresh {
		t.Fatalf("stale a: %d %v %v", v, found, fresh)
	}
	// Put again: fresh from the new time, no new entry.
	c.Put("a", 4, t0.Add(2*time.Minute))
	if v, found, fresh := c.Get("a", t0.Add(2*time.Minute+time.Second)); v != 4 || !found || !fresh || c.Len() != 2 {
		t.Fatalf("a again: %d %v %v len %d", v, found, fresh, c.Len())
	}
	if _, found, _ := c.Get("none", t0); found {
		t.Fatal("found a key never put")
	}
}

package server

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/store"
)

// Snapshot is the compiled content of one store revision. It is immutable;
// the server swaps a new one in after each commit, and a decision loads the
// current one once, so it sees exactly one revision.
type Snapshot struct {
	Revision uint64
	Digest   string
	// Time is when the revision was committed.
	Time time.Time
	Set  *engine.PolicySet
	// objects are the stored objects of the revision, decoded.
	objects map[store.Key]*engine.Object
	// next is closed when a newer snapshot replaces this one.
	next chan struct{}
}

// Objects returns the number of stored objects.
func (s *Snapshot) Objects() int { return len(s.objects) }

// Object returns a stored object.
func (s *Snapshot) Object(k store.Key) (*engine.Object, bool) {
	o, ok := s.objects[k]
	return o, ok
}

// Next returns a channel closed when a newer snapshot is swapped in.
func (s *Snapshot) Next() <-chan struct{} { return s.next }

// sortedObjects returns the snapshot's objects in key order.
func sortedObjects(m map[store.Key]*engine.Object) []*engine.Object {
	keys := make([]store.Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	out := make([]*engine.Object, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// build compiles the content that results from applying changes to base.
// It returns the new object map and policy set, or the load errors that
// make the content invalid.
func (s *Server) build(base map[store.Key]*engine.Object, changes []store.Change) (map[store.Key]*engine.Object, *engine.PolicySet, error) {
	objs := make(map[store.Key]*engine.Object, len(base)+len(changes))
	for k, o := range base {
		objs[k] = o
	}
	for _, c := range changes {
		switch c.Op {
		case store.OpDelete:
			delete(objs, c.Key)
		case store.OpUpsert:
			o, err := decodeObject(c.Key, c.Value)
			if err != nil {
				return nil, nil, err
			}
			if got := KeyOf(o); got != c.Key {
				return nil, nil, &engine.LoadError{Source: o.Source, Object: o.Ref(), Detail: fmt.Sprintf("key %s does not match the object (%s)", c.Key, got)}
			}
			if err := storable(o); err != nil {
				return nil, nil, err
			}
			objs[c.Key] = o
		}
	}
	set, err := s.compiler.Compile(sortedObjects(objs), engine.Options{})
	if err != nil {
		return nil, nil, err
	}
	return objs, set, nil
}

// swap makes next the current snapshot and wakes whoever waits on the old one.
func (s *Server) swap(next *Snapshot) {
	s.swapMu.Lock()
	defer s.swapMu.Unlock()
	prev := s.snap.Load()
	s.snap.Store(next)
	if prev != nil {
		close(prev.next)
	}
	s.onSwap(next)
}

// Current returns the current snapshot.
func (s *Server) Current() *Snapshot { return s.snap.Load() }

// WaitRevision returns a snapshot at rev or later, waiting until ctx ends.
// On timeout it returns the current snapshot and ctx's error.
func (s *Server) WaitRevision(ctx context.Context, rev uint64) (*Snapshot, error) {
	for {
		cur := s.snap.Load()
		if cur.Revision >= rev {
			return cur, nil
		}
		select {
		case <-cur.next:
		case <-ctx.Done():
			return s.snap.Load(), ctx.Err()
		}
	}
}

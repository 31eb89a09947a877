package server

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/report"
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
	// objects are the stored objects of the revision, decoded, in key order.
	objects *objectSet
	// next is closed when a newer snapshot replaces this one.
	next chan struct{}
	// reports remembers the JSON of report results made at this revision
	// (DecideStream and DecideBatch policy_reports).
	reports report.ResultCache
}

// Objects returns the number of stored objects.
func (s *Snapshot) Objects() int { return s.objects.len() }

// Object returns a stored object.
func (s *Snapshot) Object(k store.Key) (*manifest.Object, bool) { return s.objects.get(k) }

// Next returns a channel closed when a newer snapshot is swapped in.
func (s *Snapshot) Next() <-chan struct{} { return s.next }

// objectSet is an immutable set of objects in key order.
type objectSet struct {
	keys []store.Key
	objs []*manifest.Object
}

func (o *objectSet) len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

func (o *objectSet) get(k store.Key) (*manifest.Object, bool) {
	if o == nil {
		return nil, false
	}
	i := sort.Search(len(o.keys), func(i int) bool { return !keyLess(o.keys[i], k) })
	if i < len(o.keys) && o.keys[i] == k {
		return o.objs[i], true
	}
	return nil, false
}

// apply returns the set with changes applied: a merge of two sorted
// sequences, so a commit costs O(n) without sorting.
func (o *objectSet) apply(changes []store.Change, sources map[store.Key]string) (*objectSet, error) {
	if !sort.SliceIsSorted(changes, func(i, j int) bool { return keyLess(changes[i].Key, changes[j].Key) }) {
		changes = append([]store.Change(nil), changes...)
		sort.SliceStable(changes, func(i, j int) bool { return keyLess(changes[i].Key, changes[j].Key) })
	}
	n := o.len()
	out := &objectSet{keys: make([]store.Key, 0, n+len(changes)), objs: make([]*manifest.Object, 0, n+len(changes))}
	i := 0
	for _, c := range changes {
		for i < n && keyLess(o.keys[i], c.Key) {
			out.keys = append(out.keys, o.keys[i])
			out.objs = append(out.objs, o.objs[i])
			i++
		}
		if i < n && o.keys[i] == c.Key {
			i++ // replaced or deleted
		}
		if c.Op != store.OpUpsert {
			continue
		}
		obj, err := decodeObject(c.Key, c.Value)
		if err != nil {
			return nil, err
		}
		if src, ok := sources[c.Key]; ok {
			obj.Source = src
		}
		if got := KeyOf(obj); got != c.Key {
			return nil, &manifest.LoadError{Source: obj.Source, Object: obj.Ref(), Detail: fmt.Sprintf("key %s does not match the object (%s)", c.Key, got)}
		}
		if err := storable(obj); err != nil {
			return nil, err
		}
		if k := len(out.keys); k > 0 && out.keys[k-1] == c.Key {
			out.objs[k-1] = obj // last change of a key wins
			continue
		}
		out.keys = append(out.keys, c.Key)
		out.objs = append(out.objs, obj)
	}
	for ; i < n; i++ {
		out.keys = append(out.keys, o.keys[i])
		out.objs = append(out.objs, o.objs[i])
	}
	return out, nil
}

// build compiles the content that results from applying changes to base.
// It returns the new object set and policy set, or the load errors that
// make the content invalid.
//
// sources name where upserted objects come from (a file, a request field),
// for errors; objects without one are named by their store key.
func (s *Server) build(base *objectSet, changes []store.Change, sources map[store.Key]string) (*objectSet, *engine.PolicySet, error) {
	objs, err := base.apply(changes, sources)
	if err != nil {
		return nil, nil, err
	}
	set, err := s.compiler.Compile(objs.objs, engine.Options{})
	if err != nil {
		return nil, nil, err
	}
	if err := notParams(objs.objs, set); err != nil {
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
	s.logPodSecurity(prev, next)
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

// keyLess orders keys by group, kind, namespace and name.
func keyLess(a, b store.Key) bool {
	if a.Group != b.Group {
		return a.Group < b.Group
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

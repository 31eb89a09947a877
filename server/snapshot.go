package server

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"context"
	"sort"
	"time"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
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
	// objects are the stored policy objects of the revision (every class
	// but context objects), decoded, in key order.
	objects *objectSet
	// view holds the context objects: what resource.Get and resource.List
	// read (package clusterdata).
	view *clusterdata.View
	// globals answers globalContext.Get from the revision's
	// GlobalContextEntries and context objects.
	globals *clusterdata.Globals
	// libs is the context of the revision's decisions (Context adds the
	// decision's read record).
	libs *clusterdata.Context
	// next is closed when a newer snapshot replaces this one.
	next chan struct{}
	// reports remembers the JSON of report results made at this revision
	// (DecideStream and DecideBatch policy_reports).
	reports report.ResultCache
}

// Objects returns the number of stored objects.
func (s *Snapshot) Objects() int { return s.objects.len() + contextLen(s.view) }

// ContextObjects returns the number of stored context objects.
func (s *Snapshot) ContextObjects() int { return contextLen(s.view) }

// namespaceGK is v1 Namespace: a policy object (the requests'
// namespaceObject) that the view holds too, for resource.Get/List; it is
// stored and counted once, as a policy object.
var namespaceGK = schema.GroupKind{Kind: "Namespace"}

// contextLen is the number of context objects of a view (its Namespaces
// are policy objects).
func contextLen(v *clusterdata.View) int { return v.Len() - v.CountOf(namespaceGK) }

// isNamespaceKey says whether k is a Namespace's key in the view.
func isNamespaceKey(k clusterdata.Key) bool { return k.Group == "" && k.Kind == "Namespace" }

// Object returns a stored object.
func (s *Snapshot) Object(k store.Key) (*manifest.Object, bool) {
	if o, ok := s.objects.get(k); ok {
		return o, true
	}
	return s.view.Get(contextKey(k))
}

// Next returns a channel closed when a newer snapshot is swapped in.
func (s *Snapshot) Next() <-chan struct{} { return s.next }

// Context returns the context a decision at this revision reads
// (resource.*, globalContext.*, and the calls out the server is configured
// with), without recording what it reads.
func (s *Snapshot) Context() kyvernocel.Context { return s.libs }

// RecordedContext returns the context of one decision at this revision and
// the record of what the decision reads through it (one allocation).
func (s *Snapshot) RecordedContext() (kyvernocel.Context, *clusterdata.Reads) {
	d := &recorded{c: *s.libs}
	d.c.Reads = &d.r
	return &d.c, &d.r
}

type recorded struct {
	c clusterdata.Context
	r clusterdata.Reads
}

// GlobalContextEntries returns the revision's GlobalContextEntries, by
// name: what a refresher of apiCall entries fetches (committing each
// result with clusterdata.NewEntryData).
func (s *Snapshot) GlobalContextEntries() []*clusterdata.Entry { return s.globals.Entries() }

func contextKey(k store.Key) clusterdata.Key {
	return clusterdata.Key{Group: k.Group, Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
}

func storeKey(k clusterdata.Key) store.Key {
	return store.Key{Group: k.Group, Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
}

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

// objectChange is a decoded change of the object set: obj nil deletes key.
type objectChange struct {
	key store.Key
	obj *manifest.Object
}

// apply returns the set with changes applied: a merge of two sorted
// sequences, so a commit costs O(n) without sorting.
func (o *objectSet) apply(changes []objectChange) *objectSet {
	if len(changes) == 0 && o != nil {
		return o
	}
	if !sort.SliceIsSorted(changes, func(i, j int) bool { return keyLess(changes[i].key, changes[j].key) }) {
		changes = append([]objectChange(nil), changes...)
		sort.SliceStable(changes, func(i, j int) bool { return keyLess(changes[i].key, changes[j].key) })
	}
	n := o.len()
	out := &objectSet{keys: make([]store.Key, 0, n+len(changes)), objs: make([]*manifest.Object, 0, n+len(changes))}
	i := 0
	for _, c := range changes {
		for i < n && keyLess(o.keys[i], c.key) {
			out.keys = append(out.keys, o.keys[i])
			out.objs = append(out.objs, o.objs[i])
			i++
		}
		if i < n && o.keys[i] == c.key {
			i++ // replaced or deleted
		}
		if k := len(out.keys); k > 0 && out.keys[k-1] == c.key {
			// last change of a key wins
			if c.obj == nil {
				out.keys, out.objs = out.keys[:k-1], out.objs[:k-1]
			} else {
				out.objs[k-1] = c.obj
			}
			continue
		}
		if c.obj == nil {
			continue
		}
		out.keys = append(out.keys, c.key)
		out.objs = append(out.objs, c.obj)
	}
	for ; i < n; i++ {
		out.keys = append(out.keys, o.keys[i])
		out.objs = append(out.objs, o.objs[i])
	}
	return out
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

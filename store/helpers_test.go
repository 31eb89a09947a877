package store

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// openT opens a fresh store in a temp dir; it is closed at the end of the
// test, and a failing Close fails the test.
func openT(t testing.TB, opts Options) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "data", "arbiter.db"), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func vp(name string) Key {
	return Key{Group: "policies.kyverno.io", Kind: "ValidatingPolicy", Name: name}
}

func nsKey(ns, name string) Key {
	return Key{Group: "policies.kyverno.io", Kind: "PolicyException", Namespace: ns, Name: name}
}

func up(k Key, v string) Change { return Change{Op: OpUpsert, Key: k, Value: []byte(v)} }
func del(k Key) Change          { return Change{Op: OpDelete, Key: k} }

func mustApply(t testing.TB, s *Store, b Batch) Commit {
	t.Helper()
	c, err := s.Apply(context.Background(), b, nil)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return c
}

func apply(t testing.TB, s *Store, changes ...Change) Commit {
	t.Helper()
	return mustApply(t, s, Batch{Changes: changes})
}

// contents returns the store's objects as key → value.
func contents(t testing.TB, s *Store) map[Key]string {
	t.Helper()
	snap, err := s.List(context.Background())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	m := make(map[Key]string, len(snap.Objects))
	for _, o := range snap.Objects {
		m[o.Key] = string(o.Value)
	}
	return m
}

// modelDigest is the digest of a key → value model, via ComputeDigest.
func modelDigest(t testing.TB, m map[Key]string) string {
	t.Helper()
	objs := make([]Object, 0, len(m))
	for k, v := range m {
		objs = append(objs, Object{Key: k, Value: []byte(v)})
	}
	d, err := ComputeDigest(objs)
	if err != nil {
		t.Fatalf("ComputeDigest: %v", err)
	}
	return d
}

// follow brings f up to date with p through ChangesSince/ApplyChangeSet,
// installing a snapshot when the history was compacted. It returns the number
// of snapshots installed.
func follow(t testing.TB, p, f *Store, limit int) (snapshots int) {
	t.Helper()
	ctx := context.Background()
	for {
		rev, _ := f.Revision()
		sets, err := p.ChangesSince(ctx, rev, limit)
		if err != nil {
			var re *RevisionError
			if !errorsAs(err, &re) || (re.Err != ErrCompacted && re.Err != ErrFutureRevision) {
				t.Fatalf("ChangesSince(%d): %v", rev, err)
			}
			snap, err := p.List(ctx)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if err := f.ReplaceAll(ctx, snap, nil); err != nil {
				t.Fatalf("ReplaceAll: %v", err)
			}
			snapshots++
			continue
		}
		if len(sets) == 0 {
			return snapshots
		}
		for _, cs := range sets {
			if err := f.ApplyChangeSet(ctx, cs, nil); err != nil {
				t.Fatalf("ApplyChangeSet(%d): %v", cs.Revision, err)
			}
		}
	}
}

func sameObjects(a, b []Object) bool {
	return slices.EqualFunc(a, b, func(x, y Object) bool { return x.Key == y.Key && bytes.Equal(x.Value, y.Value) })
}

// manifest returns a JSON-ish value of about size bytes.
func manifest(i, gen, size int) []byte {
	head := fmt.Sprintf(`{"apiVersion":"policies.kyverno.io/v1","kind":"ValidatingPolicy","metadata":{"name":"p-%05d","generation":%d},"spec":{"pad":"`, i, gen)
	pad := max(size-len(head)-3, 0)
	return []byte(head + string(bytes.Repeat([]byte("x"), pad)) + `"}}`)
}

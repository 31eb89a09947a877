package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

var errorsAs = errors.As

func TestKeyStringAndParse(t *testing.T) {
	tests := []struct {
		key  Key
		want string
	}{
		{Key{Group: "policies.kyverno.io", Kind: "ValidatingPolicy", Name: "require-labels"}, "policies.kyverno.io/ValidatingPolicy//require-labels"},
		{Key{Kind: "Namespace", Name: "default"}, "/Namespace//default"},
		{Key{Group: "policies.kyverno.io", Kind: "PolicyException", Namespace: "team-a", Name: "allow:x"}, "policies.kyverno.io/PolicyException/team-a/allow:x"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.key.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
			back, err := ParseKey(tt.want)
			if err != nil {
				t.Fatalf("ParseKey: %v", err)
			}
			if back != tt.key {
				t.Fatalf("ParseKey(%q) = %+v, want %+v", tt.want, back, tt.key)
			}
		})
	}
}

func TestKeyValidate(t *testing.T) {
	tests := []struct {
		name string
		key  Key
	}{
		{"no kind", Key{Name: "x"}},
		{"no name", Key{Kind: "Pod"}},
		{"slash in name", Key{Kind: "Pod", Name: "a/b"}},
		{"slash in group", Key{Group: "a/b", Kind: "Pod", Name: "x"}},
		{"NUL in namespace", Key{Kind: "Pod", Namespace: "a\x00b", Name: "x"}},
		{"long name", Key{Kind: "Pod", Name: strings.Repeat("n", MaxKeyPartLen+1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.key.Validate(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid", err)
			}
		})
	}
	for _, s := range []string{"", "a/b/c", "a/b/c/d/e", "g/Kind/ns/"} {
		if _, err := ParseKey(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseKey(%q) = %v, want ErrInvalid", s, err)
		}
	}
}

// TestGoldenDigest pins the digest construction: the same objects must give
// the same digest on every machine and in every version of the store.
func TestGoldenDigest(t *testing.T) {
	if EmptyDigest != "sha256:03503581446c331ff2634c9e2137f3aef53316d581a80880d2118854f2745b0d" {
		t.Errorf("EmptyDigest = %s", EmptyDigest)
	}
	d, err := ComputeDigest([]Object{
		{Key: vp("a"), Value: []byte(`{"a":1}`)},
		{Key: Key{Kind: "Namespace", Name: "default"}, Value: []byte(`{}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if d != "sha256:2a4cf5013fe3144f779132fae501820bbd5aeff0d9fd19881c36c4061b685029" {
		t.Errorf("digest of the two objects = %s", d)
	}
	s := openT(t, Options{NoSync: true})
	if _, dg := s.Revision(); dg != EmptyDigest {
		t.Errorf("new store digest %s, want EmptyDigest %s", dg, EmptyDigest)
	}
}

func TestApplySequence(t *testing.T) {
	s := openT(t, Options{NoSync: true})
	model := map[Key]string{}
	steps := []struct {
		name          string
		changes       []Change
		wantRev       uint64
		wantUnchanged bool
		wantEffective []Change
	}{
		{"create two", []Change{up(vp("b"), "B1"), up(vp("a"), "A1")}, 1, false, []Change{up(vp("a"), "A1"), up(vp("b"), "B1")}},
		{"identical upsert is a no-op", []Change{up(vp("a"), "A1")}, 1, true, nil},
		{"delete of absent key is a no-op", []Change{del(vp("zz"))}, 1, true, nil},
		{"empty batch", nil, 1, true, nil},
		{"update one, identical upsert of the other", []Change{up(vp("a"), "A2"), up(vp("b"), "B1")}, 2, false, []Change{up(vp("a"), "A2")}},
		{"delete last but one", []Change{del(vp("a"))}, 3, false, []Change{del(vp("a"))}},
		{"namespaced object", []Change{up(nsKey("team-a", "x"), "X1")}, 4, false, []Change{up(nsKey("team-a", "x"), "X1")}},
		{"delete everything", []Change{del(vp("b")), del(nsKey("team-a", "x"))}, 5, false, []Change{del(nsKey("team-a", "x")), del(vp("b"))}}, // key order: PolicyException < ValidatingPolicy,
	}
	var lastRev uint64
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			c := apply(t, s, st.changes...)
			if c.Revision != st.wantRev || c.Unchanged != st.wantUnchanged {
				t.Fatalf("commit rev %d unchanged %v, want %d %v", c.Revision, c.Unchanged, st.wantRev, st.wantUnchanged)
			}
			if c.Revision < lastRev {
				t.Fatalf("revision went backwards: %d after %d", c.Revision, lastRev)
			}
			lastRev = c.Revision
			if !slices.EqualFunc(c.Changes, st.wantEffective, func(a, b Change) bool {
				return a.Op == b.Op && a.Key == b.Key && bytes.Equal(a.Value, b.Value)
			}) {
				t.Fatalf("effective changes %v, want %v", c.Changes, st.wantEffective)
			}
			for _, ch := range st.changes {
				if ch.Op == OpUpsert {
					model[ch.Key] = string(ch.Value)
				} else {
					delete(model, ch.Key)
				}
			}
			rev, digest := s.Revision()
			if rev != st.wantRev || digest != c.Digest {
				t.Fatalf("Revision() = %d %s, commit said %d %s", rev, digest, c.Revision, c.Digest)
			}
			if want := modelDigest(t, model); digest != want {
				t.Fatalf("digest %s, model digest %s", digest, want)
			}
			got := contents(t, s)
			if !mapsEqual(got, model) {
				t.Fatalf("content %v, want %v", got, model)
			}
			if st := s.Status(); st.Objects != len(model) {
				t.Fatalf("Status().Objects = %d, want %d", st.Objects, len(model))
			}
		})
	}
	if _, d := s.Revision(); d != EmptyDigest {
		t.Fatalf("digest after deleting everything %s, want EmptyDigest", d)
	}
}

func mapsEqual(a, b map[Key]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestApplyInvalid(t *testing.T) {
	s := openT(t, Options{NoSync: true})
	apply(t, s, up(vp("a"), "A"))
	tests := []struct {
		name    string
		batch   Batch
		wantMsg string
	}{
		{"duplicate key", Batch{Changes: []Change{up(vp("a"), "1"), up(vp("b"), "2"), del(vp("a"))}}, "changes 0 and 2 have the same key"},
		{"no kind", Batch{Changes: []Change{up(Key{Name: "x"}, "1")}}, "kind is empty"},
		{"slash in name", Batch{Changes: []Change{up(vp("a/b"), "1")}}, "contains '/'"},
		{"zero op", Batch{Changes: []Change{{Key: vp("c"), Value: []byte("1")}}}, "unknown op"},
		{"delete with value", Batch{Changes: []Change{{Op: OpDelete, Key: vp("a"), Value: []byte("1")}}}, "delete carries a value"},
		{"empty upsert value", Batch{Changes: []Change{up(vp("a"), "")}}, "empty value"},
		{"idempotency key too long", Batch{IdempotencyKey: strings.Repeat("k", MaxIdempotencyKeyLen+1)}, "idempotency key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := s.Revision()
			_, err := s.Apply(context.Background(), tt.batch, nil)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Apply = %v, want ErrInvalid containing %q", err, tt.wantMsg)
			}
			if after, _ := s.Revision(); after != before {
				t.Fatalf("revision moved %d -> %d", before, after)
			}
		})
	}
	if got := contents(t, s); !mapsEqual(got, map[Key]string{vp("a"): "A"}) {
		t.Fatalf("content changed: %v", got)
	}
}

// TestDigestIndependentOfOrder: random object sets applied in different
// orders and batchings, with detours through other values and extra objects,
// end with the same digest, equal to ComputeDigest of the set.
func TestDigestIndependentOfOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		n := rng.IntN(60)
		objs := make([]Object, n)
		for i := range objs {
			ns := ""
			if rng.IntN(2) == 0 {
				ns = "ns" + string(rune('a'+rng.IntN(3)))
			}
			objs[i] = Object{Key: Key{Group: "g", Kind: []string{"A", "B"}[rng.IntN(2)], Namespace: ns, Name: "o" + itoa(i)}, Value: manifest(i, rng.IntN(3), 20+rng.IntN(200))}
		}
		want, err := ComputeDigest(objs)
		if err != nil {
			t.Fatal(err)
		}

		a := openT(t, Options{NoSync: true})
		changes := make([]Change, n)
		for i, o := range objs {
			changes[i] = Change{Op: OpUpsert, Key: o.Key, Value: o.Value}
		}
		mustApply(t, a, Batch{Changes: changes})

		b := openT(t, Options{NoSync: true})
		perm := rng.Perm(n)
		for i := 0; i < n; {
			size := 1 + rng.IntN(5)
			var batch []Change
			for ; i < n && len(batch) < size; i++ {
				o := objs[perm[i]]
				if rng.IntN(3) == 0 { // detour: a different value first
					apply(t, b, up(o.Key, "detour"))
				}
				batch = append(batch, Change{Op: OpUpsert, Key: o.Key, Value: o.Value})
			}
			extra := Key{Group: "g", Kind: "Extra", Name: "e" + itoa(i)}
			batch = append(batch, up(extra, "temp"))
			apply(t, b, batch...)
			apply(t, b, del(extra))
		}

		_, da := a.Revision()
		rb, db := b.Revision()
		if da != want || db != want {
			t.Fatalf("trial %d (%d objects): one batch %s, shuffled %s (rev %d), ComputeDigest %s", trial, n, da, db, rb, want)
		}
		if !sameObjects(listT(t, a), listT(t, b)) {
			t.Fatalf("trial %d: contents differ", trial)
		}
	}
}

func itoa(i int) string { return fmt.Sprintf("%03d", i) }

func listT(t testing.TB, s *Store) []Object {
	t.Helper()
	snap, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap.Objects
}

// TestFollowersConverge: two stores fed the primary's change sets through
// ApplyChangeSet reach the primary's revision and digest, and every
// intermediate digest matches the primary's commit.
func TestFollowersConverge(t *testing.T) {
	ctx := context.Background()
	p := openT(t, Options{NoSync: true, KeepRevisions: 1000})
	f1 := openT(t, Options{NoSync: true})
	f2 := openT(t, Options{NoSync: true})
	rng := rand.New(rand.NewPCG(3, 4))
	digests := map[uint64]string{}
	for i := range 300 {
		keys := rng.Perm(40)[:1+rng.IntN(5)]
		var changes []Change
		for _, k := range keys {
			key := nsKey("ns"+itoa(k%3), "p"+itoa(k))
			if rng.IntN(4) == 0 {
				changes = append(changes, del(key))
			} else {
				changes = append(changes, Change{Op: OpUpsert, Key: key, Value: manifest(k, rng.IntN(4), 100)})
			}
		}
		c := apply(t, p, changes...)
		digests[c.Revision] = c.Digest
		if i%7 == 0 {
			follow(t, p, f1, 5)
			if r1, d1 := f1.Revision(); d1 != digests[r1] {
				t.Fatalf("follower at %d has digest %s, primary had %s", r1, d1, digests[r1])
			}
		}
	}
	follow(t, p, f1, 5)
	if n := follow(t, p, f2, 0); n != 0 {
		t.Fatalf("follower 2 needed %d snapshots, want 0", n)
	}
	rp, dp := p.Revision()
	for name, f := range map[string]*Store{"f1": f1, "f2": f2} {
		if r, d := f.Revision(); r != rp || d != dp {
			t.Fatalf("%s at %d %s, primary at %d %s", name, r, d, rp, dp)
		}
		if !sameObjects(listT(t, f), listT(t, p)) {
			t.Fatalf("%s content differs from primary", name)
		}
		if err := f.Verify(ctx); err != nil {
			t.Fatalf("%s Verify: %v", name, err)
		}
		// A follower's changelog serves the same change sets as the primary's.
		fs, err := f.ChangesSince(ctx, rp-10, 0)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := p.ChangesSince(ctx, rp-10, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(fs) != 10 || !changeSetsEqual(fs, ps) {
			t.Fatalf("%s changelog differs from primary's", name)
		}
	}
}

func changeSetsEqual(a, b []ChangeSet) bool {
	return slices.EqualFunc(a, b, func(x, y ChangeSet) bool {
		return x.Revision == y.Revision && x.Digest == y.Digest && x.Time.Equal(y.Time) &&
			slices.EqualFunc(x.Changes, y.Changes, func(c, d Change) bool {
				return c.Op == d.Op && c.Key == d.Key && bytes.Equal(c.Value, d.Value)
			})
	})
}

func TestExpectedRevision(t *testing.T) {
	s := openT(t, Options{NoSync: true})
	apply(t, s, up(vp("a"), "1"))
	apply(t, s, up(vp("a"), "2")) // revision 2
	tests := []struct {
		name     string
		expected uint64
		wantErr  bool
	}{
		{"stale", 1, true},
		{"ahead", 9, true},
		{"current", 2, false},
		{"zero means no check", 0, false},
	}
	val := 3
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := s.Revision()
			val++
			_, err := s.Apply(context.Background(), Batch{Changes: []Change{up(vp("a"), itoa(val))}, ExpectedRevision: tt.expected}, nil)
			after, _ := s.Revision()
			if !tt.wantErr {
				if err != nil || after != before+1 {
					t.Fatalf("Apply = %v, revision %d -> %d", err, before, after)
				}
				return
			}
			var re *RevisionError
			if !errors.Is(err, ErrConflict) || !errors.As(err, &re) || re.Current != before || re.Requested != tt.expected {
				t.Fatalf("Apply = %v (%+v), want ErrConflict with Current %d", err, re, before)
			}
			if after != before {
				t.Fatalf("revision moved on conflict: %d -> %d", before, after)
			}
		})
	}
}

func TestIdempotency(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{NoSync: true, KeepRevisions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()

	first := mustApply(t, s, Batch{Changes: []Change{up(vp("a"), "A1"), up(vp("b"), "B1")}, IdempotencyKey: "push-1"})
	if first.Revision != 1 || first.Replayed {
		t.Fatalf("first commit %+v", first)
	}
	// A retry, even with different content and a stale expected revision, returns the original.
	again := mustApply(t, s, Batch{Changes: []Change{up(vp("a"), "OTHER")}, ExpectedRevision: 99, IdempotencyKey: "push-1"})
	if !again.Replayed || again.Revision != 1 || again.Digest != first.Digest || !again.Time.Equal(first.Time) || len(again.Changes) != 2 || string(again.Changes[0].Value) != "A1" {
		t.Fatalf("replay = %+v, want the original commit %+v", again, first)
	}
	if rev, _ := s.Revision(); rev != 1 {
		t.Fatalf("replay moved the revision to %d", rev)
	}
	if got := contents(t, s)[vp("a")]; got != "A1" {
		t.Fatalf("replay applied its changes: a = %q", got)
	}

	// An unchanged batch is recorded too: a retry after someone else's write must not apply it.
	unch := mustApply(t, s, Batch{Changes: []Change{up(vp("a"), "A1")}, IdempotencyKey: "push-2"})
	if !unch.Unchanged || unch.Revision != 1 {
		t.Fatalf("unchanged commit %+v", unch)
	}
	apply(t, s, up(vp("a"), "A2")) // revision 2, by another writer
	retry := mustApply(t, s, Batch{Changes: []Change{up(vp("a"), "A1")}, IdempotencyKey: "push-2"})
	if !retry.Replayed || !retry.Unchanged || retry.Revision != 1 {
		t.Fatalf("retry of unchanged batch = %+v", retry)
	}
	if got := contents(t, s)[vp("a")]; got != "A2" {
		t.Fatalf("retry of an unchanged batch applied it: a = %q", got)
	}

	// Records survive a reopen.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path, Options{NoSync: true, KeepRevisions: 2}); err != nil {
		t.Fatal(err)
	}
	if c := mustApply(t, s, Batch{Changes: []Change{up(vp("z"), "Z")}, IdempotencyKey: "push-1"}); !c.Replayed || c.Revision != 1 {
		t.Fatalf("after reopen, replay = %+v", c)
	}

	// Records expire with the changelog entry of their revision (KeepRevisions 2).
	apply(t, s, up(vp("c"), "C1")) // 3: oldest 1, entry 1 gone
	if c := mustApply(t, s, Batch{Changes: []Change{up(vp("d"), "D1")}, IdempotencyKey: "push-1"}); c.Replayed || c.Revision != 4 {
		t.Fatalf("expired key: commit %+v, want a fresh revision 4", c)
	}
	if _, err := s.ChangesSince(ctx, 0, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("ChangesSince(0) = %v, want ErrCompacted", err)
	}
	if err := s.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestValidateHook(t *testing.T) {
	ctx := context.Background()
	errBad := errors.New("spec.validations[0].expression: undeclared reference")

	t.Run("refusal leaves the store unchanged", func(t *testing.T) {
		s := openT(t, Options{NoSync: true})
		base := apply(t, s, up(vp("a"), "A1"), up(vp("b"), "B1"))
		calls := 0
		_, err := s.Apply(ctx, Batch{Changes: []Change{up(vp("a"), "BAD"), del(vp("b")), up(vp("c"), "C1")}}, func(ctx context.Context, p *Pending) error {
			calls++
			return errBad
		})
		if !errors.Is(err, ErrRejected) || !errors.Is(err, errBad) {
			t.Fatalf("Apply = %v, want ErrRejected wrapping the hook's error", err)
		}
		if calls != 1 {
			t.Fatalf("hook called %d times", calls)
		}
		if rev, d := s.Revision(); rev != base.Revision || d != base.Digest {
			t.Fatalf("store moved to %d %s", rev, d)
		}
		if got := contents(t, s); !mapsEqual(got, map[Key]string{vp("a"): "A1", vp("b"): "B1"}) {
			t.Fatalf("content changed: %v", got)
		}
		if sets, err := s.ChangesSince(ctx, base.Revision, 0); err != nil || len(sets) != 0 {
			t.Fatalf("ChangesSince = %v %v, want nothing", sets, err)
		}
		if err := s.Verify(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("hook sees the would-be state", func(t *testing.T) {
		s := openT(t, Options{NoSync: true})
		apply(t, s, up(vp("a"), "A1"), up(vp("b"), "B1"))
		var seen struct {
			base, rev   uint64
			digest      string
			a, c        string
			bFound      bool
			n, forEachN int
			changes     []Change
		}
		var kept *Pending
		c, err := s.Apply(ctx, Batch{Changes: []Change{up(vp("c"), "C1"), del(vp("b")), up(vp("a"), "A2"), del(vp("nope"))}}, func(ctx context.Context, p *Pending) error {
			kept = p
			seen.base, seen.rev, seen.digest, seen.n = p.Base(), p.Revision(), p.Digest(), p.Len()
			av, _ := p.Get(vp("a"))
			cv, _ := p.Get(vp("c"))
			seen.a, seen.c = string(av), string(cv)
			_, seen.bFound = p.Get(vp("b"))
			seen.changes = slices.Clone(p.Changes())
			return p.ForEach(func(o Object) error { seen.forEachN++; return nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen.base != 1 || seen.rev != 2 || seen.digest != c.Digest || seen.n != 2 || seen.forEachN != 2 {
			t.Fatalf("hook saw base %d rev %d digest %s len %d foreach %d; commit %+v", seen.base, seen.rev, seen.digest, seen.n, seen.forEachN, c)
		}
		if seen.a != "A2" || seen.c != "C1" || seen.bFound {
			t.Fatalf("hook saw a=%q c=%q b found=%v", seen.a, seen.c, seen.bFound)
		}
		wantKeys := []Key{vp("a"), vp("b"), vp("c")} // effective, sorted, the no-op delete dropped
		if len(seen.changes) != 3 || seen.changes[0].Key != wantKeys[0] || seen.changes[1].Key != wantKeys[1] || seen.changes[1].Op != OpDelete || seen.changes[2].Key != wantKeys[2] {
			t.Fatalf("hook saw changes %v", seen.changes)
		}
		defer func() {
			if recover() == nil {
				t.Fatal("using Pending after the hook returned did not panic")
			}
		}()
		kept.Get(vp("a"))
	})

	t.Run("not called for an unchanged batch", func(t *testing.T) {
		s := openT(t, Options{NoSync: true})
		apply(t, s, up(vp("a"), "A1"))
		c, err := s.Apply(ctx, Batch{Changes: []Change{up(vp("a"), "A1")}}, func(context.Context, *Pending) error {
			return errBad
		})
		if err != nil || !c.Unchanged {
			t.Fatalf("Apply = %+v, %v; want unchanged without calling the hook", c, err)
		}
	})

	t.Run("follower refusal", func(t *testing.T) {
		p := openT(t, Options{NoSync: true})
		f := openT(t, Options{NoSync: true})
		apply(t, p, up(vp("a"), "A1"))
		sets, err := p.ChangesSince(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = f.ApplyChangeSet(ctx, sets[0], func(context.Context, *Pending) error { return errBad })
		if !errors.Is(err, ErrRejected) {
			t.Fatalf("ApplyChangeSet = %v, want ErrRejected", err)
		}
		if rev, d := f.Revision(); rev != 0 || d != EmptyDigest {
			t.Fatalf("follower moved to %d %s", rev, d)
		}
	})

	t.Run("cancelled context abandons the write", func(t *testing.T) {
		s := openT(t, Options{NoSync: true})
		cctx, cancel := context.WithCancel(ctx)
		_, err := s.Apply(cctx, Batch{Changes: []Change{up(vp("a"), "A1")}}, func(context.Context, *Pending) error {
			cancel()
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply = %v, want context.Canceled", err)
		}
		if rev, _ := s.Revision(); rev != 0 || len(contents(t, s)) != 0 {
			t.Fatalf("cancelled write was committed (revision %d)", rev)
		}
	})
}

func TestChangesSince(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{NoSync: true, KeepRevisions: 3})
	var commits []Commit
	for i := range 6 {
		commits = append(commits, apply(t, s, up(vp("p"+itoa(i%2)), "v"+itoa(i)), up(vp("q"), "q"+itoa(i))))
	}
	if st := s.Status(); st.Revision != 6 || st.Oldest != 3 {
		t.Fatalf("status %+v, want revision 6 oldest 3", st)
	}
	tests := []struct {
		name     string
		rev      uint64
		limit    int
		wantRevs []uint64
		wantErr  error
	}{
		{"all retained", 3, 0, []uint64{4, 5, 6}, nil},
		{"limit", 3, 2, []uint64{4, 5}, nil},
		{"tail", 5, 10, []uint64{6}, nil},
		{"up to date", 6, 0, nil, nil},
		{"compacted", 2, 0, nil, ErrCompacted},
		{"from scratch after compaction", 0, 0, nil, ErrCompacted},
		{"ahead", 7, 0, nil, ErrFutureRevision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sets, err := s.ChangesSince(ctx, tt.rev, tt.limit)
			if tt.wantErr != nil {
				var re *RevisionError
				if !errors.Is(err, tt.wantErr) || !errors.As(err, &re) || re.Current != 6 || re.Requested != tt.rev {
					t.Fatalf("ChangesSince = %v, want %v", err, tt.wantErr)
				}
				if tt.wantErr == ErrCompacted && re.Oldest != 3 {
					t.Fatalf("Oldest = %d, want 3", re.Oldest)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var revs []uint64
			for _, cs := range sets {
				revs = append(revs, cs.Revision)
				c := commits[cs.Revision-1]
				if cs.Digest != c.Digest || !cs.Time.Equal(c.Time) || len(cs.Changes) != len(c.Changes) {
					t.Fatalf("change set %d = %+v, commit was %+v", cs.Revision, cs, c)
				}
				for i := range cs.Changes {
					if cs.Changes[i].Key != c.Changes[i].Key || !bytes.Equal(cs.Changes[i].Value, c.Changes[i].Value) {
						t.Fatalf("change set %d change %d = %+v, commit had %+v", cs.Revision, i, cs.Changes[i], c.Changes[i])
					}
				}
			}
			if !slices.Equal(revs, tt.wantRevs) {
				t.Fatalf("revisions %v, want %v", revs, tt.wantRevs)
			}
		})
	}
}

func TestApplyChangeSetErrors(t *testing.T) {
	ctx := context.Background()
	p := openT(t, Options{NoSync: true})
	f := openT(t, Options{NoSync: true})
	apply(t, p, up(vp("a"), "A1"))
	apply(t, p, up(vp("b"), "B1"))
	sets, err := p.ChangesSince(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	if err := f.ApplyChangeSet(ctx, sets[1], nil); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("skipping revision 1: %v, want ErrOutOfOrder", err)
	}
	if err := f.ApplyChangeSet(ctx, sets[0], nil); err != nil {
		t.Fatal(err)
	}
	var re *RevisionError
	if err := f.ApplyChangeSet(ctx, sets[0], nil); !errors.As(err, &re) || re.Err != ErrOutOfOrder || re.Current != 1 || re.Requested != 1 {
		t.Fatalf("re-applying revision 1: %v, want ErrOutOfOrder with current 1", err)
	}

	bad := sets[1]
	bad.Changes = []Change{up(vp("b"), "TAMPERED")}
	var dm *DigestMismatchError
	if err := f.ApplyChangeSet(ctx, bad, nil); !errors.As(err, &dm) || !errors.Is(err, ErrDigestMismatch) || dm.Want != sets[1].Digest || dm.Revision != 2 {
		t.Fatalf("tampered change set: %v, want ErrDigestMismatch", err)
	}
	if rev, d := f.Revision(); rev != 1 || d != sets[0].Digest {
		t.Fatalf("follower moved to %d %s after a digest mismatch", rev, d)
	}
	if got := contents(t, f); !mapsEqual(got, map[Key]string{vp("a"): "A1"}) {
		t.Fatalf("follower content after mismatch: %v", got)
	}
	if err := f.ApplyChangeSet(ctx, sets[1], nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReplaceAll(t *testing.T) {
	ctx := context.Background()
	p := openT(t, Options{NoSync: true, KeepRevisions: 2})
	f := openT(t, Options{NoSync: true})
	for i := range 5 {
		apply(t, p, up(vp("p"+itoa(i)), "v"+itoa(i)), del(vp("p"+itoa(i-1))))
	}
	apply(t, p, up(vp("keep"), "same"))
	// The follower diverged: one identical object, one stale, one extra.
	apply(t, f, up(vp("keep"), "same"), up(vp("p004"), "stale"), up(vp("extra"), "x"))

	snap, err := p.List(ctx)
	if err != nil {
		t.Fatal(err)
	}

	wrong := snap
	wrong.Digest = EmptyDigest
	if err := f.ReplaceAll(ctx, wrong, nil); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("ReplaceAll with a wrong digest = %v, want ErrDigestMismatch", err)
	}
	if rev, _ := f.Revision(); rev != 1 {
		t.Fatalf("refused snapshot moved the follower to %d", rev)
	}

	var diff []Change
	err = f.ReplaceAll(ctx, snap, func(_ context.Context, pd *Pending) error {
		diff = slices.Clone(pd.Changes())
		if pd.Base() != 1 || pd.Revision() != snap.Revision || pd.Digest() != snap.Digest || pd.Len() != 2 {
			t.Errorf("Pending base %d rev %d digest %s len %d", pd.Base(), pd.Revision(), pd.Digest(), pd.Len())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantDiff := []Change{del(vp("extra")), up(vp("p004"), "v004")}
	if !slices.EqualFunc(diff, wantDiff, func(a, b Change) bool { return a.Op == b.Op && a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
		t.Fatalf("diff %v, want %v", diff, wantDiff)
	}
	st := f.Status()
	if st.Revision != snap.Revision || st.Digest != snap.Digest || st.Oldest != snap.Revision || !st.Time.Equal(snap.Time) {
		t.Fatalf("status after ReplaceAll %+v, snapshot rev %d %s", st, snap.Revision, snap.Digest)
	}
	if !sameObjects(listT(t, f), snap.Objects) {
		t.Fatal("content differs from snapshot")
	}
	if sets, err := f.ChangesSince(ctx, snap.Revision, 0); err != nil || len(sets) != 0 {
		t.Fatalf("ChangesSince(snapshot) = %v %v", sets, err)
	}
	if _, err := f.ChangesSince(ctx, snap.Revision-1, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("ChangesSince(before snapshot) = %v, want ErrCompacted", err)
	}
	// And it follows on from there.
	apply(t, p, up(vp("after"), "1"))
	if n := follow(t, p, f, 0); n != 0 {
		t.Fatalf("follow after snapshot needed %d more snapshots", n)
	}
	if r, d := f.Revision(); r != 7 || d != modelDigest(t, contents(t, p)) {
		t.Fatalf("follower at %d %s", r, d)
	}
	if err := f.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	// A snapshot may move a store backwards (its primary was restored).
	old := Snapshot{Revision: 1, Digest: EmptyDigest}
	if err := f.ReplaceAll(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	if r, d := f.Revision(); r != 1 || d != EmptyDigest || len(contents(t, f)) != 0 {
		t.Fatalf("after empty snapshot: %d %s", r, d)
	}
	if err := f.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "nested", "dir", "arbiter.db")
	s, err := Open(path, Options{KeepRevisions: 3})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		apply(t, s, up(vp("p"+itoa(i)), "v"+itoa(i)))
	}
	apply(t, s, del(vp("p000")))
	before := s.Status()
	beforeObjs := listT(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, Options{KeepRevisions: 3, VerifyOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if after := s.Status(); after != before {
		t.Fatalf("status after reopen %+v, before %+v", after, before)
	}
	if !sameObjects(listT(t, s), beforeObjs) {
		t.Fatal("content changed across reopen")
	}
	if c := apply(t, s, up(vp("new"), "n")); c.Revision != before.Revision+1 {
		t.Fatalf("next revision %d, want %d", c.Revision, before.Revision+1)
	}
	if sets, err := s.ChangesSince(ctx, s.Status().Oldest, 0); err != nil || len(sets) != 3 {
		t.Fatalf("ChangesSince(oldest) = %d sets, %v; want the 3 retained", len(sets), err)
	}
}

func TestOpenErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	if s2, err := Open(path, Options{Timeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) || !errors.Is(err, berrors.ErrTimeout) || !strings.Contains(err.Error(), "locked") {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open of a locked file = %v, want ErrLocked wrapping bbolt's timeout", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Timeout not honoured")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "x.db"), Options{KeepRevisions: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative KeepRevisions: %v", err)
	}
	notDB := filepath.Join(t.TempDir(), "garbage.db")
	if err := os.WriteFile(notDB, bytes.Repeat([]byte("garbage!"), 1024), 0o600); err != nil {
		t.Fatal(err)
	}
	if s3, err := Open(notDB, Options{}); !errors.Is(err, ErrCorrupt) || !errors.Is(err, berrors.ErrInvalid) || errors.Is(err, ErrLocked) {
		if s3 != nil {
			s3.Close()
		}
		t.Fatalf("Open of a non-bbolt file = %v, want ErrCorrupt wrapping bbolt's ErrInvalid", err)
	}
	// A store file whose two meta pages both fail their checksum.
	damaged := filepath.Join(t.TempDir(), "damaged.db")
	if d, err := Open(damaged, Options{NoSync: true}); err != nil {
		t.Fatal(err)
	} else {
		d.Close()
	}
	b, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := os.Getpagesize()
	for _, page := range []int{0, 1} {
		b[page*pageSize+16+56] ^= 0xff // the meta's checksum, after the page header and the other fields
	}
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if s4, err := Open(damaged, Options{}); !errors.Is(err, ErrCorrupt) || !errors.Is(err, berrors.ErrChecksum) {
		if s4 != nil {
			s4.Close()
		}
		t.Fatalf("Open of a store whose meta pages fail their checksum = %v, want ErrCorrupt wrapping bbolt's ErrChecksum", err)
	}
	// An error that is neither (the parent is a file) is not classified.
	if _, err := Open(filepath.Join(notDB, "x.db"), Options{}); err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrLocked) {
		t.Fatalf("Open under a file = %v, want an unclassified error", err)
	}
}

func TestVerifyDetectsCorruption(t *testing.T) {
	tests := []struct {
		name   string
		damage func(tx *bolt.Tx) error
	}{
		{"object value changed behind the store's back", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketObjects).Put(appendKey(nil, vp("a")), []byte("EVIL"))
		}},
		{"object added behind the store's back", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketObjects).Put(appendKey(nil, vp("z")), []byte("Z"))
		}},
		{"changelog entry lost", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketChangelog).Delete(be64(2))
		}},
		{"meta count wrong", func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(metaCount, be64(7))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "s.db")
			s, err := Open(path, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			apply(t, s, up(vp("a"), "A"), up(vp("b"), "B"))
			apply(t, s, up(vp("a"), "A2"))
			apply(t, s, del(vp("b")))
			if err := s.Verify(ctx); err != nil {
				t.Fatalf("healthy store: Verify = %v", err)
			}
			s.Close()

			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(tt.damage); err != nil {
				t.Fatal(err)
			}
			db.Close()

			if s, err := Open(path, Options{VerifyOnOpen: true}); !errors.Is(err, ErrCorrupt) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Open with VerifyOnOpen = %v, want ErrCorrupt", err)
			}
			s, err = Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Verify(ctx); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Verify = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestWait(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{NoSync: true})

	if rev, err := s.Wait(ctx, 0); err != nil || rev != 0 {
		t.Fatalf("Wait(0) = %d %v", rev, err)
	}

	st, ch := s.Watch()
	type result struct {
		rev uint64
		err error
	}
	done := make(chan result, 1)
	go func() {
		rev, err := s.Wait(ctx, 2)
		done <- result{rev, err}
	}()
	apply(t, s, up(vp("a"), "1"))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch channel not closed by a commit")
	}
	if st.Revision != 0 {
		t.Fatalf("Watch status %+v", st)
	}
	select {
	case r := <-done:
		t.Fatalf("Wait(2) returned early at %d %v", r.rev, r.err)
	case <-time.After(20 * time.Millisecond):
	}
	apply(t, s, up(vp("a"), "2"))
	select {
	case r := <-done:
		if r.err != nil || r.rev != 2 {
			t.Fatalf("Wait(2) = %d %v", r.rev, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait(2) not woken by revision 2")
	}

	tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	rev, err := s.Wait(tctx, 100)
	if !errors.Is(err, context.DeadlineExceeded) || rev != 2 {
		t.Fatalf("Wait(100) with deadline = %d %v, want 2 DeadlineExceeded", rev, err)
	}
	if d := time.Since(start); d < 25*time.Millisecond || d > 5*time.Second {
		t.Fatalf("Wait returned after %v", d)
	}

	go func() {
		rev, err := s.Wait(ctx, 100)
		done <- result{rev, err}
	}()
	time.Sleep(10 * time.Millisecond)
	s.Close()
	select {
	case r := <-done:
		if !errors.Is(r.err, ErrClosed) || r.rev != 2 {
			t.Fatalf("Wait during Close = %d %v, want ErrClosed", r.rev, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake Wait")
	}
}

func TestBackup(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{NoSync: true})
	for i := range 50 {
		apply(t, s, Change{Op: OpUpsert, Key: vp("p" + itoa(i)), Value: manifest(i, 0, 500)})
	}
	path := filepath.Join(t.TempDir(), "backup", "copy.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.Backup(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); n == 0 || fi.Size() != n {
		t.Fatalf("Backup wrote %d bytes, file has %d", n, fi.Size())
	}
	b, err := Open(path, Options{VerifyOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Status() != s.Status() {
		t.Fatalf("backup status %+v, original %+v", b.Status(), s.Status())
	}
	if !sameObjects(listT(t, b), listT(t, s)) {
		t.Fatal("backup content differs")
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Backup(cctx, &bytes.Buffer{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Backup with cancelled ctx = %v", err)
	}
}

func TestClosed(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{NoSync: true})
	apply(t, s, up(vp("a"), "1"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	checks := map[string]error{}
	_, checks["Apply"] = s.Apply(ctx, Batch{Changes: []Change{up(vp("b"), "1")}}, nil)
	checks["ApplyChangeSet"] = s.ApplyChangeSet(ctx, ChangeSet{Revision: 2}, nil)
	checks["ReplaceAll"] = s.ReplaceAll(ctx, Snapshot{Digest: EmptyDigest}, nil)
	_, checks["List"] = s.List(ctx)
	_, _, checks["Get"] = s.Get(ctx, vp("a"))
	_, checks["ChangesSince"] = s.ChangesSince(ctx, 0, 0)
	_, checks["Backup"] = s.Backup(ctx, &bytes.Buffer{})
	checks["Verify"] = s.Verify(ctx)
	_, checks["Wait"] = s.Wait(ctx, 5)
	for name, err := range checks {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if rev, _ := s.Revision(); rev != 1 {
		t.Errorf("Revision after Close = %d, want the last one", rev)
	}
}

func TestGet(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{NoSync: true})
	apply(t, s, up(vp("a"), "A"), up(nsKey("ns", "a"), "NA"))
	tests := []struct {
		key   Key
		want  string
		found bool
	}{
		{vp("a"), "A", true},
		{nsKey("ns", "a"), "NA", true},
		{nsKey("other", "a"), "", false},
		{vp("b"), "", false},
	}
	for _, tt := range tests {
		o, found, err := s.Get(ctx, tt.key)
		if err != nil || found != tt.found || string(o.Value) != tt.want || (found && o.Key != tt.key) {
			t.Errorf("Get(%s) = %+v %v %v", tt.key, o, found, err)
		}
	}
	if _, _, err := s.Get(ctx, Key{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Get of an invalid key = %v", err)
	}
}

// TestConcurrent runs writers, readers and waiters together (run with -race).
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	s := openT(t, Options{NoSync: true, KeepRevisions: 50})
	const writers, perWriter = 4, 40
	var wg sync.WaitGroup
	revs := make(chan uint64, writers*perWriter)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				c, err := s.Apply(ctx, Batch{Changes: []Change{up(nsKey("w"+itoa(w), "o"+itoa(i%7)), itoa(i))}}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				revs <- c.Revision
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap, err := s.List(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if d, _ := ComputeDigest(snap.Objects); d != snap.Digest {
					t.Errorf("List at %d: digest %s, objects hash to %s", snap.Revision, snap.Digest, d)
					return
				}
				rev, _ := s.Revision()
				if _, err := s.ChangesSince(ctx, rev-min(rev, 10), 5); err != nil && !errors.Is(err, ErrCompacted) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		if _, err := s.Wait(ctx, writers*perWriter); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	close(stop)
	readers.Wait()
	close(revs)
	seen := map[uint64]bool{}
	for r := range revs {
		if seen[r] {
			t.Fatalf("revision %d committed twice", r)
		}
		seen[r] = true
	}
	if rev, _ := s.Revision(); rev != writers*perWriter || len(seen) != writers*perWriter {
		t.Fatalf("final revision %d, %d distinct commits; want %d", rev, len(seen), writers*perWriter)
	}
	if err := s.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSum256Carry checks the 256-bit arithmetic across limb boundaries and the wrap mod 2^256.
func TestSum256Carry(t *testing.T) {
	var ones, one [32]byte
	for i := range ones {
		ones[i] = 0xff
	}
	one[31] = 1
	var s sum256
	s.add(&ones)
	s.add(&one) // 2^256 - 1 + 1 wraps to 0
	if s != (sum256{}) {
		t.Fatalf("(2^256-1)+1 = %x, want 0", s.bytes())
	}
	s.sub(&one) // 0 - 1 wraps to 2^256 - 1
	if s.bytes() != ones {
		t.Fatalf("0-1 = %x, want all ones", s.bytes())
	}
	var lowFull [32]byte
	for i := 24; i < 32; i++ {
		lowFull[i] = 0xff
	}
	s = sum256{}
	s.add(&lowFull)
	s.add(&one) // carry into the second limb
	if s != (sum256{0, 1, 0, 0}) {
		t.Fatalf("2^64-1 + 1 = %v", s)
	}
	h := newElemHasher()
	rng := rand.New(rand.NewPCG(5, 6))
	var acc sum256
	var hs [][32]byte
	for i := range 100 {
		x := h.hash([]byte(itoa(i)), []byte(itoa(rng.IntN(1000))))
		hs = append(hs, x)
		acc.add(&x)
	}
	for _, i := range rng.Perm(len(hs)) {
		acc.sub(&hs[i])
	}
	if acc != (sum256{}) {
		t.Fatalf("adding then subtracting 100 hashes in another order left %v", acc)
	}
}

// TestWatchNotWokenByNoop: batches that make no revision, including one that
// records an idempotency key, do not wake watchers; a real commit does.
func TestWatchNotWokenByNoop(t *testing.T) {
	s := openT(t, Options{NoSync: true})
	apply(t, s, up(vp("a"), "A"))
	_, ch := s.Watch()
	mustApply(t, s, Batch{Changes: []Change{up(vp("a"), "A")}})
	mustApply(t, s, Batch{Changes: []Change{del(vp("zz"))}, IdempotencyKey: "noop"})
	select {
	case <-ch:
		t.Fatal("a no-op batch woke the watchers")
	default:
	}
	apply(t, s, up(vp("a"), "B"))
	select {
	case <-ch:
	default:
		t.Fatal("a commit did not wake the watchers")
	}
}

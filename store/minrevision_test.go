package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

func TestMinRevision(t *testing.T) {
	const term = uint64(1)<<32 + 1
	tests := []struct {
		name        string
		min         uint64
		changes     []Change
		wantRev     uint64 // from a store at revision 3 with Oldest 0
		wantOldest  uint64
		wantNoop    bool
		wantChanges int
	}{
		{"zero, no changes", 0, nil, 3, 0, true, 0},
		{"at current, no changes", 3, nil, 3, 0, true, 0},
		{"below current, with a change", 2, []Change{up(vp("a"), "a2")}, 4, 0, false, 1},
		{"next revision, no changes: an empty commit", 4, nil, 4, 0, false, 0},
		{"next revision, with a change", 4, []Change{up(vp("a"), "a2")}, 4, 0, false, 1},
		{"jump, no changes", term, nil, term, term - 1, false, 0},
		{"jump, with changes", term, []Change{up(vp("a"), "a2"), del(vp("b"))}, term, term - 1, false, 2},
		{"jump, no-op change", term, []Change{up(vp("a"), "a1")}, term, term - 1, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := openT(t, Options{NoSync: true})
			apply(t, s, up(vp("a"), "a1"))
			apply(t, s, up(vp("b"), "b1"))
			mustApply(t, s, Batch{Changes: []Change{up(vp("c"), "c1")}, IdempotencyKey: "k3"})
			before := contents(t, s)

			var seen *uint64
			c, err := s.Apply(ctx, Batch{Changes: tt.changes, MinRevision: tt.min}, func(_ context.Context, p *Pending) error {
				r := p.Revision()
				seen = &r
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if c.Revision != tt.wantRev || c.Unchanged != tt.wantNoop || len(c.Changes) != tt.wantChanges {
				t.Fatalf("commit = revision %d unchanged %v changes %d, want %d %v %d", c.Revision, c.Unchanged, len(c.Changes), tt.wantRev, tt.wantNoop, tt.wantChanges)
			}
			if !tt.wantNoop && (seen == nil || *seen != tt.wantRev) {
				t.Fatalf("validate saw revision %v, want %d", seen, tt.wantRev)
			}
			st := s.Status()
			if st.Revision != tt.wantRev || st.Oldest != tt.wantOldest {
				t.Fatalf("status revision %d oldest %d, want %d %d", st.Revision, st.Oldest, tt.wantRev, tt.wantOldest)
			}
			if err := s.Verify(ctx); err != nil {
				t.Fatal(err)
			}
			if tt.wantChanges == 0 {
				if got := contents(t, s); len(got) != len(before) || st.Digest != modelDigest(t, before) {
					t.Fatalf("content changed by an empty commit: %v", got)
				}
			}
			if tt.wantOldest > 0 {
				// History before the jump is gone: a follower gets a snapshot.
				if _, err := s.ChangesSince(ctx, 3, 0); !errors.Is(err, ErrCompacted) {
					t.Fatalf("ChangesSince(3) = %v, want ErrCompacted", err)
				}
				sets, err := s.ChangesSince(ctx, tt.wantOldest, 0)
				if err != nil || len(sets) != 1 || sets[0].Revision != tt.wantRev || sets[0].Digest != st.Digest {
					t.Fatalf("ChangesSince(oldest) = %+v, %v", sets, err)
				}
				// ... and so are the idempotency records of the dropped revisions.
				if c := mustApply(t, s, Batch{Changes: []Change{up(vp("c"), "c1")}, IdempotencyKey: "k3"}); c.Replayed {
					t.Fatalf("idempotency record of a dropped revision replayed: %+v", c)
				}
			}
			// Writes go on from the new revision, and a follower converges.
			c2 := apply(t, s, up(vp("z"), "z"))
			if c2.Revision != tt.wantRev+1 {
				t.Fatalf("next write at %d, want %d", c2.Revision, tt.wantRev+1)
			}
			f := openT(t, Options{NoSync: true})
			follow(t, s, f, 0)
			if fr, fd := f.Revision(); fr != c2.Revision || fd != c2.Digest {
				t.Fatalf("follower at %d %s, want %d %s", fr, fd, c2.Revision, c2.Digest)
			}
		})
	}
}

// A follower that was in step before the jump resumes with a snapshot
// at the new revision, and the store reopens at it.
func TestMinRevisionFollowerAndReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "arbiter.db")
	s, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	f := openT(t, Options{NoSync: true})
	apply(t, s, up(vp("a"), "a1"))
	apply(t, s, up(vp("b"), "b1"))
	if n := follow(t, s, f, 0); n != 0 {
		t.Fatalf("%d snapshots for a follower within the history, want 0", n)
	}
	jump := uint64(7) << 32
	c := mustApply(t, s, Batch{MinRevision: jump})
	apply(t, s, up(vp("a"), "a2"))
	if n := follow(t, s, f, 0); n != 1 {
		t.Fatalf("%d snapshots after the jump, want 1", n)
	}
	if fr, _ := f.Revision(); fr != c.Revision+1 {
		t.Fatalf("follower at %d, want %d", fr, c.Revision+1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{NoSync: true, VerifyOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.Status(); st.Revision != jump+1 || st.Oldest != jump-1 {
		t.Fatalf("reopened at %+v", st)
	}
	if err := s.Verify(ctx); err != nil {
		t.Fatal(err)
	}
}

package store

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzApply drives a primary and a follower with random batches and checks,
// after every write, the store against a map model: content, revision
// accounting (a new revision exactly when the content changes), the digest
// against ComputeDigest, refusals leaving the store unchanged, and at the end
// Verify (persisted digest == recomputed digest) on both stores.
//
// Input: per batch a header byte (bits 0-1: number of changes, bit 5: a
// refusing validate hook, bit 6: let the follower catch up), then one byte per
// change (bits 0-2: key, bits 3-4: value, bit 7: delete).
func FuzzApply(f *testing.F) {
	f.Add([]byte{0x03, 0x00, 0x09, 0x12, 0x42, 0x80, 0x01})
	f.Add([]byte{0x01, 0x00, 0x01, 0x00, 0x61, 0x80, 0x42, 0x00, 0x08})
	f.Add([]byte{0x03, 0x01, 0x01, 0x02, 0x23, 0x03, 0x84, 0x85, 0x43, 0x11, 0x1a, 0x86})
	f.Add([]byte(strings.Repeat("\x43\x01\x8a\x13", 20)))
	keys := []Key{vp("a"), vp("b"), nsKey("team-a", "x"), nsKey("team-b", "x"), {Kind: "Namespace", Name: "team-a"}, {Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy", Name: "a"}, vp("c"), nsKey("team-a", "y")}
	values := []string{"v1", "v2", `{"spec":{}}`, strings.Repeat("z", 300)}
	errNo := errors.New("refused")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			data = data[:400]
		}
		ctx := context.Background()
		dir := t.TempDir()
		p, err := Open(filepath.Join(dir, "p.db"), Options{NoSync: true, KeepRevisions: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		fo, err := Open(filepath.Join(dir, "f.db"), Options{NoSync: true, KeepRevisions: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer fo.Close()

		model := map[Key]string{}
		for len(data) > 0 {
			hdr := data[0]
			data = data[1:]
			var changes []Change
			seen := map[Key]bool{}
			dup := false
			for i := 0; i < int(hdr&3) && len(data) > 0; i++ {
				c := data[0]
				data = data[1:]
				k := keys[c&7]
				dup = dup || seen[k]
				seen[k] = true
				if c&0x80 != 0 {
					changes = append(changes, del(k))
				} else {
					changes = append(changes, up(k, values[(c>>3)&3]))
				}
			}
			var validate ValidateFunc
			if hdr&0x20 != 0 {
				validate = func(context.Context, *Pending) error { return errNo }
			}
			beforeRev, beforeDigest := p.Revision()
			commit, err := p.Apply(ctx, Batch{Changes: changes}, validate)

			next := maps.Clone(model)
			for _, c := range changes {
				if c.Op == OpUpsert {
					next[c.Key] = string(c.Value)
				} else {
					delete(next, c.Key)
				}
			}
			changed := !mapsEqual(next, model)
			switch {
			case dup:
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("batch with a duplicate key: %v, want ErrInvalid", err)
				}
			case validate != nil && changed:
				if !errors.Is(err, ErrRejected) {
					t.Fatalf("refused batch: %v, want ErrRejected", err)
				}
			case err != nil:
				t.Fatalf("Apply: %v", err)
			default:
				if commit.Unchanged == changed || (changed && commit.Revision != beforeRev+1) || (!changed && commit.Revision != beforeRev) {
					t.Fatalf("changed=%v but commit %+v after revision %d", changed, commit, beforeRev)
				}
				model = next
			}
			if err != nil {
				if r, d := p.Revision(); r != beforeRev || d != beforeDigest {
					t.Fatalf("failed write moved the store from %d %s to %d %s", beforeRev, beforeDigest, r, d)
				}
			}
			if _, d := p.Revision(); d != modelDigest(t, model) {
				t.Fatalf("digest %s, model %v hashes to %s", d, model, modelDigest(t, model))
			}
			if hdr&0x40 != 0 {
				follow(t, p, fo, 2)
			}
		}
		if got := contents(t, p); !mapsEqual(got, model) {
			t.Fatalf("content %v, model %v", got, model)
		}
		follow(t, p, fo, 2)
		rp, dp := p.Revision()
		if rf, df := fo.Revision(); rf != rp || df != dp {
			t.Fatalf("follower at %d %s, primary at %d %s", rf, df, rp, dp)
		}
		for _, s := range []*Store{p, fo} {
			if err := s.Verify(ctx); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		}
	})
}

package store

import (
	"context"
	"fmt"
	"testing"
)

const benchObjects, benchValueSize = 10000, 1024

func benchKey(n int) Key {
	return nsKey(fmt.Sprintf("ns%02d", n%50), fmt.Sprintf("p%05d", n))
}

// fill writes n objects of about benchValueSize bytes in batches of 1000.
func fill(b *testing.B, s *Store, n int) {
	b.Helper()
	for start := 0; start < n; start += 1000 {
		changes := make([]Change, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			changes = append(changes, Change{Op: OpUpsert, Key: benchKey(i), Value: manifest(i, 0, benchValueSize)})
		}
		mustApply(b, s, Batch{Changes: changes})
	}
}

// BenchmarkCommitOneWith10k: one 1 KiB object upserted into a 10,000-object
// store, with fsync (the production setting) and without.
func BenchmarkCommitOneWith10k(b *testing.B) {
	for _, tc := range []struct {
		name   string
		noSync bool
	}{{"fsync", false}, {"nosync", true}} {
		b.Run(tc.name, func(b *testing.B) {
			s := openT(b, Options{NoSync: tc.noSync})
			fill(b, s, benchObjects)
			ctx := context.Background()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				n := (i * 7919) % benchObjects
				if _, err := s.Apply(ctx, Batch{Changes: []Change{{Op: OpUpsert, Key: benchKey(n), Value: manifest(n, i, benchValueSize)}}}, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkList10k: a consistent snapshot of 10,000 objects of 1 KiB.
func BenchmarkList10k(b *testing.B) {
	s := openT(b, Options{NoSync: true})
	fill(b, s, benchObjects)
	ctx := context.Background()
	b.SetBytes(benchObjects * benchValueSize)
	b.ReportAllocs()
	for b.Loop() {
		snap, err := s.List(ctx)
		if err != nil || len(snap.Objects) != benchObjects {
			b.Fatal(err, len(snap.Objects))
		}
	}
}

// BenchmarkChangesSince: a follower one revision behind (tail1), and one 100
// revisions behind (batch100), each revision a 1 KiB upsert.
func BenchmarkChangesSince(b *testing.B) {
	s := openT(b, Options{NoSync: true})
	ctx := context.Background()
	for i := range 1000 {
		apply(b, s, Change{Op: OpUpsert, Key: benchKey(i % 300), Value: manifest(i, i, benchValueSize)})
	}
	for _, tc := range []struct {
		name  string
		after uint64
		limit int
	}{{"tail1", 999, 1}, {"batch100", 900, 100}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sets, err := s.ChangesSince(ctx, tc.after, tc.limit)
				if err != nil || len(sets) != tc.limit {
					b.Fatal(err, len(sets))
				}
			}
		})
	}
}

// BenchmarkColdStart10k: Open an existing 10,000-object store and List it
// (the store's share of a server's cold start; the page cache is warm).
func BenchmarkColdStart10k(b *testing.B) {
	s := openT(b, Options{NoSync: true})
	fill(b, s, benchObjects)
	path := s.Path()
	s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s, err := Open(path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if snap, err := s.List(ctx); err != nil || len(snap.Objects) != benchObjects {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkVerify10k: recomputing the digest of 10,000 objects of 1 KiB.
func BenchmarkVerify10k(b *testing.B) {
	s := openT(b, Options{NoSync: true})
	fill(b, s, benchObjects)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Verify(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

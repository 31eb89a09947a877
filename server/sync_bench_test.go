package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/server"
)

// bigSet returns n objects: the 16 Pod Security policies, 184 more
// policies, and exceptions and Namespaces for the rest (half each).
func bigSet(tb testing.TB, n int) []*manifest.Object {
	tb.Helper()
	objs := readObjects(tb, pssDir)
	for i := 0; len(objs) < 200 && len(objs) < n; i++ {
		objs = append(objs, manifest.NewObject("bench", map[string]any{
			"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
			"metadata": map[string]any{"name": fmt.Sprintf("team-policy-%03d", i)},
			"spec": map[string]any{
				"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
					"apiGroups": []any{"apps"}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE", "UPDATE"}, "resources": []any{"deployments"},
				}}},
				"validations": []any{map[string]any{
					"expression": fmt.Sprintf("object.metadata.?labels[?'team-%d'].orValue('') != 'forbidden'", i),
					"message":    "forbidden team",
				}},
			},
		}))
	}
	for i := 0; len(objs) < n; i++ {
		if i%2 == 0 {
			objs = append(objs, manifest.NewObject("bench", map[string]any{
				"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
				"metadata": map[string]any{"name": fmt.Sprintf("exception-%05d", i), "namespace": "exceptions"},
				"spec": map[string]any{
					"policyRefs":      []any{map[string]any{"name": fmt.Sprintf("team-policy-%03d", i%184), "kind": "ValidatingPolicy"}},
					"matchConditions": []any{map[string]any{"name": "n", "expression": fmt.Sprintf("object.metadata.name == 'app-%d'", i)}},
				},
			}))
		} else {
			objs = append(objs, manifest.NewObject("bench", map[string]any{
				"apiVersion": "v1", "kind": "Namespace",
				"metadata": map[string]any{"name": fmt.Sprintf("ns-%05d", i), "labels": map[string]any{"team": fmt.Sprint(i % 50)}},
			}))
		}
	}
	return objs
}

// BenchmarkCommitOneWith10k commits a 1-object change to a primary holding
// 10,000 objects, including compiling the new snapshot and fsync (budget
// ≤ 20 ms).
func BenchmarkCommitOneWith10k(b *testing.B) {
	dir := b.TempDir()
	ts := startSyncedServer(b, server.Config{DataDir: dir})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, bigSet(b, 10000)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		o := manifest.NewObject("bench", map[string]any{
			"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": "churn", "labels": map[string]any{"i": fmt.Sprint(i)}},
		})
		if _, err := ts.LoadObjects(ctx, []*manifest.Object{o}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkColdStart10k opens a store holding 10,000 objects and compiles
// its snapshot, as `arbiter serve` does at start (budget ≤ 2 s).
func BenchmarkColdStart10k(b *testing.B) {
	dir := b.TempDir()
	seed := startServer(b, server.Config{DataDir: dir})
	if _, err := seed.LoadObjects(context.Background(), bigSet(b, 10000)); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	seed.Shutdown(ctx)
	cancel()
	b.ReportAllocs()
	for b.Loop() {
		srv, err := server.New(context.Background(), server.Config{DataDir: dir, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		if n := srv.Current().Objects(); n != 10000 {
			b.Fatalf("%d objects", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		srv.Shutdown(ctx)
		cancel()
	}
}

// BenchmarkCommitToFollowers measures, for each commit on a primary, the
// time until two followers (on loopback) serve its revision; it reports
// the median and p99 (budget: p99 ≤ 100 ms).
func BenchmarkCommitToFollowers(b *testing.B) {
	ctx := context.Background()
	primary := startServer(b, server.Config{})
	if _, err := primary.LoadObjects(ctx, readObjects(b, pssDir)); err != nil {
		b.Fatal(err)
	}
	followers := []*testServer{
		startServer(b, server.Config{Follow: primary.addr, ReplicaID: "f1"}),
		startServer(b, server.Config{Follow: primary.addr, ReplicaID: "f2"}),
	}
	for _, f := range followers {
		waitRevision(b, f, 1)
	}
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		body, _ := json.Marshal(map[string]any{"i": i})
		o := manifest.NewObject("bench", map[string]any{
			"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
			"metadata": map[string]any{"name": "churn", "namespace": "exceptions"},
			"spec": map[string]any{
				"policyRefs":      []any{map[string]any{"name": "disallow-host-path", "kind": "ValidatingPolicy"}},
				"matchConditions": []any{map[string]any{"name": "n", "expression": fmt.Sprintf("object.metadata.name == %q", string(body))}},
			},
		})
		start := time.Now()
		commit, err := primary.LoadObjects(ctx, []*manifest.Object{o})
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range followers {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if _, err := f.WaitRevision(wctx, commit.Revision); err != nil {
				b.Fatal(err)
			}
			cancel()
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
}

package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// storeOf50k makes a data directory holding the issue 18 scale of context
// objects (50,000 ConfigMaps in 500 namespaces) and the policy reading
// them, written through a server in one revision.
func storeOf50k(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	srv, err := server.New(context.Background(), server.Config{DataDir: dir, NoSync: true, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	objs := contextObjects(b, maxConfigMapsPolicy)
	for ns := 0; ns < 500; ns++ {
		for i := 0; i < 100; i++ {
			objs = append(objs, manifest.NewObject("bench", map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": fmt.Sprintf("cm-%03d", i), "namespace": fmt.Sprintf("ns-%03d", ns),
					"labels": map[string]any{"app": fmt.Sprintf("app-%d", i%10)}, "uid": fmt.Sprintf("%08d-0000-0000-0000-000000000000", ns*100+i)},
				"data": map[string]any{"key": "value", "config.yaml": "a: 1\nb: two\n"}}))
		}
	}
	if _, err := srv.LoadObjects(context.Background(), objs); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	return dir
}

// BenchmarkColdStart50k opens a store of 50,000 context objects and
// compiles and indexes its content (a replica starting), reporting the
// store file's size and the heap the snapshot keeps.
func BenchmarkColdStart50k(b *testing.B) {
	dir := storeOf50k(b)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		srv, err := server.New(context.Background(), server.Config{DataDir: dir, NoSync: true, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		if srv.Current().ContextObjects() != 50000 {
			b.Fatal(srv.Current().ContextObjects())
		}
		if i == b.N-1 {
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "heap-MB")
			if fi, err := os.Stat(filepath.Join(dir, "arbiter.db")); err == nil {
				b.ReportMetric(float64(fi.Size())/(1<<20), "store-MB")
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		srv.Shutdown(ctx)
		cancel()
	}
}

// BenchmarkContextCommit50k commits one changed ConfigMap to a store of
// 50,000 (bbolt without fsync): the policies are not compiled again and
// the view copies one namespace's bucket.
func BenchmarkContextCommit50k(b *testing.B) {
	dir := storeOf50k(b)
	ts := startServer(b, server.Config{DataDir: dir})
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		obj := fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-007","namespace":"ns-123"},"data":{"n":"%d"}}`, i)
		if _, err := ts.WriteBatch(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{upsert(obj)}}); err != nil {
			b.Fatal(err)
		}
	}
}

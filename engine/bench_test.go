package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// loadSet compiles the objects under paths.
func loadSet(tb testing.TB, paths ...string) (*engine.PolicySet, []*manifest.Object) {
	tb.Helper()
	docs, err := manifest.ReadPaths(nil, paths...)
	if err != nil {
		tb.Fatal(err)
	}
	objs := manifest.FromDocuments(docs)
	ps, err := engine.Compile(objs, engine.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return ps, objs
}

func resourceNamed(tb testing.TB, objs []*manifest.Object, name string) *manifest.Object {
	for _, o := range objs {
		if o.Name == name && engine.Classify(o) == engine.ClassResource {
			return o
		}
	}
	tb.Fatalf("no resource %s", name)
	return nil
}

// reportCPU reports the process's CPU time per operation since start
// (cpu-ns/op: with -cpu 1, what other processes' load inflates far less
// than wall time).
func reportCPU(b *testing.B, start time.Duration) {
	if used := cpuTime() - start; used > 0 && b.N > 0 {
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkPodSecurity evaluates the 16 Pod Security ValidatingPolicies of
// deploy/examples/pod-security on a compliant and a violating Pod (issue
// budget: ≤ 50 µs per Pod), with and without 100 non-matching exceptions.
func BenchmarkPodSecurity(b *testing.B) {
	for _, set := range []struct {
		name  string
		paths []string
	}{
		{"policies", []string{"../deploy/examples/pod-security", "testdata/pss/compliant-pod.yaml", "testdata/pss/violating-pod.yaml"}},
		{"policies+100exceptions", []string{"../deploy/examples/pod-security", "testdata/pss/compliant-pod.yaml", "testdata/pss/violating-pod.yaml", "testdata/pss/nomatch.yaml"}},
	} {
		ps, objs := loadSet(b, set.paths...)
		for _, pod := range []string{"compliant-pod", "violating-pod"} {
			o := resourceNamed(b, objs, pod)
			b.Run(set.name+"/"+pod, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				start := cpuTime()
				for b.Loop() {
					req := &admission.Request{Object: o.Content}
					req.Fill()
					d := ps.Evaluate(ctx, req, nil)
					if len(d.Results) != 16 {
						b.Fatalf("%d results", len(d.Results))
					}
				}
				reportCPU(b, start)
			})
		}
	}
}

// BenchmarkMutateThenValidate runs a Pod through the ten MutatingPolicies
// of testdata/bench/mutating, then the 16 Pod Security ValidatingPolicies
// of deploy/examples/pod-security, in one Evaluate (issue budget: ≤ 100 µs).
func BenchmarkMutateThenValidate(b *testing.B) {
	ps, objs := loadSet(b, "../deploy/examples/pod-security", "testdata/bench/mutating", "testdata/pss/compliant-pod.yaml", "testdata/pss/violating-pod.yaml")
	for _, pod := range []string{"compliant-pod", "violating-pod"} {
		o := resourceNamed(b, objs, pod)
		b.Run(pod, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			start := cpuTime()
			for b.Loop() {
				req := &admission.Request{Object: o.Content}
				req.Fill()
				d := ps.Evaluate(ctx, req, nil)
				if len(d.Results) != 26 || d.Mutated == nil {
					b.Fatalf("%d results, mutated %v", len(d.Results), d.Mutated != nil)
				}
			}
			reportCPU(b, start)
		})
	}
}

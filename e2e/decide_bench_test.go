package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// BenchmarkDecideProcess is Decide as a caller sees it in production: an
// `arbiter serve` process holding the 16 Pod Security policies, and this
// process calling it over loopback gRPC, one call at a time. It reports
// the median and p99 latency (issue budget: median ≤ 150 µs).
//
//	go test -run '^$' -bench DecideProcess -benchtime 20000x ./e2e/
func BenchmarkDecideProcess(b *testing.B) {
	primary := startPrimary(b, "--load", "../deploy/examples/pod-security", "--log-level", "warn")
	ctx := context.Background()
	for _, name := range []string{"compliant-pod", "violating-pod"} {
		raw, err := os.ReadFile(filepath.Join("../engine/testdata/pss", name+".yaml"))
		if err != nil {
			b.Fatal(err)
		}
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			b.Fatal(err)
		}
		req := &arbiterv1.DecideRequest{ObjectJson: json.RawMessage(js)}
		b.Run(name, func(b *testing.B) {
			// Warm the connection and the server.
			for range 200 {
				if _, err := primary.c.Decide(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				start := time.Now()
				resp, err := primary.c.Decide(ctx, req)
				lat = append(lat, time.Since(start))
				if err != nil || len(resp.GetResults()) != 16 {
					b.Fatal(resp, err)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "µs-median")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "µs-p99")
		})
	}
}

package server_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/internal/gctune"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// BenchmarkDecide is one Decide over a loopback gRPC connection with the 16
// Pod Security policies loaded (issue budget: ≤ 150 µs median). It reports
// the median and p99 latency of the sequential calls.
func BenchmarkDecide(b *testing.B) {
	gctune.Apply() // as arbiter serve does
	ts := startServer(b, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(b, pssDir)); err != nil {
		b.Fatal(err)
	}
	for _, pod := range []struct{ name, path string }{{"compliant-pod", compliantPod}, {"violating-pod", violatingPod}} {
		req := &arbiterv1.DecideRequest{ObjectJson: objectJSON(b, pod.path)}
		b.Run(pod.name, func(b *testing.B) {
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				resp, err := ts.c.Decide(ctx, req)
				lat = append(lat, time.Since(start))
				if err != nil || len(resp.GetResults()) != 16 {
					b.Fatal(resp, err)
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/10].Microseconds()), "µs-p10")
			b.ReportMetric(float64(lat[len(lat)/4].Microseconds()), "µs-p25")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "µs-median")
			b.ReportMetric(float64(lat[len(lat)*3/4].Microseconds()), "µs-p75")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "µs-p99")
		})
	}
}

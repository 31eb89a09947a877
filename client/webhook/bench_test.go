package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/client/webhook"
	"github.com/arbiter-pdp/arbiter/internal/gctune"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// BenchmarkAdmissionReview is the AdmissionReview round trip the API server
// sees: HTTPS (HTTP/2, one connection, as the API server's webhook client)
// to the shim, Decide over gRPC on loopback to a server holding the 16 Pod
// Security policies, and back. Requests are sent open loop at 500 per
// second, each on its schedule whether or not earlier ones have returned
// (no coordinated omission); latency is measured from the scheduled send
// time. b.N requests take b.N×2 ms: -benchtime 2500x runs 5 s.
//
// Metrics: p50-ms, p99-ms, max-ms of the round trip; sendlate-p99-ms, how
// late the sender woke for its schedule (the machine's scheduling delay);
// ns/op is the pacing.
//
//	go test -run '^$' -bench AdmissionReview -benchtime 2500x ./client/webhook
func BenchmarkAdmissionReview(b *testing.B) {
	gctune.Apply() // as arbiter serve and arbiter webhook do
	ds := startDecisionServer(b, server.Config{}, pssDir)
	s := startShim(b, ds.addr, webhook.Config{})
	for _, tc := range []struct {
		name, file string
		allowed    bool
	}{
		{"allowed", "create-compliant-pod.json", true},
		{"denied", "create-violating-pod.json", false},
	} {
		body := review(b, tc.file)
		// Warm the connection and check the answer once.
		if resp, out := s.post(b, body); resp.StatusCode != http.StatusOK || decodeReview(b, out).Response.Allowed != tc.allowed {
			b.Fatalf("HTTP %d %s", resp.StatusCode, out)
		}
		b.Run("500rps/"+tc.name, func(b *testing.B) {
			paced(b, 500, func() error {
				req, _ := http.NewRequest(http.MethodPost, s.url+"/validate?timeout=10s", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := s.client.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					return err
				}
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("HTTP %s", resp.Status)
				}
				return nil
			})
		})
		// The baseline: the same decision asked over gRPC directly, without
		// the API server's HTTPS leg and the shim.
		dreq, err := webhook.DecideRequest(decodeReview(b, body).Request)
		if err != nil {
			b.Fatal(err)
		}
		c, err := client.Dial(context.Background(), ds.addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.Run("500rps-grpc-only/"+tc.name, func(b *testing.B) {
			paced(b, 500, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				defer cancel()
				_, err := c.Decide(ctx, dreq)
				return err
			})
		})
	}
}

// paced calls send b.N times at rate per second, open loop, and reports
// the latency percentiles.
func paced(b *testing.B, rate int, send func() error) {
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, b.N)
	late := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	var failMu sync.Mutex
	var failure string
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		late[i] = time.Since(at)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := send(); err != nil {
				failMu.Lock()
				failure = err.Error()
				failMu.Unlock()
			}
			lat[i] = time.Since(at)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if failure != "" {
		b.Fatal(failure)
	}
	slices.Sort(lat)
	slices.Sort(late)
	pct := func(d []time.Duration, p float64) float64 {
		return float64(d[min(len(d)-1, int(p*float64(len(d))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(lat, 0.50), "p50-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/float64(time.Millisecond), "max-ms")
	// How late the sender itself woke for its schedule: the machine's
	// scheduling delay in the same window (high when other processes
	// compete for the CPUs), part of every latency above.
	b.ReportMetric(pct(late, 0.99), "sendlate-p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
}

// BenchmarkAdmissionReviewSerial is the same round trip, one request at a
// time (closed loop): the cost of one review through shim and server.
func BenchmarkAdmissionReviewSerial(b *testing.B) {
	gctune.Apply() // as arbiter serve and arbiter webhook do
	ds := startDecisionServer(b, server.Config{}, pssDir)
	s := startShim(b, ds.addr, webhook.Config{})
	body := review(b, "create-violating-pod.json")
	b.ReportAllocs()
	for b.Loop() {
		if resp, _ := s.post(b, body); resp.StatusCode != http.StatusOK {
			b.Fatalf("HTTP %d", resp.StatusCode)
		}
	}
}

// BenchmarkShimWork is the shim's own work per review, without the
// network: decoding the AdmissionReview, building the DecideRequest,
// building and encoding the response.
func BenchmarkShimWork(b *testing.B) {
	body := review(b, "create-violating-pod.json")
	resp := &arbiterv1.DecideResponse{
		Allowed: false, Revision: 7, Digest: "sha256:0123", DecisionId: "0123456789abcdef0123456789abcdef",
		Status:   &arbiterv1.Status{Code: 400, Message: strings.Repeat("Policy x failed: message; ", 12)},
		Warnings: []string{"Policy warn-latest-tag failed: images should be pinned to a version, not :latest"},
	}
	b.ReportAllocs()
	for b.Loop() {
		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil {
			b.Fatal(err)
		}
		if _, err := webhook.DecideRequest(in.Request); err != nil {
			b.Fatal(err)
		}
		out := webhook.AdmissionResponse(in.Request.UID, resp, false, nil)
		if _, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: out}); err != nil {
			b.Fatal(err)
		}
	}
}

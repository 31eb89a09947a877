package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/decisionlog"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/authz"
	"github.com/arbiter-pdp/arbiter/server/limits"
	"github.com/arbiter-pdp/arbiter/server/metrics"
)

// TestLoad is the load test (make loadtest): ARBITER_LOADTEST=1 runs it.
// Open loop on loopback: decisions are sent at a fixed rate
// (ARBITER_LOADTEST_RATE, default 2,000/s) for ARBITER_LOADTEST_DURATION
// (default 60s) to a server with the pod-security examples and an
// exception, metrics on and the decision log writing every decision to a
// file. It fails on any error, any dropped decision log line, an achieved
// rate below 98% of the target, or heap growth beyond 32 MiB between the
// end of the warm-up and the end of the run; it reports latency
// percentiles, measured from each request's scheduled send time (so a
// stall is not hidden by fewer sends).
func TestLoad(t *testing.T) {
	if os.Getenv("ARBITER_LOADTEST") == "" {
		t.Skip("set ARBITER_LOADTEST=1 (make loadtest)")
	}
	rate := envInt("ARBITER_LOADTEST_RATE", 2000)
	duration := time.Duration(envInt("ARBITER_LOADTEST_DURATION", 60)) * time.Second
	warmup := 5 * time.Second

	logPath := filepath.Join(t.TempDir(), "decisions.jsonl")
	dl, err := decisionlog.New(decisionlog.Config{Output: logPath, MaxSize: 64 << 20, MaxBackups: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, err := authz.New(authz.Config{Disabled: true}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New()
	ts := startServer(t, server.Config{Metrics: m, DecisionLog: dl, Authz: a,
		Limits: limits.Config{MaxRequestBytes: limits.DefaultMaxRequestBytes, MaxObjectBytes: limits.DefaultMaxObjectBytes,
			MaxBatchObjects: limits.DefaultMaxBatchObjects, MaxObjects: limits.DefaultMaxObjects,
			MaxDecisionCost: limits.DefaultMaxDecisionCost, RPCTimeout: limits.DefaultRPCTimeout}})
	m.RegisterState(ts.State)
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, "../deploy/examples", "../docs/tour/exception.yaml")); err != nil {
		t.Fatal(err)
	}
	reqs := []*arbiterv1.DecideRequest{
		podRequest("web", "default", false),
		podRequest("host", "default", true),
		{ObjectJson: objectJSON(t, violatingPod)},
		{ObjectJson: objectJSON(t, compliantPod)},
		{ObjectJson: objectJSON(t, "../docs/tour/root-pod.yaml")},
		{ObjectJson: objectJSON(t, "../engine/testdata/pss/violating-deployment.yaml")},
	}
	// A few connections, as a webhook shim's replicas would hold.
	conns := make([]*client.Client, 4)
	for i := range conns {
		c, err := client.Dial(ctx, ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}

	type sample struct {
		lat time.Duration
		err error
	}
	total := int((warmup + duration).Seconds() * float64(rate))
	samples := make([]sample, total)
	interval := time.Second / time.Duration(rate)
	jobs := make(chan int, 4096)
	var wg sync.WaitGroup
	var inflight, maxInflight atomic.Int64
	start := time.Now()
	for w := 0; w < 128; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				n := inflight.Add(1)
				for {
					old := maxInflight.Load()
					if n <= old || maxInflight.CompareAndSwap(old, n) {
						break
					}
				}
				sched := start.Add(time.Duration(i) * interval)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := conns[i%len(conns)].Decide(cctx, reqs[i%len(reqs)])
				cancel()
				samples[i] = sample{lat: time.Since(sched), err: err}
				inflight.Add(-1)
			}
		}()
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var heapStart uint64
	var heaps []string
	cpuStart := cpuTime()
	warmIdx := int(warmup.Seconds() * float64(rate))
	for i := 0; i < total; i++ {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		if i == warmIdx {
			heapStart = heap()
			cpuStart = cpuTime()
		}
		if i > warmIdx && (i-warmIdx)%(10*rate) == 0 {
			heaps = append(heaps, fmt.Sprintf("%.1f", mib(heap())))
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start.Add(warmup))
	cpu := cpuTime() - cpuStart
	if err := dl.Close(); err != nil {
		t.Fatal(err)
	}
	heapEnd := heap()

	measured := samples[warmIdx:]
	var errs int
	var firstErr error
	lats := make([]time.Duration, 0, len(measured))
	for _, s := range measured {
		if s.err != nil {
			errs++
			if firstErr == nil {
				firstErr = s.err
			}
			continue
		}
		lats = append(lats, s.lat)
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	pct := func(p float64) time.Duration {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(len(lats)-1, int(p*float64(len(lats))))]
	}
	achieved := float64(len(measured)) / elapsed.Seconds()
	fi, _ := os.Stat(logPath)
	var logBytes int64
	if fi != nil {
		logBytes = fi.Size()
	}
	growth := int64(heapEnd) - int64(heapStart)
	t.Logf("load: %d decisions in %v at %.0f/s (target %d/s), %d errors; latency p50 %v p90 %v p99 %v p99.9 %v max %v; max in flight %d",
		len(measured), elapsed.Round(time.Millisecond), achieved, rate, errs, pct(.5), pct(.9), pct(.99), pct(.999), lats[len(lats)-1], maxInflight.Load())
	t.Logf("load: heap %.1f MiB after warm-up, %.1f MiB at the end (%+.2f MiB); every 10s: %v MiB; CPU %.1f s (%.0f%% of one core); decision log %d lines written, %d dropped, %.1f MiB in the current file",
		mib(heapStart), mib(heapEnd), float64(growth)/(1<<20), heaps, cpu.Seconds(), 100*cpu.Seconds()/elapsed.Seconds(), dl.Written(), dl.Dropped(), float64(logBytes)/(1<<20))
	if errs > 0 {
		t.Errorf("%d errors; first: %v", errs, firstErr)
	}
	if dl.Dropped() > 0 {
		t.Errorf("%d decision log lines dropped", dl.Dropped())
	}
	if achieved < 0.98*float64(rate) {
		t.Errorf("achieved %.0f/s, below 98%% of %d/s", achieved, rate)
	}
	const bound = 32 << 20
	if growth > bound {
		t.Errorf("heap grew by %.1f MiB (bound %d MiB)", float64(growth)/(1<<20), bound>>20)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

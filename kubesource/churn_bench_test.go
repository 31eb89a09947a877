package kubesource

// Decide latency while the cluster changes: ConfigMaps (a context kind a
// policy reads with resource.List) updated through the real API server at
// a target rate, the source storing them and coalescing revisions
// (skipped when ARBITER_K8S_RUN is not set). docs/performance.md.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/arbiter-pdp/arbiter/engine"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// churnRate is the target number of ConfigMap changes per second
// (ARBITER_CHURN_RATE overrides it).
func churnRate() int {
	if v, err := strconv.Atoi(os.Getenv("ARBITER_CHURN_RATE")); err == nil && v > 0 {
		return v
	}
	return 1000
}

// BenchmarkDecideUnderChurn measures Decide (in process) on a ConfigMap
// whose policy lists the ConfigMaps of its namespace (200 stored), in
// alternating one-second phases: idle, and while those ConfigMaps change
// at churnRate() per second (default 1,000), the source storing the
// changes with the default commit interval (100 ms). ns/op is the mean
// Decide time under churn; it reports idle-mean-µs, idle-p99-µs,
// churn-p99-µs, p99-ratio (churn/idle), changes/s (the changes made
// during the churn phases), revisions/s (during the churn phases) and
// max-revisions/s (the most made between two samples at most a second
// apart).
//
//   - apiserver: updates sent to the real API server by 64 clients, which
//     the source's informer receives by its watch. On the shared 2-core
//     test machine the API server (with etcd, on the same cores) accepts
//     far fewer than 1,000 updates per second: changes/s says how many.
//   - informer: the changes enter where the informer's watch delivers
//     them — decoded from JSON, put in the informer's cache and handed to
//     the source's event handler — so the rate is reached; everything
//     after (dirty keys, coalescing, the write, the compile of the new
//     revision) is the source's own path.
func BenchmarkDecideUnderChurn(b *testing.B) {
	if apiserver == nil {
		b.Skip("ARBITER_K8S_RUN is not set: the source runs against a real kube-apiserver")
	}
	b.Run("apiserver", func(b *testing.B) {
		benchChurn(b, func(c *churnEnv) func(n int64) error {
			return func(n int64) error {
				u := &unstructured.Unstructured{Object: configMap(c.ns, fmt.Sprintf("cm-%03d", n%churnObjects), map[string]any{"n": strconv.FormatInt(n, 10)})}
				_, err := c.cms.Update(context.Background(), u, metav1.UpdateOptions{})
				return err
			}
		})
	})
	b.Run("informer", func(b *testing.B) {
		benchChurn(b, func(c *churnEnv) func(n int64) error {
			c.src.mu.Lock()
			w := c.src.watches[schema.GroupKind{Kind: "ConfigMap"}]
			c.src.mu.Unlock()
			if w == nil {
				b.Fatal("ConfigMaps are not watched")
			}
			gk := schema.GroupKind{Kind: "ConfigMap"}
			return func(n int64) error {
				// What a watch event carries: the object's JSON, with a
				// resourceVersion above the API server's.
				raw, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{
					"name": fmt.Sprintf("cm-%03d", n%churnObjects), "namespace": c.ns, "resourceVersion": strconv.FormatInt(1_000_000_000+n, 10),
					"uid": fmt.Sprintf("uid-%03d", n%churnObjects)}, "data": map[string]any{"n": strconv.FormatInt(n, 10)}})
				if err != nil {
					return err
				}
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(raw); err != nil {
					return err
				}
				if err := w.inf.GetStore().Update(u); err != nil {
					return err
				}
				c.src.enqueue(gk, u)
				return nil
			}
		})
	})
}

const churnObjects = 200

// churnEnv is a primary fed by a source watching ConfigMaps, with
// churnObjects ConfigMaps in ns and a policy listing them.
type churnEnv struct {
	srv     *server.Server
	src     *Source
	ns, pol string
	cms     dynamic.ResourceInterface
}

// benchChurn runs the benchmark with the changes change(n) makes (n = 1,
// 2, ...; concurrently).
func benchChurn(b *testing.B, changer func(*churnEnv) func(n int64) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(ctx, server.Config{DataDir: b.TempDir(), NoSync: true, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	src, err := New(Config{Rest: apiserver.Config, Logger: log, Resync: time.Hour, RetryInterval: time.Second,
		ContextResources: []engine.ResourceRef{{APIVersion: "v1", Resource: "configmaps"}}}, srv)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	<-src.Ready()

	ns, pname := unique("churn"), unique("churn-limit")
	benchApply(b, namespace(ns, nil))
	cms := kc.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace(ns)
	for i := range churnObjects {
		u := &unstructured.Unstructured{Object: configMap(ns, fmt.Sprintf("cm-%03d", i), map[string]any{"n": "0"})}
		if _, err := cms.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	benchApply(b, cmLimit(pname, 1000))
	defer func() { _ = kc.Delete(context.Background(), cmLimit(pname, 1000)) }()
	waitFor(b, "the policy and the ConfigMaps stored", func() bool {
		snap := srv.Current()
		_, p := snap.Object(vpKey(pname))
		_, c := snap.Object(cmKey(ns, fmt.Sprintf("cm-%03d", churnObjects-1)))
		return p && c
	})
	env := &churnEnv{srv: srv, src: src, ns: ns, pol: pname, cms: cms}
	change := changer(env)

	req := &arbiterv1.DecideRequest{ObjectJson: cmRequest(ns, "new"), Operation: arbiterv1.Operation_OPERATION_CREATE}
	decide := func() time.Duration {
		t0 := time.Now()
		resp, err := srv.Decide(ctx, req)
		d := time.Since(t0)
		if err != nil || !resp.GetAllowed() || !hasResult(resp, pname, "pass") {
			b.Fatalf("decide: %v %v", resp, err)
		}
		return d
	}
	for range 200 {
		decide() // warm
	}

	// Churn: changes paced at rate per second by 10 ms ticks, unless
	// paused.
	rate := churnRate()
	var paused atomic.Bool
	paused.Store(true)
	var sent atomic.Int64
	var churnErr atomic.Value
	tokens := make(chan struct{}, rate)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start, issued := time.Now(), int64(0)
		for {
			select {
			case <-stop:
				close(tokens)
				return
			case <-tick.C:
				// As many as the time elapsed calls for (a late tick
				// catches up).
				due := int64(time.Since(start).Seconds() * float64(rate))
				if paused.Load() {
					issued = due
				}
				for ; issued < due; issued++ {
					select {
					case tokens <- struct{}{}:
					default: // the workers are behind: the rate is not reached
					}
				}
			}
		}
	}()
	var seq atomic.Int64
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tokens {
				if err := change(seq.Add(1)); err != nil {
					churnErr.Store(err)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	// The revisions made, sampled every 100 ms (with when).
	type sample struct {
		at      time.Time
		commits uint64
	}
	var samples []sample
	var sampleMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sampleMu.Lock()
				samples = append(samples, sample{time.Now(), src.Stats().Commits})
				sampleMu.Unlock()
			}
		}
	}()
	// Idle and churn phases alternate, so that the load of the machine
	// weighs on both alike. Each phase starts with 300 ms unmeasured: the
	// last revision of the churn lands, the changes reach the store.
	const phase, settle = time.Second, 300 * time.Millisecond
	var idle, churn []time.Duration
	var elapsed time.Duration
	var commits, changes uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for len(churn) < b.N {
		paused.Store(true)
		for end := time.Now().Add(settle); time.Now().Before(end); {
			decide()
		}
		for end := time.Now().Add(phase); time.Now().Before(end); {
			idle = append(idle, decide())
		}
		paused.Store(false)
		for end := time.Now().Add(settle); time.Now().Before(end); {
			decide()
		}
		c0, s0, t0 := src.Stats().Commits, sent.Load(), time.Now()
		b.StartTimer()
		for end := time.Now().Add(phase); time.Now().Before(end) && len(churn) < b.N; {
			churn = append(churn, decide())
		}
		b.StopTimer()
		elapsed += time.Since(t0)
		commits += src.Stats().Commits - c0
		changes += uint64(sent.Load() - s0)
	}
	close(stop)
	wg.Wait()
	if err, _ := churnErr.Load().(error); err != nil {
		b.Fatalf("a change failed: %v", err)
	}
	// The last change reaches the store.
	last := seq.Load()
	waitFor(b, "the last change stored", func() bool {
		o, ok := srv.Current().Object(cmKey(ns, fmt.Sprintf("cm-%03d", last%churnObjects)))
		if !ok {
			return false
		}
		data, _ := o.Content["data"].(map[string]any)
		got, _ := strconv.ParseInt(fmt.Sprint(data["n"]), 10, 64)
		return got >= last-int64(rate) // a later change of the same object may have won a race
	})

	var maxWindow uint64
	sampleMu.Lock()
	// The most revisions made between two samples at most a second apart.
	for i := range samples {
		for j := i; j >= 0 && samples[i].at.Sub(samples[j].at) <= time.Second; j-- {
			maxWindow = max(maxWindow, samples[i].commits-samples[j].commits)
		}
	}
	sampleMu.Unlock()
	idleP99, churnP99 := p99(idle), p99(churn)
	var idleSum time.Duration
	for _, d := range idle {
		idleSum += d
	}
	b.ReportMetric(float64(idleSum.Nanoseconds())/float64(len(idle))/1e3, "idle-mean-µs")
	b.ReportMetric(float64(idleP99.Nanoseconds())/1e3, "idle-p99-µs")
	b.ReportMetric(float64(churnP99.Nanoseconds())/1e3, "churn-p99-µs")
	b.ReportMetric(float64(churnP99)/float64(idleP99), "p99-ratio")
	b.ReportMetric(float64(changes)/elapsed.Seconds(), "changes/s")
	b.ReportMetric(float64(commits)/elapsed.Seconds(), "revisions/s")
	b.ReportMetric(float64(maxWindow), "max-revisions/s")
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func benchApply(b *testing.B, obj map[string]any) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kc.Apply(ctx, obj); err != nil {
		b.Fatal(err)
	}
}

func waitFor(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

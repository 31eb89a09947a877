// Package metrics holds Arbiter's Prometheus metrics: go-grpc-middleware's
// standard RPC metrics (grpc_server_*), the Go runtime and process
// collectors, and Arbiter's own:
//
//	arbiter_decisions_total{result,action,policy_kind}    policy results of decisions
//	arbiter_decision_requests_total{allowed}              decisions
//	arbiter_decision_duration_seconds                     evaluation time of a decision
//	arbiter_store_revision                                revision served
//	arbiter_store_objects                                 objects in the store
//	arbiter_policies, arbiter_exceptions                  compiled in the snapshot served
//	arbiter_follower_lag_revisions                        follower: revisions behind the primary
//	arbiter_sync_commit_duration_seconds                  compile + commit of a write or a change set
//	arbiter_exception_grants_total{exception,result}      granted, refused, expired
//	arbiter_decision_log_dropped_total                    decision log lines dropped (queue full)
//
// and, with an image verifier (ImageValidatingPolicies):
//
//	arbiter_image_verification_cache_total{result}        verifications and image reads answered from memory (hit) or not (miss)
//	arbiter_image_verifications_total{outcome}            verifications made: verified, not_verified, error
//	arbiter_image_registry_requests_total                 HTTP requests to registries
//	arbiter_image_registry_errors_total                   of which transport failures and 5xx answers
//	arbiter_image_registry_request_duration_seconds       their latency (a summary: _sum and _count)
//	arbiter_image_registry_max_in_flight                  most registry requests ever in flight at once
//
// Handler serves them (and, when asked, pprof) on a separate HTTP port.
package metrics

import (
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
)

// Grant results.
const (
	Granted = "granted"
	Refused = "refused"
	Expired = "expired"
)

// Metrics is a registry with Arbiter's metrics.
type Metrics struct {
	Registry *prometheus.Registry
	// GRPC are the standard RPC metrics; its interceptors go in the
	// server's chain.
	GRPC *grpcprom.ServerMetrics

	decisions        *prometheus.CounterVec
	decisionRequests *prometheus.CounterVec
	decisionDuration prometheus.Histogram
	commitDuration   prometheus.Histogram
	grants           *prometheus.CounterVec
}

// New returns a registry holding every metric.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		GRPC: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets([]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}))),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_decisions_total",
			Help: "Policy results of decisions, by result (pass, fail, warn, error, skip), the policy's validation actions (Deny, Warn, Audit, comma-joined) and policy kind.",
		}, []string{"result", "action", "policy_kind"}),
		decisionRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_decision_requests_total",
			Help: "Decisions made, by whether the request was allowed.",
		}, []string{"allowed"}),
		decisionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "arbiter_decision_duration_seconds",
			Help:    "Time to decide one request (conversion and evaluation, after the snapshot is chosen).",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		commitDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "arbiter_sync_commit_duration_seconds",
			Help:    "Time to compile and commit one write (primary) or change set or snapshot (follower), and swap its snapshot in.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		grants: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_exception_grants_total",
			Help: "PolicyException outcomes in decisions: granted, refused (compensating controls failed) or expired (bound to a policy that applied, past expiresAt).",
		}, []string{"exception", "result"}),
	}
	m.Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.GRPC, m.decisions, m.decisionRequests, m.decisionDuration, m.commitDuration, m.grants,
	)
	return m
}

// InitializeGRPC pre-creates the RPC metrics of every method of srv, so
// they read 0 before the first call.
func (m *Metrics) InitializeGRPC(srv *grpc.Server) { m.GRPC.InitializeMetrics(srv) }

// PolicyResult counts one policy result of a decision.
func (m *Metrics) PolicyResult(result string, actions []string, kind string) {
	m.decisions.WithLabelValues(result, strings.Join(actions, ","), kind).Inc()
}

// Decision counts a decision and its duration.
func (m *Metrics) Decision(allowed bool, d time.Duration) {
	a := "true"
	if !allowed {
		a = "false"
	}
	m.decisionRequests.WithLabelValues(a).Inc()
	m.decisionDuration.Observe(d.Seconds())
}

// ExceptionGrant counts an exception outcome (Granted, Refused, Expired).
func (m *Metrics) ExceptionGrant(exception, result string) {
	m.grants.WithLabelValues(exception, result).Inc()
}

// Commit observes the duration of one commit.
func (m *Metrics) Commit(d time.Duration) { m.commitDuration.Observe(d.Seconds()) }

// State is what the state gauges read at each scrape.
type State struct {
	Revision   uint64
	Objects    int
	Policies   int
	Exceptions int
	// Follower is set on a follower; LagRevisions is then its lag.
	Follower     bool
	LagRevisions uint64
}

// RegisterState registers the gauges read from fn at each scrape:
// arbiter_store_revision, arbiter_store_objects, arbiter_policies,
// arbiter_exceptions and arbiter_follower_lag_revisions.
func (m *Metrics) RegisterState(fn func() State) {
	m.Registry.MustRegister(&stateCollector{fn: fn})
}

// RegisterCounterFunc registers a counter read from fn at each scrape.
func (m *Metrics) RegisterCounterFunc(name, help string, fn func() float64) {
	m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, fn))
}

var (
	revisionDesc   = prometheus.NewDesc("arbiter_store_revision", "Store revision of the snapshot being served.", nil, nil)
	objectsDesc    = prometheus.NewDesc("arbiter_store_objects", "Objects in the store at the revision served.", nil, nil)
	policiesDesc   = prometheus.NewDesc("arbiter_policies", "Policies compiled in the snapshot being served.", nil, nil)
	exceptionsDesc = prometheus.NewDesc("arbiter_exceptions", "PolicyExceptions compiled in the snapshot being served.", nil, nil)
	lagDesc        = prometheus.NewDesc("arbiter_follower_lag_revisions", "Follower: revisions behind the primary's head as last heard (0 on a primary).", nil, nil)
)

type stateCollector struct{ fn func() State }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- revisionDesc
	ch <- objectsDesc
	ch <- policiesDesc
	ch <- exceptionsDesc
	ch <- lagDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.fn()
	ch <- prometheus.MustNewConstMetric(revisionDesc, prometheus.GaugeValue, float64(s.Revision))
	ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(s.Objects))
	ch <- prometheus.MustNewConstMetric(policiesDesc, prometheus.GaugeValue, float64(s.Policies))
	ch <- prometheus.MustNewConstMetric(exceptionsDesc, prometheus.GaugeValue, float64(s.Exceptions))
	ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(s.LagRevisions))
}

// Handler serves /metrics, /healthz (the process is up), /readyz (ready
// reports true: 200, else 503; kubelet's plaintext probes cannot reach a
// TLS gRPC health service) and, when pprof is set, /debug/pprof/.
func (m *Metrics) Handler(withPprof bool, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready != nil && !ready() {
			http.Error(w, "not serving", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("arbiter: /metrics /healthz /readyz\n"))
	})
	return mux
}

// ImageVerification are an image verifier's counters since it started
// (imageverify.Stats).
type ImageVerification struct {
	CacheHits, CacheMisses int64
	// Verifications counts the verifications made; Failures those that
	// did not verify, Errors those that could not answer.
	Verifications, Failures, Errors  int64
	RegistryRequests, RegistryErrors int64
	// RegistryLatency is the total duration of the registry requests.
	RegistryLatency time.Duration
	MaxInFlight     int64
}

var (
	ivCacheDesc = prometheus.NewDesc("arbiter_image_verification_cache_total",
		"Image verifications and image reads of ImageValidatingPolicies answered from the verifier's memory (result=hit) or not (miss).", []string{"result"}, nil)
	ivOutcomeDesc = prometheus.NewDesc("arbiter_image_verifications_total",
		"Image signature and attestation verifications made (cache misses), by outcome: verified, not_verified, error (could not answer: registry down, timeout).", []string{"outcome"}, nil)
	ivRequestsDesc = prometheus.NewDesc("arbiter_image_registry_requests_total", "HTTP requests of the image verifier to registries.", nil, nil)
	ivErrorsDesc   = prometheus.NewDesc("arbiter_image_registry_errors_total", "Registry requests of the image verifier that failed (transport errors, 5xx answers).", nil, nil)
	ivLatencyDesc  = prometheus.NewDesc("arbiter_image_registry_request_duration_seconds", "Latency of the image verifier's registry requests (to the end of the response body).", nil, nil)
	ivInFlightDesc = prometheus.NewDesc("arbiter_image_registry_max_in_flight", "Most registry requests of the image verifier ever in flight at once (bounded by maxConcurrent).", nil, nil)
)

// RegisterImageVerification registers the arbiter_image_* metrics, read
// from fn at each scrape.
func (m *Metrics) RegisterImageVerification(fn func() ImageVerification) {
	m.Registry.MustRegister(&imageCollector{fn: fn})
}

type imageCollector struct{ fn func() ImageVerification }

func (c *imageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- ivCacheDesc
	ch <- ivOutcomeDesc
	ch <- ivRequestsDesc
	ch <- ivErrorsDesc
	ch <- ivLatencyDesc
	ch <- ivInFlightDesc
}

func (c *imageCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.fn()
	ch <- prometheus.MustNewConstMetric(ivCacheDesc, prometheus.CounterValue, float64(s.CacheHits), "hit")
	ch <- prometheus.MustNewConstMetric(ivCacheDesc, prometheus.CounterValue, float64(s.CacheMisses), "miss")
	verified := max(s.Verifications-s.Failures-s.Errors, 0)
	ch <- prometheus.MustNewConstMetric(ivOutcomeDesc, prometheus.CounterValue, float64(verified), "verified")
	ch <- prometheus.MustNewConstMetric(ivOutcomeDesc, prometheus.CounterValue, float64(s.Failures), "not_verified")
	ch <- prometheus.MustNewConstMetric(ivOutcomeDesc, prometheus.CounterValue, float64(s.Errors), "error")
	ch <- prometheus.MustNewConstMetric(ivRequestsDesc, prometheus.CounterValue, float64(s.RegistryRequests))
	ch <- prometheus.MustNewConstMetric(ivErrorsDesc, prometheus.CounterValue, float64(s.RegistryErrors))
	ch <- prometheus.MustNewConstSummary(ivLatencyDesc, uint64(max(s.RegistryRequests, 0)), s.RegistryLatency.Seconds(), nil)
	ch <- prometheus.MustNewConstMetric(ivInFlightDesc, prometheus.GaugeValue, float64(s.MaxInFlight))
}

// Package webhook is the admission webhook shim: an HTTPS handler that turns
// the AdmissionReview the Kubernetes API server sends into one Decide call on
// an Arbiter decision service, and the decision into an AdmissionReview
// response.
//
// The shim is a client: it depends on the generated API, the Go client, gRPC
// and the admission types of k8s.io/api, never on the engine, the server or
// the store. It holds no policy and makes no decision of its own; when the
// decision service cannot answer, it answers HTTP 500 (never an allow), so
// the API server applies the webhook's failurePolicy.
//
// Endpoints:
//
//	POST /validate  admission.k8s.io/v1 (or v1beta1) AdmissionReview in, AdmissionReview out:
//	                the validations of the object as admitted (STAGES_VALIDATE_ONLY)
//	POST /mutate    the same, for a mutating webhook: the mutations
//	                (STAGES_MUTATE_ONLY), answered with patchType JSONPatch
//	GET  /healthz   200 while the process serves HTTP
//	GET  /readyz    200 when the decision service answers gRPC health SERVING (cached briefly)
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/arbiter-pdp/arbiter/client"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds a Decide call: shorter than the API server's
	// default webhook timeout (10 s), so the shim's own 500 reaches the API
	// server before the API server gives up on the call.
	DefaultTimeout = 8 * time.Second
	// DefaultMaxBodyBytes is the largest AdmissionReview accepted (3 MiB, the
	// API server's own request body limit).
	DefaultMaxBodyBytes = 3 << 20
	// DefaultReadyCacheTTL is how long a /readyz answer is reused.
	DefaultReadyCacheTTL = time.Second
)

// AdmissionReview API versions the shim answers.
const (
	apiVersionV1      = "admission.k8s.io/v1"
	apiVersionV1beta1 = "admission.k8s.io/v1beta1"
)

// Config configures a Handler.
type Config struct {
	// Client is the connection to the decision service. Required.
	Client *client.Client
	// Timeout bounds each Decide call (default DefaultTimeout). When the
	// API server states its own timeout (the ?timeout= query parameter it
	// adds from the webhook's timeoutSeconds), the shim uses at most 80% of
	// that.
	Timeout time.Duration
	// MaxBodyBytes is the largest request body accepted; larger ones are
	// refused with 413 (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// ReadyCacheTTL is how long /readyz reuses the decision service's
	// health answer (default DefaultReadyCacheTTL).
	ReadyCacheTTL time.Duration
	// Monotonic makes every decision demand (min_revision) at least the
	// highest store revision this shim has seen in a decision, so that a
	// replica behind the others cannot answer with an older policy set: it
	// waits to catch up within the deadline, or the call fails (HTTP 500,
	// failurePolicy). Off by default: after a primary is restored to an
	// older revision, a monotonic shim fails every call until restarted.
	Monotonic bool
	// Logger receives the shim's logs (default slog.Default()).
	Logger *slog.Logger
}

// Handler serves /validate, /healthz and /readyz.
type Handler struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	// seen is the highest revision of a decision so far (Monotonic).
	seen atomic.Uint64

	readyMu  sync.Mutex
	readyAt  time.Time
	readyOK  bool
	readyErr error
}

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Client == nil {
		return nil, errors.New("webhook: Config.Client is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ReadyCacheTTL <= 0 {
		cfg.ReadyCacheTTL = DefaultReadyCacheTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /validate", func(w http.ResponseWriter, r *http.Request) {
		h.review(w, r, arbiterv1.Stages_STAGES_VALIDATE_ONLY)
	})
	h.mux.HandleFunc("POST /mutate", func(w http.ResponseWriter, r *http.Request) {
		h.review(w, r, arbiterv1.Stages_STAGES_MUTATE_ONLY)
	})
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.HandleFunc("GET /readyz", h.readyz)
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Revision is the highest store revision of a decision this shim has
// received.
func (h *Handler) Revision() uint64 { return h.seen.Load() }

// ObserveRevision raises the revision floor of a Monotonic shim to rev (for
// example a revision the caller knows was written).
func (h *Handler) ObserveRevision(rev uint64) {
	for {
		cur := h.seen.Load()
		if rev <= cur || h.seen.CompareAndSwap(cur, rev) {
			return
		}
	}
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ok, err := h.ready(r.Context())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		msg := "decision service not serving"
		if err != nil {
			msg += ": " + client.Describe(err)
		}
		w.Write([]byte(msg + "\n"))
		return
	}
	w.Write([]byte("ok\n"))
}

// ready asks the decision service's health, at most once per ReadyCacheTTL.
func (h *Handler) ready(ctx context.Context) (bool, error) {
	h.readyMu.Lock()
	defer h.readyMu.Unlock()
	if !h.readyAt.IsZero() && time.Since(h.readyAt) < h.cfg.ReadyCacheTTL {
		return h.readyOK, h.readyErr
	}
	ctx, cancel := context.WithTimeout(ctx, min(h.cfg.Timeout, time.Second))
	defer cancel()
	ok, err := h.cfg.Client.Serving(ctx)
	if ok != h.readyOK || h.readyAt.IsZero() {
		h.log.Info("decision service readiness", "serving", ok, "error", errString(err))
	}
	h.readyAt, h.readyOK, h.readyErr = time.Now(), ok, err
	return ok, err
}

// review handles one AdmissionReview: the API server's validating call
// (the object as it will be admitted, validated only) or its mutating call
// (mutated only; the response carries the patch).
func (h *Handler) review(w http.ResponseWriter, r *http.Request, stages arbiterv1.Stages) {
	start := time.Now()
	if r.ContentLength > h.cfg.MaxBodyBytes {
		h.fail(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
			"AdmissionReview of "+itoa(r.ContentLength)+" bytes exceeds the limit of "+itoa(h.cfg.MaxBodyBytes))
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		h.fail(w, http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, "content type "+ct+": want application/json")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.fail(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
				"AdmissionReview exceeds the limit of "+itoa(h.cfg.MaxBodyBytes)+" bytes")
			return
		}
		h.fail(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "reading the request: "+err.Error())
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		h.fail(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decoding the AdmissionReview: "+err.Error())
		return
	}
	if review.APIVersion != apiVersionV1 && review.APIVersion != apiVersionV1beta1 || review.Kind != "AdmissionReview" {
		h.fail(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			"want an AdmissionReview of "+apiVersionV1+" or "+apiVersionV1beta1+", got kind "+quote(review.Kind)+" of "+quote(review.APIVersion))
		return
	}
	req := review.Request
	if req == nil {
		h.fail(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "the AdmissionReview has no request")
		return
	}
	dreq, err := DecideRequest(req)
	if err != nil {
		h.fail(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return
	}
	dreq.Stages = stages
	// The API server is admitting the request: it may set off
	// mutate-existing MutatingPolicies (on the mutating webhook's call).
	dreq.AdmissionWebhook = true
	if h.cfg.Monotonic {
		dreq.MinRevision = h.seen.Load()
	}
	timeout := h.timeout(r)
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	resp, err := h.cfg.Client.Decide(ctx, dreq)
	cancel()
	attrs := []any{
		"stage", stageName(stages), "uid", req.UID, "operation", req.Operation, "kind", gvkString(req.Kind), "subresource", req.SubResource,
		"namespace", req.Namespace, "name", req.Name, "user", req.UserInfo.Username, "dry_run", dreq.GetDryRun(),
	}
	if err != nil {
		// Never an allow: a 500 makes the API server apply failurePolicy.
		h.log.Error("decision failed", append(attrs, "error", client.Describe(err), "timeout", timeout, "duration", time.Since(start))...)
		h.fail(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "decision service: "+client.Describe(err))
		return
	}
	if h.cfg.Monotonic {
		h.ObserveRevision(resp.GetRevision())
	}
	out := AdmissionResponse(req.UID, resp, dreq.GetDryRun(), h.log)
	payload, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: review.APIVersion, Kind: "AdmissionReview"},
		Response: out,
	})
	if err != nil {
		h.fail(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "encoding the response: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(payload)
	lvl := slog.LevelDebug
	if !resp.GetAllowed() {
		lvl = slog.LevelInfo
	}
	if h.log.Enabled(r.Context(), lvl) {
		h.log.Log(r.Context(), lvl, "decision", append(attrs, "allowed", resp.GetAllowed(), "revision", resp.GetRevision(),
			"decision_id", resp.GetDecisionId(), "warnings", len(resp.GetWarnings()), "duration", time.Since(start))...)
	}
}

// timeout is the deadline of a Decide call: Config.Timeout, or 80% of the
// timeout the API server states, whichever is shorter.
func (h *Handler) timeout(r *http.Request) time.Duration {
	t := h.cfg.Timeout
	if q := r.URL.Query().Get("timeout"); q != "" {
		if d, err := time.ParseDuration(q); err == nil && d > 0 {
			t = min(t, d*4/5)
		}
	}
	return t
}

// fail answers with an HTTP error and a metav1.Status body, as the API
// server's own errors look. The API server treats any status but 200 as a
// failed call and applies the webhook's failurePolicy.
func (h *Handler) fail(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	if code != http.StatusInternalServerError {
		h.log.Warn("refused admission request", "code", code, "reason", reason, "message", msg)
	}
	body, _ := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reason,
		Code:     int32(code),
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(body)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return client.Describe(err)
}

func quote(s string) string { return `"` + s + `"` }

func stageName(s arbiterv1.Stages) string {
	if s == arbiterv1.Stages_STAGES_MUTATE_ONLY {
		return "mutate"
	}
	return "validate"
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func gvkString(k metav1.GroupVersionKind) string {
	if k.Group == "" {
		return k.Version + "/" + k.Kind
	}
	return k.Group + "/" + k.Version + "/" + k.Kind
}

package kubesource

// The apiCall of GlobalContextEntries: the primary fetches each entry's
// data every refreshInterval — from the API server (urlPath) or a service
// through the callout client (its allowlist, timeout and size limit) — and
// commits it as a context object (clusterdata.NewEntryData: kind
// GlobalContextEntryData of context.arbiter.dev/v1alpha1, named after the
// entry), so every replica serves the same data at a revision. A fetch
// that fails is committed too (spec.error): globalContext.Get of the entry
// is then an error, as in Kyverno, whose entry answers its last error
// rather than its last data. Each fetch writes the entry's status as
// Kyverno does (a Ready condition, lastRefreshTime) and a failure records
// a Warning Event (reason FailedToCallAPI). A fetch that returns what the
// store holds makes no revision.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// APICallConfig configures the fetches of the GlobalContextEntries'
// apiCall.
type APICallConfig struct {
	// Service makes the calls of entries with apiCall.service: the server's
	// callout client (*callout.Client), whose allowedURLPrefixes must
	// allow the URL. Nil: those entries fail, naming the missing callout
	// configuration.
	Service ServiceCaller
	// Timeout bounds an apiCall.urlPath request to the API server (default
	// 30 s).
	Timeout time.Duration
	// MaxResponseBytes bounds an apiCall.urlPath response (default
	// 2,000,000 bytes, Kyverno's --maxAPICallResponseLength).
	MaxResponseBytes int64
}

func (c APICallConfig) timeout() time.Duration {
	if c.Timeout <= 0 {
		return 30 * time.Second
	}
	return c.Timeout
}

func (c APICallConfig) maxBytes() int64 {
	if c.MaxResponseBytes <= 0 {
		return 2_000_000
	}
	return c.MaxResponseBytes
}

// ServiceCaller makes an apiCall.service request (*callout.Client): it
// returns the status and body whatever the status.
type ServiceCaller interface {
	APICall(ctx context.Context, method, url, caBundle string, headers http.Header, body []byte) (int, []byte, error)
}

// Kyverno's names (globalcontext/event, api/kyverno/v2 GlobalContextEntry status).
const (
	ReasonAPICallFailure = "FailedToCallAPI"
	gceConditionReady    = "Ready"
)

var (
	gceGK  = schema.GroupKind{Group: clusterdata.GlobalContextGroup, Kind: clusterdata.KindGlobalContextEntry}
	dataGK = schema.GroupKind{Group: clusterdata.DataGroup, Kind: clusterdata.KindEntryData}
)

// fetchState is an entry's schedule.
type fetchState struct {
	version string
	due     time.Time
}

// runAPICalls fetches the apiCall entries of the revision served, each
// when due, until ctx ends (it starts after the first comparison of the
// store with the cluster).
func (s *Source) runAPICalls(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.ready:
	}
	var raw rest.Interface
	if dc, err := discovery.NewDiscoveryClientForConfig(s.cfg.Rest); err == nil {
		raw = dc.RESTClient()
	}
	state := map[string]*fetchState{}
	for ctx.Err() == nil {
		snap := s.srv.current()
		now := time.Now()
		next := now.Add(time.Minute)
		seen := map[string]bool{}
		for _, e := range entriesOf(snap) {
			if e.Spec.APICall == nil {
				continue
			}
			seen[e.Name] = true
			f := state[e.Name]
			if f == nil || f.version != e.Version {
				f = &fetchState{version: e.Version, due: dueOf(snap, e, now)}
				state[e.Name] = f
			}
			if !now.Before(f.due) {
				data, err := s.fetch(ctx, raw, e)
				if ctx.Err() != nil {
					return
				}
				s.fetched(ctx, snap, e, data, err)
				f.due = time.Now().Add(e.RefreshInterval())
			}
			if f.due.Before(next) {
				next = f.due
			}
		}
		for name := range state {
			if !seen[name] {
				delete(state, name)
			}
		}
		// Data of entries that are gone (or no longer apiCall entries).
		var stale []store.Key
		rangeKind(snap, dataGK, func(k store.Key, _ *manifest.Object) bool {
			if !seen[k.Name] {
				stale = append(stale, k)
			}
			return true
		})
		if len(stale) > 0 {
			s.mu.Lock()
			for _, k := range stale {
				if _, pending := s.cx.pendingData[k]; !pending {
					s.cx.pendingDel[k] = true
				}
			}
			s.mu.Unlock()
			s.poke()
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.cx.apiWake:
		case <-t.C:
		}
		t.Stop()
	}
}

// dueOf is when an entry is fetched first by this primary: when the data
// stored for its version is one refreshInterval old (a new primary does
// not fetch again what the last one fetched), at once otherwise.
func dueOf(snap Snapshot, e *clusterdata.Entry, now time.Time) time.Time {
	o, ok := snap.Object(store.Key{Group: dataGK.Group, Kind: dataGK.Kind, Name: e.Name})
	if !ok {
		return now
	}
	spec, _ := o.Content["spec"].(map[string]any)
	if v, _ := spec["entryVersion"].(string); v != e.Version {
		return now
	}
	if msg, _ := spec["error"].(string); msg != "" {
		return now
	}
	at, _ := spec["fetchedAt"].(string)
	t, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return now
	}
	return t.Add(e.RefreshInterval())
}

// fetch makes an entry's call, retried as Kyverno retries it (retryLimit
// attempts, default 3, about 10 ms apart), and decodes the response as
// JSON.
func (s *Source) fetch(ctx context.Context, raw rest.Interface, e *clusterdata.Entry) (any, error) {
	a := e.Spec.APICall
	method := a.Method
	if method == "" {
		method = http.MethodGet
	}
	var body []byte
	if method == http.MethodPost {
		// Kyverno's buildRequestData: the data's keys and values as one
		// JSON object (json.Encoder: a trailing newline).
		m := make(map[string]any, len(a.Data))
		for _, d := range a.Data {
			m[d.Key] = d.Value
		}
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(m); err != nil {
			return nil, fmt.Errorf("failed to encode HTTP POST data for APICall %s: %w", e.Name, err)
		}
		body = b.Bytes()
	}
	attempts := a.RetryLimit
	if attempts <= 0 {
		attempts = 3 // the CRD's default
	}
	var data []byte
	var err error
	for i := range attempts {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(10+rand.IntN(2)) * time.Millisecond):
			}
		}
		if a.URLPath != "" {
			data, err = s.fetchPath(ctx, raw, method, a.URLPath, body)
		} else {
			data, err = s.fetchService(ctx, e, method, body)
		}
		if err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("the response of APICall %s is not JSON: %w", e.Name, err)
	}
	return v, nil
}

// fetchPath calls the API server, with the source's credentials (RBAC
// applies), as Kyverno's executeK8sAPICall.
func (s *Source) fetchPath(ctx context.Context, raw rest.Interface, method, path string, body []byte) ([]byte, error) {
	if raw == nil {
		return nil, fmt.Errorf("failed to %s resource with raw url: %s: no API server client", method, path)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.APICall.timeout())
	defer cancel()
	req := raw.Verb(method).AbsPath(path)
	if body != nil {
		req = req.Body(body).SetHeader("Content-Type", "application/json")
	}
	rc, err := req.Stream(ctx)
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return nil, fmt.Errorf("failed to %s resource with raw url: %s: permission denied: %v", method, path, err)
		}
		return nil, fmt.Errorf("failed to %s resource with raw url: %s: %v", method, path, err)
	}
	defer func() { _ = rc.Close() }()
	limit := s.cfg.APICall.maxBytes()
	data, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("failed to %s resource with raw url: %s: %v", method, path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("response length must be less than max allowed response length of %d", limit)
	}
	return data, nil
}

// errNoService: apiCall.service needs the callout client.
var errNoService = errors.New("calls to services are not configured: give the server a callout section whose allowedURLPrefixes allow the URL")

// fetchService calls a service through the callout client, as Kyverno's
// executeServiceCall: a status outside 2xx is an error with the body.
func (s *Source) fetchService(ctx context.Context, e *clusterdata.Entry, method string, body []byte) ([]byte, error) {
	svc := e.Spec.APICall.Service
	if s.cfg.APICall.Service == nil {
		return nil, fmt.Errorf("failed to execute HTTP request for APICall %s: %w", e.Name, errNoService)
	}
	if svc.CABundleFrom != nil {
		return nil, fmt.Errorf("APICall %s: service.caBundleFrom is not supported: give the bundle in service.caBundle", e.Name)
	}
	headers := http.Header{}
	for _, h := range svc.Headers {
		if h.ValueFrom != nil {
			return nil, fmt.Errorf("APICall %s: header %s: valueFrom is not supported: give the value", e.Name, h.Key)
		}
		headers.Add(h.Key, h.Value)
	}
	if method == http.MethodPost && headers.Get("Content-Type") == "" {
		headers.Set("Content-Type", "application/json")
	}
	status, data, err := s.cfg.APICall.Service.APICall(ctx, method, svc.URL, svc.CABundle, headers, body)
	if err != nil {
		return nil, fmt.Errorf("failed to execute HTTP request for APICall %s: %w", e.Name, err)
	}
	if status < 200 || status >= 300 {
		return nil, fmt.Errorf("HTTP %d %s: %s", status, http.StatusText(status), data)
	}
	return data, nil
}

// fetched records a fetch: its data (or error) to commit when it differs
// from what the store holds, the entry's status and, for a failure, an
// Event.
func (s *Source) fetched(ctx context.Context, snap Snapshot, e *clusterdata.Entry, data any, fetchErr error) {
	now := time.Now()
	obj := clusterdata.NewEntryData(e, now, data, fetchErr)
	k := store.Key{Group: dataGK.Group, Kind: dataGK.Kind, Name: e.Name}
	if !sameFetch(snap, k, obj) {
		s.mu.Lock()
		s.cx.pendingData[k] = obj
		delete(s.cx.pendingDel, k)
		s.mu.Unlock()
		s.poke()
	}
	u := s.clusterEntry(e.Name)
	if fetchErr != nil {
		s.log.Warn("a GlobalContextEntry's apiCall failed", "entry", e.Name, "err", fetchErr)
		if u != nil {
			s.recorder.Event(u.DeepCopy(), corev1.EventTypeWarning, ReasonAPICallFailure, truncate(fetchErr.Error(), 1024))
		}
	} else {
		s.log.Info("a GlobalContextEntry's apiCall fetched", "entry", e.Name)
	}
	if u != nil {
		s.writeEntryStatus(ctx, u, fetchErr, now)
	}
}

// sameFetch says whether the store holds the data (or error) of obj for
// the same entry version, fetched at whatever time.
func sameFetch(snap Snapshot, k store.Key, obj *manifest.Object) bool {
	stored, ok := snap.Object(k)
	if !ok {
		return false
	}
	a, _ := stored.Content["spec"].(map[string]any)
	b, _ := obj.Content["spec"].(map[string]any)
	strip := func(m map[string]any) map[string]any {
		out := make(map[string]any, len(m))
		for key, v := range m {
			if key != "fetchedAt" {
				out[key] = v
			}
		}
		return out
	}
	return sameContent(strip(a), strip(b))
}

// clusterEntry is the entry's object in the informer's cache (nil: none).
func (s *Source) clusterEntry(name string) *unstructured.Unstructured {
	s.mu.Lock()
	w := s.watches[gceGK]
	s.mu.Unlock()
	if w == nil {
		return nil
	}
	u, _ := get(w, store.Key{Group: gceGK.Group, Kind: gceGK.Kind, Name: name})
	return u
}

// writeEntryStatus writes the entry's status as Kyverno's
// GlobalContextEntryStatus.SetReady does (and lastRefreshTime after a
// success). A conflict or a missing object is left to the next fetch.
func (s *Source) writeEntryStatus(ctx context.Context, u *unstructured.Unstructured, fetchErr error, now time.Time) {
	s.mu.Lock()
	w := s.watches[gceGK]
	s.mu.Unlock()
	if w == nil {
		return
	}
	st, _ := u.Object["status"].(map[string]any)
	cond := metav1.Condition{Type: gceConditionReady, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "Ready"}
	if fetchErr != nil {
		cond = metav1.Condition{Type: gceConditionReady, Status: metav1.ConditionFalse, Reason: "Failed", Message: truncate(fetchErr.Error(), 32768)}
	}
	var conds []metav1.Condition
	if raw, ok := st["conditions"]; ok {
		b, _ := json.Marshal(raw)
		_ = json.Unmarshal(b, &conds)
	}
	cond.ObservedGeneration = u.GetGeneration()
	cond.LastTransitionTime = metav1.NewTime(now)
	for _, c := range conds {
		if c.Type == cond.Type && c.Status == cond.Status {
			cond.LastTransitionTime = c.LastTransitionTime // no transition
		}
	}
	out := []any{}
	replaced := false
	for _, c := range conds {
		if c.Type == cond.Type {
			c, replaced = cond, true
		}
		m, _ := toMap(c)
		out = append(out, m)
	}
	if !replaced {
		m, _ := toMap(cond)
		out = append(out, m)
	}
	status := map[string]any{"ready": fetchErr == nil, "conditions": out}
	if fetchErr == nil {
		status["lastRefreshTime"] = now.UTC().Format(time.RFC3339)
	} else if t, ok := st["lastRefreshTime"]; ok {
		status["lastRefreshTime"] = t
	}
	obj := u.DeepCopy()
	obj.Object["status"] = status
	_, err := s.dyn.Resource(w.gvr).UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: s.cfg.Component})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		s.log.Warn("writing a GlobalContextEntry's status", "entry", u.GetName(), "err", err)
	}
}

// unstructuredOf is an object as the source's items hold it.
func unstructuredOf(o *manifest.Object) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: o.Content}
}

// sameContent compares JSON-shaped content.
func sameContent(a, b map[string]any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

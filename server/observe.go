package server

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/engine"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server/authz"
	"github.com/arbiter-pdp/arbiter/server/metrics"
)

// observeDecision reports one decision to the metrics, the decision log and
// the trace: every decision path (Decide, batches) calls it once per
// decision, after the response is built. start is when deciding began.
func (s *Server) observeDecision(ctx context.Context, snap *Snapshot, req *engine.Request, d *engine.Decision, resp *arbiterv1.DecideResponse, start time.Time) {
	end := time.Now()
	dur := end.Sub(start)
	m, dl := s.cfg.Metrics, s.cfg.DecisionLog
	logIt := dl != nil && dl.Sample(d.Allowed)
	var ex decisionlog.Exceptions
	if m != nil || logIt {
		ex = s.exceptionOutcomes(snap, req, d)
	}
	if m != nil {
		m.Decision(d.Allowed, dur)
		for i := range d.Results {
			r := &d.Results[i]
			m.PolicyResult(r.Result, r.Actions, r.PolicyKind)
		}
		for _, e := range ex.Granted {
			m.ExceptionGrant(e, metrics.Granted)
		}
		for _, e := range ex.Refused {
			m.ExceptionGrant(e, metrics.Refused)
		}
		for _, e := range ex.Expired {
			m.ExceptionGrant(e, metrics.Expired)
		}
	}
	if s.tracer != nil {
		_, span := s.tracer.Start(ctx, "arbiter.decision", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal))
		if span.IsRecording() {
			span.SetAttributes(
				attribute.Int64("arbiter.revision", int64(snap.Revision)),
				attribute.String("arbiter.digest", snap.Digest),
				attribute.String("arbiter.decision_id", resp.GetDecisionId()),
				attribute.Bool("arbiter.allowed", d.Allowed),
				attribute.Bool("arbiter.dry_run", req.DryRun),
				attribute.String("arbiter.request.kind", req.Kind.Kind),
				attribute.String("arbiter.request.namespace", req.Namespace),
				attribute.String("arbiter.request.name", req.Name),
				attribute.String("arbiter.request.operation", req.Operation),
				attribute.Int("arbiter.results", len(d.Results)),
				attribute.Int64("arbiter.cel_cost", int64(d.Cost)),
			)
		}
		span.End(trace.WithTimestamp(end))
	}
	if logIt {
		dl.Log(decisionEntry(ctx, snap, req, d, resp, ex, start, dur))
	}
}

func decisionEntry(ctx context.Context, snap *Snapshot, req *engine.Request, d *engine.Decision, resp *arbiterv1.DecideResponse,
	ex decisionlog.Exceptions, start time.Time, dur time.Duration) *decisionlog.Entry {
	caller := authz.CallerName(ctx)
	if caller == "" {
		caller = authz.Anonymous
	}
	e := &decisionlog.Entry{
		DecisionID: resp.GetDecisionId(),
		Time:       start.UTC(),
		Revision:   snap.Revision,
		Digest:     snap.Digest,
		Caller:     caller,
		Request: decisionlog.Request{
			APIVersion:  req.Kind.GroupVersion().String(),
			Kind:        req.Kind.Kind,
			Resource:    req.Resource.Resource,
			SubResource: req.SubResource,
			Namespace:   req.Namespace,
			Name:        req.Name,
			Operation:   req.Operation,
			User:        req.UserInfo.Username,
			Groups:      req.UserInfo.Groups,
			Mode:        modeName(req.Mode),
		},
		Allowed:         d.Allowed,
		DryRun:          req.DryRun,
		Message:         d.Message,
		Warnings:        d.Warnings,
		Results:         make([]decisionlog.Result, len(d.Results)),
		Exceptions:      ex,
		DurationSeconds: dur.Seconds(),
		Object:          req.Object,
		OldObject:       req.OldObject,
	}
	for i := range d.Results {
		r := &d.Results[i]
		e.Results[i] = decisionlog.Result{
			Policy: r.Policy, PolicyKind: r.PolicyKind, Rule: r.Rule, Result: r.Result,
			Message: r.Message, Actions: r.Actions, Exceptions: r.Exceptions,
		}
	}
	return e
}

func modeName(m engine.Mode) string {
	switch m {
	case engine.ModeAdmission:
		return "admission"
	case engine.ModeBackground:
		return "background"
	}
	return "cli"
}

// exceptionOutcomes derives the exceptions granted, refused and expired in
// a decision from its results (the engine reports them there):
//   - granted: the exceptions of a result with rule "exception" (an
//     exemption);
//   - refused: the exception named by a plain (rule "") failing or erring
//     result, which carries the refused exception whose compensating
//     control message replaced the policy's (the first refused one, by
//     namespace and name, when none was granted);
//   - expired: exceptions bound to a policy that applied whose expiresAt
//     has passed (the engine ignores them; their matchConditions are not
//     evaluated, so this counts "would have been considered"), once per
//     decision. A Pod Security level applied unless its result is a skip
//     other than by an exception (an exempt namespace, user or runtime
//     class, or an update that changes nothing the checks read): its
//     exceptions are consulted only when the level is checked.
func (s *Server) exceptionOutcomes(snap *Snapshot, req *engine.Request, d *engine.Decision) decisionlog.Exceptions {
	var out decisionlog.Exceptions
	idx := s.expiryIndex(snap)
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	var expired map[string]bool
	for i := range d.Results {
		r := &d.Results[i]
		switch {
		case r.Rule == "exception":
			out.Granted = append(out.Granted, r.Exceptions...)
		case r.Rule == "" && len(r.Exceptions) > 0 && (r.Result == engine.ResultFail || r.Result == engine.ResultWarn || r.Result == engine.ResultError):
			out.Refused = append(out.Refused, r.Exceptions...)
		}
		if len(idx.byPolicy) == 0 || r.PolicyKind == engine.KindPodSecurity && r.Result == engine.ResultSkip && r.Rule != "exception" {
			continue
		}
		for _, e := range idx.byPolicy[r.PolicyKind+"/"+r.Policy] {
			if e.Expired(now) && !expired[e.Key()] {
				if expired == nil {
					expired = map[string]bool{}
				}
				expired[e.Key()] = true
				out.Expired = append(out.Expired, e.Key())
			}
		}
	}
	return out
}

// expiryIndex lists, per policy (kind/namespace/name as results name it:
// PodSecurity/restricted for a Pod Security level), its exceptions that
// have an expiresAt.
type expiryIndex struct {
	set      *engine.PolicySet
	byPolicy map[string][]*engine.Exception
}

type expiryCache struct{ p atomic.Pointer[expiryIndex] }

func (s *Server) expiryIndex(snap *Snapshot) *expiryIndex {
	if idx := s.expiries.p.Load(); idx != nil && idx.set == snap.Set {
		return idx
	}
	idx := &expiryIndex{set: snap.Set}
	for _, p := range snap.Set.Policies() {
		for _, e := range snap.Set.ExceptionsFor(p) {
			if e.ExpiresAt.IsZero() {
				continue
			}
			if idx.byPolicy == nil {
				idx.byPolicy = map[string][]*engine.Exception{}
			}
			k := p.Kind + "/" + p.Key()
			idx.byPolicy[k] = append(idx.byPolicy[k], e)
		}
	}
	for _, level := range engine.PodSecurityLevels() {
		for _, e := range snap.Set.PodSecurityExceptions(level) {
			if e.ExpiresAt.IsZero() {
				continue
			}
			if idx.byPolicy == nil {
				idx.byPolicy = map[string][]*engine.Exception{}
			}
			k := engine.KindPodSecurity + "/" + level
			idx.byPolicy[k] = append(idx.byPolicy[k], e)
		}
	}
	s.expiries.p.Store(idx)
	return idx
}

// observeCommit reports the duration of a commit that began at start.
func (s *Server) observeCommit(start time.Time) {
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Commit(time.Since(start))
	}
}

// State returns what the state gauges report.
func (s *Server) State() metrics.State {
	snap := s.Current()
	st := metrics.State{Revision: snap.Revision, Objects: snap.Objects(),
		Policies: policyCount(snap.Set), Exceptions: len(snap.Set.Exceptions())}
	if r := s.currentRole(); !r.primary {
		st.Follower = true
		if r.f != nil {
			st.LagRevisions, _, _, _, _ = r.f.lag()
		}
	}
	return st
}

// Serving says whether the replica's health is SERVING (store loaded, a
// follower synced and within its lag bounds, not shutting down).
func (s *Server) Serving() bool { return s.isServing() }

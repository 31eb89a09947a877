package server

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/arbiter-pdp/arbiter/callout"
	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server/authz"
	"github.com/arbiter-pdp/arbiter/server/metrics"
)

// observeDecision reports one decision to the metrics, the decision log and
// the trace: every decision path (Decide, batches) calls it once per
// decision, after the response is built. start is when deciding began.
//
// reads are the context reads of the decision (nil: none recorded).
//
// calls are the calls out of the decision (nil: none collected).
func (s *Server) observeDecision(ctx context.Context, snap *Snapshot, req *admission.Request, d *engine.Decision, resp *arbiterv1.DecideResponse, start time.Time, reads *clusterdata.Reads, calls *callout.Calls) {
	end := time.Now()
	dur := end.Sub(start)
	m, dl := s.cfg.Metrics, s.cfg.DecisionLog
	logIt := dl != nil && dl.Sample(d.Allowed)
	var ex decisionlog.Exceptions
	if m != nil || logIt {
		ex = exceptionOutcomes(d)
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
		e := decisionEntry(ctx, snap, req, d, resp, ex, start, dur)
		e.ContextReads = logReads(reads.List())
		e.Calls = logCalls(calls)
		dl.Log(e)
	}
}

func decisionEntry(ctx context.Context, snap *Snapshot, req *admission.Request, d *engine.Decision, resp *arbiterv1.DecideResponse,
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
	switch req.Shape {
	case admission.ShapeEnvoy:
		// Authorization requests are logged under kinds of their own, so
		// masks can name them (decisionlog.DefaultMasks does).
		e.Request.Kind = "EnvoyCheckRequest"
	case admission.ShapeHTTP:
		e.Request.Kind = "HTTPCheckRequest"
	}
	for i := range d.Results {
		r := &d.Results[i]
		e.Results[i] = decisionlog.Result{
			Policy: r.Policy, PolicyKind: r.PolicyKind, Rule: r.Rule, Result: r.Result,
			Message: r.Message, Actions: r.Actions, Exceptions: r.Exceptions(),
		}
	}
	return e
}

// logCalls are a decision's calls out as the decision log writes them.
func logCalls(calls *callout.Calls) []decisionlog.Call {
	if calls == nil {
		return nil
	}
	list := calls.List()
	if len(list) == 0 {
		return nil
	}
	out := make([]decisionlog.Call, len(list))
	for i, c := range list {
		out[i] = decisionlog.Call{Function: c.Function, Method: c.Method, URL: c.URL, Location: c.Location, Resource: c.Resource,
			Status: c.Status, DurationSeconds: c.Duration.Seconds(), ResponseBytes: c.ResponseBytes, Refused: c.Refused}
		if c.Err != nil {
			out[i].Error = c.Err.Error()
		}
	}
	return out
}

// collectCalls returns the context a decision is made under and what
// collects its calls out: only when there is a decision log to write
// them to and a client that makes them.
func (s *Server) collectCalls(ctx context.Context) (context.Context, *callout.Calls) {
	if s.cfg.DecisionLog == nil || (s.cfg.HTTP == nil && s.cfg.Poster == nil) {
		return ctx, nil
	}
	return callout.Collect(ctx)
}

// logReads are a decision's context reads as the decision log writes
// them: keys and counts, never the objects' content (a Secret read is
// logged as its name).
func logReads(reads []clusterdata.Read) []decisionlog.ContextRead {
	if len(reads) == 0 {
		return nil
	}
	out := make([]decisionlog.ContextRead, len(reads))
	for i, r := range reads {
		out[i] = decisionlog.ContextRead{Op: r.Op, APIVersion: r.APIVersion, Resource: r.Resource, Namespace: r.Namespace,
			Name: r.Name, Selector: r.Selector, Projection: r.Projection, Count: r.Count, Error: r.Error}
	}
	return out
}

func modeName(m admission.Mode) string {
	switch m {
	case admission.ModeAdmission:
		return "admission"
	case admission.ModeBackground:
		return "background"
	}
	return "cli"
}

// exceptionOutcomes collects the exceptions granted, refused and expired
// in a decision, as the engine typed them in its results: granted are the
// exceptions of an exemption; refused, the exception whose compensating
// controls refused it and whose message a failing result shows; expired,
// the exceptions bound to a policy that applied whose expiresAt had
// passed (ignored by the engine), once per decision.
func exceptionOutcomes(d *engine.Decision) decisionlog.Exceptions {
	var out decisionlog.Exceptions
	var expired map[string]bool
	for i := range d.Results {
		r := &d.Results[i]
		if r.Cause == outcome.CauseException {
			out.Granted = append(out.Granted, r.Granted...)
		}
		if r.Refused != "" {
			out.Refused = append(out.Refused, r.Refused)
		}
		for _, e := range r.Expired {
			if !expired[e] {
				if expired == nil {
					expired = map[string]bool{}
				}
				expired[e] = true
				out.Expired = append(out.Expired, e)
			}
		}
	}
	return out
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

package server

import (
	"context"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// MutateExistingSink receives the admission requests that set off
// mutate-existing MutatingPolicies (evaluation.mutateExisting.enabled),
// with the keys of those policies and the revision that qualified them;
// kubesource's Mutator, which updates their targets through the API
// server, is one. Trigger is called after the decision is made and must
// not block (a full queue drops the request, counted and logged);
// admitted is the request's object as the replica's mutations left it
// (req.Object when they changed nothing, nil for a DELETE): what the API
// server persists, unless other webhooks change it further. Neither is
// modified.
type MutateExistingSink interface {
	Trigger(req *admission.Request, admitted map[string]any, policies []string, revision uint64)
}

type sinkBox struct{ sink MutateExistingSink }

// SetMutateExisting makes sink receive the admission requests (Decide
// calls with admission_webhook set, not dry runs, allowed, that run the
// mutations) that set off mutate-existing MutatingPolicies; nil stops it.
// Without a sink a replica sets off nothing (the policies are still
// stored, and compiled when Config.MutateExisting is set).
func (s *Server) SetMutateExisting(sink MutateExistingSink) {
	if sink == nil {
		s.mutateExisting.Store(nil)
		return
	}
	s.mutateExisting.Store(&sinkBox{sink})
}

// triggerMutateExisting hands an admitted request to the sink when it sets
// off mutate-existing policies of the snapshot. A request the validating
// webhook is asked about (validate only) sets off nothing: the mutating
// webhook, which the API server calls for the same request, does it once.
func (s *Server) triggerMutateExisting(ctx context.Context, snap *Snapshot, in *arbiterv1.DecideRequest, req *admission.Request, opts *engine.EvalOptions, d *engine.Decision) {
	box := s.mutateExisting.Load()
	if box == nil || !in.GetAdmissionWebhook() || !d.Allowed || req.DryRun || opts.Stages == engine.ValidateOnly || !snap.Set.HasMutateExisting() {
		return
	}
	pols := snap.Set.MutateExistingTriggers(ctx, req, &engine.EvalOptions{Context: opts.Context, CostBudget: opts.CostBudget})
	if len(pols) == 0 {
		return
	}
	keys := make([]string, len(pols))
	for i, p := range pols {
		keys[i] = p.Key()
	}
	admitted := req.Object
	if d.Mutated != nil {
		admitted = d.Mutated
	}
	box.sink.Trigger(req, admitted, keys, snap.Revision)
}

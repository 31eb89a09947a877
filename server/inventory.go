package server

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/authz"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	manifestpkg "github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/psa"
	"github.com/arbiter-pdp/arbiter/engine/vap"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/store"
)

// ListPolicies implements QueryService.ListPolicies.
func (s *Server) ListPolicies(ctx context.Context, in *arbiterv1.ListPoliciesRequest) (*arbiterv1.ListPoliciesResponse, error) {
	snap := s.snap.Load()
	var sel labels.Selector
	if in.GetLabelSelector() != "" {
		var err error
		if sel, err = labels.Parse(in.GetLabelSelector()); err != nil {
			return nil, toStatus(&FieldError{Field: "label_selector", Detail: err.Error()})
		}
	}
	resp := &arbiterv1.ListPoliciesResponse{Revision: snap.Revision, Digest: snap.Digest, Policies: []*arbiterv1.PolicyInfo{}}
	for _, p := range snap.Set.Policies() {
		if in.GetKind() != "" && p.Kind != in.GetKind() || in.GetNamespace() != "" && p.Namespace != in.GetNamespace() {
			continue
		}
		if in.GetAction() != "" && !hasAction(p, in.GetAction()) {
			continue
		}
		if sel != nil && !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		resp.Policies = append(resp.Policies, s.policyInfo(snap, p, !in.GetWithoutManifests()))
	}
	for _, p := range snap.Set.MutatingPolicies() {
		if in.GetKind() != "" && p.Kind != in.GetKind() || in.GetNamespace() != "" && p.Namespace != in.GetNamespace() || in.GetAction() != "" {
			continue
		}
		if sel != nil && !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		resp.Policies = append(resp.Policies, s.mutatingPolicyInfo(snap, p, !in.GetWithoutManifests()))
	}
	if in.GetNamespace() == "" && (in.GetKind() == "" || in.GetKind() == kyvernoapi.KindValidatingPolicy) && in.GetAction() == "" {
		for _, p := range snap.Set.AuthzPolicies() {
			if sel == nil || sel.Matches(labels.Set(p.Labels)) {
				resp.Policies = append(resp.Policies, s.authzPolicyInfo(snap, p, !in.GetWithoutManifests()))
			}
		}
	}
	if in.GetNamespace() == "" && in.GetAction() == "" && (in.GetKind() == "" || in.GetKind() == mapol.KindPolicy) {
		for _, v := range snap.Set.MAPInfos() {
			info := s.mapInfo(snap, v, !in.GetWithoutManifests())
			if sel == nil || sel.Matches(labels.Set(info.Labels)) {
				resp.Policies = append(resp.Policies, info)
			}
		}
	}
	if in.GetNamespace() == "" && (in.GetKind() == "" || in.GetKind() == vap.KindPolicy) {
		for _, v := range snap.Set.VAPInfos() {
			info := s.vapInfo(snap, v, !in.GetWithoutManifests())
			if in.GetAction() != "" && !slices.Contains(info.Actions, in.GetAction()) {
				continue
			}
			if sel != nil && !sel.Matches(labels.Set(info.Labels)) {
				continue
			}
			resp.Policies = append(resp.Policies, info)
		}
	}
	if in.GetNamespace() == "" && (in.GetKind() == "" || in.GetKind() == psa.KindPodSecurity) {
		for _, l := range snap.Set.PodSecurityInfos() {
			info := s.podSecurityInfo(snap, l, !in.GetWithoutManifests())
			if in.GetAction() != "" && !slices.Contains(info.Actions, in.GetAction()) {
				continue
			}
			if sel != nil && !sel.Matches(labels.Set(info.Labels)) {
				continue
			}
			resp.Policies = append(resp.Policies, info)
		}
	}
	return resp, nil
}

// policyCount is the number of policies ListPolicies lists without a
// filter: Kyverno policies, ValidatingAdmissionPolicies and Pod Security
// levels.
func policyCount(set *engine.PolicySet) int {
	return len(set.Policies()) + len(set.MutatingPolicies()) + len(set.AuthzPolicies()) + len(set.VAPInfos()) + len(set.MAPInfos()) + len(set.PodSecurityInfos())
}

// authzPolicyInfo describes an authorization policy (a ValidatingPolicy
// in Envoy or HTTP mode): it has no actions, resources or exceptions, and
// admits nothing (it answers Envoy or HTTP CheckRequests).
func (s *Server) authzPolicyInfo(snap *Snapshot, p *authz.Policy, manifest bool) *arbiterv1.PolicyInfo {
	info := &arbiterv1.PolicyInfo{Kind: p.Kind, Name: p.Name, Labels: p.Labels, Annotations: p.Annotations}
	if manifest {
		info.ManifestJson = s.manifest(snap, store.Key{Group: kyvernoapi.Group, Kind: p.Kind, Name: p.Name})
	}
	return info
}

// podSecurityInfo describes a Pod Security level as a policy of kind
// PodSecurity named by the level: where it is in effect (modes, versions,
// namespaces), its actions (the modes), the resources it checks, its
// exceptions; its manifest is the PodSecurityConfiguration, if any. It has
// no labels or annotations. A level in effect nowhere (listed because
// exceptions name it) is neither admission- nor background-enabled.
func (s *Server) podSecurityInfo(snap *Snapshot, l psa.Info, manifest bool) *arbiterv1.PolicyInfo {
	info := &arbiterv1.PolicyInfo{
		Kind: psa.KindPodSecurity, Name: l.Level, Actions: l.Actions, Resources: l.Resources,
		AdmissionEnabled: len(l.Uses) > 0, BackgroundEnabled: len(l.Uses) > 0,
	}
	for _, u := range l.Uses {
		info.PodSecurity = append(info.PodSecurity, &arbiterv1.PodSecurityUse{Mode: u.Mode, Version: u.Version, Namespaces: u.Namespaces, Defaults: u.Defaults})
	}
	for _, ex := range l.Exceptions {
		info.Exceptions = append(info.Exceptions, ex.Key())
	}
	if cfg := snap.Set.PodSecurityConfiguration(); manifest && cfg != nil {
		info.ManifestJson = s.manifest(snap, KeyOf(cfg))
	}
	return info
}

// vapInfo describes a ValidatingAdmissionPolicy: its actions are its
// bindings' validationActions, its labels and annotations its manifest's.
func (s *Server) vapInfo(snap *Snapshot, v vap.Info, manifest bool) *arbiterv1.PolicyInfo {
	info := &arbiterv1.PolicyInfo{
		Kind: vap.KindPolicy, Name: v.Name, Actions: v.Actions, Resources: v.Resources,
		AdmissionEnabled: len(v.Bindings) > 0, Bindings: v.Bindings, ParamKind: v.ParamKind,
	}
	k := store.Key{Group: vap.Group, Kind: vap.KindPolicy, Name: v.Name}
	if o, ok := snap.Object(k); ok {
		if md, ok := o.Content["metadata"].(map[string]any); ok {
			info.Labels = stringMap(md["labels"])
			info.Annotations = stringMap(md["annotations"])
		}
		if manifest {
			info.ManifestJson, _ = json.Marshal(o.Content)
		}
	}
	return info
}

func stringMap(v any) map[string]string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, e := range m {
		if s, ok := e.(string); ok {
			out[k] = s
		}
	}
	return out
}

func hasAction(p *vpol.Policy, action string) bool {
	for _, a := range p.Actions {
		if string(a) == action {
			return true
		}
	}
	return false
}

// GetPolicy implements QueryService.GetPolicy.
func (s *Server) GetPolicy(ctx context.Context, in *arbiterv1.GetPolicyRequest) (*arbiterv1.GetPolicyResponse, error) {
	snap := s.snap.Load()
	if in.GetKind() == "" {
		// Any kind: the first that has the name (a namespace asks for a
		// NamespacedValidatingPolicy).
		kinds := []string{kyvernoapi.KindValidatingPolicy, vap.KindPolicy, psa.KindPodSecurity}
		if in.GetNamespace() != "" {
			kinds = []string{kyvernoapi.KindNamespacedValidatingPolicy}
		}
		for _, k := range kinds {
			if resp, err := s.getPolicy(snap, k, in); err == nil {
				return resp, nil
			}
		}
		return nil, toStatus(&NotFoundError{What: "policy " + qualified(in.GetNamespace(), in.GetName())})
	}
	resp, err := s.getPolicy(snap, in.GetKind(), in)
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// getPolicy finds the policy of a kind and name.
func (s *Server) getPolicy(snap *Snapshot, kind string, in *arbiterv1.GetPolicyRequest) (*arbiterv1.GetPolicyResponse, error) {
	for _, p := range snap.Set.Policies() {
		if p.Kind == kind && p.Name == in.GetName() && (kind != kyvernoapi.KindNamespacedValidatingPolicy || p.Namespace == in.GetNamespace()) {
			resp := &arbiterv1.GetPolicyResponse{Revision: snap.Revision, Digest: snap.Digest, Policy: s.policyInfo(snap, p, true)}
			for _, ex := range snap.Set.ExceptionsFor(p) {
				resp.Exceptions = append(resp.Exceptions, s.exceptionInfo(snap, ex, false))
			}
			return resp, nil
		}
	}
	for _, p := range snap.Set.MutatingPolicies() {
		if p.Kind == kind && p.Name == in.GetName() && (!p.Namespaced() || p.Namespace == in.GetNamespace()) {
			resp := &arbiterv1.GetPolicyResponse{Revision: snap.Revision, Digest: snap.Digest, Policy: s.mutatingPolicyInfo(snap, p, true)}
			for _, ex := range snap.Set.MutatingPolicyExceptions(p) {
				resp.Exceptions = append(resp.Exceptions, s.exceptionInfo(snap, ex, false))
			}
			return resp, nil
		}
	}
	for _, p := range snap.Set.AuthzPolicies() {
		if p.Kind == kind && p.Name == in.GetName() {
			return &arbiterv1.GetPolicyResponse{Revision: snap.Revision, Digest: snap.Digest, Policy: s.authzPolicyInfo(snap, p, true)}, nil
		}
	}
	if kind == psa.KindPodSecurity {
		for _, l := range snap.Set.PodSecurityInfos() {
			if l.Level == in.GetName() {
				resp := &arbiterv1.GetPolicyResponse{Revision: snap.Revision, Digest: snap.Digest, Policy: s.podSecurityInfo(snap, l, true)}
				for _, ex := range l.Exceptions {
					resp.Exceptions = append(resp.Exceptions, s.exceptionInfo(snap, ex, false))
				}
				return resp, nil
			}
		}
	}
	if kind == mapol.KindPolicy {
		for _, v := range snap.Set.MAPInfos() {
			if v.Name == in.GetName() {
				return &arbiterv1.GetPolicyResponse{Revision: snap.Revision, Digest: snap.Digest, Policy: s.mapInfo(snap, v, true)}, nil
			}
		}
	}
	if kind == vap.KindPolicy {
		for _, v := range snap.Set.VAPInfos() {
			if v.Name == in.GetName() {
				return &arbiterv1.GetPolicyResponse{Revision: snap.Revision, Digest: snap.Digest, Policy: s.vapInfo(snap, v, true)}, nil
			}
		}
	}
	return nil, &NotFoundError{What: kind + " " + qualified(in.GetNamespace(), in.GetName())}
}

// NotFoundError is a query for something the revision does not have.
type NotFoundError struct{ What string }

func (e *NotFoundError) Error() string { return e.What + " not found" }

func qualified(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// ListExceptions implements QueryService.ListExceptions.
func (s *Server) ListExceptions(ctx context.Context, in *arbiterv1.ListExceptionsRequest) (*arbiterv1.ListExceptionsResponse, error) {
	snap := s.snap.Load()
	now := time.Now()
	resp := &arbiterv1.ListExceptionsResponse{Revision: snap.Revision, Digest: snap.Digest, Exceptions: []*arbiterv1.ExceptionInfo{}}
	for _, ex := range snap.Set.Exceptions() {
		if in.GetNamespace() != "" && ex.Namespace != in.GetNamespace() {
			continue
		}
		if in.GetPolicy() != "" {
			found := false
			for _, r := range ex.Spec.PolicyRefs {
				if r.Name == in.GetPolicy() && (in.GetPolicyKind() == "" || r.Kind == in.GetPolicyKind()) {
					found = true
				}
			}
			if !found {
				continue
			}
		}
		if in.HasControls != nil && ex.HasControls() != in.GetHasControls() {
			continue
		}
		if in.GetExpiringBefore() != nil {
			before := in.GetExpiringBefore().AsTime()
			if ex.ExpiresAt.IsZero() || !ex.ExpiresAt.Before(before) {
				continue
			}
		}
		if ex.Expired(now) && !in.GetIncludeExpired() && in.GetExpiringBefore() != nil {
			continue
		}
		resp.Exceptions = append(resp.Exceptions, s.exceptionInfo(snap, ex, !in.GetWithoutManifests()))
	}
	return resp, nil
}

// Applicable implements QueryService.Applicable.
func (s *Server) Applicable(ctx context.Context, in *arbiterv1.ApplicableRequest) (*arbiterv1.ApplicableResponse, error) {
	snap, err := s.snapshotFor(ctx, in.GetMinRevision())
	if err != nil {
		return nil, toStatus(err)
	}
	dr := &arbiterv1.DecideRequest{ObjectJson: in.GetObjectJson(), Kind: in.GetKind(), Namespace: in.GetNamespace(), Name: in.GetName(),
		Operation: in.GetOperation(), Mode: in.GetMode()}
	evaluate := len(in.GetObjectJson()) > 0
	if !evaluate {
		// A synthetic object carrying the kind, namespace and labels.
		k := in.GetKind()
		if k.GetKind() == "" {
			return nil, toStatus(&FieldError{Field: "kind", Detail: "give object_json, or a kind (with namespace and labels)"})
		}
		gv := schema.GroupVersion{Group: k.GetGroup(), Version: k.GetVersion()}
		lbls := map[string]any{}
		for key, v := range in.GetLabels() {
			lbls[key] = v
		}
		obj := map[string]any{"apiVersion": gv.String(), "kind": k.GetKind(),
			"metadata": map[string]any{"name": in.GetName(), "namespace": in.GetNamespace(), "labels": lbls}}
		b, _ := json.Marshal(obj)
		dr.ObjectJson = b
	}
	req, opts, err := convert.RequestFromProto(dr)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &arbiterv1.ApplicableResponse{Revision: snap.Revision, Digest: snap.Digest, Policies: []*arbiterv1.ApplicablePolicy{}}
	opts.Context = snap.Context()
	for _, a := range snap.Set.Applicable(ctx, req, evaluate, opts) {
		ap := &arbiterv1.ApplicablePolicy{Variant: a.Variant, MatchError: a.MatchError}
		switch {
		case a.PodSecurity != nil:
			ap.Policy = s.podSecurityInfo(snap, *a.PodSecurity, false)
		case a.VAP != nil:
			ap.Policy = s.vapInfo(snap, *a.VAP, false)
		case a.MutatingPolicy != nil:
			ap.Policy = s.mutatingPolicyInfo(snap, a.MutatingPolicy, false)
		case a.MAP != nil:
			ap.Policy = s.mapInfo(snap, *a.MAP, false)
		default:
			ap.Policy = s.policyInfo(snap, a.Policy, false)
		}
		for _, e := range a.Exceptions {
			ap.Exceptions = append(ap.Exceptions, &arbiterv1.ApplicableException{Exception: s.exceptionInfo(snap, e.Exception, false), Match: e.Match})
		}
		resp.Policies = append(resp.Policies, ap)
	}
	return resp, nil
}

// Explain implements QueryService.Explain.
func (s *Server) Explain(ctx context.Context, in *arbiterv1.ExplainRequest) (*arbiterv1.ExplainResponse, error) {
	if in.GetRequest() == nil {
		return nil, toStatus(&FieldError{Field: "request", Detail: "required"})
	}
	snap, err := s.snapshotFor(ctx, in.GetRequest().GetMinRevision())
	if err != nil {
		return nil, toStatus(err)
	}
	req, opts, err := convert.RequestFromProto(in.GetRequest())
	if err != nil {
		return nil, toStatus(err)
	}
	opts.Trace = &outcome.Trace{}
	var reads *clusterdata.Reads
	opts.Context, reads = snap.RecordedContext()
	opts.ImageVerifier = s.cfg.ImageVerifier
	d := snap.Set.Evaluate(ctx, req, opts)
	resp := &arbiterv1.ExplainResponse{Decision: convert.ResponseFromDecision(d)}
	for _, r := range reads.List() {
		resp.ContextReads = append(resp.ContextReads, &arbiterv1.ContextRead{Op: r.Op, ApiVersion: r.APIVersion, Resource: r.Resource,
			Namespace: r.Namespace, Name: r.Name, Selector: r.Selector, Projection: r.Projection, Count: uint32(r.Count), Error: r.Error})
	}
	resp.Decision.Revision, resp.Decision.Digest, resp.Decision.DecisionId = snap.Revision, snap.Digest, newDecisionID()
	for _, st := range opts.Trace.Steps {
		resp.Steps = append(resp.Steps, &arbiterv1.ExplainStep{
			Policy: st.Policy, Variant: st.Variant, Phase: st.Phase, Name: st.Name, Exception: st.Exception,
			Expression: st.Expression, Value: st.Value, Error: st.Error, Note: st.Note,
		})
	}
	return resp, nil
}

func (s *Server) policyInfo(snap *Snapshot, p *vpol.Policy, manifest bool) *arbiterv1.PolicyInfo {
	info := &arbiterv1.PolicyInfo{
		Kind: p.Kind, Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, Annotations: p.Annotations,
		AdmissionEnabled: p.Spec.AdmissionEnabled(), BackgroundEnabled: p.Spec.BackgroundEnabled(),
		Resources: p.Resources(), Autogen: p.AutogenConfigs(),
	}
	for _, a := range p.Actions {
		info.Actions = append(info.Actions, string(a))
	}
	for _, ex := range snap.Set.ExceptionsFor(p) {
		info.Exceptions = append(info.Exceptions, ex.Key())
	}
	if manifest {
		info.ManifestJson = s.manifest(snap, store.Key{Group: kyvernoapi.Group, Kind: p.Kind, Namespace: p.Namespace, Name: p.Name})
	}
	return info
}

// mapInfo describes a MutatingAdmissionPolicy: no validation actions; its
// labels and annotations are its manifest's.
func (s *Server) mapInfo(snap *Snapshot, v mapol.Info, manifest bool) *arbiterv1.PolicyInfo {
	info := &arbiterv1.PolicyInfo{
		Kind: mapol.KindPolicy, Name: v.Name, Resources: v.Resources,
		AdmissionEnabled: len(v.Bindings) > 0, Bindings: v.Bindings, ParamKind: v.ParamKind,
	}
	k := store.Key{Group: mapol.Group, Kind: mapol.KindPolicy, Name: v.Name}
	if o, ok := snap.Object(k); ok {
		info.Labels = manifestpkg.MetadataStrings(o.Content, "labels")
		info.Annotations = manifestpkg.MetadataStrings(o.Content, "annotations")
		if manifest {
			info.ManifestJson, _ = json.Marshal(o.Content)
		}
	}
	return info
}

// mutatingPolicyInfo describes a MutatingPolicy: it has no validation
// actions; it is admission-enabled when it mutates admitted objects.
func (s *Server) mutatingPolicyInfo(snap *Snapshot, p *mpol.Policy, manifest bool) *arbiterv1.PolicyInfo {
	info := &arbiterv1.PolicyInfo{
		Kind: p.Kind, Namespace: p.Namespace, Name: p.Name, Labels: p.Labels, Annotations: p.Annotations,
		AdmissionEnabled: p.Spec.AdmissionEnabled() && p.Spec.TargetMatchConstraints == nil, BackgroundEnabled: p.Spec.BackgroundEnabled(),
		Resources: p.Resources(), Autogen: p.AutogenConfigs(),
	}
	for _, ex := range snap.Set.MutatingPolicyExceptions(p) {
		info.Exceptions = append(info.Exceptions, ex.Key())
	}
	if manifest {
		info.ManifestJson = s.manifest(snap, store.Key{Group: kyvernoapi.Group, Kind: p.Kind, Namespace: p.Namespace, Name: p.Name})
	}
	return info
}

func (s *Server) exceptionInfo(snap *Snapshot, ex *exception.Exception, manifest bool) *arbiterv1.ExceptionInfo {
	info := &arbiterv1.ExceptionInfo{
		Namespace: ex.Namespace, Name: ex.Name, Expired: ex.Expired(time.Now()), HasControls: ex.HasControls(),
		ReportResult: ex.Spec.ReportResult, Full: ex.Full(), Images: ex.Spec.Images, AllowedValues: ex.Spec.AllowedValues,
		Properties: ex.Spec.Properties, Labels: ex.Labels,
	}
	if info.ReportResult == "" {
		info.ReportResult = "skip"
	}
	if !ex.ExpiresAt.IsZero() {
		info.ExpiresAt = timestamppb.New(ex.ExpiresAt)
	}
	for _, mc := range ex.Spec.MatchConditions {
		info.MatchConditions = append(info.MatchConditions, mc.Expression)
	}
	for _, r := range ex.Spec.PolicyRefs {
		info.Policies = append(info.Policies, &arbiterv1.PolicyReference{Kind: r.Kind, Name: r.Name, Exists: snap.Set.HasPolicy(r.Kind, r.Name)})
	}
	if manifest {
		info.ManifestJson = s.manifest(snap, store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindPolicyException, Namespace: ex.Namespace, Name: ex.Name})
	}
	return info
}

func (s *Server) manifest(snap *Snapshot, k store.Key) []byte {
	o, ok := snap.Object(k)
	if !ok {
		return nil
	}
	b, _ := json.Marshal(o.Content)
	return b
}

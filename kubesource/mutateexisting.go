package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/record"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/patch"
)

// Mutate-existing MutatingPolicies in a cluster (Kyverno 1.19: the
// admission handler's UpdateRequests of type CELMutate, and the background
// controller's pkg/background/mpol/processor.go).
//
// The replica that receives an admission request (through the webhook
// shim's Decide) qualifies the mutate-existing policies it sets off
// (engine.PolicySet.MutateExistingTriggers) and hands the request to its
// Mutator (server.MutateExistingSink), which queues it (bounded: a full
// queue drops it, counted and logged) and answers at once: the admission
// response never waits for, nor fails on, the targets' updates. A worker
// then, at the revision the replica serves when it takes the request:
//
//   - selects each policy's targets: without a targetMatchConstraints
//     expression, every object listed from the API server of the
//     resources of targetMatchConstraints' resource rules (else of
//     matchConstraints'), in the policy's namespace (a namespaced policy),
//     the namespaces its namespaceSelector selects, or all, with its
//     objectSelector, and of the rules' resourceNames; with an expression,
//     the objects it returns, evaluated on the trigger re-read from the API
//     server (its old object for a DELETE);
//   - evaluates the policy on each target (exceptions, targetMatchConditions,
//     mutations: engine.PolicySet.MutateTargetBy);
//   - writes a target the policy changed with an Update carrying the
//     resourceVersion it was evaluated on; a conflict re-reads the target
//     and evaluates it again (at most MutateExistingConfig.Retries times).
//     A target the policy leaves as it is is not written.
//
// Every write is logged and counted; every failure is logged, counted and,
// for a target, recorded as a Warning Event on it.

// Reasons of the Events the Mutator records on targets.
const (
	ReasonMutateExistingFailed = "MutateExistingFailed"
)

// MutateExistingConfig configures a Mutator.
type MutateExistingConfig struct {
	// Logger receives the Mutator's logs (default slog.Default()).
	Logger *slog.Logger
	// QueueSize is how many triggers wait at most (default 1024); a
	// trigger arriving when the queue is full is dropped.
	QueueSize int
	// Workers is how many triggers are processed at once (default 2).
	Workers int
	// Retries is how many times a target is re-read and evaluated again
	// after a write conflict (default 5).
	Retries int
	// TriggerWait is how long a trigger that a targetMatchConstraints
	// expression reads is waited for when the API server does not hold it
	// yet (it is persisted after the admission response; default 10 s).
	TriggerWait time.Duration
	// Component is the field manager of the updates and the source of the
	// Events (default "arbiter").
	Component string
	// Metrics receives the counters (nil: none).
	Metrics *MutateExistingMetrics
	// ExcludeNamespaces are namespaces whose objects, and the Namespaces
	// of those names, are never targets (nil: DefaultCleanupExcludeNamespaces,
	// Kyverno's default resourceFilters; empty: none).
	ExcludeNamespaces []string
}

func (c *MutateExistingConfig) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 1024
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.Retries <= 0 {
		c.Retries = 5
	}
	if c.TriggerWait <= 0 {
		c.TriggerWait = 10 * time.Second
	}
	if c.Component == "" {
		c.Component = "arbiter"
	}
	if c.ExcludeNamespaces == nil {
		c.ExcludeNamespaces = DefaultCleanupExcludeNamespaces
	}
}

// MutateExistingMetrics are the Mutator's Prometheus counters:
//
//	arbiter_mutate_existing_triggers_total   admission requests that set off mutate-existing policies, by result (queued, dropped)
//	arbiter_mutate_existing_targets_total    targets evaluated, by policy and result (updated, unchanged, skipped, error)
//	arbiter_mutate_existing_errors_total     failures, by policy and stage (select, evaluate, write)
type MutateExistingMetrics struct {
	triggers, targets, errors *prometheus.CounterVec
}

// NewMutateExistingMetrics makes the counters, registered with reg (nil:
// not registered).
func NewMutateExistingMetrics(reg prometheus.Registerer) *MutateExistingMetrics {
	m := &MutateExistingMetrics{
		triggers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_mutate_existing_triggers_total",
			Help: "Admission requests that set off mutate-existing MutatingPolicies, by result: queued, or dropped (the queue was full).",
		}, []string{"result"}),
		targets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_mutate_existing_targets_total",
			Help: "Targets of mutate-existing MutatingPolicies evaluated, by result: updated (written), unchanged (not written), skipped (targetMatchConditions or an exception), error.",
		}, []string{"policy", "result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_mutate_existing_errors_total",
			Help: "Failures of mutate-existing MutatingPolicies, by stage: select (listing targets, the targetMatchConstraints expression), evaluate, write.",
		}, []string{"policy", "stage"}),
	}
	if reg != nil {
		reg.MustRegister(m.triggers, m.targets, m.errors)
	}
	return m
}

// MutateExistingStats count what a Mutator did.
type MutateExistingStats struct {
	// Queued and Dropped count the triggers queued and dropped; Done
	// those processed.
	Queued, Dropped, Done uint64
	// Updated, Unchanged, Skipped count the targets written, left as they
	// were (the policy did not change them), and skipped by the policy.
	Updated, Unchanged, Skipped uint64
	// Errors counts the failures (selection, evaluation, writes).
	Errors uint64
}

// MutatorSnapshot is what a Mutator reads of the revision a replica
// serves; *server.Snapshot satisfies it.
type MutatorSnapshot interface {
	PolicySet() *engine.PolicySet
	Context() kyvernocel.Context
}

// Mutator updates the targets of the mutate-existing MutatingPolicies that
// admission requests set off (see above). It satisfies
// server.MutateExistingSink. Every replica with the Kubernetes source runs
// one: the replica that answers the admission request does the work.
type Mutator struct {
	cfg         MutateExistingConfig
	log         *slog.Logger
	current     func() MutatorSnapshot
	dyn         dynamic.Interface
	mapper      *restmapper.DeferredDiscoveryRESTMapper
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	queue       chan trigger
	excluded    map[string]bool

	queued, dropped, done, updated, unchanged, skipped, errs atomic.Uint64
}

// trigger is one queued admission request and the policies it set off.
type trigger struct {
	req *admission.Request
	// admitted is the request's object as the replica's mutations left
	// it (server.MutateExistingSink).
	admitted map[string]any
	policies []string
	revision uint64
}

// NewMutator prepares a Mutator reading the revision current returns (a
// *server.Server's Current) and reaching the API server with
// cfg.Rest; Run starts it.
func NewMutator[S MutatorSnapshot](src Config, cfg MutateExistingConfig, current func() S) (*Mutator, error) {
	cfg.defaults()
	if src.Rest == nil {
		return nil, errors.New("kubesource: no API server configuration")
	}
	dyn, err := dynamic.NewForConfig(src.Rest)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(src.Rest)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	core, err := corev1client.NewForConfig(src.Rest)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	excluded := map[string]bool{}
	for _, ns := range cfg.ExcludeNamespaces {
		excluded[ns] = true
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: core.Events("")})
	return &Mutator{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "mutate-existing"),
		current:     func() MutatorSnapshot { return current() },
		dyn:         dyn,
		mapper:      restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		broadcaster: b,
		recorder:    b.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: cfg.Component}),
		queue:       make(chan trigger, cfg.QueueSize),
		excluded:    excluded,
	}, nil
}

// Trigger queues an admission request that set off mutate-existing
// policies (their keys), with its object as the replica's mutations left
// it (admitted; nil: req.Object); it never blocks: when the queue is full
// the request is dropped, logged and counted.
func (m *Mutator) Trigger(req *admission.Request, admitted map[string]any, policies []string, revision uint64) {
	if policies = m.notOwnWrite(req, policies); len(policies) == 0 {
		return
	}
	select {
	case m.queue <- trigger{req: req, admitted: admitted, policies: policies, revision: revision}:
		m.queued.Add(1)
		m.cfg.Metrics.trigger("queued")
		m.log.Debug("mutate-existing trigger queued", "policies", policies, "trigger", describe(req), "revision", revision)
	default:
		m.dropped.Add(1)
		m.cfg.Metrics.trigger("dropped")
		m.log.Warn("mutate-existing queue full: trigger dropped, its targets are not updated",
			"policies", policies, "operation", req.Operation, "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "queue", cap(m.queue))
	}
}

// notOwnWrite drops, from the policies a request sets off, those with
// evaluation.skipBackgroundRequests (default true) when the request is
// one of the Mutator's own updates (its field manager, Component): as
// Kyverno's admission handler ignores its background controller's
// requests, so that a policy whose trigger rules match its own targets'
// updates is not set off again by them.
func (m *Mutator) notOwnWrite(req *admission.Request, policies []string) []string {
	if fm, _ := req.Options["fieldManager"].(string); fm != m.cfg.Component || req.Operation != admission.OpUpdate {
		return policies
	}
	ps := m.current().PolicySet()
	var out []string
	for _, key := range policies {
		p := ps.MutateExistingPolicy(key)
		if p != nil && p.Spec.Evaluation != nil && p.Spec.Evaluation.SkipBackgroundRequests != nil && !*p.Spec.Evaluation.SkipBackgroundRequests {
			out = append(out, key)
		}
	}
	if len(out) < len(policies) {
		m.log.Debug("mutate-existing: the Mutator's own update sets off no policy with skipBackgroundRequests", "trigger", describe(req))
	}
	return out
}

// Stats returns what the Mutator did so far.
func (m *Mutator) Stats() MutateExistingStats {
	return MutateExistingStats{Queued: m.queued.Load(), Dropped: m.dropped.Load(), Done: m.done.Load(),
		Updated: m.updated.Load(), Unchanged: m.unchanged.Load(), Skipped: m.skipped.Load(), Errors: m.errs.Load()}
}

// Run processes the queue until ctx ends; it returns once its workers
// stopped (triggers still queued are abandoned, logged).
func (m *Mutator) Run(ctx context.Context) {
	defer m.broadcaster.Shutdown()
	var wg sync.WaitGroup
	for range m.cfg.Workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case t := <-m.queue:
					m.process(ctx, t)
					m.done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := len(m.queue); n > 0 {
		m.log.Warn("mutate-existing triggers abandoned at shutdown", "count", n)
	}
}

// process handles one trigger, policy by policy, at the revision served now.
func (m *Mutator) process(ctx context.Context, t trigger) {
	for _, key := range t.policies {
		if ctx.Err() != nil {
			return
		}
		snap := m.current()
		ps := snap.PolicySet()
		p := ps.MutateExistingPolicy(key)
		if p == nil {
			m.log.Info("mutate-existing policy no longer served: trigger ignored", "policy", key, "revision", t.revision)
			continue
		}
		opts := &engine.EvalOptions{Context: snap.Context()}
		targets, err := m.selectTargets(ctx, ps, p, t, opts)
		if err != nil {
			m.fail(p, "select", err, "trigger", describe(t.req))
			continue
		}
		for _, tg := range targets {
			m.mutateTarget(ctx, key, t.req, tg)
		}
	}
}

// mutateTarget is one target: a listed object, or a reference to read.
type mutateTarget struct {
	gvr         schema.GroupVersionResource
	subresource string
	namespace   string
	name        string
	// obj is the object as listed (nil: read it first).
	obj *unstructured.Unstructured
}

func (t mutateTarget) String() string {
	r := t.gvr.Resource
	if t.gvr.Group != "" {
		r += "." + t.gvr.Group
	}
	if t.namespace != "" {
		return r + " " + t.namespace + "/" + t.name
	}
	return r + " " + t.name
}

// selectTargets lists a policy's targets (Kyverno's processor Process).
func (m *Mutator) selectTargets(ctx context.Context, ps *engine.PolicySet, p *mpol.Policy, t trigger, opts *engine.EvalOptions) ([]mutateTarget, error) {
	if p.HasTargetExpression() {
		return m.expressionTargets(ctx, ps, p, t, opts)
	}
	mr := p.TargetConstraints()
	if mr == nil {
		return nil, nil
	}
	namespaces, err := m.targetNamespaces(ctx, p, mr)
	if err != nil {
		return nil, err
	}
	objSel := labels.Everything()
	if mr.ObjectSelector != nil {
		if objSel, err = metav1.LabelSelectorAsSelector(mr.ObjectSelector); err != nil {
			return nil, fmt.Errorf("objectSelector: %w", err)
		}
	}
	seen := map[string]bool{}
	var out []mutateTarget
	for _, rule := range mr.ResourceRules {
		names := map[string]bool{}
		for _, n := range rule.ResourceNames {
			names[n] = true
		}
		for _, g := range rule.APIGroups {
			for _, v := range rule.APIVersions {
				for _, res := range rule.Resources {
					if g == "*" || v == "*" || strings.Contains(res, "*") {
						return nil, fmt.Errorf("resource rule %q/%q/%q: wildcards do not name resources to list", g, v, res)
					}
					resource, sub, _ := strings.Cut(res, "/")
					gvr := schema.GroupVersionResource{Group: g, Version: v, Resource: resource}
					namespaced, err := m.namespaced(gvr)
					if err != nil {
						return nil, err
					}
					nss := namespaces
					if !namespaced {
						nss = []string{metav1.NamespaceAll}
					}
					for _, ns := range nss {
						objs, err := m.list(ctx, gvr, ns, objSel)
						if err != nil {
							return nil, err
						}
						for i := range objs {
							o := &objs[i]
							if len(names) > 0 && !names[o.GetName()] {
								continue
							}
							k := gvr.String() + "|" + sub + "|" + o.GetNamespace() + "/" + o.GetName()
							if seen[k] {
								continue
							}
							seen[k] = true
							out = append(out, mutateTarget{gvr: gvr, subresource: sub, namespace: o.GetNamespace(), name: o.GetName(), obj: o})
						}
					}
				}
			}
		}
	}
	return out, nil
}

// targetNamespaces are the namespaces a policy's targets are listed in:
// its own (a namespaced policy), those its namespaceSelector selects, or
// all (NamespaceAll).
func (m *Mutator) targetNamespaces(ctx context.Context, p *mpol.Policy, mr *admissionregistrationv1.MatchResources) ([]string, error) {
	if p.Namespaced() {
		return []string{p.Namespace}, nil
	}
	sel := mr.NamespaceSelector
	if sel == nil || len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
		return []string{metav1.NamespaceAll}, nil
	}
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("namespaceSelector: %w", err)
	}
	objs, err := m.list(ctx, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", ls)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.GetName())
	}
	return out, nil
}

// expressionTargets evaluates the policy's targetMatchConstraints
// expression on the trigger as the API server holds it.
func (m *Mutator) expressionTargets(ctx context.Context, ps *engine.PolicySet, p *mpol.Policy, t trigger, opts *engine.EvalOptions) ([]mutateTarget, error) {
	trig := t.req
	req := *trig
	if req.Operation != admission.OpDelete {
		obj, err := m.readTrigger(ctx, trig, t.admitted)
		if err != nil {
			return nil, err
		}
		if obj == nil {
			m.log.Info("mutate-existing trigger not found in the cluster (denied, or deleted since): no target", "policy", p.Key(), "trigger", describe(trig))
			return nil, nil
		}
		req.Object = obj.Object
	}
	objs, err := ps.MutateExistingTargets(ctx, p, &req, opts)
	if err != nil {
		return nil, fmt.Errorf("targetMatchConstraints.expression: %w", err)
	}
	out := make([]mutateTarget, 0, len(objs))
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o}
		gvk := u.GroupVersionKind()
		if gvk.Kind == "" || u.GetName() == "" {
			return nil, fmt.Errorf("targetMatchConstraints.expression returned an object without apiVersion, kind or metadata.name")
		}
		mapping, err := m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("targetMatchConstraints.expression returned a %s: %w", gvk, err)
		}
		out = append(out, mutateTarget{gvr: mapping.Resource, namespace: u.GetNamespace(), name: u.GetName()})
	}
	return out, nil
}

// readTrigger reads the trigger from the API server, waiting for it when
// it is not there yet, or, for an UPDATE, still at its old resourceVersion
// (the API server persists it after the admission response): nil when a
// created trigger never appears; the old object when an update never
// lands (denied after the mutating webhook). An UPDATE whose admitted
// object (the request's object as the replica's mutations left it; nil:
// the request's object) is what the API server holds at the old
// resourceVersion is not persisted (it changes nothing): that object is
// read at once. The request's object is not what is compared: the
// replica's mutations may turn an update that changes nothing into one
// that does, or the reverse.
func (m *Mutator) readTrigger(ctx context.Context, trig *admission.Request, admitted map[string]any) (*unstructured.Unstructured, error) {
	if admitted == nil {
		admitted = trig.Object
	}
	gvr := trig.Resource
	if gvr.Resource == "" {
		gvr = admission.ResourceFor(trig.Kind)
	}
	var oldVersion string
	if trig.Operation == admission.OpUpdate && trig.OldObject != nil {
		oldVersion = (&unstructured.Unstructured{Object: trig.OldObject}).GetResourceVersion()
	}
	deadline := time.Now().Add(m.cfg.TriggerWait)
	wait := 50 * time.Millisecond
	for {
		obj, err := m.resource(gvr, trig.Namespace).Get(ctx, trig.Name, metav1.GetOptions{})
		over := time.Now().After(deadline)
		switch {
		case err == nil && (oldVersion == "" || obj.GetResourceVersion() != oldVersion || over || sameStoredContent(obj.Object, admitted)):
			return obj, nil
		case err != nil && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading the trigger %s: %w", describe(trig), err)
		case over:
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// sameStoredContent says whether two versions of an object are the same but for
// the metadata the API server maintains (an UPDATE that changes nothing is
// not persisted: the stored object keeps its resourceVersion).
func sameStoredContent(a, b map[string]any) bool {
	if a == nil || b == nil {
		return false
	}
	strip := func(o map[string]any) map[string]any {
		out := make(map[string]any, len(o))
		for k, v := range o {
			out[k] = v
		}
		if md, ok := o["metadata"].(map[string]any); ok {
			m := make(map[string]any, len(md))
			for k, v := range md {
				switch k {
				case "resourceVersion", "managedFields", "generation", "creationTimestamp", "uid":
				default:
					m[k] = v
				}
			}
			out["metadata"] = m
		}
		return out
	}
	return patch.Equal(strip(a), strip(b))
}

// mutateTarget evaluates the policy on one target and writes it when the
// policy changed it, re-reading and evaluating again on a conflict.
func (m *Mutator) mutateTarget(ctx context.Context, key string, trig *admission.Request, t mutateTarget) {
	if m.excluded[t.namespace] || t.gvr.Group == "" && t.gvr.Resource == "namespaces" && m.excluded[t.name] {
		m.log.Debug("mutate-existing target in an excluded namespace: not evaluated", "policy", key, "target", t.String())
		return
	}
	obj := t.obj
	for attempt := 0; ; attempt++ {
		if obj == nil {
			var err error
			obj, err = m.resource(t.gvr, t.namespace).Get(ctx, t.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return // gone meanwhile
			}
			if err != nil {
				m.targetFailed(key, "write", t, nil, fmt.Errorf("reading the target: %w", err))
				return
			}
		}
		snap := m.current()
		ps := snap.PolicySet()
		p := ps.MutateExistingPolicy(key)
		if p == nil {
			return
		}
		res := ps.MutateTargetBy(ctx, p, trig, engine.Target{Object: obj.Object, Resource: t.gvr}, &engine.EvalOptions{Context: snap.Context()})
		if len(res.Results) == 0 {
			return // out of the policy's scope
		}
		r := res.Results[0]
		switch r.Result {
		case outcome.Pass:
		case outcome.Skip:
			m.skipped.Add(1)
			m.cfg.Metrics.target(key, "skipped")
			m.log.Debug("mutate-existing target skipped", "policy", key, "target", t.String(), "reason", r.Message)
			return
		default:
			m.cfg.Metrics.target(key, "error")
			m.targetFailed(key, "evaluate", t, obj, errors.New(r.Result+": "+r.Message))
			return
		}
		if patch.Equal(res.Patched, obj.Object) {
			m.unchanged.Add(1)
			m.cfg.Metrics.target(key, "unchanged")
			m.log.Debug("mutate-existing target unchanged: not written", "policy", key, "target", t.String())
			return
		}
		patched := &unstructured.Unstructured{Object: res.Patched}
		patched.SetResourceVersion(obj.GetResourceVersion())
		var subs []string
		if t.subresource != "" {
			subs = []string{t.subresource}
		}
		out, err := m.resource(t.gvr, t.namespace).Update(ctx, patched, metav1.UpdateOptions{FieldManager: m.cfg.Component}, subs...)
		switch {
		case err == nil:
			m.updated.Add(1)
			m.cfg.Metrics.target(key, "updated")
			m.log.Info("mutate-existing target updated", "policy", key, "target", t.String(), "trigger", describe(trig),
				"resource_version", obj.GetResourceVersion(), "new_resource_version", out.GetResourceVersion())
			return
		case apierrors.IsConflict(err) && attempt < m.cfg.Retries:
			m.log.Debug("mutate-existing target changed meanwhile: reading it again", "policy", key, "target", t.String(), "attempt", attempt+1)
			obj = nil
			continue
		case apierrors.IsNotFound(err):
			return
		default:
			m.cfg.Metrics.target(key, "error")
			m.targetFailed(key, "write", t, obj, fmt.Errorf("updating the target: %w", err))
			return
		}
	}
}

// targetFailed logs, counts and records (a Warning Event on the target,
// when it was read) a failure on one target.
func (m *Mutator) targetFailed(key, stage string, t mutateTarget, obj *unstructured.Unstructured, err error) {
	m.errs.Add(1)
	m.cfg.Metrics.error(key, stage)
	m.log.Warn("mutate-existing target not updated", "policy", key, "stage", stage, "target", t.String(), "err", err)
	if obj != nil && obj.GetUID() != "" {
		m.recorder.Event(obj.DeepCopy(), corev1.EventTypeWarning, ReasonMutateExistingFailed,
			truncate(fmt.Sprintf("mutate-existing policy %s: %v", key, err), 1024))
	}
}

// fail logs and counts a failure of a policy's trigger (no target known).
func (m *Mutator) fail(p *mpol.Policy, stage string, err error, attrs ...any) {
	m.errs.Add(1)
	m.cfg.Metrics.error(p.Key(), stage)
	m.log.Warn("mutate-existing policy: no target updated", append([]any{"policy", p.Key(), "stage", stage, "err", err}, attrs...)...)
}

func (m *Mutator) resource(gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return m.dyn.Resource(gvr)
	}
	return m.dyn.Resource(gvr).Namespace(namespace)
}

// namespaced says whether the API server serves gvr in namespaces.
func (m *Mutator) namespaced(gvr schema.GroupVersionResource) (bool, error) {
	gvk, err := m.mapper.KindFor(gvr)
	if err != nil {
		m.mapper.Reset()
		if gvk, err = m.mapper.KindFor(gvr); err != nil {
			return false, fmt.Errorf("resource %s: %w", gvr, err)
		}
	}
	mapping, err := m.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, fmt.Errorf("resource %s: %w", gvr, err)
	}
	return mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// list lists every object of gvr in namespace (NamespaceAll: all) that
// sel selects, page by page.
func (m *Mutator) list(ctx context.Context, gvr schema.GroupVersionResource, namespace string, sel labels.Selector) ([]unstructured.Unstructured, error) {
	var out []unstructured.Unstructured
	opts := metav1.ListOptions{LabelSelector: sel.String(), Limit: 500}
	for {
		l, err := m.resource(gvr, namespace).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", gvr, err)
		}
		out = append(out, l.Items...)
		if l.GetContinue() == "" {
			return out, nil
		}
		opts.Continue = l.GetContinue()
	}
}

func describe(req *admission.Request) string {
	s := req.Operation + " " + req.Kind.Kind + " "
	if req.Namespace != "" {
		s += req.Namespace + "/"
	}
	return s + req.Name
}

func (m *MutateExistingMetrics) trigger(result string) {
	if m != nil {
		m.triggers.WithLabelValues(result).Inc()
	}
}

func (m *MutateExistingMetrics) target(policy, result string) {
	if m != nil {
		m.targets.WithLabelValues(policy, result).Inc()
	}
}

func (m *MutateExistingMetrics) error(policy, stage string) {
	if m != nil {
		m.errors.WithLabelValues(policy, stage).Inc()
	}
}

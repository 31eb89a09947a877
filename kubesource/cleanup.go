package kubesource

// DeletingPolicies run by the primary (Config.Cleanup): Kyverno 1.19's
// cleanup controller (pkg/controllers/deleting), from the revision the
// primary serves.
//
// Each DeletingPolicy or NamespacedDeletingPolicy of the revision served
// runs when the first time its schedule names after its last run
// (status.lastExecutionTime of the cluster's object) or, if it never ran,
// after its creation, has passed: that time is the run's slot. A run
// lists, page by page, every resource its matchConstraints' resource
// rules name (with the objectSelector; in its namespace for a namespaced
// policy), decides each object (engine/dpol: matchConstraints,
// exceptions, conditions, with the Namespaces and context objects of the
// revision) and deletes those it selects, with the policy's
// deletionPropagationPolicy and a precondition on the object's UID (an
// object recreated under the same name since it was listed is not
// deleted). Every deletion is logged and recorded as an events.k8s.io
// Event on the policy (Kyverno's reason and note), and counted. When the
// pass is complete, status.lastExecutionTime is set (a merge patch of the
// status subresource: the rest of the status is kept).
//
// Dry run (CleanupConfig.DryRun, or the policy's annotation
// cleanup.arbiter.dev/dry-run: "true"): the same pass, but nothing is
// deleted; each object that would be is logged and recorded as a
// PolicyDryRun Event. lastExecutionTime advances as for a real run.
//
// A run belongs to its slot. A primary that stops during a run (it lost
// the Lease, or was killed) has written no lastExecutionTime, so the next
// primary runs the same slot again: what was deleted is gone (or being
// deleted: objects with a deletionTimestamp are skipped), and the Events
// of a slot have names derived from the slot and the object's UID, so a
// second Event for the same object and slot is refused by the API server
// (AlreadyExists) and neither recorded nor logged again. Within one
// primary, a deletion, its log line and its Event are not interrupted by
// the end of the term.
//
// Divergences from Kyverno, on purpose: a pass whose lists fail for a
// reason that may pass (not Forbidden, NotFound, ...) is retried with a
// backoff for ever (Kyverno drops the policy after 10 failures until it
// changes); failures to evaluate or delete one object are logged,
// evented and counted but do not repeat the pass (Kyverno repeats the
// whole pass, with its deletions' Events); objects being deleted are
// skipped; deletions carry a UID precondition; a schedule that names no
// future time never runs (Kyverno runs it every second); wildcards and
// subresources in resource rules are skipped with a warning (Kyverno's
// list of them fails); the namespaces of CleanupConfig.ExcludeNamespaces
// stand for Kyverno's resourceFilters (kube-system, kube-public,
// kube-node-lease by default).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/dpol"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/store"
)

// DryRunAnnotation on a DeletingPolicy, "true", makes it run dry whatever
// CleanupConfig.DryRun says.
const DryRunAnnotation = "cleanup.arbiter.dev/dry-run"

// Reasons, actions and notes of the Events a run records on the policy
// (Kyverno's, pkg/event: PolicyApplied and PolicyError; PolicyDryRun is
// Arbiter's).
const (
	ReasonCleanupDeleted = "PolicyApplied"
	ReasonCleanupFailed  = "PolicyError"
	ReasonCleanupDryRun  = "PolicyDryRun"

	actionCleanedUp = "Resource Cleaned Up"
	actionNone      = "None"
	actionDryRun    = "Dry Run"
)

// DefaultCleanupExcludeNamespaces are the namespaces no DeletingPolicy
// deletes in by default: those Kyverno's default resourceFilters exclude.
var DefaultCleanupExcludeNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// CleanupConfig configures the DeletingPolicy runs of the primary
// (Config.Cleanup).
type CleanupConfig struct {
	// DryRun runs every policy dry: nothing is deleted; what would be is
	// logged and recorded as PolicyDryRun Events.
	DryRun bool
	// ExcludeNamespaces are namespaces whose objects are never deleted
	// (nil: DefaultCleanupExcludeNamespaces; empty: none).
	ExcludeNamespaces []string
	// PageSize is the number of objects a list returns at once (default 500).
	PageSize int64
	// Workers is how many policies run at once (default 3, Kyverno's).
	Workers int
	// Metrics counts the deletions (nil: not counted).
	Metrics *CleanupMetrics

	// afterDelete, when set (tests), is called after each deletion.
	afterDelete func()
}

// CleanupMetrics are the counters of the DeletingPolicy runs, with
// Kyverno's labels (kyverno_deleting_controller_deletedobjects_total and
// kyverno_deleting_controller_errors_total): policy_type,
// policy_namespace, policy_name, resource, resource_namespace,
// deletion_propagation.
type CleanupMetrics struct {
	deleted, errors, dryRun *prometheus.CounterVec
	runs                    *prometheus.CounterVec
}

var cleanupLabels = []string{"policy_type", "policy_namespace", "policy_name", "resource", "resource_namespace", "deletion_propagation"}

// NewCleanupMetrics registers the counters with reg:
//
//	arbiter_deleting_policy_deleted_objects_total   objects deleted
//	arbiter_deleting_policy_errors_total            failed lists and deletions
//	arbiter_deleting_policy_dry_run_objects_total   objects a dry run would have deleted
//	arbiter_deleting_policy_runs_total              runs, by policy and result (complete, incomplete)
func NewCleanupMetrics(reg prometheus.Registerer) *CleanupMetrics {
	m := &CleanupMetrics{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_deleting_policy_deleted_objects_total",
			Help: "Objects deleted by DeletingPolicies (Kyverno's kyverno_deleting_controller_deletedobjects_total).",
		}, cleanupLabels),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_deleting_policy_errors_total",
			Help: "Failed lists and deletions of DeletingPolicy runs (Kyverno's kyverno_deleting_controller_errors_total).",
		}, cleanupLabels),
		dryRun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_deleting_policy_dry_run_objects_total",
			Help: "Objects DeletingPolicies running dry would have deleted.",
		}, cleanupLabels),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "arbiter_deleting_policy_runs_total",
			Help: "DeletingPolicy runs, by result: complete (lastExecutionTime written) or incomplete (retried).",
		}, []string{"policy_type", "policy_namespace", "policy_name", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.deleted, m.errors, m.dryRun, m.runs)
	}
	return m
}

func (m *CleanupMetrics) count(v *prometheus.CounterVec, p *dpol.Policy, resource, namespace string) {
	if m == nil {
		return
	}
	prop := ""
	if pp := p.PropagationPolicy(); pp != nil {
		prop = string(*pp)
	}
	v.WithLabelValues(p.Kind, p.Namespace, p.Name, resource, namespace, prop).Inc()
}

func (m *CleanupMetrics) run(p *dpol.Policy, result string) {
	if m != nil {
		m.runs.WithLabelValues(p.Kind, p.Namespace, p.Name, result).Inc()
	}
}

// cleanupKinds are the kinds the cleanup runs.
func isCleanupKind(group, kind string) bool {
	return group == kyvernoapi.Group && dpol.IsKind(kind)
}

// compiledSnapshot is a snapshot that has its compiled policies and the
// context of its decisions (*server.Snapshot).
type compiledSnapshot interface {
	PolicySet() *engine.PolicySet
	Context() kyvernocel.Context
}

// cleanup runs the DeletingPolicies. It runs in the source, so only while
// the replica is the primary, and stops with it.
type cleanup struct {
	s        *Source
	cfg      CleanupConfig
	log      *slog.Logger
	events   eventsv1client.EventsV1Interface
	exclude  map[string]bool
	instance string
	wake     chan struct{}

	mu sync.Mutex
	// running are the policies being run.
	running map[store.Key]bool
	// lastRun is when this primary last completed a run of a policy (the
	// informer may not show the status written yet).
	lastRun map[store.Key]time.Time
	// retry holds the incomplete run of a policy: its slot, attempts and
	// when to try again.
	retry map[store.Key]retryState

	runs, deleted, wouldDelete, failures atomic.Uint64
}

type retryState struct {
	slot     time.Time
	attempts int
	at       time.Time
}

func newCleanup(s *Source) (*cleanup, error) {
	cfg := *s.cfg.Cleanup
	if cfg.PageSize <= 0 {
		cfg.PageSize = 500
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 3
	}
	if cfg.ExcludeNamespaces == nil {
		cfg.ExcludeNamespaces = DefaultCleanupExcludeNamespaces
	}
	ev, err := eventsv1client.NewForConfig(s.cfg.Rest)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	instance := s.cfg.Component + "-cleanup-" + host
	if len(instance) > 128 {
		instance = instance[:128]
	}
	c := &cleanup{s: s, cfg: cfg, log: s.cfg.Logger.With("component", "kube-cleanup"), events: ev, instance: instance,
		exclude: map[string]bool{}, wake: make(chan struct{}, 1),
		running: map[store.Key]bool{}, lastRun: map[store.Key]time.Time{}, retry: map[store.Key]retryState{}}
	for _, ns := range cfg.ExcludeNamespaces {
		c.exclude[ns] = true
	}
	return c, nil
}

func (c *cleanup) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run starts the policies' runs when they are due, until ctx ends; it
// returns once every run stopped.
func (c *cleanup) run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-c.s.ready:
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, c.cfg.Workers)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next := c.dispatch(ctx, sem, &wg)
		wait := time.Until(next)
		if wait < 10*time.Millisecond {
			wait = 10 * time.Millisecond
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-timer.C:
		}
	}
}

// due is a policy whose run's slot has passed.
type due struct {
	bound dpol.Bound
	key   store.Key
	gvr   schema.GroupVersionResource
	u     *unstructured.Unstructured
	slot  time.Time
}

// dispatch starts the runs that are due (as many as there are free
// workers) and returns when to look again.
func (c *cleanup) dispatch(ctx context.Context, sem chan struct{}, wg *sync.WaitGroup) time.Time {
	now := time.Now()
	next := now.Add(time.Minute) // and on every change of a policy or revision
	snap := c.s.srv.current()
	cs, ok := snap.(compiledSnapshot)
	if !ok {
		return next
	}
	set := cs.PolicySet()
	if set == nil {
		return next
	}
	for _, p := range set.DeletingPolicies() {
		b, _ := set.DeletingPolicy(p.Kind, p.Namespace, p.Name)
		k := store.Key{Group: kyvernoapi.Group, Kind: p.Kind, Namespace: p.Namespace, Name: p.Name}
		if !p.Namespaced() {
			k.Namespace = ""
		}
		u, gvr, ok := c.clusterObject(k)
		if !ok {
			continue // not (or no longer) in the cluster: the source deletes it from the store
		}
		c.mu.Lock()
		running := c.running[k]
		last := lastExecutionTime(u)
		if t, ok := c.lastRun[k]; ok && t.After(last) {
			last = t
		}
		slot, ok := p.Schedule.ExecutionTime(last, u.GetCreationTimestamp().Time)
		at := slot
		if r, ok := c.retry[k]; ok && r.slot.Equal(slot) && r.at.After(at) {
			at = r.at
		}
		c.mu.Unlock()
		switch {
		case running || !ok:
		case !now.After(at):
			if at.Before(next) {
				next = at
			}
		default:
			select {
			case sem <- struct{}{}:
			default:
				// every worker is busy: a finished run pokes
				continue
			}
			c.mu.Lock()
			c.running[k] = true
			c.mu.Unlock()
			wg.Add(1)
			go func(d due) {
				defer wg.Done()
				defer func() { <-sem }()
				c.runPolicy(ctx, cs, d)
				c.mu.Lock()
				delete(c.running, d.key)
				c.mu.Unlock()
				c.poke()
			}(due{bound: b, key: k, gvr: gvr, u: u, slot: slot})
		}
	}
	return next
}

// clusterObject is the informer's copy of a policy and its resource.
func (c *cleanup) clusterObject(k store.Key) (*unstructured.Unstructured, schema.GroupVersionResource, bool) {
	c.s.mu.Lock()
	w := c.s.watches[schema.GroupKind{Group: k.Group, Kind: k.Kind}]
	c.s.mu.Unlock()
	if w == nil || !w.inf.HasSynced() {
		return nil, schema.GroupVersionResource{}, false
	}
	u, ok := get(w, k)
	return u, w.gvr, ok
}

// lastExecutionTime is status.lastExecutionTime (zero when absent).
func lastExecutionTime(u *unstructured.Unstructured) time.Time {
	s, _, _ := unstructured.NestedString(u.Object, "status", "lastExecutionTime")
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// runStats is what one pass did.
type runStats struct {
	deleted, wouldDelete, skipped, failed int
	// incomplete: a list failed for a reason that may pass; the pass is
	// retried.
	incomplete error
}

// runPolicy runs one policy for its slot, then records the run.
func (c *cleanup) runPolicy(ctx context.Context, cs compiledSnapshot, d due) {
	p := d.bound.Policy
	dry := c.cfg.DryRun || p.Annotations[DryRunAnnotation] == "true"
	log := c.log.With("policy", d.key.String(), "run", d.slot.UTC().Format(time.RFC3339), "dry_run", dry)
	log.Info("running the DeletingPolicy")
	c.runs.Add(1)
	st := c.pass(ctx, cs, d, dry, log)
	if ctx.Err() != nil {
		log.Info("the run stopped with the term; the next primary runs it again", "deleted", st.deleted, "would_delete", st.wouldDelete)
		return
	}
	if st.incomplete != nil {
		c.metrics().run(p, "incomplete")
		c.backoff(d, log, "the run is incomplete; retrying it", st.incomplete)
		return
	}
	now := time.Now()
	if err := c.writeLastExecution(ctx, d, now); err != nil {
		if ctx.Err() != nil {
			return
		}
		c.backoff(d, log, "writing the policy's lastExecutionTime failed; running it again", err)
		return
	}
	c.metrics().run(p, "complete")
	c.mu.Lock()
	c.lastRun[d.key] = now
	delete(c.retry, d.key)
	c.mu.Unlock()
	next, _ := p.Schedule.Next(metav1.NewTime(now).Rfc3339Copy().Time)
	log.Info("updated deleting policy status", "lastExecutionTime", metav1.NewTime(now).Rfc3339Copy().UTC().Format(time.RFC3339),
		"deleted", st.deleted, "would_delete", st.wouldDelete, "failed", st.failed, "next", next.UTC().Format(time.RFC3339))
}

func (c *cleanup) metrics() *CleanupMetrics { return c.cfg.Metrics }

// backoff schedules the run of the same slot again: 1 s, doubling to 5
// minutes, for ever.
func (c *cleanup) backoff(d due, log *slog.Logger, msg string, err error) {
	c.mu.Lock()
	r := c.retry[d.key]
	if !r.slot.Equal(d.slot) {
		r = retryState{slot: d.slot}
	}
	r.attempts++
	delay := time.Second << min(r.attempts-1, 9)
	delay = min(delay, 5*time.Minute)
	r.at = time.Now().Add(delay)
	c.retry[d.key] = r
	c.mu.Unlock()
	log.Warn(msg, "err", err, "attempt", r.attempts, "in", delay)
}

// writeLastExecution sets status.lastExecutionTime (a merge patch of the
// status subresource).
func (c *cleanup) writeLastExecution(ctx context.Context, d due, now time.Time) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"lastExecutionTime": metav1.NewTime(now)}})
	if err != nil {
		return err
	}
	ri := c.s.dyn.Resource(d.gvr)
	opts := metav1.PatchOptions{FieldManager: c.s.cfg.Component}
	if d.key.Namespace != "" {
		_, err = ri.Namespace(d.key.Namespace).Patch(ctx, d.key.Name, k8stypes.MergePatchType, patch, opts, "status")
	} else {
		_, err = ri.Patch(ctx, d.key.Name, k8stypes.MergePatchType, patch, opts, "status")
	}
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile
	}
	return err
}

// pass lists the policy's resources and deletes what it selects.
func (c *cleanup) pass(ctx context.Context, cs compiledSnapshot, d due, dry bool, log *slog.Logger) runStats {
	var st runStats
	p := d.bound.Policy
	sel, err := p.ObjectSelector()
	if err != nil {
		st.incomplete = err
		return st
	}
	set := cs.PolicySet()
	libs := cs.Context()
	for _, gvr := range p.GVRs() {
		if ctx.Err() != nil {
			return st
		}
		glog := log.With("resource", gvr.String())
		if !dpol.Listable(gvr) {
			glog.Warn("a resource rule names a wildcard or a subresource, which cannot be listed: skipped")
			continue
		}
		namespaced, err := c.namespacedResource(gvr)
		if err != nil {
			c.metrics().count(c.metrics().errorsVec(), p, gvr.Resource, "")
			glog.Info("skipping resource: the API server does not serve it", "err", err)
			continue
		}
		if p.Namespaced() && !namespaced {
			glog.Error("skipping cluster-scoped resource", "err", "cluster-scoped kind cannot be used in namespaced policy")
			continue
		}
		var ri dynamic.ResourceInterface = c.s.dyn.Resource(gvr)
		if p.Namespaced() {
			ri = c.s.dyn.Resource(gvr).Namespace(p.Namespace)
		}
		cont := ""
		for {
			list, err := ri.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: c.cfg.PageSize, Continue: cont})
			if err != nil {
				if ctx.Err() != nil {
					return st
				}
				c.metrics().count(c.metrics().errorsVec(), p, gvr.Resource, "")
				if recoverable(err) {
					glog.Info("skipping resource due to access restrictions", "err", err)
					break
				}
				glog.Warn("failed to list resources", "err", err)
				st.incomplete = errors.Join(st.incomplete, fmt.Errorf("listing %s: %w", gvr, err))
				break
			}
			for i := range list.Items {
				if ctx.Err() != nil {
					return st
				}
				c.consider(ctx, set, libs, d, gvr, &list.Items[i], dry, glog, &st)
			}
			if cont = list.GetContinue(); cont == "" {
				break
			}
		}
	}
	return st
}

func (m *CleanupMetrics) errorsVec() *prometheus.CounterVec {
	if m == nil {
		return nil
	}
	return m.errors
}

// recoverable are the list errors Kyverno skips (dclient.IsRecoverableError).
func recoverable(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err)
}

// namespacedResource says whether a resource is namespaced (discovery).
func (c *cleanup) namespacedResource(gvr schema.GroupVersionResource) (bool, error) {
	gvk, err := c.s.mapper.KindFor(gvr)
	if err != nil {
		c.s.mapper.Reset()
		if gvk, err = c.s.mapper.KindFor(gvr); err != nil {
			return false, err
		}
	}
	m, err := c.s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, err
	}
	return m.Scope.Name() == apimeta.RESTScopeNameNamespace, nil
}

// consider decides one listed object and deletes it (or records that a
// dry run would).
func (c *cleanup) consider(ctx context.Context, set *engine.PolicySet, libs kyvernocel.Context, d due, gvr schema.GroupVersionResource,
	u *unstructured.Unstructured, dry bool, log *slog.Logger, st *runStats) {
	p := d.bound.Policy
	ns, name := u.GetNamespace(), u.GetName()
	olog := log.With("kind", u.GetKind(), "namespace", ns, "name", name)
	switch {
	case c.exclude[ns]:
		olog.Debug("skipping resource in an excluded namespace")
		st.skipped++
		return
	case u.GetDeletionTimestamp() != nil:
		olog.Debug("skipping resource being deleted")
		st.skipped++
		return
	}
	cand := dpol.Candidate{Object: u.Object, Resource: gvr}
	if ns != "" && set != nil {
		cand.Namespace, _ = set.Namespace(ns)
	}
	dec := d.bound.Evaluate(ctx, cand, dpol.Options{Context: libs})
	switch {
	case dec.Verdict == dpol.Failed:
		st.failed++
		olog.Warn("failed to process resource", "err", dec.Err)
		return
	case !dec.Deletes():
		olog.Debug("policy did not match", "reason", dec.Reason())
		st.skipped++
		return
	}
	if dry {
		created := c.event(ctx, d, u, ReasonCleanupDryRun, corev1.EventTypeNormal, actionDryRun,
			fmt.Sprintf("dry run: would delete the target resource %s/%s/%s", u.GetKind(), ns, name), olog)
		if !created {
			olog.Debug("already recorded by this run")
			return
		}
		st.wouldDelete++
		c.wouldDelete.Add(1)
		c.metrics().count(c.metrics().dryRunVec(), p, gvr.Resource, ns)
		olog.Info("dry run: resource would be deleted", "uid", string(u.GetUID()))
		return
	}
	uid := u.GetUID()
	opts := metav1.DeleteOptions{PropagationPolicy: p.PropagationPolicy(), Preconditions: &metav1.Preconditions{UID: &uid}}
	var err error
	if ns != "" {
		err = c.s.dyn.Resource(gvr).Namespace(ns).Delete(ctx, name, opts)
	} else {
		err = c.s.dyn.Resource(gvr).Delete(ctx, name, opts)
	}
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		olog.Debug("resource not found (deleted or replaced since it was listed)")
		st.skipped++
	case err != nil && ctx.Err() != nil:
		// the term ended during the call: the next primary decides it again
	case err != nil:
		st.failed++
		c.failures.Add(1)
		c.metrics().count(c.metrics().errorsVec(), p, gvr.Resource, ns)
		olog.Error("failed to delete resource", "err", err)
		c.event(ctx, d, u, ReasonCleanupFailed, corev1.EventTypeWarning, actionNone,
			fmt.Sprintf("failed to delete the target resource %s/%s/%s: %v", u.GetKind(), ns, name, err), olog)
	default:
		st.deleted++
		c.deleted.Add(1)
		c.metrics().count(c.metrics().deletedVec(), p, gvr.Resource, ns)
		prop := ""
		if pp := p.PropagationPolicy(); pp != nil {
			prop = string(*pp)
		}
		olog.Info("resource deleted", "uid", string(uid), "propagation", prop)
		c.event(ctx, d, u, ReasonCleanupDeleted, corev1.EventTypeNormal, actionCleanedUp,
			fmt.Sprintf("successfully deleted the target resource %s/%s/%s", u.GetKind(), ns, name), olog)
		if c.cfg.afterDelete != nil {
			c.cfg.afterDelete()
		}
	}
}

func (m *CleanupMetrics) deletedVec() *prometheus.CounterVec {
	if m == nil {
		return nil
	}
	return m.deleted
}

func (m *CleanupMetrics) dryRunVec() *prometheus.CounterVec {
	if m == nil {
		return nil
	}
	return m.dryRun
}

// eventName names the Event of an object in a run: the policy's name and
// a hash of the policy, the run's slot, the object's UID and the reason,
// so that the same Event is never recorded twice.
func eventName(d due, uid k8stypes.UID, reason string) string {
	h := sha256.Sum256([]byte(d.key.String() + "\x00" + d.slot.UTC().Format(time.RFC3339Nano) + "\x00" + string(uid) + "\x00" + reason))
	name := d.key.Name
	if len(name) > 253-17 {
		name = name[:253-17]
	}
	return name + "." + hex.EncodeToString(h[:8])
}

// event records an events.k8s.io Event on the policy about a resource, as
// Kyverno's cleanup controller does (regarding the policy, related the
// resource, in the policy's namespace or default). It reports whether it
// was recorded now (false: this run already recorded it, or it failed).
// The deletion it reports happened: the Event is recorded even if the
// term ends meanwhile.
func (c *cleanup) event(ctx context.Context, d due, u *unstructured.Unstructured, reason, typ, action, note string, log *slog.Logger) bool {
	ns := d.key.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	if len(note) > 1024 {
		note = note[:1021] + "..."
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(d, u.GetUID(), reason), Namespace: ns},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: c.s.cfg.Component + "-cleanup",
		ReportingInstance:   c.instance,
		Action:              action,
		Reason:              reason,
		Type:                typ,
		Note:                note,
		Regarding: corev1.ObjectReference{APIVersion: d.u.GetAPIVersion(), Kind: d.key.Kind, Namespace: d.key.Namespace,
			Name: d.key.Name, UID: d.u.GetUID()},
		Related: &corev1.ObjectReference{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(),
			Name: u.GetName(), UID: u.GetUID()},
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := c.events.Events(ns).Create(ectx, ev, metav1.CreateOptions{FieldManager: c.s.cfg.Component})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false
	case err != nil:
		log.Warn("recording the Event failed", "reason", reason, "err", err)
	}
	return true
}

// cleanupStats are the counters of Stats.
func (c *cleanup) stats() (runs, deleted, wouldDelete, failures uint64) {
	if c == nil {
		return 0, 0, 0, 0
	}
	return c.runs.Load(), c.deleted.Load(), c.wouldDelete.Load(), c.failures.Load()
}

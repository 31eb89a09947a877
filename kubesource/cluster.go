package kubesource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	admissionregistrationv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// StatusConfig configures the policy status the primary writes
// (Config.Status): status.conditionStatus of every ValidatingPolicy,
// NamespacedValidatingPolicy, MutatingPolicy, NamespacedMutatingPolicy,
// ImageValidatingPolicy and NamespacedImageValidatingPolicy in the cluster, as Kyverno 1.19 writes it, computed from the revision
// the primary serves.
type StatusConfig struct {
	// ReportsUser is the user the RBACPermissionsGranted condition asks
	// about (Kyverno asks about its reports controller's service account,
	// system:serviceaccount:NS:NAME): a SubjectAccessReview per resource
	// and verb (get, list, watch), with no groups, as Kyverno sends it.
	// Empty: SelfSubjectAccessReviews, for Arbiter's own credentials.
	ReportsUser string
	// PermissionsTTL is how long a permission answer is reused (default a
	// minute): a changed RBAC shows in the status within about as long.
	PermissionsTTL time.Duration
}

func (c *StatusConfig) ttl() time.Duration {
	if c == nil || c.PermissionsTTL <= 0 {
		return time.Minute
	}
	return c.PermissionsTTL
}

// cluster writes back to the cluster what the primary serves: the managed
// webhook configurations and the policies' status. It runs in the source,
// so only while the replica is the primary, and stops with it.
type cluster struct {
	s       *Source
	log     *slog.Logger
	status  *StatusConfig
	hooks   *WebhookConfig
	vwcs    admissionregistrationv1client.ValidatingWebhookConfigurationInterface
	mwcs    admissionregistrationv1client.MutatingWebhookConfigurationInterface
	perms   *permissions
	wake    chan struct{}
	refusal sync.Map // store.Key → refusal

	// worker state
	applied     Snapshot           // the snapshot the webhooks were last applied from
	appliedAt   time.Time          // when
	attempted   bool               // an apply was attempted
	configured  map[store.Key]bool // policies in the applied configurations
	storedInfos map[store.Key]storedInfo
	clusterInfo map[store.Key]clusterInfo
	written     map[store.Key]written

	// Counters (Stats).
	statusWrites, webhookWrites atomic.Uint64
}

// refusal is the compile error of a cluster object's content.
type refusal struct {
	content string // contentHash of the refused content
	message string
}

type storedInfo struct {
	obj  *manifest.Object
	info *policyInfo
}

type clusterInfo struct {
	rv      string
	content string // contentHash(normalize(u))
	info    *policyInfo
	err     error
}

// written remembers a status write: while the object stays at rv and the
// wanted status is the same, it is not written again (whatever the API
// server made of it).
type written struct {
	rv, status string
}

func newCluster(s *Source) (*cluster, error) {
	c := &cluster{s: s, log: s.cfg.Logger.With("component", "kube-cluster"), status: s.cfg.Status, hooks: s.cfg.Webhooks,
		wake: make(chan struct{}, 1), storedInfos: map[store.Key]storedInfo{}, clusterInfo: map[store.Key]clusterInfo{}, written: map[store.Key]written{}}
	if c.hooks != nil {
		ar, err := admissionregistrationv1client.NewForConfig(s.cfg.Rest)
		if err != nil {
			return nil, err
		}
		c.vwcs, c.mwcs = ar.ValidatingWebhookConfigurations(), ar.MutatingWebhookConfigurations()
	}
	if c.status != nil {
		az, err := authorizationv1client.NewForConfig(s.cfg.Rest)
		if err != nil {
			return nil, err
		}
		c.perms = &permissions{client: az, user: c.status.ReportsUser, ttl: c.status.ttl(), cache: map[permKey]permAnswer{}}
	}
	return c, nil
}

func (c *cluster) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// refused records the compile error of a cluster object (the source calls it).
func (c *cluster) refused(k store.Key, u *unstructured.Unstructured, message string) {
	if !isStatusKind(k.Group, k.Kind) {
		return
	}
	c.refusal.Store(k, refusal{content: contentHash(normalize(u)), message: message})
	c.poke()
}

// run reconciles until ctx ends: after the source's first comparison, on
// every revision, refusal or change of a policy, and periodically.
func (c *cluster) run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-c.s.ready:
	}
	period := c.hooks.resync()
	if c.status != nil {
		period = min(period, c.status.ttl())
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		if err := c.reconcile(ctx); err != nil && ctx.Err() == nil {
			backoff = min(max(2*backoff, 200*time.Millisecond), 10*time.Second)
			c.log.Warn("writing the policies' status or webhook configurations failed; retrying", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
			select {
			case <-ctx.Done():
				return
			case <-time.After(c.s.cfg.BatchDelay):
			}
		case <-tick.C:
			if c.perms != nil {
				c.perms.expire()
			}
		}
	}
}

// reconcile applies the webhook configurations of the revision served (when
// managed) and writes every policy's status that differs.
func (c *cluster) reconcile(ctx context.Context) error {
	snap := c.s.srv.current()
	rev := revisionOf(snap)
	stored := c.storedPolicies(snap)
	var errs []error
	if c.hooks != nil && (snap != c.applied || time.Since(c.appliedAt) >= c.hooks.resync()) {
		if err := c.applyWebhooks(ctx, stored); err != nil {
			errs = append(errs, err)
		} else {
			c.applied, c.appliedAt = snap, time.Now()
		}
		c.attempted = true
	}
	if c.status != nil {
		storedByKey := make(map[store.Key]*policyInfo, len(stored))
		for _, p := range stored {
			storedByKey[p.key] = p
		}
		if err := c.writeStatuses(ctx, snap, rev, storedByKey); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// storedPolicies decodes the policies of the status kinds snap holds
// (each stored object once).
func (c *cluster) storedPolicies(snap Snapshot) []*policyInfo {
	var out []*policyInfo
	seen := map[store.Key]bool{}
	rangeKinds(snap, statusGroupKinds, func(k store.Key, o *manifest.Object) bool {
		seen[k] = true
		si, ok := c.storedInfos[k]
		if !ok || si.obj != o {
			info, err := decodePolicy(k, o.Content)
			if err != nil {
				c.log.Warn("reading a stored policy for its webhook and status", "object", k.String(), "err", err)
			}
			si = storedInfo{obj: o, info: info}
			c.storedInfos[k] = si
		}
		if si.info != nil {
			out = append(out, si.info)
		}
		return true
	})
	for k := range c.storedInfos {
		if !seen[k] {
			delete(c.storedInfos, k)
		}
	}
	return out
}

// webhookOf is what the status says of a policy's webhook.
func (c *cluster) webhookOf(k store.Key, info *policyInfo, isStored bool) webhookState {
	if info == nil || !info.inWebhook() {
		return webhookUnknown // not an admission policy: Kyverno writes no condition
	}
	if c.hooks == nil {
		// The static configuration sends every request of every kind.
		if isStored {
			return webhookConfigured
		}
		return webhookNotConfigured
	}
	if !c.attempted {
		return webhookUnknown
	}
	if c.configured[k] {
		return webhookConfigured
	}
	return webhookNotConfigured
}

// writeStatuses writes the status of every policy of a status kind in the
// cluster whose status differs from what the revision served says.
func (c *cluster) writeStatuses(ctx context.Context, snap Snapshot, rev uint64, stored map[store.Key]*policyInfo) error {
	type target struct {
		gvr schema.GroupVersionResource
		gk  schema.GroupKind
		u   *unstructured.Unstructured
	}
	var targets []target
	c.s.mu.Lock()
	for gk, w := range c.s.watches {
		if !isStatusKind(gk.Group, gk.Kind) || !w.inf.HasSynced() {
			continue
		}
		for _, o := range w.inf.GetStore().List() {
			if u, ok := o.(*unstructured.Unstructured); ok {
				targets = append(targets, target{gvr: w.gvr, gk: gk, u: u})
			}
		}
	}
	c.s.mu.Unlock()
	sort.Slice(targets, func(i, j int) bool {
		return keyOf(targets[i].gk, targets[i].u.GetNamespace(), targets[i].u.GetName()).String() < keyOf(targets[j].gk, targets[j].u.GetNamespace(), targets[j].u.GetName()).String()
	})
	seen := map[store.Key]bool{}
	var errs []error
	for _, t := range targets {
		k := keyOf(t.gk, t.u.GetNamespace(), t.u.GetName())
		seen[k] = true
		if err := c.writeStatus(ctx, snap, rev, k, t.gvr, t.u, stored[k]); err != nil {
			errs = append(errs, err)
		}
	}
	for k := range c.clusterInfo {
		if !seen[k] {
			delete(c.clusterInfo, k)
			delete(c.written, k)
			c.refusal.Delete(k)
		}
	}
	return errors.Join(errs...)
}

func (c *cluster) writeStatus(ctx context.Context, snap Snapshot, rev uint64, k store.Key, gvr schema.GroupVersionResource, u *unstructured.Unstructured, storedInfo *policyInfo) error {
	ci, ok := c.clusterInfo[k]
	if !ok || ci.rv != u.GetResourceVersion() {
		norm := normalize(u)
		ci = clusterInfo{rv: u.GetResourceVersion(), content: contentHash(norm)}
		ci.info, ci.err = decodePolicy(k, norm)
		c.clusterInfo[k] = ci
	}
	storedObj, isStored := snap.Object(k)
	accepted := isStored && contentHash(storedObj.Content) == ci.content
	in := statusInput{now: time.Now(), generation: u.GetGeneration(), revision: rev}
	if !accepted {
		r, ok := c.refusal.Load(k)
		if !ok || r.(refusal).content != ci.content {
			return nil // not written or refused yet: the commit (or refusal) pokes again
		}
		in.refused = r.(refusal).message
	} else {
		c.refusal.Delete(k)
	}
	if isStored {
		in.holds = rev
	}
	info := ci.info
	if info == nil {
		// The cluster's version does not even decode: the status follows
		// the version stored, if any.
		info = storedInfo
	}
	if info != nil {
		in.backgroundOnly = info.backgroundOnly()
		in.webhook = c.webhookOf(k, info, isStored)
		denied := c.perms.denied(ctx, info)
		in.rbac = rbacOutcome(info.background, denied, len(info.variants) > 0)
		in.autogen = autogenConfigs(info)
	} else {
		in.rbac = rbacOutcome(true, nil, false)
	}
	if in.refused != "" && ci.err != nil {
		in.refused += "; " + ci.err.Error()
	}
	cur := decodeStatus(statusOf(u))
	want := buildStatus(cur, in)
	if sameStatus(cur, want) {
		return nil
	}
	wantJSON, _ := json.Marshal(want)
	if w, ok := c.written[k]; ok && w.rv == u.GetResourceVersion() && w.status == string(wantJSON) {
		return nil // written: what the API server stored of it is what it is
	}
	obj := u.DeepCopy()
	obj.Object["status"] = want.statusMap()
	ri := c.s.dyn.Resource(gvr)
	var out *unstructured.Unstructured
	var err error
	if k.Namespace != "" {
		out, err = ri.Namespace(k.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: c.s.cfg.Component})
	} else {
		out, err = ri.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: c.s.cfg.Component})
	}
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // the informer brings the new version (or the deletion), and a poke
	case err != nil:
		return fmt.Errorf("writing the status of %s: %w", k, err)
	}
	c.statusWrites.Add(1)
	c.written[k] = written{rv: out.GetResourceVersion(), status: string(wantJSON)}
	c.log.Info("policy status written", "object", k.String(), "ready", *want.ConditionStatus.Ready, "message", want.ConditionStatus.Message)
	return nil
}

func statusOf(u *unstructured.Unstructured) map[string]any {
	st, _ := u.Object["status"].(map[string]any)
	return st
}

// autogenConfigs is status.autogen.configs: each configuration's targets
// and spec.
func autogenConfigs(p *policyInfo) map[string]any {
	if len(p.variants) == 0 {
		return nil
	}
	out := map[string]any{}
	for _, v := range p.variants {
		targets := make([]any, len(v.targets))
		for i, t := range v.targets {
			targets[i] = map[string]any{"group": t.Group, "version": t.Version, "resource": t.Resource, "kind": t.Kind}
		}
		out[v.name] = map[string]any{"targets": targets, "spec": v.spec}
	}
	return out
}

// contentHash identifies JSON-shaped content.
func contentHash(content map[string]any) string {
	b, _ := json.Marshal(content)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// revisioned is a snapshot that knows its store revision
// (*server.Snapshot).
type revisioned interface{ StoreRevision() uint64 }

func revisionOf(snap Snapshot) uint64 {
	if r, ok := snap.(revisioned); ok {
		return r.StoreRevision()
	}
	return 0
}

// --- webhook configurations ---

// caBundle is the configured CA bundle (nil: keep what the configurations hold).
func (c *cluster) caBundle() ([]byte, error) {
	if c.hooks.CAFile != "" {
		b, err := os.ReadFile(c.hooks.CAFile)
		if err != nil {
			return nil, fmt.Errorf("the webhook CA bundle: %w", err)
		}
		return b, nil
	}
	return c.hooks.CABundle, nil
}

var webhookIndexRe = regexp.MustCompile(`^webhooks\[(\d+)\]`)

// applyWebhooks makes the managed configurations those of the stored
// policies. A webhook the API server refuses (a policy's rules it finds
// invalid) is left out with its policies, which are then not configured.
func (c *cluster) applyWebhooks(ctx context.Context, stored []*policyInfo) error {
	ca, err := c.caBundle()
	if err != nil {
		return err
	}
	d := buildWebhooks(c.hooks, ca, stored)
	dropped := map[string]bool{}
	for attempt := 0; ; attempt++ {
		bad, err := c.applyValidating(ctx, d.validating)
		if err == nil {
			bad, err = c.applyMutating(ctx, d.mutating)
			if bad != nil {
				for _, i := range bad {
					dropped[d.mutating[i].Name] = true
				}
				d.mutating = removeIndices(d.mutating, bad)
			}
		} else if bad != nil {
			for _, i := range bad {
				dropped[d.validating[i].Name] = true
			}
			d.validating = removeIndices(d.validating, bad)
		}
		if err == nil {
			break
		}
		if bad == nil || attempt >= 5 {
			return err
		}
		c.log.Warn("the API server refused webhooks made from policies; leaving them out", "webhooks", len(bad), "err", err)
	}
	configured := map[store.Key]bool{}
	for _, p := range d.included {
		configured[p.key] = true
	}
	for name := range dropped {
		for _, p := range d.policies[name] {
			configured[p.key] = false
		}
	}
	c.configured = configured
	return nil
}

func removeIndices[T any](s []T, idx []int) []T {
	drop := map[int]bool{}
	for _, i := range idx {
		drop[i] = true
	}
	out := s[:0:0]
	for i, v := range s {
		if !drop[i] {
			out = append(out, v)
		}
	}
	return out
}

// invalidWebhooks are the indices of the webhooks an Invalid error names.
func invalidWebhooks(err error, n int) []int {
	var se *apierrors.StatusError
	if !errors.As(err, &se) || !apierrors.IsInvalid(err) || se.ErrStatus.Details == nil {
		return nil
	}
	seen := map[int]bool{}
	var out []int
	for _, cause := range se.ErrStatus.Details.Causes {
		m := webhookIndexRe.FindStringSubmatch(cause.Field)
		if m == nil {
			continue
		}
		if i, err := strconv.Atoi(m[1]); err == nil && i < n && !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out
}

func (c *cluster) meta(cur metav1.ObjectMeta) metav1.ObjectMeta {
	m := *cur.DeepCopy()
	m.Name = c.hooks.name()
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels["app.kubernetes.io/name"] = "arbiter"
	m.Labels[ManagedByLabel] = "arbiter"
	for k, v := range c.hooks.Labels {
		m.Labels[k] = v
	}
	if len(c.hooks.Annotations) > 0 && m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	for k, v := range c.hooks.Annotations {
		m.Annotations[k] = v
	}
	return m
}

// keepCA gives the webhooks the caBundle the current ones hold, when none
// is configured.
func keepCA(configured []byte, current, desired []admissionregistrationv1.WebhookClientConfig) {
	if configured != nil {
		return
	}
	var ca []byte
	for _, cc := range current {
		if len(cc.CABundle) > 0 {
			ca = cc.CABundle
			break
		}
	}
	for i := range desired {
		desired[i].CABundle = ca
	}
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func (c *cluster) applyValidating(ctx context.Context, webhooks []admissionregistrationv1.ValidatingWebhook) ([]int, error) {
	cur, err := c.vwcs.Get(ctx, c.hooks.name(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the ValidatingWebhookConfiguration %s: %w", c.hooks.name(), err)
	}
	notFound := err != nil
	if notFound {
		cur = &admissionregistrationv1.ValidatingWebhookConfiguration{}
	}
	want := cur.DeepCopy()
	want.ObjectMeta = c.meta(cur.ObjectMeta)
	want.Webhooks = webhooks
	ca, _ := c.caBundle()
	var curCC, wantCC []admissionregistrationv1.WebhookClientConfig
	for _, w := range cur.Webhooks {
		curCC = append(curCC, w.ClientConfig)
	}
	for _, w := range want.Webhooks {
		wantCC = append(wantCC, w.ClientConfig)
	}
	keepCA(ca, curCC, wantCC)
	for i := range want.Webhooks {
		want.Webhooks[i].ClientConfig = wantCC[i]
	}
	if !notFound && sameJSON(cur.Webhooks, want.Webhooks) && sameJSON(cur.ObjectMeta, want.ObjectMeta) {
		return nil, nil
	}
	if notFound {
		_, err = c.vwcs.Create(ctx, want, metav1.CreateOptions{FieldManager: c.s.cfg.Component})
	} else {
		_, err = c.vwcs.Update(ctx, want, metav1.UpdateOptions{FieldManager: c.s.cfg.Component})
	}
	if err != nil {
		return invalidWebhooks(err, len(webhooks)), fmt.Errorf("writing the ValidatingWebhookConfiguration %s: %w", c.hooks.name(), err)
	}
	c.webhookWrites.Add(1)
	c.log.Info("ValidatingWebhookConfiguration written", "name", c.hooks.name(), "webhooks", len(webhooks))
	return nil, nil
}

func (c *cluster) applyMutating(ctx context.Context, webhooks []admissionregistrationv1.MutatingWebhook) ([]int, error) {
	cur, err := c.mwcs.Get(ctx, c.hooks.name(), metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the MutatingWebhookConfiguration %s: %w", c.hooks.name(), err)
	}
	notFound := err != nil
	if notFound {
		cur = &admissionregistrationv1.MutatingWebhookConfiguration{}
	}
	want := cur.DeepCopy()
	want.ObjectMeta = c.meta(cur.ObjectMeta)
	want.Webhooks = webhooks
	ca, _ := c.caBundle()
	var curCC, wantCC []admissionregistrationv1.WebhookClientConfig
	for _, w := range cur.Webhooks {
		curCC = append(curCC, w.ClientConfig)
	}
	for _, w := range want.Webhooks {
		wantCC = append(wantCC, w.ClientConfig)
	}
	keepCA(ca, curCC, wantCC)
	for i := range want.Webhooks {
		want.Webhooks[i].ClientConfig = wantCC[i]
	}
	if !notFound && sameJSON(cur.Webhooks, want.Webhooks) && sameJSON(cur.ObjectMeta, want.ObjectMeta) {
		return nil, nil
	}
	if notFound {
		_, err = c.mwcs.Create(ctx, want, metav1.CreateOptions{FieldManager: c.s.cfg.Component})
	} else {
		_, err = c.mwcs.Update(ctx, want, metav1.UpdateOptions{FieldManager: c.s.cfg.Component})
	}
	if err != nil {
		return invalidWebhooks(err, len(webhooks)), fmt.Errorf("writing the MutatingWebhookConfiguration %s: %w", c.hooks.name(), err)
	}
	c.webhookWrites.Add(1)
	c.log.Info("MutatingWebhookConfiguration written", "name", c.hooks.name(), "webhooks", len(webhooks))
	return nil, nil
}

// --- reporting permissions ---

// permissions answers, with a cache, whether the reporting identity may
// get, list and watch a resource.
type permissions struct {
	client authorizationv1client.AuthorizationV1Interface
	user   string
	ttl    time.Duration
	mu     sync.Mutex
	cache  map[permKey]permAnswer
}

type permKey struct {
	gvr  metav1.GroupVersionResource
	verb string
}

type permAnswer struct {
	allowed bool
	reason  string
	err     error
	at      time.Time
}

func (p *permissions) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, a := range p.cache {
		if time.Since(a.at) >= p.ttl {
			delete(p.cache, k)
		}
	}
}

// gvrsOf are the resources a policy's reports need, as Kyverno lists them:
// every group × version × resource of matchConstraints.resourceRules and
// of each autogen configuration's, taken literally (subresources and
// wildcards included).
func gvrsOf(p *policyInfo) []metav1.GroupVersionResource {
	var out []metav1.GroupVersionResource
	add := func(m *admissionregistrationv1.MatchResources) {
		if m == nil {
			return
		}
		for _, r := range m.ResourceRules {
			for _, g := range r.APIGroups {
				for _, v := range r.APIVersions {
					for _, res := range r.Resources {
						out = append(out, metav1.GroupVersionResource{Group: g, Version: v, Resource: res})
					}
				}
			}
		}
	}
	add(p.match)
	for _, v := range p.variants {
		add(v.match)
	}
	return out
}

// denied returns Kyverno's messages for the checks that fail
// ("VERB GROUP/VERSION, Resource=RESOURCE: REASON", or the error).
func (p *permissions) denied(ctx context.Context, info *policyInfo) []string {
	if p == nil || !info.background {
		return nil
	}
	var out []string
	for _, gvr := range gvrsOf(info) {
		for _, verb := range []string{"get", "list", "watch"} {
			a := p.check(ctx, gvr, verb)
			switch {
			case a.err != nil:
				out = append(out, a.err.Error())
			case !a.allowed:
				out = append(out, fmt.Sprintf("%s %s: %s", verb, gvr.String(), a.reason))
			}
		}
	}
	return out
}

func (p *permissions) check(ctx context.Context, gvr metav1.GroupVersionResource, verb string) permAnswer {
	k := permKey{gvr: gvr, verb: verb}
	p.mu.Lock()
	a, ok := p.cache[k]
	p.mu.Unlock()
	if ok {
		return a
	}
	attrs := &authorizationv1.ResourceAttributes{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource, Verb: verb}
	var st authorizationv1.SubjectAccessReviewStatus
	var err error
	if p.user != "" {
		var r *authorizationv1.SubjectAccessReview
		r, err = p.client.SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: attrs, User: p.user},
		}, metav1.CreateOptions{})
		if err == nil {
			st = r.Status
		}
	} else {
		var r *authorizationv1.SelfSubjectAccessReview
		r, err = p.client.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs},
		}, metav1.CreateOptions{})
		if err == nil {
			st = r.Status
		}
	}
	a = permAnswer{allowed: st.Allowed, reason: st.Reason, err: err, at: time.Now()}
	if ctx.Err() == nil {
		p.mu.Lock()
		p.cache[k] = a
		p.mu.Unlock()
	}
	return a
}

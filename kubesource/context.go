package kubesource

// Context kinds: the kinds of the objects the stored policies read, which
// the source watches and writes as context objects beside the policies, so
// that a decision at revision R reads exactly the cluster objects of R on
// every replica (docs/context.md).
//
// The kinds watched are
//   - those of the resource.Get and resource.List calls of the compiled
//     policies whose apiVersion and resource (or resource.ToGVR kind) are
//     constants (engine.PolicySet.ResourceReads);
//   - the kubernetesResource of the GlobalContextEntries;
//   - Config.ContextResources, for calls whose arguments are not constants.
//
// A policy is admitted (written) only when what it reads is watched: a
// call whose arguments are not constants needs a configured resource its
// constant parts match, and a read of v1 Secrets needs
// Config.StoreSecrets; otherwise the policy is refused with an
// ArbiterRejected Event naming the call (the store keeps its previous
// version). A policy whose kinds are not listed yet waits (at most
// SyncTimeout) until they are, so its first revision holds their objects.
//
// The source owns the kinds it watches: a full comparison deletes stored
// objects of those kinds that the cluster does not have (objects an
// arbiter push stored included), and the objects of a kind it stops
// watching are deleted. Objects of other kinds are left alone.
//
// Changes are coalesced: a revision at most every Config.CommitInterval
// (default 100 ms).

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// contextState is the source's state for context kinds and the apiCall
// fetches (worker only, unless said otherwise).
type contextState struct {
	// reads caches the resource reads of the last policy set seen.
	readsSet *engine.PolicySet
	reads    []engine.ResourceRead
	// unresolved are the resources the API server did not map, logged
	// once each and looked for again every RetryInterval.
	unresolved map[engine.ResourceRef]bool
	// skipped are kinds not watched although read (Secrets without
	// StoreSecrets), logged once each.
	skipped map[schema.GroupKind]bool
	// deferred are policy objects waiting for the kinds they read to be
	// listed: since when, and the resources they read (watched meanwhile,
	// though no stored policy reads them yet).
	deferred map[store.Key]deferral
	// prune asks the next write to delete the stored objects of kinds the
	// source owns and no longer watches.
	prune bool
	// lastCommit is when the source last made a revision.
	lastCommit time.Time

	// apiCall data to write and delete (guarded by Source.mu).
	pendingData map[store.Key]*manifest.Object
	pendingDel  map[store.Key]bool
	// apiWake wakes the apiCall fetches when the entries may have changed.
	apiWake chan struct{}
}

// deferral is a policy object waiting for the kinds it reads.
type deferral struct {
	since time.Time
	refs  []engine.ResourceRef
}

func (c *contextState) init() {
	c.unresolved = map[engine.ResourceRef]bool{}
	c.skipped = map[schema.GroupKind]bool{}
	c.deferred = map[store.Key]deferral{}
	c.pendingData = map[store.Key]*manifest.Object{}
	c.pendingDel = map[store.Key]bool{}
	c.apiWake = make(chan struct{}, 1)
}

// ParseContextResources reads resources given as APIVERSION/RESOURCE:
// v1/configmaps, apps/v1/deployments, example.com/v1alpha1/widgets.
func ParseContextResources(specs []string) ([]engine.ResourceRef, error) {
	out := make([]engine.ResourceRef, 0, len(specs))
	for _, sp := range specs {
		i := strings.LastIndexByte(sp, '/')
		if i <= 0 || i == len(sp)-1 {
			return nil, fmt.Errorf("%q: want APIVERSION/RESOURCE (v1/configmaps, apps/v1/deployments)", sp)
		}
		apiVersion, resource := sp[:i], sp[i+1:]
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil || gv.Version == "" || strings.Count(apiVersion, "/") > 1 {
			return nil, fmt.Errorf("%q: %q is not an apiVersion (v1, apps/v1)", sp, apiVersion)
		}
		if gv.Group != "" && !strings.Contains(gv.Group, ".") && !builtinGroup(gv.Group) {
			return nil, fmt.Errorf("%q: the group %q has no dot: want APIVERSION/RESOURCE (apps/v1/deployments)", sp, gv.Group)
		}
		if strings.ToLower(resource) != resource || strings.ContainsAny(resource, ". ") {
			return nil, fmt.Errorf("%q: %q is not a resource: the lower-case plural (configmaps)", sp, resource)
		}
		out = append(out, engine.ResourceRef{APIVersion: apiVersion, Resource: resource})
	}
	return out, nil
}

// builtinGroup says whether a group without a dot is a built-in one (apps,
// batch, policy, autoscaling).
func builtinGroup(g string) bool {
	switch g {
	case "apps", "batch", "policy", "autoscaling", "extensions":
		return true
	}
	return false
}

// ---- what a snapshot says ----

// policySnapshot is a snapshot with its compiled policies
// (*server.Snapshot).
type policySnapshot interface {
	PolicySet() *engine.PolicySet
}

// entrySnapshot is a snapshot with its GlobalContextEntries
// (*server.Snapshot).
type entrySnapshot interface {
	GlobalContextEntries() []*clusterdata.Entry
}

// kindRanger ranges over the objects of one kind (*server.Snapshot).
type kindRanger interface {
	RangeKind(group, kind string, fn func(store.Key, *manifest.Object) bool)
}

// rangeKind calls fn for the stored objects of gk.
func rangeKind(snap Snapshot, gk schema.GroupKind, fn func(store.Key, *manifest.Object) bool) {
	if r, ok := snap.(kindRanger); ok {
		r.RangeKind(gk.Group, gk.Kind, fn)
		return
	}
	snap.Range(func(k store.Key, o *manifest.Object) bool {
		if k.Group == gk.Group && k.Kind == gk.Kind {
			return fn(k, o)
		}
		return true
	})
}

// rangeKinds calls fn for the stored objects of each of gks, in order,
// until fn returns false.
func rangeKinds(snap Snapshot, gks []schema.GroupKind, fn func(store.Key, *manifest.Object) bool) {
	more := true
	for _, gk := range gks {
		if !more {
			return
		}
		rangeKind(snap, gk, func(k store.Key, o *manifest.Object) bool {
			more = fn(k, o)
			return more
		})
	}
}

// statusGroupKinds are the status kinds, in key order.
var statusGroupKinds = func() []schema.GroupKind {
	kinds := append([]string(nil), statusKinds...)
	sort.Strings(kinds)
	out := make([]schema.GroupKind, len(kinds))
	for i, k := range kinds {
		out[i] = schema.GroupKind{Group: kyvernoapi.Group, Kind: k}
	}
	return out
}()

func entriesOf(snap Snapshot) []*clusterdata.Entry {
	if es, ok := snap.(entrySnapshot); ok {
		return es.GlobalContextEntries()
	}
	return nil
}

// policyReads are the resource reads of snap's compiled policies.
func (s *Source) policyReads(snap Snapshot) []engine.ResourceRead {
	ps, ok := snap.(policySnapshot)
	if !ok {
		return nil
	}
	set := ps.PolicySet()
	if set == nil {
		return nil
	}
	if set != s.cx.readsSet {
		s.cx.readsSet, s.cx.reads = set, set.ResourceReads()
	}
	return s.cx.reads
}

// entryRef is the resource of a kubernetesResource entry.
func entryRef(k *clusterdata.KubernetesResource) engine.ResourceRef {
	return engine.ResourceRef{APIVersion: schema.GroupVersion{Group: k.Group, Version: k.Version}.String(), Resource: k.Resource}
}

// ---- which kinds ----

// resolve maps a resource (or a kind) to the kind the API server serves.
func (s *Source) resolve(ref engine.ResourceRef) (schema.GroupVersionKind, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	if ref.Kind != "" {
		m, err := s.mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
		if err != nil {
			return schema.GroupVersionKind{}, err
		}
		return m.GroupVersionKind, nil
	}
	return s.mapper.KindFor(gv.WithResource(ref.Resource))
}

// watchable says why a kind read is not watched ("" when it is watched as
// a context kind): the fixed kinds are watched anyway, the apiCall data
// are the source's own, Secrets need StoreSecrets, and objects of policy
// classes are not context objects.
func (s *Source) watchable(gvk schema.GroupVersionKind) string {
	gk := gvk.GroupKind()
	switch {
	case isFixed(gk):
		return "watched anyway"
	case gk.Group == clusterdata.DataGroup:
		return "Arbiter's own data"
	case gk.Group == "" && gk.Kind == "Secret" && !s.cfg.StoreSecrets:
		return "Secrets are stored only with --store-secrets"
	}
	o := manifest.NewObject("", map[string]any{"apiVersion": gvk.GroupVersion().String(), "kind": gvk.Kind, "metadata": map[string]any{"name": "x"}})
	if engine.Classify(o) != engine.ClassResource {
		return "not a context object"
	}
	return ""
}

// contextRefs are the resources whose kinds snap needs watched: the
// configured ones, the constant reads of its policies and its
// kubernetesResource entries, and those of the policies waiting for their
// kinds to be listed (still in the cluster).
func (s *Source) contextRefs(snap Snapshot) []engine.ResourceRef {
	refs := append([]engine.ResourceRef(nil), s.cfg.ContextResources...)
	for k, d := range s.cx.deferred {
		s.mu.Lock()
		w := s.watches[schema.GroupKind{Group: k.Group, Kind: k.Kind}]
		s.mu.Unlock()
		if w == nil {
			delete(s.cx.deferred, k)
			continue
		}
		if _, ok := get(w, k); !ok {
			delete(s.cx.deferred, k) // gone from the cluster before it was written
			continue
		}
		refs = append(refs, d.refs...)
	}
	refs = append(refs, engine.ConstantResources(s.policyReads(snap))...)
	for _, e := range entriesOf(snap) {
		if k := e.Spec.KubernetesResource; k != nil {
			refs = append(refs, entryRef(k))
		}
	}
	return refs
}

// contextKinds resolves refs to the kinds to watch (one version per kind:
// the first in a stable order).
func (s *Source) contextKinds(refs []engine.ResourceRef) map[schema.GroupKind]schema.GroupVersionKind {
	var gvks []schema.GroupVersionKind
	for _, ref := range refs {
		gvk, err := s.resolve(ref)
		if err != nil {
			if !s.cx.unresolved[ref] {
				s.log.Warn("the API server does not serve a resource policies read; looking for it again later", "resource", ref.String(), "err", err)
			}
			s.cx.unresolved[ref] = true
			continue
		}
		delete(s.cx.unresolved, ref)
		if why := s.watchable(gvk); why != "" {
			if why != "watched anyway" && !s.cx.skipped[gvk.GroupKind()] {
				s.log.Warn("a kind policies read is not watched", "kind", gvk.String(), "why", why)
				s.cx.skipped[gvk.GroupKind()] = true
			}
			continue
		}
		gvks = append(gvks, gvk)
	}
	sort.Slice(gvks, func(i, j int) bool { return gvks[i].String() < gvks[j].String() })
	out := map[schema.GroupKind]schema.GroupVersionKind{}
	for _, gvk := range gvks {
		if _, ok := out[gvk.GroupKind()]; !ok {
			out[gvk.GroupKind()] = gvk
		}
	}
	return out
}

// syncWatches starts the informers of the param and context kinds snap
// needs and stops the others (worker only). A kind that stops being
// watched has its stored objects deleted by the next write.
func (s *Source) syncWatches(ctx context.Context, snap Snapshot) {
	if ctx.Err() != nil {
		return
	}
	type want struct {
		gvk            schema.GroupVersionKind
		param, context bool
	}
	wants := map[schema.GroupKind]want{}
	for gk, gvk := range s.contextKinds(s.contextRefs(snap)) {
		wants[gk] = want{gvk: gvk, context: true}
	}
	for gk, gvk := range paramKinds(snap, nil, nil) {
		w := wants[gk]
		w.gvk, w.param = gvk, true // the param's version: params are of exactly that version
		wants[gk] = w
	}
	s.mu.Lock()
	var stop []schema.GroupKind
	var start []want
	for gk, w := range s.watches {
		if isFixed(gk) {
			continue
		}
		if wt, ok := wants[gk]; ok && wt.gvk == w.gvk {
			w.param, w.context = wt.param, wt.context
		} else {
			stop = append(stop, gk)
		}
	}
	for gk, wt := range wants {
		if w := s.watches[gk]; w == nil || w.gvk != wt.gvk {
			start = append(start, wt)
		}
	}
	s.mu.Unlock()
	for gk := range s.unresolved {
		if _, ok := wants[gk]; !ok && !isFixed(gk) {
			delete(s.unresolved, gk)
		}
	}
	for _, gk := range stop {
		s.stopWatch(gk)
	}
	if len(stop) > 0 {
		s.cx.prune = true
		s.poke()
	}
	sort.Slice(start, func(i, j int) bool { return start[i].gvk.String() < start[j].gvk.String() })
	for _, wt := range start {
		s.startWatch(ctx, wt.gvk, wt.param, wt.context)
	}
}

// startWatch starts a non-fixed kind's informer, unless the API server did
// not serve it (the retry looks again).
func (s *Source) startWatch(ctx context.Context, gvk schema.GroupVersionKind, param, context bool) {
	if _, tried := s.unresolved[gvk.GroupKind()]; tried {
		return
	}
	s.ensureWatch(ctx, gvk.GroupKind(), []string{gvk.Version}, param)
	s.mu.Lock()
	if w := s.watches[gvk.GroupKind()]; w != nil {
		w.context = context
	}
	s.mu.Unlock()
}

// retryUnresolved looks again for the kinds and resources the API server
// did not serve (every RetryInterval).
func (s *Source) retryUnresolved(ctx context.Context) {
	if len(s.unresolved) == 0 && len(s.cx.unresolved) == 0 {
		return
	}
	s.mapper.Reset()
	for gk, versions := range s.unresolved {
		if isFixed(gk) {
			s.ensureWatch(ctx, gk, versions, false)
		} else {
			delete(s.unresolved, gk) // syncWatches tries it again
		}
	}
	s.syncWatches(ctx, s.srv.current())
}

// isContextKind says whether gk is watched as a context kind.
func (s *Source) isContextKind(gk schema.GroupKind) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.watches[gk]
	return w != nil && w.context
}

// ---- writing ----

// coalesceDelay is how long to wait before writing what woke the worker:
// BatchDelay, and at least until CommitInterval after the last revision.
func (s *Source) coalesceDelay() time.Duration {
	d := s.cfg.BatchDelay
	if next := time.Until(s.cx.lastCommit.Add(s.cfg.CommitInterval)); next > d {
		d = next
	}
	return d
}

// afterCommit notes a revision the source made: the next one waits
// CommitInterval, and the apiCall fetches look at the entries again when
// the commit changed some.
func (s *Source) afterCommit(c store.Commit) {
	s.cx.lastCommit = time.Now()
	for _, ch := range c.Changes {
		if ch.Key.Group == gceGK.Group && ch.Key.Kind == gceGK.Kind {
			select {
			case s.cx.apiWake <- struct{}{}:
			default:
			}
			return
		}
	}
}

// touchesPolicies says whether a commit changed objects other than
// context objects (the policies' status and webhooks follow those).
func touchesPolicies(c store.Commit) bool {
	for _, ch := range c.Changes {
		if isFixed(schema.GroupKind{Group: ch.Key.Group, Kind: ch.Key.Kind}) {
			return true
		}
	}
	return false
}

// takePending says (with Source.mu held) whether there are apiCall data to
// write or delete, or a prune to do.
func (s *Source) hasPending() bool {
	return len(s.cx.pendingData) > 0 || len(s.cx.pendingDel) > 0 || s.cx.prune
}

// withOwned adjusts a write to the kinds the source owns: upserts of
// objects of kinds it does not watch (any more) are dropped, and stored
// objects of the kinds in s.owned that it no longer watches are deleted —
// params no longer params, context kinds no policy reads — as they would
// go stale. The apiCall data waiting are added. Objects of other kinds are
// left alone (context objects that arbiter push or serve --load stored).
func (s *Source) withOwned(snap Snapshot, ups []item, dels []store.Key) ([]item, []store.Key) {
	want := paramKinds(snap, ups, dels)
	isParam := func(gvk schema.GroupVersionKind) bool { return want[gvk.GroupKind()] == gvk }
	keep := func(gvk schema.GroupVersionKind) bool {
		gk := gvk.GroupKind()
		return isFixed(gk) || isParam(gvk) || s.isContextKind(gk)
	}
	outUps := ups[:0:0]
	for _, it := range ups {
		if keep(it.u.GroupVersionKind()) {
			outUps = append(outUps, it)
		}
	}
	deleting := map[store.Key]bool{}
	for _, k := range dels {
		deleting[k] = true
	}
	upserting := map[store.Key]bool{}
	for _, it := range outUps {
		upserting[it.key] = true
	}
	outDels := append([]store.Key(nil), dels...)
	// apiCall data (apicall.go).
	s.mu.Lock()
	data, dataDels := maps.Clone(s.cx.pendingData), maps.Clone(s.cx.pendingDel)
	s.mu.Unlock()
	for _, k := range slices.SortedFunc(maps.Keys(data), keyCompare) {
		if !deleting[k] && !upserting[k] {
			outUps = append(outUps, item{key: k, u: unstructuredOf(data[k])})
			upserting[k] = true
		}
	}
	var gone []store.Key
	for _, k := range slices.SortedFunc(maps.Keys(dataDels), keyCompare) {
		if _, ok := snap.Object(k); !ok {
			gone = append(gone, k) // nothing to delete
		} else if !deleting[k] && !upserting[k] {
			outDels = append(outDels, k)
			deleting[k] = true
		}
	}
	if len(gone) > 0 {
		s.mu.Lock()
		for _, k := range gone {
			delete(s.cx.pendingDel, k)
		}
		s.mu.Unlock()
	}
	owned := make([]schema.GroupKind, 0, len(s.owned))
	for gk := range s.owned {
		owned = append(owned, gk)
	}
	sort.Slice(owned, func(i, j int) bool { return owned[i].String() < owned[j].String() })
	for _, gk := range owned {
		if gk.Group == dataGK.Group || s.isContextKind(gk) {
			continue // the apiCall data are deleted with their entry (apicall.go)
		}
		rangeKind(snap, gk, func(k store.Key, o *manifest.Object) bool {
			if deleting[k] || upserting[k] || engine.Classify(o) != engine.ClassResource {
				return true
			}
			if !isParam(schema.FromAPIVersionAndKind(o.APIVersion, o.Kind)) {
				outDels = append(outDels, k)
			}
			return true
		})
	}
	return outUps, outDels
}

// written clears what a successful write carried: the apiCall data it
// wrote and the prune it did.
func (s *Source) written(ups []item, dels []store.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range ups {
		if o, ok := s.cx.pendingData[it.key]; ok && sameContent(o.Content, it.u.Object) {
			delete(s.cx.pendingData, it.key)
		}
	}
	for _, k := range dels {
		delete(s.cx.pendingDel, k)
	}
	s.cx.prune = false
}

func keyCompare(a, b store.Key) int { return strings.Compare(a.String(), b.String()) }

// ---- admitting policies ----

// admit checks what the policies and GlobalContextEntries among ups read
// (worker only): a policy whose reads Arbiter cannot store is refused (an
// ArbiterRejected Event names each call), and one whose kinds are watched
// but not listed yet waits for them (at most SyncTimeout), so that the
// revision that holds it holds their objects too.
func (s *Source) admit(ctx context.Context, ups []item) []item {
	out := ups[:0:0]
	for _, it := range ups {
		o := manifest.NewObject(sourceOf(it.key), normalize(it.u))
		var refs []engine.ResourceRef
		var errs manifest.LoadErrors
		switch engine.Classify(o) {
		case engine.ClassPolicy, engine.ClassMutatingPolicy, engine.ClassAuthzPolicy:
			reads, err := engine.ResourceReadsOf(o)
			if err != nil {
				out = append(out, it) // the write reports what does not decode
				continue
			}
			for _, r := range reads {
				ref, le := s.check(o, r)
				if le != nil {
					errs = append(errs, le)
				} else if ref != nil {
					refs = append(refs, *ref)
				}
			}
		case engine.ClassGlobalContextEntry:
			if e, les := clusterdata.CompileEntry(o); les == nil && e.Spec.KubernetesResource != nil {
				refs = append(refs, entryRef(e.Spec.KubernetesResource))
			}
		default:
			out = append(out, it)
			continue
		}
		if len(errs) > 0 {
			delete(s.cx.deferred, it.key)
			s.reject(it, errs)
			continue
		}
		if waiting := s.unlisted(ctx, refs); len(waiting) > 0 {
			d, ok := s.cx.deferred[it.key]
			if !ok {
				d.since = time.Now()
				s.log.Info("waiting for the kinds a policy reads to be listed before writing it", "object", it.key.String(), "kinds", waiting)
			}
			d.refs = refs
			s.cx.deferred[it.key] = d
			if time.Since(d.since) < s.cfg.SyncTimeout {
				k := it.key
				time.AfterFunc(time.Second, func() {
					s.mu.Lock()
					s.dirty[k] = true
					s.mu.Unlock()
					s.poke()
				})
				continue
			}
			s.log.Warn("the kinds a policy reads are not listed in time; writing it without their objects", "object", it.key.String(), "kinds", waiting, "timeout", s.cfg.SyncTimeout)
		}
		delete(s.cx.deferred, it.key)
		out = append(out, it)
	}
	return out
}

// check says whether a read can be served: a constant read returns its
// resource (nil: nothing to watch), a read Arbiter cannot store an error.
func (s *Source) check(o *manifest.Object, r engine.ResourceRead) (*engine.ResourceRef, *manifest.LoadError) {
	if r.Constant {
		ref := engine.ResourceRef{APIVersion: r.APIVersion, Resource: baseOf(r.Resource), Kind: r.Kind}
		gvk, err := s.resolve(ref)
		if err != nil {
			return &ref, nil // not served (yet): nothing to wait for; reads find nothing, as in a cluster
		}
		if why := s.watchable(gvk); why != "" && why != "watched anyway" && why != "not a context object" {
			return nil, manifest.Errorf(o, r.Field, "%s reads %s, which Arbiter does not store: %s", r.ResourceCall, gvk.Kind, why)
		}
		return &ref, nil
	}
	for _, c := range s.cfg.ContextResources {
		if s.covers(c, r) {
			return nil, nil
		}
	}
	return nil, manifest.Errorf(o, r.Field, "%s: its apiVersion and resource are not constants, so Arbiter cannot know which kind to store for it; list the kinds it reads with --kube-context-resources (APIVERSION/RESOURCE)", r.ResourceCall)
}

// covers says whether a configured resource matches the constant parts of
// a read whose arguments are not all constants.
func (s *Source) covers(c engine.ResourceRef, r engine.ResourceRead) bool {
	if r.APIVersion != "" && r.APIVersion != c.APIVersion {
		return false
	}
	if r.Resource != "" && baseOf(r.Resource) != c.Resource {
		return false
	}
	if r.Kind != "" {
		gvk, err := s.resolve(c)
		return err == nil && gvk.Kind == r.Kind
	}
	return true
}

func baseOf(resource string) string {
	if i := strings.IndexByte(resource, '/'); i >= 0 {
		return resource[:i]
	}
	return resource
}

// unlisted starts the informers of the kinds refs name that are not
// watched yet, and returns those not listed yet.
func (s *Source) unlisted(ctx context.Context, refs []engine.ResourceRef) []string {
	var out []string
	for gk, gvk := range s.contextKinds(refs) {
		s.mu.Lock()
		w := s.watches[gk]
		s.mu.Unlock()
		if w == nil {
			s.startWatch(ctx, gvk, false, true)
			s.mu.Lock()
			w = s.watches[gk]
			s.mu.Unlock()
		}
		if w != nil && !w.inf.HasSynced() {
			out = append(out, gvk.String())
		}
	}
	sort.Strings(out)
	return out
}

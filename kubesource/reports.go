package kubesource

// Background scans: the primary evaluates the policies whose background
// evaluation is enabled against the existing objects of the kinds they
// match (one dynamic informer per kind) and writes the results as
// wgpolicyk8s.io/v1alpha2 PolicyReport and ClusterPolicyReport objects in
// Kyverno's layout (reportobj.go). See ReportsConfig.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// ReportsConfig configures background scans (Config.Reports). The primary
// scans every existing object of the kinds matched by the policies whose
// background evaluation is enabled (ValidatingPolicy and
// NamespacedValidatingPolicy spec.evaluation.background.enabled, MutatingPolicy
// and NamespacedMutatingPolicy likewise, every ValidatingAdmissionPolicy):
// all of them when a revision changes a policy, an exception, a binding, a
// param or a Namespace, when an exception expires, and every Interval; an
// object alone when it changes. Each object's results are written, when
// they changed, as one PolicyReport (ClusterPolicyReport for cluster-scoped
// objects) named by its UID.
type ReportsConfig struct {
	// Counters, when set, receive the scans' counts (the process's
	// metrics); else each Source counts on its own.
	Counters *ScanCounters
	// Interval is how often every object is scanned again (default 1 h,
	// Kyverno's --backgroundScanInterval).
	Interval time.Duration
	// Delay gathers object changes into one scan (default 1 s).
	Delay time.Duration
	// QPS and Burst bound the report writes (default 300 and 300, the
	// client limits of Kyverno's reports controller).
	QPS   float32
	Burst int
	// Workers is how many report writes are in flight (default 16).
	Workers int
}

func (c *ReportsConfig) defaults() {
	if c.Interval <= 0 {
		c.Interval = time.Hour
	}
	if c.Delay <= 0 {
		c.Delay = time.Second
	}
	if c.QPS <= 0 {
		c.QPS = 300
	}
	if c.Burst <= 0 {
		c.Burst = int(c.QPS)
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
}

// ScanStats count what the background scans did.
type ScanStats struct {
	// Scans is the number of scans finished (full or not); FullScans of
	// every object.
	Scans, FullScans uint64
	// Evaluated is the number of objects evaluated.
	Evaluated uint64
	// Created, Updated and Deleted count the reports written.
	Created, Updated, Deleted uint64
	// WriteErrors counts report writes that failed (retried by a later scan).
	WriteErrors uint64
	// Resources lists the resources scanned, as group/version/resource (sorted).
	Resources []string
	// LastRevision is the revision of the last scan that finished.
	LastRevision uint64
}

// ScanStats returns what the background scans did so far (zero without
// Config.Reports).
func (s *Source) ScanStats() ScanStats {
	if s.scanner == nil {
		return ScanStats{}
	}
	return s.scanner.stats()
}

// scannable is a snapshot the scans can evaluate with (*server.Snapshot).
type scannable interface {
	PolicySet() *engine.PolicySet
	Context() kyvernocel.Context
}

// nexter is a snapshot that says when a newer one replaces it (*server.Snapshot).
type nexter interface{ Next() <-chan struct{} }

// objRef names an object of a scanned resource.
type objRef struct {
	gr       schema.GroupResource
	ns, name string
}

// reportRef names a report: the namespace and UID of its object.
type reportRef struct{ ns, name string }

// resWatch is one scanned resource's informer.
type resWatch struct {
	gvr        schema.GroupVersionResource
	gvk        schema.GroupVersionKind
	namespaced bool
	inf        cache.SharedIndexInformer
	cancel     context.CancelFunc
}

// wrote remembers a report write: while the wanted report is the same it
// is not written again. A zero digest is a report deleted; foreign a
// report someone else changed since (read whole before it is written).
type wrote struct {
	rv, digest string
	// stamps are the timestamps of the results written.
	stamps  []stamp
	foreign bool
}

type scanner struct {
	s   *Source
	cfg ReportsConfig
	log *slog.Logger
	dyn dynamic.Interface // rate-limited (QPS, Burst): the report writes
	// rw writes reports (rate-limited likewise) and reads back only their
	// metadata.
	rw   *rest.RESTClient
	read dynamic.Interface  // the informers of the scanned resources
	meta metadata.Interface // the informers of the reports (metadata only)
	disc discovery.DiscoveryInterface
	wake chan struct{}

	mu    sync.Mutex
	dirty map[objRef]bool
	gone  map[reportRef]bool
	full  bool
	wrote map[reportRef]wrote

	// worker only
	watches   map[schema.GroupResource]*resWatch
	polr      cache.SharedIndexInformer
	cpolr     cache.SharedIndexInformer
	policies  map[store.Key]*manifest.Object
	infos     map[store.Key]storedInfo
	resources []schema.GroupVersionResource // wanted, last computed
	// generated are the policies with status.generated (Kyverno leaves
	// them to the ValidatingAdmissionPolicy it generated: no results), by
	// kind, namespace and name.
	generated map[[3]string]bool
	wg        sync.WaitGroup

	n *ScanCounters
	// reads counts the reports read whole (changed by someone else, or
	// written by an earlier term without the digest).
	reads atomic.Uint64
}

// ScanCounters count what the background scans did. One value may be
// shared by the Sources of successive primary terms
// (ReportsConfig.Counters), so the metrics read from it survive a change of
// primary within the process.
type ScanCounters struct {
	Scans, FullScans, Evaluated, Created, Updated, Deleted, WriteErrors, LastRevision atomic.Uint64
}

// NewScanCounters returns counters that reg (when not nil) exports:
//
//	arbiter_scan_runs_total{kind=full|objects}     scans finished
//	arbiter_scan_evaluated_objects_total           objects evaluated
//	arbiter_scan_report_writes_total{op}           reports created, updated, deleted
//	arbiter_scan_report_write_errors_total         report writes that failed (retried)
//	arbiter_scan_revision                          revision of the last scan finished
func NewScanCounters(reg prometheus.Registerer) *ScanCounters {
	n := &ScanCounters{}
	if reg == nil {
		return n
	}
	reg.MustRegister(&scanCollector{n})
	return n
}

var (
	scanRunsDesc   = prometheus.NewDesc("arbiter_scan_runs_total", "Background scans finished, by kind: full (every object) or objects (the changed ones).", []string{"kind"}, nil)
	scanEvalDesc   = prometheus.NewDesc("arbiter_scan_evaluated_objects_total", "Objects evaluated by background scans.", nil, nil)
	scanWritesDesc = prometheus.NewDesc("arbiter_scan_report_writes_total", "PolicyReports and ClusterPolicyReports written by background scans, by op: create, update, delete.", []string{"op"}, nil)
	scanErrorsDesc = prometheus.NewDesc("arbiter_scan_report_write_errors_total", "Report writes of background scans that failed (retried).", nil, nil)
	scanRevDesc    = prometheus.NewDesc("arbiter_scan_revision", "Revision of the last background scan finished (0 before the first, or on a replica that is not the primary).", nil, nil)
)

type scanCollector struct{ n *ScanCounters }

func (c *scanCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{scanRunsDesc, scanEvalDesc, scanWritesDesc, scanErrorsDesc, scanRevDesc} {
		ch <- d
	}
}

func (c *scanCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	full, all := n.FullScans.Load(), n.Scans.Load()
	ch <- prometheus.MustNewConstMetric(scanRunsDesc, prometheus.CounterValue, float64(full), "full")
	ch <- prometheus.MustNewConstMetric(scanRunsDesc, prometheus.CounterValue, float64(all-min(full, all)), "objects")
	ch <- prometheus.MustNewConstMetric(scanEvalDesc, prometheus.CounterValue, float64(n.Evaluated.Load()))
	ch <- prometheus.MustNewConstMetric(scanWritesDesc, prometheus.CounterValue, float64(n.Created.Load()), "create")
	ch <- prometheus.MustNewConstMetric(scanWritesDesc, prometheus.CounterValue, float64(n.Updated.Load()), "update")
	ch <- prometheus.MustNewConstMetric(scanWritesDesc, prometheus.CounterValue, float64(n.Deleted.Load()), "delete")
	ch <- prometheus.MustNewConstMetric(scanErrorsDesc, prometheus.CounterValue, float64(n.WriteErrors.Load()))
	ch <- prometheus.MustNewConstMetric(scanRevDesc, prometheus.GaugeValue, float64(n.LastRevision.Load()))
}

func newScanner(s *Source, cfg ReportsConfig) (*scanner, error) {
	cfg.defaults()
	rc := *s.cfg.Rest
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	// One budget for every request about the reports (writes, reads of a
	// changed one, deletions).
	rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	dyn, err := dynamic.NewForConfig(&rc)
	if err != nil {
		return nil, err
	}
	mc := metadata.ConfigFor(&rc)
	mc.GroupVersion, mc.APIPath = &schema.GroupVersion{}, "/apis"
	rw, err := rest.RESTClientFor(mc)
	if err != nil {
		return nil, err
	}
	read := *s.cfg.Rest
	read.QPS, read.Burst = max(read.QPS, 50), max(read.Burst, 100)
	rdyn, err := dynamic.NewForConfig(&read)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(&read)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(s.cfg.Rest)
	if err != nil {
		return nil, err
	}
	n := cfg.Counters
	if n == nil {
		n = &ScanCounters{}
	}
	return &scanner{s: s, cfg: cfg, n: n, log: s.cfg.Logger.With("component", "kube-scan"), dyn: dyn, rw: rw, read: rdyn, meta: meta, disc: disc,
		wake: make(chan struct{}, 1), dirty: map[objRef]bool{}, gone: map[reportRef]bool{}, wrote: map[reportRef]wrote{},
		watches: map[schema.GroupResource]*resWatch{}, infos: map[store.Key]storedInfo{}}, nil
}

func (sc *scanner) stats() ScanStats {
	st := ScanStats{Scans: sc.n.Scans.Load(), FullScans: sc.n.FullScans.Load(), Evaluated: sc.n.Evaluated.Load(),
		Created: sc.n.Created.Load(), Updated: sc.n.Updated.Load(), Deleted: sc.n.Deleted.Load(), WriteErrors: sc.n.WriteErrors.Load(),
		LastRevision: sc.n.LastRevision.Load()}
	sc.mu.Lock()
	for _, r := range sc.resources {
		st.Resources = append(st.Resources, r.String())
	}
	sc.mu.Unlock()
	sort.Strings(st.Resources)
	return st
}

func (sc *scanner) poke() {
	select {
	case sc.wake <- struct{}{}:
	default:
	}
}

func (sc *scanner) markFull() {
	sc.mu.Lock()
	sc.full = true
	sc.mu.Unlock()
	sc.poke()
}

var (
	polrGVR  = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
	cpolrGVR = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "clusterpolicyreports"}
)

// reportInformer watches the metadata of the reports labelled as
// Kyverno's (those the scans own): the API server neither sends nor
// encodes their results, and the digest annotation says what they hold.
func (sc *scanner) reportInformer(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	sel := ManagedByReportLabel + "=" + ManagedByReportValue
	inf := metadatainformer.NewFilteredMetadataInformer(sc.meta, gvr, metav1.NamespaceAll, 0, cache.Indexers{},
		func(opts *metav1.ListOptions) { opts.LabelSelector = sel }).Informer()
	_ = inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			m.ManagedFields = nil
		}
		return obj, nil
	})
	var warned atomic.Bool
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			if !warned.Swap(true) {
				sc.log.Warn("the API server does not serve the reports; background scans wait for their CRDs (kubectl apply -k deploy/kube-source/crds)", "resource", gvr.String(), "err", err)
			}
			return
		}
		sc.log.Warn("listing or watching the reports failed", "resource", gvr.String(), "err", err)
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { sc.reportChanged(obj, false) },
		DeleteFunc: func(obj any) { sc.reportChanged(obj, true) },
	})
	return inf
}

// reportChanged rescans the object of a report that someone else changed
// or deleted (found by its UID, the report's name): a changed one is read
// whole and written again if it no longer holds what the scan wants.
func (sc *scanner) reportChanged(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	ref := reportRef{ns: m.Namespace, name: m.Name}
	sc.mu.Lock()
	w, known := sc.wrote[ref]
	if known && !deleted && w.rv == m.ResourceVersion {
		sc.mu.Unlock()
		return // our own write
	}
	if deleted {
		delete(sc.wrote, ref)
	} else {
		sc.wrote[ref] = wrote{foreign: true}
	}
	var found []objRef
	for gr, w := range sc.watches {
		objs, _ := w.inf.GetIndexer().ByIndex(uidIndex, m.Name)
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetNamespace() == m.Namespace {
				found = append(found, objRef{gr: gr, ns: u.GetNamespace(), name: u.GetName()})
			}
		}
	}
	for _, r := range found {
		sc.dirty[r] = true
	}
	sc.mu.Unlock()
	if len(found) > 0 {
		sc.poke()
	}
}

// uidIndex indexes the scanned objects by UID (their reports' names).
const uidIndex = "uid"

func indexUID(obj any) ([]string, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return []string{string(u.GetUID())}, nil
	}
	return nil, nil
}

// run scans until ctx ends, from the source's first comparison on.
func (sc *scanner) run(ctx context.Context) {
	defer sc.wg.Wait()
	select {
	case <-ctx.Done():
		return
	case <-sc.s.ready:
	}
	sc.polr, sc.cpolr = sc.reportInformer(polrGVR), sc.reportInformer(cpolrGVR)
	for _, inf := range []cache.SharedIndexInformer{sc.polr, sc.cpolr} {
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
	if !cache.WaitForCacheSync(ctx.Done(), sc.polr.HasSynced, sc.cpolr.HasSynced) {
		return
	}
	tick := time.NewTicker(sc.cfg.Interval)
	defer tick.Stop()
	var last Snapshot
	backoff := time.Duration(0)
	for {
		snap := sc.s.srv.current()
		if snap != last {
			if sc.policiesChanged(snap) {
				sc.syncWatches(ctx, snap)
				sc.markFull()
			}
			last = snap
		}
		expiry, err := sc.scan(ctx, snap)
		if err != nil && ctx.Err() == nil {
			backoff = min(max(2*backoff, 200*time.Millisecond), 10*time.Second)
			sc.log.Warn("writing reports failed; retrying them", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		var next <-chan struct{}
		if n, ok := snap.(nexter); ok {
			next = n.Next()
		}
		var expire <-chan time.Time
		var timer *time.Timer
		if !expiry.IsZero() {
			// Re-evaluated just after the instant an exception expires.
			timer = time.NewTimer(time.Until(expiry) + 10*time.Millisecond)
			expire = timer.C
		}
		select {
		case <-ctx.Done():
		case <-sc.wake:
			// Object changes are gathered for Delay; a full scan (an
			// informer listed) does not wait.
			sc.mu.Lock()
			full := sc.full
			sc.mu.Unlock()
			if !full {
				select {
				case <-ctx.Done():
				case <-time.After(sc.cfg.Delay):
				}
			}
		case <-next:
		case <-tick.C:
			sc.syncWatches(ctx, snap)
			sc.markFull()
		case <-expire:
			sc.markFull()
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// policiesChanged says whether snap's objects other than context objects
// (policies, exceptions, bindings, params, Namespaces) differ from the
// last scanned ones.
func (sc *scanner) policiesChanged(snap Snapshot) bool {
	sn, ok := snap.(scannable)
	if !ok {
		return false
	}
	ps := sn.PolicySet()
	cur := map[store.Key]*manifest.Object{}
	snap.Range(func(k store.Key, o *manifest.Object) bool {
		if engine.Classify(o) != engine.ClassResource || (ps != nil && ps.IsParam(o)) {
			cur[k] = o
		}
		return true
	})
	changed := sc.policies == nil || len(cur) != len(sc.policies)
	if !changed {
		for k, o := range cur {
			if sc.policies[k] != o {
				changed = true
				break
			}
		}
	}
	sc.policies = cur
	return changed
}

// wantedResources are the resources the background policies of snap match.
func (sc *scanner) wantedResources(snap Snapshot) []schema.GroupVersionResource {
	var literal []metav1.GroupVersionResource
	seen := map[store.Key]bool{}
	generated := map[[3]string]bool{}
	snap.Range(func(k store.Key, o *manifest.Object) bool {
		switch {
		case isStatusKind(k.Group, k.Kind):
			seen[k] = true
			si, ok := sc.infos[k]
			if !ok || si.obj != o {
				info, err := decodePolicy(k, o.Content)
				if err != nil {
					sc.log.Warn("reading a stored policy for the resources it matches", "object", k.String(), "err", err)
				}
				si = storedInfo{obj: o, info: info}
				sc.infos[k] = si
			}
			if si.info != nil && si.info.generated {
				generated[[3]string{k.Kind, k.Namespace, k.Name}] = true
			}
			if si.info != nil && si.info.background && !si.info.generated {
				literal = append(literal, gvrsOf(si.info)...)
			}
		case k.Group == vapGroup && k.Kind == vapGK.Kind:
			literal = append(literal, vapResources(o.Content)...)
		}
		return true
	})
	for k := range sc.infos {
		if !seen[k] {
			delete(sc.infos, k)
		}
	}
	sc.generated = generated
	var preferred []*metav1.APIResourceList
	expanded := false
	out := map[schema.GroupResource]schema.GroupVersionResource{}
	var order []schema.GroupResource
	add := func(gvr schema.GroupVersionResource) {
		if _, ok := out[gvr.GroupResource()]; !ok {
			out[gvr.GroupResource()] = gvr
			order = append(order, gvr.GroupResource())
		}
	}
	for _, r := range literal {
		if strings.Contains(r.Resource, "/") {
			continue // subresources are not listed
		}
		if r.Group != "*" && r.Version != "*" && r.Resource != "*" {
			gvr := schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
			if _, err := sc.s.mapper.KindFor(gvr); err != nil {
				sc.log.Debug("a policy matches a resource the API server does not serve", "resource", gvr.String())
				continue
			}
			add(gvr)
			continue
		}
		if !expanded {
			expanded = true
			var err error
			preferred, err = sc.disc.ServerPreferredResources()
			if err != nil {
				sc.log.Warn("discovering the resources a wildcard matches", "err", err)
			}
		}
		for _, l := range preferred {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil {
				continue
			}
			for _, res := range l.APIResources {
				if strings.Contains(res.Name, "/") || !hasVerbs(res.Verbs, "list", "watch") {
					continue
				}
				if (r.Group == "*" || r.Group == gv.Group) && (r.Version == "*" || r.Version == gv.Version) && (r.Resource == "*" || r.Resource == res.Name) {
					add(gv.WithResource(res.Name))
				}
			}
		}
	}
	res := make([]schema.GroupVersionResource, 0, len(order))
	for _, gr := range order {
		res = append(res, out[gr])
	}
	return res
}

func hasVerbs(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// vapResources are a ValidatingAdmissionPolicy's
// spec.matchConstraints.resourceRules, group × version × resource.
func vapResources(content map[string]any) []metav1.GroupVersionResource {
	spec, _ := content["spec"].(map[string]any)
	mc, _ := spec["matchConstraints"].(map[string]any)
	rules, _ := mc["resourceRules"].([]any)
	var out []metav1.GroupVersionResource
	strs := func(v any) []string {
		l, _ := v.([]any)
		var s []string
		for _, x := range l {
			if str, ok := x.(string); ok {
				s = append(s, str)
			}
		}
		return s
	}
	for _, r := range rules {
		rm, _ := r.(map[string]any)
		for _, g := range strs(rm["apiGroups"]) {
			for _, v := range strs(rm["apiVersions"]) {
				for _, res := range strs(rm["resources"]) {
					out = append(out, metav1.GroupVersionResource{Group: g, Version: v, Resource: res})
				}
			}
		}
	}
	return out
}

// syncWatches starts the informers of the resources snap's background
// policies match and stops the others.
func (sc *scanner) syncWatches(ctx context.Context, snap Snapshot) {
	want := sc.wantedResources(snap)
	wanted := map[schema.GroupResource]schema.GroupVersionResource{}
	for _, gvr := range want {
		wanted[gvr.GroupResource()] = gvr
	}
	for gr, w := range sc.watches {
		if wanted[gr] != w.gvr {
			w.cancel()
			sc.mu.Lock()
			delete(sc.watches, gr)
			sc.mu.Unlock()
			sc.log.Info("stopped scanning", "resource", w.gvr.String())
		}
	}
	for _, gvr := range want {
		if sc.watches[gvr.GroupResource()] != nil {
			continue
		}
		gvk, err := sc.s.mapper.KindFor(gvr)
		if err != nil {
			continue
		}
		mapping, err := sc.s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			continue
		}
		w := &resWatch{gvr: gvr, gvk: gvk, namespaced: mapping.Scope.Name() == meta.RESTScopeNameNamespace}
		w.inf = sc.resourceInformer(w)
		wctx, cancel := context.WithCancel(ctx)
		w.cancel = cancel
		sc.mu.Lock()
		sc.watches[gvr.GroupResource()] = w
		sc.mu.Unlock()
		sc.wg.Add(2)
		go func() {
			defer sc.wg.Done()
			w.inf.RunWithContext(wctx)
		}()
		go func() {
			defer sc.wg.Done()
			if cache.WaitForCacheSync(wctx.Done(), w.inf.HasSynced) {
				sc.markFull()
			}
		}()
		sc.log.Info("scanning", "resource", gvr.String())
	}
	sc.mu.Lock()
	sc.resources = want
	sc.mu.Unlock()
}

func (sc *scanner) resourceInformer(w *resWatch) cache.SharedIndexInformer {
	ri := sc.read.Resource(w.gvr)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (kruntime.Object, error) {
			return ri.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (apiwatch.Interface, error) {
			return ri.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{ObjectDescription: w.gvr.String(),
		Indexers: cache.Indexers{uidIndex: indexUID}})
	gvk := w.gvk
	_ = inf.SetTransform(func(obj any) (any, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			u.SetManagedFields(nil)
			if u.GetKind() == "" {
				u.SetGroupVersionKind(gvk)
			}
		}
		return obj, nil
	})
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if apierrors.IsForbidden(err) {
			sc.log.Warn("not allowed to list and watch a resource the background policies match; its objects are not scanned until granted", "resource", w.gvr.String(), "err", err)
		} else {
			sc.log.Info("listing or watching a scanned resource failed", "resource", w.gvr.String(), "err", err)
		}
	})
	gr := w.gvr.GroupResource()
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		sc.mu.Lock()
		sc.dirty[objRef{gr: gr, ns: u.GetNamespace(), name: u.GetName()}] = true
		sc.mu.Unlock()
		sc.poke()
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, obj any) {
			if o, ok := old.(*unstructured.Unstructured); ok {
				if n, ok := obj.(*unstructured.Unstructured); ok && o.GetResourceVersion() == n.GetResourceVersion() {
					return // a resync
				}
			}
			enqueue(obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				sc.mu.Lock()
				sc.gone[reportRef{ns: u.GetNamespace(), name: string(u.GetUID())}] = true
				sc.mu.Unlock()
			}
			enqueue(obj)
		},
	})
	return inf
}

// target is an object to scan.
type scanTarget struct {
	w *resWatch
	u *unstructured.Unstructured
}

// job is a report write: want nil deletes the report.
type job struct {
	// obj is the object scanned (zero for the report of an object gone):
	// a failed write scans it again.
	obj     objRef
	ref     reportRef
	cluster bool
	want    *unstructured.Unstructured
	canon   string
	digest  string
	// existing is the stored report's metadata (nil: none known).
	existing *metav1.PartialObjectMetadata
}

// scan evaluates what is due (every object, or those that changed) at
// snap and writes the reports that differ; it returns the next instant an
// exception expires (zero: none).
func (sc *scanner) scan(ctx context.Context, snap Snapshot) (time.Time, error) {
	sn, ok := snap.(scannable)
	if !ok || sn.PolicySet() == nil {
		return time.Time{}, nil
	}
	ps := sn.PolicySet()
	now := time.Now()
	var expiry time.Time
	for _, e := range ps.Exceptions() {
		if e.ExpiresAt.After(now) && (expiry.IsZero() || e.ExpiresAt.Before(expiry)) {
			expiry = e.ExpiresAt
		}
	}
	sc.mu.Lock()
	full, dirty, gone := sc.full, sc.dirty, sc.gone
	sc.full, sc.dirty, sc.gone = false, map[objRef]bool{}, map[reportRef]bool{}
	watches := make(map[schema.GroupResource]*resWatch, len(sc.watches))
	allSynced := true
	for gr, w := range sc.watches {
		if w.inf.HasSynced() {
			watches[gr] = w
		} else {
			allSynced = false
			sc.log.Debug("not listed yet", "resource", w.gvr.String())
		}
	}
	sc.mu.Unlock()
	if !full && len(dirty) == 0 && len(gone) == 0 {
		return expiry, nil
	}
	var targets []scanTarget
	if full {
		for _, w := range watches {
			for _, o := range w.inf.GetStore().List() {
				if u, ok := o.(*unstructured.Unstructured); ok {
					targets = append(targets, scanTarget{w: w, u: u})
				}
			}
		}
	} else {
		for ref := range dirty {
			w := watches[ref.gr]
			if w == nil {
				continue
			}
			id := ref.name
			if ref.ns != "" {
				id = ref.ns + "/" + ref.name
			}
			if o, ok, _ := w.inf.GetIndexer().GetByKey(id); ok {
				if u, ok := o.(*unstructured.Unstructured); ok {
					targets = append(targets, scanTarget{w: w, u: u})
				}
			}
		}
	}
	rev := revisionOf(snap)
	desired := make(map[reportRef]bool, len(targets))
	for _, t := range targets {
		desired[reportRef{ns: t.u.GetNamespace(), name: string(t.u.GetUID())}] = true
	}
	// Each object's report is written as soon as it is evaluated, while
	// the others are.
	w := sc.startWriters(ctx)
	sc.evaluate(ctx, ps, sn.Context(), now, rev, targets, func(t scanTarget, want *unstructured.Unstructured) {
		ref := reportRef{ns: t.u.GetNamespace(), name: string(t.u.GetUID())}
		if js := sc.diff(nil, ref, !t.w.namespaced, want); len(js) > 0 {
			js[0].obj = objRef{gr: t.w.gvr.GroupResource(), ns: t.u.GetNamespace(), name: t.u.GetName()}
			w.put(ctx, js[0])
		}
	})
	evaluated := time.Since(now)
	if ctx.Err() == nil {
		for ref := range gone {
			if !desired[ref] {
				for _, j := range sc.diff(nil, ref, ref.ns == "", nil) {
					w.put(ctx, j)
				}
				desired[ref] = true
			}
		}
		if full && allSynced {
			// Reports whose object is gone, or of a kind no background
			// policy matches any more.
			for _, inf := range []cache.SharedIndexInformer{sc.polr, sc.cpolr} {
				for _, o := range inf.GetStore().List() {
					m, ok := o.(*metav1.PartialObjectMetadata)
					if !ok {
						continue
					}
					ref := reportRef{ns: m.Namespace, name: m.Name}
					if !desired[ref] {
						for _, j := range sc.diff(nil, ref, ref.ns == "", nil) {
							w.put(ctx, j)
						}
					}
				}
			}
		}
	}
	err := w.close(ctx)
	if ctx.Err() != nil {
		return expiry, ctx.Err()
	}
	sc.n.Scans.Add(1)
	if full {
		sc.n.FullScans.Add(1)
	}
	sc.n.LastRevision.Store(rev)
	writes := w.n.Load()
	if writes == 0 && !full {
		sc.log.Debug("background scan", "revision", rev, "objects", len(targets))
	} else {
		sc.log.Info("background scan", "revision", rev, "full", full, "objects", len(targets), "writes", writes, "reports_read", sc.reads.Load(), "evaluated_in", evaluated.Round(time.Millisecond), "took", time.Since(now).Round(time.Millisecond))
	}
	return expiry, err
}

// evaluate evaluates the targets in parallel, passing each one's report
// to emit (nil where no policy gave a result), from several goroutines.
func (sc *scanner) evaluate(ctx context.Context, ps *engine.PolicySet, c kyvernocel.Context, now time.Time, rev uint64, targets []scanTarget, emit func(scanTarget, *unstructured.Unstructured)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := &engine.EvalOptions{Context: c, Now: now}
			for {
				i := int(next.Add(1) - 1)
				if i >= len(targets) || ctx.Err() != nil {
					return
				}
				t := targets[i]
				req := &admission.Request{Operation: admission.OpCreate, Object: t.u.Object, Kind: t.w.gvk, Resource: t.w.gvr,
					Name: t.u.GetName(), Namespace: t.u.GetNamespace(), Mode: admission.ModeBackground}
				req.Fill()
				d := ps.Evaluate(ctx, req, opts)
				sc.n.Evaluated.Add(1)
				rs := d.Results
				if len(sc.generated) > 0 {
					rs = rs[:0:0]
					for _, r := range d.Results {
						if !sc.generated[[3]string{r.PolicyKind, r.PolicyNamespace, r.PolicyName}] {
							rs = append(rs, r)
						}
					}
				}
				var want *unstructured.Unstructured
				if len(rs) > 0 {
					want = buildReport(t.u, t.w.namespaced, rs, rev, now)
				}
				emit(t, want)
			}
		}()
	}
	wg.Wait()
}

// existing is the metadata of the report stored under ref (from the
// informers).
func (sc *scanner) existing(ref reportRef, cluster bool) *metav1.PartialObjectMetadata {
	inf, id := sc.polr, ref.ns+"/"+ref.name
	if cluster {
		inf, id = sc.cpolr, ref.name
	}
	o, ok, _ := inf.GetIndexer().GetByKey(id)
	if !ok {
		return nil
	}
	m, _ := o.(*metav1.PartialObjectMetadata)
	return m
}

// diff appends the write that makes the report of ref want (nil: no
// report). A report is taken to hold want when Arbiter wrote it so (its
// digest), this term or, by its DigestAnnotation, an earlier one, and
// nobody else changed it since.
func (sc *scanner) diff(jobs []job, ref reportRef, cluster bool, want *unstructured.Unstructured) []job {
	cur := sc.existing(ref, cluster)
	sc.mu.Lock()
	w, known := sc.wrote[ref]
	sc.mu.Unlock()
	if want == nil {
		if cur == nil && (!known || w.digest == "" && !w.foreign) {
			return jobs
		}
		if known && w.digest == "" && !w.foreign {
			return jobs // deleted by us; the informer is behind
		}
		return append(jobs, job{ref: ref, cluster: cluster, existing: cur})
	}
	canon := canonical(want)
	digest := digestOf(canon)
	switch {
	case known && w.foreign:
	case known && w.digest == digest:
		return jobs // written; the informer may be behind
	case !known && cur != nil && cur.Annotations[DigestAnnotation] == digest:
		return jobs
	}
	return append(jobs, job{ref: ref, cluster: cluster, want: want, canon: canon, digest: digest, existing: cur})
}

// writer runs report writes, Workers at a time (the client's QPS and
// Burst bound the rate).
type writer struct {
	ch   chan job
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
	n    atomic.Int64
}

func (sc *scanner) startWriters(ctx context.Context) *writer {
	w := &writer{ch: make(chan job, 4*sc.cfg.Workers)}
	for range sc.cfg.Workers {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for j := range w.ch {
				if ctx.Err() != nil {
					continue
				}
				if err := sc.writeOne(ctx, &j); err != nil {
					sc.n.WriteErrors.Add(1)
					// Retried by the next scan (after the backoff).
					sc.mu.Lock()
					if j.obj.name != "" {
						sc.dirty[j.obj] = true
					} else {
						sc.gone[j.ref] = true
					}
					sc.mu.Unlock()
					w.mu.Lock()
					if len(w.errs) < 5 {
						w.errs = append(w.errs, err)
					}
					w.mu.Unlock()
				}
			}
		}()
	}
	return w
}

// put queues a write (dropped once ctx is done).
func (w *writer) put(ctx context.Context, j job) {
	select {
	case w.ch <- j:
		w.n.Add(1)
	case <-ctx.Done():
	}
}

// close waits for the queued writes and returns their errors.
func (w *writer) close(ctx context.Context) error {
	close(w.ch)
	w.wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(w.errs...)
}

func (sc *scanner) client(j *job) dynamic.ResourceInterface {
	if j.cluster {
		return sc.dyn.Resource(cpolrGVR)
	}
	return sc.dyn.Resource(polrGVR).Namespace(j.ref.ns)
}

// reportPath is the API path of the reports of j's kind, or of j's report
// when named.
func reportPath(j *job, named bool) string {
	p := "/apis/" + polrGVR.Group + "/" + polrGVR.Version + "/"
	if j.cluster {
		p += cpolrGVR.Resource
	} else {
		p += "namespaces/" + j.ref.ns + "/" + polrGVR.Resource
	}
	if named {
		p += "/" + j.ref.name
	}
	return p
}

// metadataOnly asks the API server to answer a write with the object's
// metadata alone.
const metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// put creates (base without a resourceVersion) or replaces the report of
// j; it returns the resourceVersion written and the results' timestamps.
func (sc *scanner) put(ctx context.Context, j *job, base metav1.ObjectMeta, prev []stamp) (string, []stamp, error) {
	body, stamps, err := reportBody(base, j.want, prev, j.digest)
	if err != nil {
		return "", nil, err
	}
	req := sc.rw.Post().AbsPath(reportPath(j, false))
	if base.ResourceVersion != "" {
		req = sc.rw.Put().AbsPath(reportPath(j, true))
	}
	raw, err := req.SetHeader("Content-Type", "application/json").SetHeader("Accept", metadataOnly).
		Param("fieldManager", sc.s.cfg.Component).Param("fieldValidation", metav1.FieldValidationIgnore).
		Body(body).Do(ctx).Raw()
	if err != nil {
		return "", nil, err
	}
	var out metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", nil, fmt.Errorf("reading the API server's answer: %w", err)
	}
	return out.ResourceVersion, stamps, nil
}

// readReport reads the stored report of j whole (nil: none); matches says it
// holds what j wants (then remembered as written).
func (sc *scanner) readReport(ctx context.Context, j *job) (cur *unstructured.Unstructured, matches bool, err error) {
	sc.reads.Add(1)
	cur, err = sc.client(j).Get(ctx, j.ref.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	cur.SetManagedFields(nil)
	if canonical(cur) == j.canon && cur.GetAnnotations()[DigestAnnotation] == j.digest {
		results, _ := cur.Object["results"].([]any)
		sc.remember(j.ref, cur.GetResourceVersion(), j.digest, stampsOf(results))
		return cur, true, nil
	}
	return cur, false, nil
}

func (sc *scanner) writeOne(ctx context.Context, j *job) error {
	if j.want == nil {
		err := sc.client(j).Delete(ctx, j.ref.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the report %s/%s: %w", j.ref.ns, j.ref.name, err)
		}
		sc.mu.Lock()
		sc.wrote[j.ref] = wrote{}
		sc.mu.Unlock()
		if err == nil {
			sc.n.Deleted.Add(1)
		}
		return nil
	}
	sc.mu.Lock()
	w, known := sc.wrote[j.ref]
	sc.mu.Unlock()
	// base is the stored report's metadata (none: created), prev the
	// timestamps of its results.
	base := metav1.ObjectMeta{Name: j.ref.name, Namespace: j.ref.ns}
	var prev []stamp
	stale := false
	switch {
	case known && !w.foreign && w.digest != "":
		// Written by us this term: its resourceVersion and timestamps are
		// known (the informer may be behind).
		if j.existing != nil {
			base = j.existing.ObjectMeta
		}
		base.ResourceVersion, prev = w.rv, w.stamps
	case j.existing != nil || known && w.foreign:
		// An earlier term's or someone else's: read whole.
		stale = true
	}
	for attempt := 0; ; attempt++ {
		if stale {
			cur, matches, err := sc.readReport(ctx, j)
			if err != nil {
				return fmt.Errorf("reading the report %s/%s: %w", j.ref.ns, j.ref.name, err)
			}
			if matches {
				return nil
			}
			base, prev = metav1.ObjectMeta{Name: j.ref.name, Namespace: j.ref.ns}, nil
			if cur != nil {
				results, _ := cur.Object["results"].([]any)
				prev = stampsOf(results)
				md, _ := cur.Object["metadata"].(map[string]any)
				if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(md, &base); err != nil {
					return fmt.Errorf("reading the report %s/%s: %w", j.ref.ns, j.ref.name, err)
				}
			}
		}
		create := base.ResourceVersion == ""
		rv, stamps, err := sc.put(ctx, j, base, prev)
		if err != nil && attempt < 3 && (apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err)) {
			stale = true
			continue
		}
		if err != nil {
			return fmt.Errorf("writing the report %s/%s: %w", j.ref.ns, j.ref.name, err)
		}
		if create {
			sc.n.Created.Add(1)
		} else {
			sc.n.Updated.Add(1)
		}
		sc.remember(j.ref, rv, j.digest, stamps)
		return nil
	}
}

func (sc *scanner) remember(ref reportRef, rv, digest string, stamps []stamp) {
	sc.mu.Lock()
	sc.wrote[ref] = wrote{rv: rv, digest: digest, stamps: stamps}
	sc.mu.Unlock()
}

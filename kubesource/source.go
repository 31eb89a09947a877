// Package kubesource feeds a primary's store from a Kubernetes API server:
// it watches, with one dynamic informer per kind and no other cache, the
// policy kinds (policies.kyverno.io ValidatingPolicy,
// NamespacedValidatingPolicy, MutatingPolicy, NamespacedMutatingPolicy,
// DeletingPolicy, NamespacedDeletingPolicy, PolicyException;
// admissionregistration.k8s.io
// ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding),
// Namespaces, and the param kinds the stored ValidatingAdmissionPolicies
// name (discovered as policies change), and commits every change through
// the primary's validated write path (Primary.WriteObjects).
//
// The source owns exactly the kinds it watches: on start, when a kind's
// informer first lists, after a watch failure and every Config.Resync, it
// compares the whole store with the caches and commits the difference
// (upserts and deletes), so the store equals the cluster for those kinds;
// objects of other kinds (a PodSecurityConfiguration written with arbiter
// push) are never touched. A kind the API server does not serve (no Kyverno
// CRDs) is left alone and looked for again.
//
// An object that does not compile is refused: the rest of the write is
// retried without it, the store keeps what it had for that object (its
// previous version, or nothing), and a Warning Event (reason
// ArbiterRejected) naming the field is recorded on the object, once per
// content (a change of the status alone records no second Event). Changes
// to fields that carry no policy meaning (resourceVersion, managedFields,
// ...) store the same bytes and make no revision (see normalize).
//
// The source also writes back, from the revision the primary serves, the
// status of the policies (Config.Status: status.conditionStatus as Kyverno
// writes it, status.go) and the webhook configurations made from them
// (Config.Webhooks, webhooks.go); cluster.go runs both. With Config.Reports
// it scans the existing objects with the background policies and writes
// PolicyReports (reports.go, reportobj.go). With Config.Cleanup it runs the
// DeletingPolicies on their schedule (cleanup.go).
//
// RunHA elects one primary among several replicas with a Lease; see elect.go.
package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apiwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// ReasonRejected is the reason of the Event recorded on an object that
// does not compile.
const ReasonRejected = "ArbiterRejected"

// Config configures a Source.
type Config struct {
	// Rest reaches the API server.
	Rest *rest.Config
	// Logger receives the source's logs (default slog.Default()).
	Logger *slog.Logger
	// Resync is how often the whole store is compared with the caches
	// (default 10 minutes).
	Resync time.Duration
	// SyncTimeout bounds the wait for the first list of every kind before
	// the first write (default 30 s); a kind listed later is reconciled
	// when it is.
	SyncTimeout time.Duration
	// BatchDelay is how long changes are gathered into one write (default 20 ms).
	BatchDelay time.Duration
	// CommitInterval is the shortest time between two revisions the source
	// commits (default 100 ms): changes that arrive meanwhile are gathered
	// into the next one, so a busy cluster makes at most one revision per
	// interval (context.go).
	CommitInterval time.Duration
	// ContextResources are resources stored as context objects besides
	// those the policies name with constant arguments and the
	// GlobalContextEntries' kubernetesResource: what resource.Get and
	// resource.List calls whose arguments are not constants may read
	// (ParseContextResources; context.go).
	ContextResources []engine.ResourceRef
	// StoreSecrets lets the source watch v1 Secrets that policies read (the
	// primary must store them: server.Config.StoreSecrets). Without it a
	// policy that reads Secrets is refused.
	StoreSecrets bool
	// APICall configures the fetches of the GlobalContextEntries' apiCall
	// (apicall.go).
	APICall APICallConfig
	// RetryInterval is how often kinds the API server does not serve are
	// looked for again (default 30 s).
	RetryInterval time.Duration
	// Component is the source of the Events recorded, and the field
	// manager of what the primary writes (default "arbiter").
	Component string
	// Status, when set, makes the primary write the status of the
	// policies it serves (cluster.go).
	Status *StatusConfig
	// Webhooks, when set, makes the primary manage webhook configurations
	// made from the policies it serves (webhooks.go); nil: the static
	// configuration of deploy/ is in place.
	Webhooks *WebhookConfig
	// Cleanup, when set, makes the primary run the DeletingPolicies it
	// serves (cleanup.go).
	Cleanup *CleanupConfig
	// Reports, when set, makes the primary scan existing objects with the
	// policies whose background evaluation is enabled and write
	// PolicyReports (reports.go).
	Reports *ReportsConfig
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Resync <= 0 {
		c.Resync = 10 * time.Minute
	}
	if c.SyncTimeout <= 0 {
		c.SyncTimeout = 30 * time.Second
	}
	if c.BatchDelay <= 0 {
		c.BatchDelay = 20 * time.Millisecond
	}
	if c.CommitInterval <= 0 {
		c.CommitInterval = 100 * time.Millisecond
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 30 * time.Second
	}
	if c.Component == "" {
		c.Component = "arbiter"
	}
}

// Stats count what a source did.
type Stats struct {
	// Commits is the number of writes that made a revision.
	Commits uint64
	// Rejected is the number of objects refused (each attempt).
	Rejected uint64
	// WatchErrors is the number of list and watch failures the informers reported.
	WatchErrors uint64
	// Relists is the number of lists after an informer's first (its watch
	// could not resume).
	Relists uint64
	// Reconciles is the number of whole-store comparisons.
	Reconciles uint64
	// Watching lists the kinds watched, as Kind.group/version (sorted).
	Watching []string
	// StatusWrites and WebhookWrites count the policy statuses and the
	// webhook configurations written.
	StatusWrites, WebhookWrites uint64
	// CleanupRuns, CleanupDeleted, CleanupWouldDelete and
	// CleanupFailures count the DeletingPolicy runs started, the objects
	// deleted, those dry runs would have deleted, and failed deletions.
	CleanupRuns, CleanupDeleted, CleanupWouldDelete, CleanupFailures uint64
}

// Snapshot is what the source reads of one compiled revision of the
// primary: its stored objects. *server.Snapshot satisfies it.
type Snapshot interface {
	// Object returns the object stored under k.
	Object(k store.Key) (*manifest.Object, bool)
	// Range calls fn for every stored object, in key order, until fn
	// returns false. The objects are shared: they must not be modified.
	Range(fn func(store.Key, *manifest.Object) bool)
}

// Primary is the replica a Source writes to; *server.Server satisfies it
// (S is *server.Snapshot). The snapshot's type is a type parameter, inferred
// by New and RunHA, because a method returning *server.Snapshot does not
// satisfy one returning Snapshot (Go method results are not covariant), and
// the source must not import the server to name it.
type Primary[S Snapshot] interface {
	// Current returns the snapshot of the revision the primary serves.
	// The source reads one snapshot per step, so each step sees one revision.
	Current() S
	// WriteObjects commits upserts and deletes in one revision through the
	// validated write path: a write whose content does not compile is
	// refused whole, with load errors (manifest.AsLoadErrors) naming each
	// object by its Source ("kube:KEY" for the source's, "store:KEY" for
	// stored objects the write would break) and field. A write that
	// changes nothing makes no revision (store.Commit.Unchanged).
	WriteObjects(ctx context.Context, upserts []*manifest.Object, deletes []store.Key) (store.Commit, error)
}

// target is a Primary with its snapshot type erased, so that Source and
// the election need no type parameter.
type target interface {
	current() Snapshot
	writeObjects(ctx context.Context, upserts []*manifest.Object, deletes []store.Key) (store.Commit, error)
}

// primaryOf adapts a Primary to target.
type primaryOf[S Snapshot] struct{ p Primary[S] }

func (a primaryOf[S]) current() Snapshot { return a.p.Current() }

func (a primaryOf[S]) writeObjects(ctx context.Context, upserts []*manifest.Object, deletes []store.Key) (store.Commit, error) {
	return a.p.WriteObjects(ctx, upserts, deletes)
}

// Source watches the cluster and writes to a primary. A Source runs once.
type Source struct {
	cfg         Config
	srv         target
	log         *slog.Logger
	dyn         dynamic.Interface
	mapper      *restmapper.DeferredDiscoveryRESTMapper
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	// cluster writes the policies' status and the webhook configurations
	// (nil when the configuration asks for neither).
	cluster *cluster
	// cleanup runs the DeletingPolicies (nil without Config.Cleanup).
	cleanup *cleanup
	// scanner runs the background scans (nil without Config.Reports).
	scanner *scanner

	mu      sync.Mutex
	watches map[schema.GroupKind]*watch
	dirty   map[store.Key]bool
	full    bool
	wake    chan struct{}
	wg      sync.WaitGroup

	// unresolved are the kinds the API server did not serve when asked
	// (worker only).
	unresolved map[schema.GroupKind][]string
	// rejected maps a refused object to the content (contentHash of what
	// would be stored) its Event was recorded for (worker only).
	rejected map[store.Key]string
	// owned are the kinds other than the fixed kinds the source has
	// written — params and context kinds (worker only): stored objects of
	// these kinds that it no longer watches are its own, stale, and
	// deleted. Objects of other kinds are context objects written by
	// others (arbiter push), which it leaves alone.
	owned map[schema.GroupKind]bool
	// cx is the state of the context kinds and the apiCall fetches
	// (context.go, apicall.go).
	cx    contextState
	ready chan struct{}

	commits, rejects, watchErrors, relists, reconciles atomic.Uint64
}

// watch is one kind's informer.
type watch struct {
	gvk   schema.GroupVersionKind
	gvr   schema.GroupVersionResource
	param bool
	// context: objects of the kind are read by policies (context.go).
	context bool
	inf     cache.SharedIndexInformer
	cancel  context.CancelFunc
}

// New prepares a source writing to srv (a *server.Server); Run starts it.
func New[S Snapshot](cfg Config, srv Primary[S]) (*Source, error) {
	return newSource(cfg, primaryOf[S]{srv})
}

func newSource(cfg Config, srv target) (*Source, error) {
	cfg.defaults()
	if cfg.Rest == nil {
		return nil, errors.New("kubesource: no API server configuration")
	}
	dyn, err := dynamic.NewForConfig(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	core, err := corev1client.NewForConfig(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&corev1client.EventSinkImpl{Interface: core.Events("")})
	s := &Source{
		cfg:         cfg,
		srv:         srv,
		log:         cfg.Logger.With("component", "kube-source"),
		dyn:         dyn,
		mapper:      restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		broadcaster: b,
		recorder:    b.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: cfg.Component}),
		watches:     map[schema.GroupKind]*watch{},
		dirty:       map[store.Key]bool{},
		wake:        make(chan struct{}, 1),
		unresolved:  map[schema.GroupKind][]string{},
		rejected:    map[store.Key]string{},
		ready:       make(chan struct{}),
	}
	s.cx.init()
	if cfg.Status != nil || cfg.Webhooks != nil {
		if s.cluster, err = newCluster(s); err != nil {
			return nil, fmt.Errorf("kubesource: %w", err)
		}
	}
	if cfg.Cleanup != nil {
		if s.cleanup, err = newCleanup(s); err != nil {
			return nil, fmt.Errorf("kubesource: %w", err)
		}
	}
	if cfg.Reports != nil {
		if s.scanner, err = newScanner(s, *cfg.Reports); err != nil {
			return nil, fmt.Errorf("kubesource: %w", err)
		}
	}
	return s, nil
}

// Ready is closed once the first comparison of the store with the
// cluster was written.
func (s *Source) Ready() <-chan struct{} { return s.ready }

// Stats returns what the source did so far.
func (s *Source) Stats() Stats {
	st := Stats{Commits: s.commits.Load(), Rejected: s.rejects.Load(), WatchErrors: s.watchErrors.Load(), Relists: s.relists.Load(), Reconciles: s.reconciles.Load()}
	s.mu.Lock()
	for _, w := range s.watches {
		st.Watching = append(st.Watching, w.gvk.Kind+"."+w.gvk.GroupVersion().String())
	}
	s.mu.Unlock()
	sort.Strings(st.Watching)
	if s.cluster != nil {
		st.StatusWrites, st.WebhookWrites = s.cluster.statusWrites.Load(), s.cluster.webhookWrites.Load()
	}
	st.CleanupRuns, st.CleanupDeleted, st.CleanupWouldDelete, st.CleanupFailures = s.cleanup.stats()
	return st
}

// Run watches the cluster and writes to the primary until ctx ends. It
// returns after every informer stopped, so nothing is written after it
// returns.
func (s *Source) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		s.wg.Wait()
		s.broadcaster.Shutdown()
	}()
	for _, k := range fixedKinds {
		s.ensureWatch(ctx, k.gk, k.versions, false)
	}
	s.syncWatches(ctx, s.srv.current()) // the kinds the stored policies read
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.runAPICalls(ctx)
	}()
	if s.cluster != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.cluster.run(ctx)
		}()
	}
	if s.cleanup != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.cleanup.run(ctx)
		}()
	}
	if s.scanner != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.scanner.run(ctx)
		}()
	}
	s.waitSynced(ctx)
	s.markFull()
	resync := time.NewTicker(s.cfg.Resync)
	defer resync.Stop()
	retry := time.NewTicker(s.cfg.RetryInterval)
	defer retry.Stop()
	backoff := time.Duration(0)
	for {
		if err := s.process(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, 200*time.Millisecond), 10*time.Second)
			s.log.Warn("writing cluster changes failed; retrying", "err", err, "in", backoff)
			s.markFull()
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
			// gather what arrives with it into one write
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(s.coalesceDelay()):
			}
		case <-resync.C:
			s.markFull()
		case <-retry.C:
			s.retryUnresolved(ctx)
		}
		// At most one revision per CommitInterval, whatever woke the worker.
		if d := time.Until(s.cx.lastCommit.Add(s.cfg.CommitInterval)); d > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d):
			}
		}
	}
}

// waitSynced waits (bounded by SyncTimeout) until every informer listed.
func (s *Source) waitSynced(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SyncTimeout)
	defer cancel()
	s.mu.Lock()
	var synced []cache.InformerSynced
	for _, w := range s.watches {
		synced = append(synced, w.inf.HasSynced)
	}
	s.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) && ctx.Err() != nil {
		s.log.Warn("not every kind was listed in time; the others are reconciled when they are", "timeout", s.cfg.SyncTimeout)
	}
}

func (s *Source) markFull() {
	s.mu.Lock()
	s.full = true
	s.mu.Unlock()
	s.poke()
}

func (s *Source) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Source) enqueue(gk schema.GroupKind, obj any) {
	var ns, name string
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		ns, name = o.GetNamespace(), o.GetName()
	case cache.DeletedFinalStateUnknown:
		var err error
		if ns, name, err = cache.SplitMetaNamespaceKey(o.Key); err != nil {
			return
		}
	default:
		return
	}
	s.mu.Lock()
	s.dirty[keyOf(gk, ns, name)] = true
	s.mu.Unlock()
	s.poke()
	if s.cluster != nil && isStatusKind(gk.Group, gk.Kind) {
		s.cluster.poke()
	}
	if s.cleanup != nil && isCleanupKind(gk.Group, gk.Kind) {
		s.cleanup.poke()
	}
}

// ensureWatch starts the informer of a kind at the first of versions the
// API server serves (worker only). A kind it does not serve is remembered
// and looked for again.
func (s *Source) ensureWatch(ctx context.Context, gk schema.GroupKind, versions []string, param bool) {
	mapping, err := s.mapper.RESTMapping(gk, versions...)
	if err != nil {
		if _, known := s.unresolved[gk]; !known {
			s.log.Warn("the API server does not serve this kind; its objects in the store are left alone until it does",
				"kind", gk.String(), "versions", versions, "err", err)
		}
		s.unresolved[gk] = versions
		return
	}
	delete(s.unresolved, gk)
	gvk := mapping.GroupVersionKind
	inf := s.newInformer(mapping.Resource, gvk)
	_ = inf.SetTransform(func(obj any) (any, error) {
		if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == "" {
			u.SetGroupVersionKind(gvk)
		}
		return stripVolatile(obj)
	})
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		s.watchErrors.Add(1)
		cache.DefaultWatchErrorHandler(ctx, r, err)
		s.log.Info("watch failed", "kind", gvk.String(), "err", err)
		s.markFull()
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.enqueue(gk, obj) },
		UpdateFunc: func(_, obj any) { s.enqueue(gk, obj) },
		DeleteFunc: func(obj any) { s.enqueue(gk, obj) },
	})
	wctx, cancel := context.WithCancel(ctx)
	w := &watch{gvk: gvk, gvr: mapping.Resource, param: param, inf: inf, cancel: cancel}
	s.mu.Lock()
	if old := s.watches[gk]; old != nil {
		old.cancel()
	}
	s.watches[gk] = w
	s.mu.Unlock()
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		inf.RunWithContext(wctx)
	}()
	go func() {
		defer s.wg.Done()
		if cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
			s.markFull() // reconcile the kind against the store once it is listed
		}
	}()
	s.log.Info("watching", "kind", gvk.String(), "resource", mapping.Resource.String(), "param", param)
}

// newInformer is the dynamic informer of a resource (as dynamicinformer
// makes it), counting its lists: every list after the first is a re-list
// after a watch that could not resume (a cut, an expired resourceVersion),
// and is followed by a comparison of the whole store with the caches. The
// re-list itself delivers every object again, and a deletion for each
// object that disappeared meanwhile, so no change is lost.
func (s *Source) newInformer(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind) cache.SharedIndexInformer {
	ri := s.dyn.Resource(gvr)
	var lists atomic.Int64
	listed := func() {
		if lists.Add(1) > 1 {
			s.relists.Add(1)
			s.log.Info("re-listing after a watch that could not resume", "kind", gvk.String())
			s.markFull()
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			listed()
			return ri.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (apiwatch.Interface, error) {
			if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
				listed() // a streamed list (WatchListClient)
			}
			return ri.Watch(ctx, opts)
		},
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, s.dyn),
		&unstructured.Unstructured{}, cache.SharedIndexInformerOptions{ObjectDescription: gvr.String()})
}

// stopWatch stops a kind's informer (worker only).
func (s *Source) stopWatch(gk schema.GroupKind) {
	s.mu.Lock()
	w := s.watches[gk]
	delete(s.watches, gk)
	s.mu.Unlock()
	if w != nil {
		w.cancel()
		s.log.Info("stopped watching", "kind", w.gvk.String())
	}
}

// item is an object to upsert.
type item struct {
	key store.Key
	u   *unstructured.Unstructured
}

// process writes what changed since the last call: the dirty keys, or
// the whole difference between the store and the caches.
func (s *Source) process(ctx context.Context) error {
	s.mu.Lock()
	full, dirty := s.full, s.dirty
	s.full, s.dirty = false, map[store.Key]bool{}
	synced := map[schema.GroupKind]*watch{}
	for gk, w := range s.watches {
		if w.inf.HasSynced() {
			synced[gk] = w
		}
	}
	pending := s.hasPending()
	s.mu.Unlock()
	if !full && len(dirty) == 0 && !pending {
		return nil
	}
	snap := s.srv.current()
	var ups []item
	var dels []store.Key
	if full {
		s.reconciles.Add(1)
		gks := make([]schema.GroupKind, 0, len(synced))
		for gk := range synced {
			gks = append(gks, gk)
		}
		sort.Slice(gks, func(i, j int) bool { return gks[i].String() < gks[j].String() })
		for _, gk := range gks {
			for _, o := range synced[gk].inf.GetStore().List() {
				if u, ok := o.(*unstructured.Unstructured); ok {
					ups = append(ups, item{key: keyOf(gk, u.GetNamespace(), u.GetName()), u: u})
				}
			}
		}
		for _, gk := range gks {
			w := synced[gk]
			rangeKind(snap, gk, func(k store.Key, _ *manifest.Object) bool {
				if _, ok := get(w, k); !ok {
					dels = append(dels, k)
				}
				return true
			})
		}
	} else {
		keys := make([]store.Key, 0, len(dirty))
		for k := range dirty {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			w := synced[schema.GroupKind{Group: k.Group, Kind: k.Kind}]
			if w == nil {
				continue // not watched (any more), or not listed yet: the next full comparison covers it
			}
			if u, ok := get(w, k); ok {
				ups = append(ups, item{key: k, u: u})
			} else if _, ok := snap.Object(k); ok {
				dels = append(dels, k)
			}
		}
	}
	err := s.commit(ctx, ups, dels)
	if full && err == nil {
		select {
		case <-s.ready:
		default:
			close(s.ready)
		}
	}
	// The param and context kinds watched follow the committed policies.
	s.syncWatches(ctx, s.srv.current())
	return err
}

func get(w *watch, k store.Key) (*unstructured.Unstructured, bool) {
	id := k.Name
	if k.Namespace != "" {
		id = k.Namespace + "/" + k.Name
	}
	o, ok, err := w.inf.GetIndexer().GetByKey(id)
	if err != nil || !ok {
		return nil, false
	}
	u, ok := o.(*unstructured.Unstructured)
	return u, ok
}

const vapGroup = "admissionregistration.k8s.io"

var vapGK = schema.GroupKind{Group: vapGroup, Kind: "ValidatingAdmissionPolicy"}

// paramKindOf is the spec.paramKind of a ValidatingAdmissionPolicy.
func paramKindOf(content map[string]any) (schema.GroupVersionKind, bool) {
	spec, _ := content["spec"].(map[string]any)
	pk, _ := spec["paramKind"].(map[string]any)
	av, _ := pk["apiVersion"].(string)
	kind, _ := pk["kind"].(string)
	if av == "" || kind == "" {
		return schema.GroupVersionKind{}, false
	}
	gv, err := schema.ParseGroupVersion(av)
	if err != nil {
		return schema.GroupVersionKind{}, false
	}
	return gv.WithKind(kind), true
}

// paramKinds are the param kinds (other than the fixed kinds) the
// ValidatingAdmissionPolicies of snap name, after ups and dels when given.
func paramKinds(snap Snapshot, ups []item, dels []store.Key) map[schema.GroupKind]schema.GroupVersionKind {
	changed := map[store.Key]bool{}
	for _, k := range dels {
		changed[k] = true
	}
	var gvks []schema.GroupVersionKind
	for _, it := range ups {
		changed[it.key] = true
		if it.key.Group == vapGroup && it.key.Kind == vapGK.Kind {
			if gvk, ok := paramKindOf(it.u.Object); ok {
				gvks = append(gvks, gvk)
			}
		}
	}
	rangeKind(snap, vapGK, func(k store.Key, o *manifest.Object) bool {
		if !changed[k] {
			if gvk, ok := paramKindOf(o.Content); ok {
				gvks = append(gvks, gvk)
			}
		}
		return true
	})
	// One version per kind: the first in a stable order.
	sort.Slice(gvks, func(i, j int) bool { return gvks[i].String() < gvks[j].String() })
	out := map[schema.GroupKind]schema.GroupVersionKind{}
	for _, gvk := range gvks {
		if gk := gvk.GroupKind(); !isFixed(gk) {
			if _, ok := out[gk]; !ok {
				out[gk] = gvk
			}
		}
	}
	return out
}

// commit writes ups and dels; objects that do not compile are refused
// (an Event on each) and the rest is written without them.
func (s *Source) commit(ctx context.Context, ups []item, dels []store.Key) error {
	ups = s.admit(ctx, ups)
	for {
		snap := s.srv.current()
		wu, wd := s.withOwned(snap, ups, dels)
		if len(wu) == 0 && len(wd) == 0 {
			s.written(nil, nil)
			return nil
		}
		for _, it := range wu {
			if gk := (schema.GroupKind{Group: it.key.Group, Kind: it.key.Kind}); !isFixed(gk) {
				if s.owned == nil {
					s.owned = map[schema.GroupKind]bool{}
				}
				s.owned[gk] = true
			}
		}
		objs := make([]*manifest.Object, len(wu))
		for i, it := range wu {
			objs[i] = manifest.NewObject(sourceOf(it.key), normalize(it.u))
		}
		c, err := s.srv.writeObjects(ctx, objs, wd)
		if err == nil {
			s.committed(c, wu)
			s.written(wu, wd)
			return nil
		}
		les := manifest.AsLoadErrors(err)
		if les == nil {
			return err
		}
		bad := map[store.Key][]*manifest.LoadError{}
		for _, le := range les {
			if k, ok := keyOfSource(le.Source); ok {
				bad[k] = append(bad[k], le)
			}
		}
		kept := ups[:0:0]
		for _, it := range wu {
			if errs := bad[it.key]; errs != nil {
				s.reject(it, errs)
			} else {
				kept = append(kept, it)
			}
		}
		if len(kept) == len(wu) {
			// The errors name objects outside the write (content it would
			// break): find the culprits one change at a time.
			if err := s.commitEach(ctx, wu, wd); err != nil {
				return err
			}
			s.written(wu, wd)
			return nil
		}
		ups, dels = kept, wd
	}
}

// commitEach writes each change on its own; those refused are reported.
func (s *Source) commitEach(ctx context.Context, ups []item, dels []store.Key) error {
	for _, it := range ups {
		c, err := s.srv.writeObjects(ctx, []*manifest.Object{manifest.NewObject(sourceOf(it.key), normalize(it.u))}, nil)
		if les := manifest.AsLoadErrors(err); les != nil {
			s.reject(it, les)
			continue
		}
		if err != nil {
			return err
		}
		s.committed(c, []item{it})
	}
	for _, k := range dels {
		c, err := s.srv.writeObjects(ctx, nil, []store.Key{k})
		if les := manifest.AsLoadErrors(err); les != nil {
			s.rejects.Add(1)
			s.log.Warn("deleting an object the cluster no longer has was refused; the store keeps it", "object", k.String(), "err", les.Error())
			continue
		}
		if err != nil {
			return err
		}
		s.committed(c, nil)
	}
	return nil
}

func (s *Source) committed(c store.Commit, ups []item) {
	for _, it := range ups {
		delete(s.rejected, it.key)
	}
	if s.cluster != nil && (c.Unchanged || touchesPolicies(c)) {
		s.cluster.poke()
	}
	if s.cleanup != nil {
		s.cleanup.poke()
	}
	if c.Unchanged {
		return
	}
	s.afterCommit(c)
	s.commits.Add(1)
	var up, del int
	for _, ch := range c.Changes {
		if ch.Op == store.OpDelete {
			del++
		} else {
			up++
		}
	}
	s.log.Info("committed cluster changes", "revision", c.Revision, "digest", c.Digest, "upserted", up, "deleted", del)
}

// reject reports an object that does not compile: a log line, a Warning
// Event on the object once per content, and (with Config.Status) its
// status.
func (s *Source) reject(it item, errs []*manifest.LoadError) {
	s.rejects.Add(1)
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Detail
		if e.Field != "" {
			parts[i] = e.Field + ": " + e.Detail
		}
		if e.Object != "" && e.Source != sourceOf(it.key) {
			parts[i] = e.Object + ": " + parts[i]
		}
	}
	msg := "refused by Arbiter, which keeps deciding with the last accepted version: " + strings.Join(parts, "; ")
	ref := it.u.GetKind() + " " + it.u.GetName()
	if ns := it.u.GetNamespace(); ns != "" {
		ref = it.u.GetKind() + " " + ns + "/" + it.u.GetName()
	}
	s.log.Warn("object refused", "object", ref, "resource_version", it.u.GetResourceVersion(), "err", strings.Join(parts, "; "))
	if s.cluster != nil {
		s.cluster.refused(it.key, it.u, strings.Join(parts, "; "))
	}
	// Once per content: a change of what the store would not hold (the
	// status the primary writes) records no second Event.
	if v := contentHash(normalize(it.u)); s.rejected[it.key] != v {
		s.rejected[it.key] = v
		if len(msg) > 1024 {
			msg = msg[:1021] + "..."
		}
		s.recorder.Event(it.u.DeepCopy(), corev1.EventTypeWarning, ReasonRejected, msg)
	}
}

// sourceOf names a cluster object in write errors.
func sourceOf(k store.Key) string { return "kube:" + k.String() }

// keyOfSource is the store key an error's source names: one of ours, or
// an object already stored ("store:KEY", from the primary).
func keyOfSource(src string) (store.Key, bool) {
	for _, p := range []string{"kube:", "store:"} {
		if rest, ok := strings.CutPrefix(src, p); ok {
			k, err := store.ParseKey(rest)
			return k, err == nil
		}
	}
	return store.Key{}, false
}

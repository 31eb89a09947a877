package clusterdata

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	gojmespath "github.com/kyverno/go-jmespath"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Kyverno's GlobalContextEntry (kyverno.io, cluster-scoped): the data that
// globalContext.Get serves, from Kubernetes objects (kubernetesResource) or
// from an HTTP call the primary makes (apiCall).
const (
	GlobalContextGroup     = "kyverno.io"
	KindGlobalContextEntry = "GlobalContextEntry"
)

// GlobalContextVersions are the versions of GlobalContextEntry Kyverno 1.19
// serves (one schema; v2alpha1 is deprecated).
var GlobalContextVersions = map[string]bool{"v2alpha1": true, "v2beta1": true, "v2": true}

// IsGlobalContextEntry says whether o is a GlobalContextEntry (any
// version: CompileEntry refuses the versions Kyverno does not serve).
func IsGlobalContextEntry(o *manifest.Object) bool {
	return o.Kind == KindGlobalContextEntry && o.Group() == GlobalContextGroup
}

// GlobalContextEntry is the manifest of a GlobalContextEntry.
type GlobalContextEntry struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GlobalContextEntrySpec `json:"spec"`
	Status            map[string]any         `json:"status,omitempty"`
}

// GlobalContextEntrySpec is its spec: exactly one of KubernetesResource and
// APICall, and the projections.
type GlobalContextEntrySpec struct {
	KubernetesResource *KubernetesResource `json:"kubernetesResource,omitempty"`
	APICall            *ExternalAPICall    `json:"apiCall,omitempty"`
	Projections        []Projection        `json:"projections,omitempty"`
}

// KubernetesResource names the objects of an entry: every object of the
// resource in Namespace ("" for all namespaces, or a cluster-scoped
// resource).
type KubernetesResource struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
}

// ExternalAPICall is an entry's HTTP call: a path on the API server
// (URLPath) or a service, refreshed every RefreshInterval (default 10m).
type ExternalAPICall struct {
	URLPath         string           `json:"urlPath,omitempty"`
	Method          string           `json:"method,omitempty"`
	Data            []RequestData    `json:"data,omitempty"`
	Service         *ServiceCall     `json:"service,omitempty"`
	RefreshInterval *metav1.Duration `json:"refreshInterval,omitempty"`
	RetryLimit      int              `json:"retryLimit,omitempty"`
}

// RequestData is one key of the body of a POST.
type RequestData struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// ServiceCall is a call to a JSON web service.
type ServiceCall struct {
	URL          string         `json:"url"`
	CABundle     string         `json:"caBundle,omitempty"`
	CABundleFrom map[string]any `json:"caBundleFrom,omitempty"`
	Headers      []HTTPHeader   `json:"headers,omitempty"`
}

// HTTPHeader is a header of a service call.
type HTTPHeader struct {
	Key       string         `json:"key"`
	Value     string         `json:"value,omitempty"`
	ValueFrom map[string]any `json:"valueFrom,omitempty"`
}

// Projection is a named JMESPath extract of an entry's data.
type Projection struct {
	Name     string `json:"name"`
	JMESPath string `json:"jmesPath"`
}

// DefaultRefreshInterval is an apiCall's refreshInterval when none is set
// (the CRD's default).
const DefaultRefreshInterval = 10 * time.Minute

// Entry is a compiled GlobalContextEntry.
type Entry struct {
	Name string
	// Version identifies the entry's content (the compiled form is reused
	// while it is the same).
	Version     string
	Spec        GlobalContextEntrySpec
	projections []compiledProjection
}

type compiledProjection struct {
	name string
	path string
	jp   *gojmespath.JMESPath
}

// RefreshInterval is the apiCall's refresh interval (0 for a
// kubernetesResource entry).
func (e *Entry) RefreshInterval() time.Duration {
	if e.Spec.APICall == nil {
		return 0
	}
	if ri := e.Spec.APICall.RefreshInterval; ri != nil && ri.Duration > 0 {
		return ri.Duration
	}
	return DefaultRefreshInterval
}

// CompileEntry loads and validates a GlobalContextEntry as Kyverno's
// validation does (field paths of the manifest), compiling its projections.
func CompileEntry(o *manifest.Object) (*Entry, manifest.LoadErrors) {
	if !GlobalContextVersions[o.VersionOnly()] {
		return nil, manifest.LoadErrors{manifest.Errorf(o, "apiVersion", "unsupported version %s of GlobalContextEntry (served: kyverno.io/v2alpha1, v2beta1, v2)", o.APIVersion)}
	}
	if o.Namespace != "" {
		return nil, manifest.LoadErrors{manifest.Errorf(o, "metadata.namespace", "must be empty: GlobalContextEntry is cluster-scoped")}
	}
	var g GlobalContextEntry
	if err := manifest.DecodeStrict(o, &g); err != nil {
		return nil, manifest.LoadErrors{err}
	}
	var errs manifest.LoadErrors
	bad := func(field, format string, args ...any) {
		errs = append(errs, manifest.Errorf(o, field, format, args...))
	}
	sp := g.Spec
	switch {
	case sp.KubernetesResource != nil && sp.APICall != nil:
		bad("spec.kubernetesResource", "a GlobalContextEntry has either kubernetesResource or apiCall, not both")
	case sp.KubernetesResource == nil && sp.APICall == nil:
		bad("spec", "a GlobalContextEntry needs kubernetesResource or apiCall")
	}
	if k := sp.KubernetesResource; k != nil {
		if k.Group == "" && k.Version != "v1" {
			bad("spec.kubernetesResource.group", "required (only the core group, version v1, has none)")
		}
		if k.Version == "" {
			bad("spec.kubernetesResource.version", "required")
		}
		if k.Resource == "" {
			bad("spec.kubernetesResource.resource", "required (the plural, lower-case resource name, e.g. deployments)")
		} else if strings.Contains(k.Resource, "/") {
			bad("spec.kubernetesResource.resource", "a resource, not a subresource: %q", k.Resource)
		}
	}
	if a := sp.APICall; a != nil {
		switch {
		case a.URLPath == "" && a.Service == nil:
			bad("spec.apiCall", "needs urlPath or service")
		case a.URLPath != "" && a.Service != nil:
			bad("spec.apiCall.service", "an apiCall has either urlPath or service, not both")
		}
		if a.Service != nil && a.Service.URL == "" {
			bad("spec.apiCall.service.url", "required")
		}
		method := a.Method
		if method == "" {
			method = "GET"
		}
		if method != "GET" && method != "POST" {
			bad("spec.apiCall.method", "must be GET or POST, not %q", a.Method)
		}
		if a.Data != nil && method != "POST" {
			bad("spec.apiCall.method", "an apiCall with data must be a POST")
		}
		if a.RefreshInterval != nil && a.RefreshInterval.Duration < 0 {
			bad("spec.apiCall.refreshInterval", "must be positive")
		}
		if a.RetryLimit < 0 || a.RetryLimit > 10 {
			bad("spec.apiCall.retryLimit", "must be between 0 and 10")
		}
	}
	e := &Entry{Name: o.Name, Version: o.ContentVersion(), Spec: sp}
	seen := map[string]bool{}
	for i, p := range sp.Projections {
		field := fmt.Sprintf("spec.projections[%d]", i)
		switch {
		case p.Name == "":
			bad(field+".name", "required")
		case p.Name == o.Name:
			bad(field+".name", "must differ from the GlobalContextEntry's name")
		case seen[p.Name]:
			bad(field+".name", "duplicate projection %q", p.Name)
		}
		seen[p.Name] = true
		if p.JMESPath == "" {
			bad(field+".jmesPath", "required")
			continue
		}
		jp, err := compileJMESPath(p.JMESPath)
		if err != nil {
			bad(field+".jmesPath", "%v", err)
			continue
		}
		e.projections = append(e.projections, compiledProjection{name: p.Name, path: p.JMESPath, jp: jp})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return e, nil
}

// compileJMESPath compiles an expression; a panic of the library is an
// error.
func compileJMESPath(expr string) (jp *gojmespath.JMESPath, err error) {
	defer func() {
		if r := recover(); r != nil {
			jp, err = nil, fmt.Errorf("jmespath %q: %v", expr, r)
		}
	}()
	return gojmespath.Compile(expr)
}

// searchJMESPath evaluates a compiled expression as Kyverno does (the
// library and version its engine uses; a panic of the library is an
// error).
func searchJMESPath(p compiledProjection, data any) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("jmespath %q: %v", p.path, r)
		}
	}()
	return p.jp.Search(data)
}

// ---- apiCall data ----

// The data of an apiCall entry is a context object the primary commits
// each time it fetches (so every replica serves the same data at a
// revision): kind GlobalContextEntryData of context.arbiter.dev/v1alpha1,
// named after the entry, with
//
//	spec.entryVersion  the Version of the Entry it was fetched for
//	spec.fetchedAt     RFC 3339 time of the fetch
//	spec.data          the decoded response (any JSON)
//	spec.error         the error of the last fetch, if it failed
const (
	DataGroup      = "context.arbiter.dev"
	DataAPIVersion = DataGroup + "/v1alpha1"
	KindEntryData  = "GlobalContextEntryData"
)

// NewEntryData returns the object that records a fetch of entry e: its
// data, or the error it failed with.
func NewEntryData(e *Entry, fetchedAt time.Time, data any, fetchErr error) *manifest.Object {
	spec := map[string]any{"entryVersion": e.Version, "fetchedAt": fetchedAt.UTC().Format(time.RFC3339)}
	if fetchErr != nil {
		spec["error"] = fetchErr.Error()
	} else {
		spec["data"] = data
	}
	content := map[string]any{"apiVersion": DataAPIVersion, "kind": KindEntryData, "metadata": map[string]any{"name": e.Name}, "spec": spec}
	return manifest.NewObject("globalContext:"+e.Name, content)
}

// ---- Globals: globalContext.Get over the entries and views of a revision ----

// Globals answers globalContext.Get for one revision: the entries, and the
// view their kubernetesResource objects and apiCall data are read from.
// An entry's data and projections are computed on first use and reused by
// the next revisions while neither the entry nor the objects it reads
// change. It is immutable and safe for concurrent use.
type Globals struct {
	view *View
	// reader lists the objects of kubernetesResource entries: view, or a
	// live cluster (NewGlobalsOn).
	reader  Reader
	entries map[string]*globalEntry
}

type globalEntry struct {
	entry *Entry
	// source is what the data was computed from: the bucket of the
	// resource's kind (kubernetesResource) or the data object (apiCall).
	source any

	once      sync.Once
	data      any
	err       error
	projected map[string]projected
}

type projected struct {
	v   any
	err error
}

// NewGlobals returns the global context of entries over view, reusing the
// computed data of prev where entry and source are unchanged. prev may be
// nil.
func NewGlobals(entries []*Entry, view *View, prev *Globals) *Globals {
	if view == nil {
		view = Empty()
	}
	g := &Globals{view: view, reader: view, entries: make(map[string]*globalEntry, len(entries))}
	for _, e := range entries {
		ge := &globalEntry{entry: e, source: g.source(e)}
		if prev != nil {
			if old := prev.entries[e.Name]; old != nil && old.entry.Version == e.Version && old.source == ge.source && sameMapping(prev.view, view, e) {
				ge = old
			}
		}
		g.entries[e.Name] = ge
	}
	return g
}

// NewGlobalsOn returns the global context of entries whose
// kubernetesResource objects are read from r (a live cluster: arbiter
// apply --cluster) each time an entry is first used. apiCall entries have
// no data there.
func NewGlobalsOn(entries []*Entry, r Reader) *Globals {
	g := &Globals{view: Empty(), reader: r, entries: make(map[string]*globalEntry, len(entries))}
	for _, e := range entries {
		g.entries[e.Name] = &globalEntry{entry: e}
	}
	return g
}

// Entries returns the entries, by name.
func (g *Globals) Entries() []*Entry {
	if g == nil {
		return nil
	}
	out := make([]*Entry, 0, len(g.entries))
	for _, ge := range g.entries {
		out = append(out, ge.entry)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// source is what an entry's data is computed from in g.view.
func (g *Globals) source(e *Entry) any {
	if k := e.Spec.KubernetesResource; k != nil {
		mp, b, _, _ := g.view.resolve(schema.GroupVersion{Group: k.Group, Version: k.Version}.String(), k.Resource)
		if mp == nil || b == nil {
			return nil
		}
		return b
	}
	o, _ := g.view.Get(Key{Group: DataGroup, Kind: KindEntryData, Name: e.Name})
	return o
}

// sameMapping says whether a kubernetesResource entry's resource maps the
// same in both views.
func sameMapping(a, b *View, e *Entry) bool {
	k := e.Spec.KubernetesResource
	if k == nil {
		return true
	}
	gr := schema.GroupResource{Group: k.Group, Resource: k.Resource}
	ma, oka := a.Mapper().ResourceFor(gr)
	mb, okb := b.Mapper().ResourceFor(gr)
	if oka != okb {
		return false
	}
	return !oka || ma.GroupKind == mb.GroupKind && ma.hasVersion(k.Version) == mb.hasVersion(k.Version)
}

// GetGlobalReference implements kyvernocel.GlobalContext as Kyverno does: a
// missing entry is null; projection "" is the entry's data (a
// kubernetesResource entry's objects, by namespace then name; an apiCall
// entry's response), another the named projection's value, or an error
// when the entry has no such projection or it failed.
func (g *Globals) GetGlobalReference(_ context.Context, name, projection string) (any, error) {
	if g == nil {
		return nil, nil
	}
	ge := g.entries[name]
	if ge == nil {
		return nil, nil
	}
	ge.once.Do(func() { g.compute(ge) })
	if ge.err != nil {
		return nil, fmt.Errorf("global context entry %q: %w", name, ge.err)
	}
	if ge.entry.Spec.APICall != nil {
		// Kyverno's apiCall entries (globalcontext/externalapi): a value
		// that is null — the data, a projection's result, a projection the
		// entry does not have — is "no data available".
		v := ge.data
		if projection != "" {
			v = ge.projected[projection].v
		}
		if v == nil {
			return nil, fmt.Errorf("global context entry %q: projection %q: no data available", name, projection)
		}
		return v, nil
	}
	if projection == "" {
		return ge.data, nil
	}
	p, ok := ge.projected[projection]
	if !ok {
		return nil, fmt.Errorf("global context entry %q: projection %q not found", name, projection)
	}
	if p.err != nil {
		return nil, fmt.Errorf("global context entry %q: projection %q: %w", name, projection, p.err)
	}
	return p.v, nil
}

// compute fills an entry's data and projections.
func (g *Globals) compute(ge *globalEntry) {
	e := ge.entry
	if k := e.Spec.KubernetesResource; k != nil {
		apiVersion := schema.GroupVersion{Group: k.Group, Version: k.Version}.String()
		list, err := g.reader.ListResources(context.Background(), apiVersion, k.Resource, k.Namespace, nil)
		if err != nil {
			ge.err = fmt.Errorf("kubernetesResource %s %s: %w", apiVersion, k.Resource, err)
			return
		}
		objs := make([]any, len(list.Items))
		for i := range list.Items {
			objs[i] = list.Items[i].Object
		}
		ge.data = objs
	} else {
		o, ok := ge.source.(*manifest.Object)
		if !ok || o == nil {
			ge.err = fmt.Errorf("apiCall data not yet fetched (the primary fetches it every %s and commits it as %s %s)", e.RefreshInterval(), KindEntryData, e.Name)
			return
		}
		spec, _ := o.Content["spec"].(map[string]any)
		if v, _ := spec["entryVersion"].(string); v != e.Version {
			ge.err = fmt.Errorf("apiCall data not yet fetched for the entry's current spec (the stored data is of another version)")
			return
		}
		if msg, _ := spec["error"].(string); msg != "" {
			at, _ := spec["fetchedAt"].(string)
			ge.err = fmt.Errorf("apiCall failed at %s: %s", at, msg)
			return
		}
		ge.data = spec["data"]
	}
	ge.projected = make(map[string]projected, len(e.projections))
	for _, p := range e.projections {
		v, err := searchJMESPath(p, jsonShaped(ge.data))
		if err != nil && e.Spec.APICall != nil {
			// Kyverno's apiCall entries: a projection that fails fails the
			// entry (every projection, and its data).
			ge.data, ge.projected = nil, nil
			ge.err = fmt.Errorf("projection %q: %w", p.name, err)
			return
		}
		ge.projected[p.name] = projected{v: v, err: err}
	}
}

// jsonShaped converts integer numbers to float64, as the JSON round trip
// of Kyverno's entries does, so JMESPath compares and sums them as Kyverno
// does. It copies only what it changes.
func jsonShaped(v any) any {
	out, _ := toJSONNumbers(v)
	return out
}

// toJSONNumbers is jsonShaped, saying whether anything changed.
func toJSONNumbers(v any) (any, bool) {
	switch t := v.(type) {
	case map[string]any:
		var out map[string]any
		for k, e := range t {
			c, changed := toJSONNumbers(e)
			if !changed {
				continue
			}
			if out == nil {
				out = make(map[string]any, len(t))
				for k2, e2 := range t {
					out[k2] = e2
				}
			}
			out[k] = c
		}
		if out == nil {
			return t, false
		}
		return out, true
	case []any:
		var out []any
		for i, e := range t {
			c, changed := toJSONNumbers(e)
			if !changed {
				continue
			}
			if out == nil {
				out = append([]any(nil), t...)
			}
			out[i] = c
		}
		if out == nil {
			return t, false
		}
		return out, true
	case int64:
		return float64(t), true
	case int:
		return float64(t), true
	case json.Number:
		if f, err := t.Float64(); err == nil {
			return f, true
		}
	}
	return v, false
}

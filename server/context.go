package server

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// content is what a revision's objects compile to: the policy objects and
// their PolicySet, the context objects' view, and the global context.
type content struct {
	objects *objectSet
	view    *clusterdata.View
	globals *clusterdata.Globals
	set     *engine.PolicySet
}

// snapshot makes the snapshot of content at a revision.
func (s *Server) snapshot(c *content, rev uint64, digest string) *Snapshot {
	return &Snapshot{Revision: rev, Digest: digest, Set: c.set, objects: c.objects, view: c.view, globals: c.globals,
		libs: s.contextOf(c), next: make(chan struct{})}
}

// contextOf is the context decisions on content read: its context objects
// and GlobalContextEntries, and the calls out the server is configured
// with.
func (s *Server) contextOf(c *content) *clusterdata.Context {
	libs := &clusterdata.Context{Resources: c.view, Global: c.globals, Images: s.cfg.ImageData, HTTPClient: s.cfg.HTTP}
	if s.cfg.Poster != nil {
		libs.Poster = s.cfg.Poster
	}
	return libs
}

// contentOf is the content of a snapshot (nil: none).
func contentOf(snap *Snapshot) *content {
	if snap == nil {
		return nil
	}
	return &content{objects: snap.objects, view: snap.view, globals: snap.globals, set: snap.Set}
}

// build compiles the content that results from applying changes to base
// (nil: the empty store). It returns the new content, or the load errors
// that make it invalid.
//
// Context objects (objects of no policy class: ConfigMaps, Deployments,
// CustomResourceDefinitions, ...) go to the view, copied on write per kind
// and namespace; the rest to the object set. The policies are compiled
// again only when the write changes what they are compiled from: policy
// objects, CustomResourceDefinitions (the schemas of the mutating kinds),
// or objects of a kind some ValidatingAdmissionPolicy or
// MutatingAdmissionPolicy takes as params. A write of other context
// objects keeps the compiled policy set.
//
// sources name where upserted objects come from (a file, a request field),
// for errors; objects without one are named by their store key.
func (s *Server) build(base *content, changes []store.Change, sources map[store.Key]string) (*content, error) {
	if base == nil {
		base = &content{view: clusterdata.Empty()}
	}
	var policyChanges []objectChange
	var viewChanges []clusterdata.Change
	var upserted []*manifest.Object // context objects upserted
	var errs manifest.LoadErrors
	for _, c := range changes {
		ck := contextKey(c.Key)
		if c.Op != store.OpUpsert {
			if _, ok := base.view.Get(ck); ok {
				viewChanges = append(viewChanges, clusterdata.Change{Key: ck})
			}
			if _, ok := base.objects.get(c.Key); ok {
				policyChanges = append(policyChanges, objectChange{key: c.Key})
			}
			continue
		}
		obj, err := decodeObject(c.Key, c.Value)
		if err != nil {
			return nil, err
		}
		if src, ok := sources[c.Key]; ok {
			obj.Source = src
		}
		if got := KeyOf(obj); got != c.Key {
			return nil, &manifest.LoadError{Source: obj.Source, Object: obj.Ref(), Detail: fmt.Sprintf("key %s does not match the object (%s)", c.Key, got)}
		}
		if err := storable(obj); err != nil {
			var le *manifest.LoadError
			if errors.As(err, &le) {
				errs = append(errs, le)
				continue
			}
			return nil, err
		}
		if engine.Classify(obj) == engine.ClassResource {
			viewChanges = append(viewChanges, clusterdata.Change{Key: ck, Object: obj})
			upserted = append(upserted, obj)
			if _, ok := base.objects.get(c.Key); ok {
				policyChanges = append(policyChanges, objectChange{key: c.Key})
			}
			continue
		}
		policyChanges = append(policyChanges, objectChange{key: c.Key, obj: obj})
		if engine.Classify(obj) == engine.ClassNamespace {
			// A Namespace is also what resource.Get/List read
			// (v1 namespaces), as Kyverno's listers serve it.
			viewChanges = append(viewChanges, clusterdata.Change{Key: ck, Object: obj})
			continue
		}
		if _, ok := base.view.Get(ck); ok {
			viewChanges = append(viewChanges, clusterdata.Change{Key: ck})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	out := &content{objects: base.objects.apply(policyChanges), view: base.view.Apply(viewChanges), set: base.set, globals: base.globals}
	for _, o := range upserted {
		if le := clusterdata.CheckScope(out.view, o); le != nil {
			errs = append(errs, le)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	paramKinds := engine.ParamKinds(out.objects.objs)
	recompile := out.set == nil || len(policyChanges) > 0
	for _, c := range viewChanges {
		if recompile {
			break
		}
		recompile = c.Key.Group == crdGroup && c.Key.Kind == crdKind || isParamKind(paramKinds, base.view, c)
	}
	if recompile {
		objs := append([]*manifest.Object(nil), out.objects.objs...)
		objs = append(objs, out.view.ObjectsOf(schema.GroupKind{Group: crdGroup, Kind: crdKind})...)
		for pk := range paramKinds {
			gk := schema.FromAPIVersionAndKind(pk[0], pk[1]).GroupKind()
			for _, o := range out.view.ObjectsOf(gk) {
				if o.APIVersion == pk[0] {
					objs = append(objs, o)
				}
			}
		}
		set, err := s.compiler.Compile(objs, engine.Options{MutateExisting: s.cfg.MutateExisting})
		if err != nil {
			return nil, err
		}
		out.set = set
	}
	if out.globals == nil || len(policyChanges) > 0 || len(viewChanges) > 0 {
		globals, err := buildGlobals(out.objects, out.view, base.globals)
		if err != nil {
			return nil, err
		}
		out.globals = globals
	}
	return out, nil
}

const (
	crdGroup = "apiextensions.k8s.io"
	crdKind  = "CustomResourceDefinition"
)

// isParamKind says whether a context change touches an object of a param
// kind (the object written, or the one it replaces or deletes).
func isParamKind(kinds map[[2]string]bool, base *clusterdata.View, c clusterdata.Change) bool {
	if len(kinds) == 0 {
		return false
	}
	if c.Object != nil && kinds[[2]string{c.Object.APIVersion, c.Object.Kind}] {
		return true
	}
	if old, ok := base.Get(c.Key); ok && kinds[[2]string{old.APIVersion, old.Kind}] {
		return true
	}
	return false
}

// buildGlobals compiles the GlobalContextEntries among objs (reusing those
// of prev that did not change) over view.
func buildGlobals(objs *objectSet, view *clusterdata.View, prev *clusterdata.Globals) (*clusterdata.Globals, error) {
	known := map[string]*clusterdata.Entry{}
	for _, e := range prev.Entries() {
		known[e.Name] = e
	}
	var entries []*clusterdata.Entry
	var errs manifest.LoadErrors
	for _, o := range objs.objs {
		if engine.Classify(o) != engine.ClassGlobalContextEntry {
			continue
		}
		if e := known[o.Name]; e != nil && e.Version == o.ContentVersion() {
			entries = append(entries, e)
			continue
		}
		e, les := clusterdata.CompileEntry(o)
		if les != nil {
			errs = append(errs, les...)
			continue
		}
		entries = append(entries, e)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return clusterdata.NewGlobals(entries, view, prev), nil
}

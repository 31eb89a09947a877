package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/kyvernotest/fixtures"
)

// ContextOptions say where a local evaluation's context comes from: what
// resource.Get/List and globalContext.Get read.
type ContextOptions struct {
	// Files are --context files: Kyverno CLI context files
	// (cli.kyverno.io/v1alpha1 Context: spec.resources, spec.images) and
	// plain manifests, whose objects are context objects (any object of no
	// policy class), GlobalContextEntries, and the fetched data of apiCall
	// entries (context.arbiter.dev GlobalContextEntryData).
	Files []string
	// Cluster reads resource.Get/List from a live API server, read-only
	// (--cluster), with the client configuration of Kubeconfig (empty:
	// the default loading rules). It is exclusive with context objects
	// in Files.
	Cluster    bool
	Kubeconfig string
}

// Empty says whether no context is asked for.
func (o ContextOptions) Empty() bool { return len(o.Files) == 0 && !o.Cluster }

// ClusterReader connects --cluster: a read-only clusterdata.Reader on the
// live API server named by kubeconfig. It is set by the command (which
// links client-go); nil means --cluster is not available.
var ClusterReader func(ctx context.Context, kubeconfig string) (clusterdata.Reader, error)

// LoadContext builds the context of a local evaluation: the objects and
// image data of the --context files, the GlobalContextEntries among them
// and among policyObjects (the policy PATHs' objects), and --cluster. The
// objects are checked as the server checks context objects (a namespaced
// kind needs a namespace); errors name the file and the object.
//
// Parts not given stay nil, so a call to them fails naming what is not
// configured (resource.List without --context or --cluster, say).
func LoadContext(ctx context.Context, o ContextOptions, policyObjects []*manifest.Object) (*clusterdata.Context, error) {
	c := &clusterdata.Context{}
	var objs, entries []*manifest.Object
	for _, p := range policyObjects {
		if engine.Classify(p) == engine.ClassGlobalContextEntry {
			entries = append(entries, p)
		}
	}
	images := staticImages{}
	if len(o.Files) > 0 {
		read, err := ReadObjects(o.Files...)
		if err != nil {
			return nil, err
		}
		for _, obj := range read {
			switch {
			case obj.Kind == "Context" && strings.HasPrefix(obj.APIVersion, "cli.kyverno.io/"):
				cobjs, err := contextFileObjects(obj, images)
				if err != nil {
					return nil, err
				}
				objs = append(objs, cobjs...)
			case engine.Classify(obj) == engine.ClassGlobalContextEntry:
				entries = append(entries, obj)
			case engine.Classify(obj) == engine.ClassResource:
				objs = append(objs, obj)
			default:
				return nil, fmt.Errorf("%s: %s: --context takes context objects, GlobalContextEntries and Kyverno CLI context files, not policy objects (give them as PATH)", obj.Source, obj.Ref())
			}
		}
	}
	if len(images) > 0 {
		c.Images = images
	}
	if o.Cluster && len(objs) > 0 {
		return nil, errors.New("--cluster reads the objects from the cluster: give --context files without objects (GlobalContextEntries, image data), or drop --cluster")
	}
	var view *clusterdata.View
	if !o.Cluster && len(o.Files) > 0 {
		seen := map[clusterdata.Key]string{}
		for _, obj := range objs {
			if obj.Name == "" {
				return nil, fmt.Errorf("%s: %s: metadata.name: required", obj.Source, obj.Ref())
			}
			k := clusterdata.KeyOf(obj)
			if prev, dup := seen[k]; dup {
				return nil, fmt.Errorf("%s: %s: defined twice (also in %s)", obj.Source, obj.Ref(), prev)
			}
			seen[k] = obj.Source
		}
		view = clusterdata.New(objs)
		var errs manifest.LoadErrors
		for _, obj := range objs {
			if le := clusterdata.CheckScope(view, obj); le != nil {
				errs = append(errs, le)
			}
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("cannot load the context:\n  %s", strings.ReplaceAll(errs.Error(), "\n", "\n  "))
		}
		c.Resources = view
	}
	if o.Cluster {
		if ClusterReader == nil {
			return nil, errors.New("--cluster is not available in this build")
		}
		r, err := ClusterReader(ctx, o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--cluster: %w", err)
		}
		c.Resources = r
	}
	if len(entries) > 0 {
		var compiled []*clusterdata.Entry
		var errs manifest.LoadErrors
		names := map[string]string{}
		for _, e := range entries {
			if prev, dup := names[e.Name]; dup {
				errs = append(errs, manifest.Errorf(e, "metadata.name", "defined twice (also in %s)", prev))
				continue
			}
			names[e.Name] = e.Source
			ce, les := clusterdata.CompileEntry(e)
			if les != nil {
				errs = append(errs, les...)
				continue
			}
			compiled = append(compiled, ce)
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("cannot load the context:\n  %s", strings.ReplaceAll(errs.Error(), "\n", "\n  "))
		}
		switch {
		case view != nil:
			c.Global = clusterdata.NewGlobals(compiled, view, nil)
		case c.Resources != nil:
			c.Global = clusterdata.NewGlobalsOn(compiled, c.Resources)
		default:
			c.Global = noObjectsGlobals{}
		}
	}
	return c, nil
}

// contextFileObjects reads a Kyverno CLI context file's resources (as
// context objects) and images (into images), as `kyverno test` does.
func contextFileObjects(obj *manifest.Object, images staticImages) ([]*manifest.Object, error) {
	raw, err := json.Marshal(obj.Content)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", obj.Source, err)
	}
	cf, err := fixtures.ParseContextFile(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: Kyverno CLI context file: %v", obj.Source, err)
	}
	out := make([]*manifest.Object, 0, len(cf.Spec.Resources))
	for i := range cf.Spec.Resources {
		out = append(out, manifest.NewObject(fmt.Sprintf("%s: spec.resources[%d]", obj.Source, i), cf.Spec.Resources[i].Object))
	}
	for i, img := range cf.Spec.Images {
		b, err := json.Marshal(img)
		if err != nil {
			return nil, fmt.Errorf("%s: spec.images[%d]: %v", obj.Source, i, err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s: spec.images[%d]: %v", obj.Source, i, err)
		}
		images[img.Image] = m
	}
	return out, nil
}

// staticImages serves image.GetMetadata from context files' spec.images.
type staticImages map[string]map[string]any

func (s staticImages) GetImageData(_ context.Context, image string) (map[string]any, error) {
	if d, ok := s[image]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("image data for %s is not in the --context files (spec.images)", image)
}

// noObjectsGlobals answers globalContext.Get when entries are given but no
// objects: the entries cannot be computed.
type noObjectsGlobals struct{}

func (noObjectsGlobals) GetGlobalReference(_ context.Context, name, _ string) (any, error) {
	return nil, fmt.Errorf("global context entry %q: %w", name, clusterdata.ErrNoObjects)
}

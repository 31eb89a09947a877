package main

import (
	"fmt"
	"os"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// inputs are the objects of a local evaluation.
type inputs struct {
	// objects are every object read (policies, exceptions, namespaces, resources).
	objects []*engine.Object
	// resources are the objects to evaluate.
	resources []*engine.Object
}

// readObjects reads every manifest under paths.
func readObjects(paths ...string) ([]*engine.Object, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	docs, err := manifest.ReadPaths(os.Stdin, paths...)
	if err != nil {
		return nil, exitWith(exitLoad, "%v", err)
	}
	return engine.FromDocuments(docs), nil
}

// loadInputs reads policy paths (whose non-policy objects are resources),
// explicit resource paths and exception paths.
func loadInputs(paths, resourcePaths, exceptionPaths []string) (*inputs, error) {
	in := &inputs{}
	objs, err := readObjects(paths...)
	if err != nil {
		return nil, err
	}
	params := engine.ParamObjects(objs)
	for _, o := range objs {
		in.objects = append(in.objects, o)
		if engine.Classify(o) == engine.ClassResource && !params[o] {
			in.resources = append(in.resources, o)
		}
	}
	res, err := readObjects(resourcePaths...)
	if err != nil {
		return nil, err
	}
	for _, o := range res {
		switch engine.Classify(o) {
		case engine.ClassResource:
			in.resources = append(in.resources, o)
		case engine.ClassNamespace:
			in.resources = append(in.resources, o)
			in.objects = append(in.objects, o)
		default:
			return nil, exitWith(exitLoad, "%s: %s is a policy object, not a resource", o.Source, o.Ref())
		}
	}
	exc, err := readObjects(exceptionPaths...)
	if err != nil {
		return nil, err
	}
	for _, o := range exc {
		if engine.Classify(o) != engine.ClassException {
			return nil, exitWith(exitLoad, "%s: %s is not a PolicyException", o.Source, o.Ref())
		}
		in.objects = append(in.objects, o)
	}
	return in, nil
}

// compile compiles the inputs' policies, reporting load errors with exit code 2.
func compile(objs []*engine.Object, opts engine.Options) (*engine.PolicySet, error) {
	ps, err := engine.Compile(objs, opts)
	if err != nil {
		if l := engine.AsLoadErrors(err); l != nil {
			return nil, exitWith(exitLoad, "cannot load policies:\n  %s", strings.ReplaceAll(l.Error(), "\n", "\n  "))
		}
		return nil, exitWith(exitLoad, "%v", err)
	}
	for _, w := range ps.PodSecurityWarnings() {
		fmt.Fprintf(os.Stderr, "warning: %s: %s\n", ps.PodSecurityConfiguration().Source, w)
	}
	return ps, nil
}

// requestFor builds the request the CLI evaluates a resource with, as
// `kyverno apply` does: CREATE with the object; UPDATE with the object as
// object and oldObject; DELETE with it as oldObject only. A namespaced
// object without a namespace is in "default".
func requestFor(o *engine.Object, operation string, mode engine.Mode) (*engine.Request, error) {
	req := &engine.Request{Operation: strings.ToUpper(operation), Mode: mode}
	switch req.Operation {
	case "", engine.OpCreate:
		req.Operation = engine.OpCreate
		req.Object = o.Content
	case engine.OpUpdate:
		req.Object = o.Content
		req.OldObject = o.Content
	case engine.OpDelete:
		req.OldObject = o.Content
	case engine.OpConnect:
		req.Object = o.Content
	default:
		return nil, exitWith(exitLoad, "--operation: unknown operation %q (CREATE, UPDATE, DELETE, CONNECT)", operation)
	}
	req.Fill()
	gvk := schema.FromAPIVersionAndKind(o.APIVersion, o.Kind)
	if req.Namespace == "" && engine.IsNamespaced(gvk.GroupKind()) {
		req.Namespace = "default"
	}
	return req, nil
}

func parseMode(s string, dflt engine.Mode) (engine.Mode, error) {
	switch strings.ToLower(s) {
	case "":
		return dflt, nil
	case "admission":
		return engine.ModeAdmission, nil
	case "background":
		return engine.ModeBackground, nil
	}
	return 0, exitWith(exitLoad, "--mode: unknown mode %q (admission, background)", s)
}

// resourceName is "Kind namespace/name" for tables.
func resourceName(kind, namespace, name string) string {
	if namespace != "" {
		return fmt.Sprintf("%s %s/%s", kind, namespace, name)
	}
	return fmt.Sprintf("%s %s", kind, name)
}

// remoteInputs are apply --server's inputs: the resources to decide, as
// JSON (their data is the server's to build), and the Namespace objects
// among the inputs.
type remoteInputs struct {
	resources  []remoteResource
	namespaces map[string]*structpb.Struct
}

// remoteResource is a resource to decide on the server: its identity and
// its request, whose object is the resource's JSON.
type remoteResource struct {
	object  *engine.Object // identity only: no Content
	request *arbiterv1.DecideRequest
}

// loadRemoteInputs reads apply --server's paths as loadInputs does, keeping
// each resource as JSON rather than data. Policy objects are refused (the
// policies are the server's: try them with --candidate).
func loadRemoteInputs(paths, resourcePaths, exceptionPaths []string, operation string, mode engine.Mode) (*remoteInputs, error) {
	in := &remoteInputs{namespaces: map[string]*structpb.Struct{}}
	addNamespace := func(o *engine.Object, js []byte) error {
		content, err := manifest.DecodeJSON(js)
		if err == nil {
			var st *structpb.Struct
			if st, err = structpb.NewStruct(content); err == nil {
				in.namespaces[o.Name] = st
				return nil
			}
		}
		return exitWith(exitLoad, "%s: %s: %v", o.Source, o.Ref(), err)
	}
	addResource := func(o *engine.Object, js []byte) error {
		// requestFor needs only the identity of the object: the head.
		req, err := requestFor(&engine.Object{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, Namespace: o.Namespace,
			Content: map[string]any{"apiVersion": o.APIVersion, "kind": o.Kind, "metadata": map[string]any{"name": o.Name, "namespace": o.Namespace}}},
			operation, mode)
		if err != nil {
			return err
		}
		var object, oldObject []byte
		if req.Object != nil {
			object = js
		}
		if req.OldObject != nil {
			oldObject = js
		}
		in.resources = append(in.resources, remoteResource{object: o, request: protoRequestJSON(req, object, oldObject)})
		return nil
	}
	policyObject := func(o *engine.Object) error {
		return exitWith(exitLoad, "%s: %s: with --server the policies are the server's (try it with --candidate)", o.Source, o.Ref())
	}
	for _, set := range []struct {
		paths []string
		add   func(o *engine.Object, js []byte) error
	}{
		{paths, func(o *engine.Object, js []byte) error {
			switch engine.Classify(o) {
			case engine.ClassResource:
				return addResource(o, js)
			case engine.ClassNamespace:
				return addNamespace(o, js)
			}
			return policyObject(o)
		}},
		{resourcePaths, func(o *engine.Object, js []byte) error {
			switch engine.Classify(o) {
			case engine.ClassResource:
				return addResource(o, js)
			case engine.ClassNamespace:
				if err := addNamespace(o, js); err != nil {
					return err
				}
				return addResource(o, js)
			}
			return exitWith(exitLoad, "%s: %s is a policy object, not a resource", o.Source, o.Ref())
		}},
		{exceptionPaths, func(o *engine.Object, js []byte) error {
			if engine.Classify(o) != engine.ClassException {
				return exitWith(exitLoad, "%s: %s is not a PolicyException", o.Source, o.Ref())
			}
			return policyObject(o)
		}},
	} {
		if len(set.paths) == 0 {
			continue
		}
		docs, err := manifest.ReadPathsJSON(os.Stdin, set.paths...)
		if err != nil {
			return nil, exitWith(exitLoad, "%v", err)
		}
		for _, d := range docs {
			o := &engine.Object{APIVersion: d.Head.APIVersion, Kind: d.Head.Kind, Name: d.Head.Name, Namespace: d.Head.Namespace, Source: d.Source()}
			if err := set.add(o, d.JSON); err != nil {
				return nil, err
			}
		}
	}
	return in, nil
}

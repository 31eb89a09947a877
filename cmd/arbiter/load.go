package main

import (
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/report"
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

// reportResults converts decision results to report results.
func reportResults(rs []*arbiterv1.PolicyResult) []report.Result {
	out := make([]report.Result, len(rs))
	for i, r := range rs {
		out[i] = report.Result{
			Policy:     r.GetPolicy(),
			Rule:       r.GetRule(),
			Result:     r.GetResult(),
			Message:    r.GetMessage(),
			Properties: r.GetProperties(),
			Source:     r.GetSource(),
			Scored:     r.GetScored(),
			Category:   r.GetCategory(),
			Severity:   r.GetSeverity(),
		}
	}
	return out
}

// resourceName is "Kind namespace/name" for tables.
func resourceName(kind, namespace, name string) string {
	if namespace != "" {
		return fmt.Sprintf("%s %s/%s", kind, namespace, name)
	}
	return fmt.Sprintf("%s %s", kind, name)
}

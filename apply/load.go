package apply

import (
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/convert"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// inputs are the objects of a local evaluation.
type inputs struct {
	// objects are the objects to compile: policies, exceptions, Namespaces,
	// ValidatingAdmissionPolicy params and the rest of the policy objects.
	objects []*manifest.Object
	// resources are the objects to evaluate, decoded one at a time as they
	// are (plain YAML is kept as compact JSON until then).
	resources []resourceDoc
}

// resourceDoc is a resource to evaluate: its document, and the object it
// names (its identity, and its content when it was decoded already).
type resourceDoc struct {
	object *manifest.Object
	doc    *manifest.RawDocument
}

// decoded returns the resource with its content, and its sizes when they
// were measured while decoding it (see admission.Request.ObjectSizes).
func (r resourceDoc) decoded() (*manifest.Object, *manifest.Sizes, error) {
	switch {
	case r.object.Content != nil:
		return r.object, nil, nil
	case r.doc.JSON == nil:
		o, err := decodeDocument(r.doc)
		return o, nil, err
	}
	// The document's JSON is ours and never changes: decoded in place.
	content, sizes, err := manifest.DecodeJSONSizedOwned(r.doc.JSON)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", r.doc.Source(), err)
	}
	return manifest.NewObject(r.doc.Source(), content), &sizes, nil
}

// ReadObjects reads every manifest under paths ("-": standard input).
func ReadObjects(paths ...string) ([]*manifest.Object, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	docs, err := manifest.ReadPaths(os.Stdin, paths...)
	if err != nil {
		return nil, err
	}
	return manifest.FromDocuments(docs), nil
}

// ReadOne reads the one object of a file.
func ReadOne(path string) (*manifest.Object, error) {
	objs, err := ReadObjects(path)
	if err != nil {
		return nil, err
	}
	if len(objs) != 1 {
		return nil, fmt.Errorf("%s: want exactly one object, found %d", path, len(objs))
	}
	return objs[0], nil
}

// readDocuments reads every manifest under paths, plain YAML as JSON (see
// manifest.ReadPathsJSON).
func readDocuments(paths []string) ([]*manifest.RawDocument, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	docs, err := manifest.ReadPathsJSON(os.Stdin, paths...)
	if err != nil {
		return nil, err
	}
	return docs, nil
}

// headObject is the object a document names, by its head: identity only.
func headObject(d *manifest.RawDocument) *manifest.Object {
	return &manifest.Object{APIVersion: d.Head.APIVersion, Kind: d.Head.Kind, Name: d.Head.Name, Namespace: d.Head.Namespace, Source: d.Source()}
}

// decodeDocument is the object of a document, with its content.
func decodeDocument(d *manifest.RawDocument) (*manifest.Object, error) {
	content, err := d.Content()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", d.Source(), err)
	}
	return manifest.NewObject(d.Source(), content), nil
}

// loadInputs reads policy paths (whose non-policy objects are resources),
// explicit resource paths and exception paths. Resources are kept as read:
// they are decoded when they are evaluated.
func loadInputs(paths, resourcePaths, exceptionPaths []string) (*inputs, error) {
	in := &inputs{}
	docs, err := readDocuments(paths)
	if err != nil {
		return nil, err
	}
	// Policy objects are decoded now; resources are named by their head,
	// and those that are ValidatingAdmissionPolicy params decoded.
	objs := make([]*manifest.Object, len(docs))
	for i, d := range docs {
		if objs[i] = headObject(d); engine.Classify(objs[i]) != engine.ClassResource {
			if objs[i], err = decodeDocument(d); err != nil {
				return nil, err
			}
		}
	}
	params := engine.ParamObjects(objs)
	for i, o := range objs {
		switch {
		case engine.Classify(o) != engine.ClassResource:
			in.objects = append(in.objects, o)
		case params[o]:
			full, err := decodeDocument(docs[i])
			if err != nil {
				return nil, err
			}
			in.objects = append(in.objects, full)
		default:
			in.resources = append(in.resources, resourceDoc{object: o, doc: docs[i]})
		}
	}
	docs, err = readDocuments(resourcePaths)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		o := headObject(d)
		switch engine.Classify(o) {
		case engine.ClassResource:
			in.resources = append(in.resources, resourceDoc{object: o, doc: d})
		case engine.ClassNamespace:
			full, err := decodeDocument(d)
			if err != nil {
				return nil, err
			}
			in.resources = append(in.resources, resourceDoc{object: full, doc: d})
			in.objects = append(in.objects, full)
		default:
			return nil, fmt.Errorf("%s: %s is a policy object, not a resource", o.Source, o.Ref())
		}
	}
	docs, err = readDocuments(exceptionPaths)
	if err != nil {
		return nil, err
	}
	for _, d := range docs {
		o := headObject(d)
		if engine.Classify(o) != engine.ClassException {
			return nil, fmt.Errorf("%s: %s is not a PolicyException", o.Source, o.Ref())
		}
		full, err := decodeDocument(d)
		if err != nil {
			return nil, err
		}
		in.objects = append(in.objects, full)
	}
	return in, nil
}

// Compile compiles policy objects; the Pod Security configuration's
// warnings go to warnings.
func Compile(objs []*manifest.Object, opts engine.Options, warnings io.Writer) (*engine.PolicySet, error) {
	ps, err := engine.Compile(objs, opts)
	if err != nil {
		if l := manifest.AsLoadErrors(err); l != nil {
			return nil, fmt.Errorf("cannot load policies:\n  %s", strings.ReplaceAll(l.Error(), "\n", "\n  "))
		}
		return nil, err
	}
	for _, w := range ps.PodSecurityWarnings() {
		// Best-effort: warnings (on stderr) that cannot be written do not
		// make the policies wrong.
		_, _ = fmt.Fprintf(warnings, "warning: %s: %s\n", ps.PodSecurityConfiguration().Source, w)
	}
	return ps, nil
}

// RequestFor builds the request the CLI evaluates a resource with, as
// `kyverno apply` does: CREATE with the object; UPDATE with the object as
// object and oldObject; DELETE with it as oldObject only. A namespaced
// object without a namespace is in "default".
func RequestFor(o *manifest.Object, operation string, mode admission.Mode) (*admission.Request, error) {
	req := &admission.Request{Operation: strings.ToUpper(operation), Mode: mode}
	switch req.Operation {
	case "", admission.OpCreate:
		req.Operation = admission.OpCreate
		req.Object = o.Content
	case admission.OpUpdate:
		req.Object = o.Content
		req.OldObject = o.Content
	case admission.OpDelete:
		req.OldObject = o.Content
	case admission.OpConnect:
		req.Object = o.Content
	default:
		return nil, fmt.Errorf("--operation: unknown operation %q (CREATE, UPDATE, DELETE, CONNECT)", operation)
	}
	req.Fill()
	gvk := schema.FromAPIVersionAndKind(o.APIVersion, o.Kind)
	if req.Namespace == "" && admission.IsNamespaced(gvk.GroupKind()) {
		req.Namespace = "default"
	}
	return req, nil
}

// ParseMode reads --mode: admission, background, or empty for dflt.
func ParseMode(s string, dflt admission.Mode) (admission.Mode, error) {
	switch strings.ToLower(s) {
	case "":
		return dflt, nil
	case "admission":
		return admission.ModeAdmission, nil
	case "background":
		return admission.ModeBackground, nil
	}
	return 0, fmt.Errorf("--mode: unknown mode %q (admission, background)", s)
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
	object  *manifest.Object // identity only: no Content
	request *arbiterv1.DecideRequest
}

// remoteInputsOf makes apply --server's inputs of what loadInputs read:
// each resource's request carries its JSON (the data is the server's to
// build); Namespace objects go with the requests in them; policy objects
// are refused (the policies are the server's: try them with --candidate).
func remoteInputsOf(in *inputs, operation string, mode admission.Mode) (*remoteInputs, error) {
	out := &remoteInputs{namespaces: map[string]*structpb.Struct{}}
	for _, o := range in.objects {
		if engine.Classify(o) != engine.ClassNamespace {
			return nil, fmt.Errorf("%s: %s: with --server the policies are the server's (try it with --candidate)", o.Source, o.Ref())
		}
		st, err := convert.NamespaceToProto(o)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", o.Source, o.Ref(), err)
		}
		out.namespaces[o.Name] = st
	}
	for _, r := range in.resources {
		o := r.object
		js, err := r.doc.Encoded()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", o.Source, o.Ref(), err)
		}
		// requestFor needs only the identity of the object: the head.
		req, err := RequestFor(&manifest.Object{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, Namespace: o.Namespace,
			Content: map[string]any{"apiVersion": o.APIVersion, "kind": o.Kind, "metadata": map[string]any{"name": o.Name, "namespace": o.Namespace}}},
			operation, mode)
		if err != nil {
			return nil, err
		}
		var object, oldObject []byte
		if req.Object != nil {
			object = js
		}
		if req.OldObject != nil {
			oldObject = js
		}
		out.resources = append(out.resources, remoteResource{object: o, request: convert.RequestToProtoJSON(req, object, oldObject)})
	}
	return out, nil
}

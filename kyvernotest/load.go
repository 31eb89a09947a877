package kyvernotest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/authz"
	"github.com/arbiter-pdp/arbiter/engine/gpol"
	"github.com/arbiter-pdp/arbiter/engine/ivpol"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
	"github.com/arbiter-pdp/arbiter/kyvernotest/fixtures"
)

// Suite is a loaded Test: its policies compiled, its resources, payloads
// and library context read. It is what Run evaluates.
type Suite struct {
	Doc *TestDocument
	// Dir is the folder input paths are relative to.
	Dir string
	// Warnings are problems Kyverno would only warn about (duplicated
	// resources, ignored kyverno.io exceptions, non-Kubernetes documents).
	Warnings []string

	policySet *engine.PolicySet
	policies  []*vpol.Policy
	// mpols are the MutatingPolicies and NamespacedMutatingPolicies.
	mpols []*mpol.Policy
	// ivpols are the ImageValidatingPolicies and
	// NamespacedImageValidatingPolicies.
	ivpols []*ivpol.Policy
	// gpols are the GeneratingPolicies and NamespacedGeneratingPolicies.
	gpols []*gpol.Policy
	// imageVerifier serves the ImageValidatingPolicies (nil: none).
	imageVerifier kyvernocel.ImageVerifier
	// vaps are the names of the ValidatingAdmissionPolicies.
	vaps []string
	// maps are the names of the MutatingAdmissionPolicies.
	maps []string
	// authz are the authorization policies (Envoy and HTTP modes).
	authz      []*authz.Policy
	exceptions int
	resources  []*Resource
	// targets are the targetResources: what mutate-existing policies
	// mutate.
	targets  []*Resource
	payloads []*Payload
	envoy    []*Payload
	http     []*Payload
	values   *ValuesSpec
	userInfo admission.UserInfo
	context  *fixtures.Static
	// targetContext is context with the targets visible to resource.Get
	// and resource.List: what mutate-existing policies read.
	targetContext *fixtures.Static
	// mapper maps kinds to resources (built-in discovery data and the
	// clusterResources CRDs).
	mapper *fixtures.Static
}

// Resource is a resource of a test, as the Kyverno CLI loads it: a
// namespaced kind without a namespace is put in "default", and its numbers
// are float64 (the CLI converts them before evaluation).
type Resource struct {
	// Key is "apiVersion,kind,namespace,name", the CLI's response key.
	Key    string
	Source string
	Object map[string]any
}

// Payload is a JSON (or Envoy/HTTP authorization) payload of a test.
type Payload struct {
	// Name is the response key: the payload path as the test gives it
	// (cleaned) for JSON payloads, the full path for Envoy/HTTP payloads.
	Name   string
	Source string
	Object map[string]any
}

// PolicyCount, ResourceCount and ExceptionCount describe the suite.
func (s *Suite) PolicyCount() int {
	return len(s.policies) + len(s.mpols) + len(s.ivpols) + len(s.gpols) + len(s.vaps) + len(s.maps) + len(s.authz)
}
func (s *Suite) ResourceCount() int  { return len(s.resources) }
func (s *Suite) ExceptionCount() int { return s.exceptions }

func (s *Suite) errorf(field, format string, args ...any) error {
	return &LoadError{File: s.Doc.Path, Test: s.Doc.Ref(), Field: field, Err: fmt.Errorf(format, args...)}
}

// wrap names the test field an error comes from (an error in an input file
// names that file and, inside it, the object and field).
func (s *Suite) wrap(field string, err error) error {
	return &LoadError{File: s.Doc.Path, Test: s.Doc.Ref(), Field: field, Err: err}
}

// path resolves a path of the test: relative to the test's folder.
func (s *Suite) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(s.Dir, p)
}

// Load reads every input of a test and compiles its policies and
// exceptions. Any problem is a *LoadError naming the file, the test and
// the field.
func Load(doc *TestDocument) (*Suite, error) {
	s := &Suite{Doc: doc, Dir: filepath.Clean(filepath.Dir(doc.Path))}
	t := doc.Test
	s.mapper = fixtures.NewStatic()
	if err := s.loadValues(); err != nil {
		return nil, err
	}
	if err := s.loadUserInfo(); err != nil {
		return nil, err
	}
	objs, err := s.loadPolicies()
	if err != nil {
		return nil, err
	}
	excs, err := s.loadExceptions()
	if err != nil {
		return nil, err
	}
	s.exceptions = len(excs)
	params, err := s.loadResources("paramResources", t.ParamResources, false)
	if err != nil {
		return nil, err
	}
	objs = prepareMAP(prepareVAP(objs), params)
	// the param resources, which the engine takes as params of the VAPs
	// and MAPs whose paramKind names their kind
	for _, o := range objs {
		if c := engine.Classify(o); c == engine.ClassVAP || c == engine.ClassMAP {
			for _, r := range params {
				objs = append(objs, manifest.NewObject(r.Source, r.Object))
			}
			break
		}
	}
	crds, err := s.loadCRDs()
	if err != nil {
		return nil, err
	}
	// Mutate-existing policies are evaluated offline, on the targets;
	// generating policies offline, on the resources.
	ps, err := engine.Compile(append(append(objs, excs...), crds...), engine.Options{KeepOrder: true, MutateExisting: true, Generating: true})
	if err != nil {
		if l := manifest.AsLoadErrors(err); l != nil {
			msgs := make([]string, len(l))
			field, what := "exceptions", "exceptions"
			for i, e := range l {
				msgs[i] = e.Error()
				if !strings.HasPrefix(e.Object, kyvernoapi.KindPolicyException+" ") {
					field, what = "policies", "policies"
				}
			}
			return nil, s.errorf(field, "cannot load %s:\n  %s", what, strings.Join(msgs, "\n  "))
		}
		return nil, s.errorf("policies", "%v", err)
	}
	s.policySet = ps
	s.policies = ps.Policies()
	s.mpols = ps.MutatingPolicies()
	s.ivpols = ps.ImagePolicies()
	s.gpols = ps.GeneratingPolicies()
	s.authz = ps.AuthzPolicies()
	for _, v := range ps.VAPInfos() {
		s.vaps = append(s.vaps, v.Name)
	}
	for _, m := range ps.MAPInfos() {
		s.maps = append(s.maps, m.Name)
	}

	if s.resources, err = s.loadResources("resources", t.Resources, true); err != nil {
		return nil, err
	}
	targets, err := s.loadResources("targetResources", t.TargetResources, false)
	if err != nil {
		return nil, err
	}
	s.targets = targets
	if err := s.loadPayloads(); err != nil {
		return nil, err
	}
	// the library context: context file, clusterResources (whose fake
	// cluster also holds the test's resources), mocks, global context
	var objects []*unstructured.Unstructured
	for _, list := range [][]*Resource{s.resources, targets, params} {
		for _, r := range list {
			objects = append(objects, &unstructured.Unstructured{Object: r.Object})
		}
	}
	ctx, err := fixtures.LoadTestContext(doc.Path, fixtures.TestContext{
		Context:              t.Context,
		ClusterResources:     t.ClusterResources,
		APICallResponses:     t.APICallResponses,
		GlobalContextEntries: t.GlobalContextEntries,
	}, objects...)
	if err != nil {
		return nil, s.wrap(contextField(t), err)
	}
	s.context = ctx
	s.targetContext = ctx
	if len(targets) > 0 && !ctx.ClusterMode() {
		// a cluster's fake client holds the targets already
		objs := make([]*unstructured.Unstructured, len(targets))
		for i, r := range targets {
			objs[i] = &unstructured.Unstructured{Object: r.Object}
		}
		s.targetContext = ctx.WithObjects(objs...)
	}
	return s, nil
}

// loadCRDs reads the CustomResourceDefinitions that clusterResources files
// name: their schemas guide the apply configurations of MutatingPolicies
// on custom resources, as the CLI's OpenAPI client reads them.
func (s *Suite) loadCRDs() ([]*manifest.Object, error) {
	var out []*manifest.Object
	for i, p := range s.Doc.Test.ClusterResources {
		field := fmt.Sprintf("clusterResources[%d]", i)
		c, err := fixtures.LoadClusterResourceFile(s.path(p))
		if err != nil {
			return nil, s.wrap(field, err)
		}
		for _, crd := range c.Spec.CRDs {
			f := s.path(crd)
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, s.wrap(field, err)
			}
			docs, err := manifest.Parse(f, data)
			if err != nil {
				return nil, s.wrap(field, err)
			}
			for _, o := range manifest.FromDocuments(docs) {
				if o.Group() == "apiextensions.k8s.io" && o.Kind == "CustomResourceDefinition" {
					out = append(out, o)
				}
			}
		}
	}
	return out, nil
}

// contextField names the test field a context error comes from.
func contextField(t *Test) string {
	var fields []string
	if t.Context != "" {
		fields = append(fields, "context")
	}
	if len(t.ClusterResources) > 0 {
		fields = append(fields, "clusterResources")
	}
	if len(t.APICallResponses) > 0 {
		fields = append(fields, "apiCallResponses")
	}
	if len(t.GlobalContextEntries) > 0 {
		fields = append(fields, "globalContextEntries")
	}
	return strings.Join(fields, "/")
}

// ---- values and user info ----

func (s *Suite) loadValues() error {
	t := s.Doc.Test
	s.values = t.Values
	if s.values == nil && t.Variables != "" {
		p := s.path(t.Variables)
		data, err := os.ReadFile(p)
		if err != nil {
			return s.wrap("variables", err)
		}
		var v Values
		if err := yaml.UnmarshalStrict(data, &v); err != nil {
			return s.wrap("variables", &LoadError{File: p, Field: strictFieldPath(data, &v, err), Err: decodeDetail(err)})
		}
		if v.APIVersion == "" || v.Kind == "" {
			return s.wrap("variables", &LoadError{File: p, Err: errors.New("values file uses the deprecated schema (set apiVersion: cli.kyverno.io/v1alpha1 and kind: Values)")})
		}
		s.values = &v.ValuesSpec
	}
	switch op := s.globalOperation(); op {
	case "", "CREATE", "UPDATE", "DELETE", "CONNECT":
	default:
		field := "values.globalValues"
		if t.Values == nil {
			field = "variables"
		}
		return s.errorf(field, "invalid request.operation value %q, must be one of CREATE, UPDATE, DELETE, CONNECT", op)
	}
	return nil
}

// globalOperation is the values' globalValues["request.operation"].
func (s *Suite) globalOperation() string {
	if s.values == nil {
		return ""
	}
	op, _ := s.values.GlobalValues["request.operation"].(string)
	return op
}

func (s *Suite) loadUserInfo() error {
	t := s.Doc.Test
	if t.UserInfo == "" {
		return nil
	}
	p := s.path(t.UserInfo)
	data, err := os.ReadFile(p)
	if err != nil {
		return s.wrap("userinfo", err)
	}
	var u UserInfo
	if err := yaml.UnmarshalStrict(data, &u); err != nil {
		return s.wrap("userinfo", &LoadError{File: p, Field: strictFieldPath(data, &u, err), Err: decodeDetail(err)})
	}
	if u.APIVersion == "" || u.Kind == "" {
		return s.wrap("userinfo", &LoadError{File: p, Err: errors.New("user info file uses the deprecated schema (set apiVersion: cli.kyverno.io/v1alpha1 and kind: UserInfo)")})
	}
	s.userInfo = userInfoOf(u.AdmissionUserInfo)
	return nil
}

func userInfoOf(u authenticationv1.UserInfo) admission.UserInfo {
	out := admission.UserInfo{Username: u.Username, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		out.Extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			out.Extra[k] = []string(v)
		}
	}
	return out
}

// namespaceObject is the namespace Kyverno's CLI gives CEL policies for a
// namespace: the values' `namespaces` entry, else a Namespace built from
// its `namespaceSelector` labels, else none.
func (s *Suite) namespaceObject(name string) map[string]any {
	if s.values == nil || name == "" {
		return nil
	}
	for i := range s.values.Namespaces {
		n := &s.values.Namespaces[i]
		if n.Name == name {
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
			if err != nil {
				return nil
			}
			return m
		}
	}
	for _, n := range s.values.NamespaceSelectors {
		if n.Name == name {
			md := map[string]any{"name": name, "creationTimestamp": nil}
			if n.Labels != nil {
				labels := make(map[string]any, len(n.Labels))
				for k, v := range n.Labels {
					labels[k] = v
				}
				md["labels"] = labels
			}
			return map[string]any{
				"apiVersion": "v1",
				"kind":       "Namespace",
				"metadata":   md,
				"spec":       map[string]any{},
				"status":     map[string]any{},
			}
		}
	}
	return nil
}

// ---- policies and exceptions ----

// yamlFiles expands a policy path as the CLI does: a file is read if it is
// YAML; a folder recursively, skipping hidden entries.
func yamlFiles(p string, depth int) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	base := filepath.Base(p)
	if depth > 0 && strings.HasPrefix(base, ".") {
		return nil, nil
	}
	if !info.IsDir() {
		if isYAML(p) {
			return []string{p}, nil
		}
		return nil, nil
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("%s: folders nested too deeply", p)
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		files, err := yamlFiles(filepath.Join(p, e.Name()), depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, files...)
	}
	return out, nil
}

func isYAML(p string) bool {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".yaml", ".yml":
		return true
	}
	return false
}

func (s *Suite) loadPolicies() ([]*manifest.Object, error) {
	var out []*manifest.Object
	// the same policy reached twice (a file and its folder) is read once
	seen := map[string]string{}
	for i, p := range s.Doc.Test.Policies {
		field := fmt.Sprintf("policies[%d]", i)
		files, err := yamlFiles(s.path(p), 0)
		if err != nil {
			return nil, s.wrap(field, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, s.wrap(field, err)
			}
			docs, err := manifest.Parse(f, data)
			if err != nil {
				return nil, s.wrap(field, err)
			}
			for _, o := range manifest.FromDocuments(docs) {
				if o.APIVersion == "" || o.Kind == "" {
					s.Warnings = append(s.Warnings, fmt.Sprintf("%s: not a Kubernetes object (no apiVersion or kind): ignored", o.Source))
					continue
				}
				switch engine.Classify(o) {
				case engine.ClassPolicy, engine.ClassAuthzPolicy, engine.ClassMutatingPolicy, engine.ClassImagePolicy, engine.ClassGeneratingPolicy:
					id := o.ID()
					content, _ := json.Marshal(o.Content)
					if first, dup := seen[id]; dup && first == string(content) {
						continue
					}
					seen[id] = string(content)
					out = append(out, o)
				case engine.ClassVAP, engine.ClassVAPBinding, engine.ClassMAP, engine.ClassMAPBinding:
					id := o.ID()
					content, _ := json.Marshal(o.Content)
					if first, dup := seen[id]; dup && first == string(content) {
						continue
					}
					seen[id] = string(content)
					out = append(out, o)
				case engine.ClassException:
					// the CLI takes exceptions from `exceptions` only
					s.Warnings = append(s.Warnings, fmt.Sprintf("%s: %s in a policy file is not used (list it under exceptions)", o.Source, o.Ref()))
				default:
					return nil, s.wrap(field, &LoadError{File: o.Source, Test: o.Ref(), Field: "kind", Err: fmt.Errorf("policy type not supported: %s %s (Arbiter evaluates ValidatingPolicy, NamespacedValidatingPolicy, MutatingPolicy, NamespacedMutatingPolicy, ImageValidatingPolicy, NamespacedImageValidatingPolicy, GeneratingPolicy, NamespacedGeneratingPolicy, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding)", o.APIVersion, o.Kind)})
				}
			}
		}
	}
	return out, nil
}

func (s *Suite) loadExceptions() ([]*manifest.Object, error) {
	var out []*manifest.Object
	for i, p := range s.Doc.Test.PolicyExceptions {
		field := fmt.Sprintf("exceptions[%d]", i)
		f := s.path(p)
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, s.wrap(field, err)
		}
		docs, err := manifest.Parse(f, data)
		if err != nil {
			return nil, s.wrap(field, err)
		}
		for _, o := range manifest.FromDocuments(docs) {
			switch {
			case engine.Classify(o) == engine.ClassException:
				out = append(out, o)
			case o.Kind == "PolicyException" && (o.APIVersion == "kyverno.io/v2" || o.APIVersion == "kyverno.io/v2beta1"):
				s.Warnings = append(s.Warnings, fmt.Sprintf("%s: %s (%s) applies to kyverno.io policies only: ignored", o.Source, o.Ref(), o.APIVersion))
			default:
				return nil, s.wrap(field, &LoadError{File: o.Source, Test: o.Ref(), Field: "kind", Err: fmt.Errorf("policy exception type not supported: %s %s", o.APIVersion, o.Kind)})
			}
		}
	}
	return out, nil
}

// ---- resources ----

// resourceFiles expands a resource path: a file, or the YAML files of a
// folder (not recursively), as the CLI does.
func resourceFiles(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && isYAML(e.Name()) {
			out = append(out, filepath.Join(p, e.Name()))
		}
	}
	return out, nil
}

type resourceID struct {
	group, kind, namespace, name string
}

func (s *Suite) loadResources(field string, paths []string, unique bool) ([]*Resource, error) {
	var out []*Resource
	seen := map[resourceID]bool{}
	for i, p := range paths {
		f := fmt.Sprintf("%s[%d]", field, i)
		files, err := resourceFiles(s.path(p))
		if err != nil {
			return nil, s.wrap(f, err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				return nil, s.wrap(f, err)
			}
			rs, err := s.parseResources(file, data)
			if err != nil {
				return nil, s.wrap(f, err)
			}
			for _, r := range rs {
				if unique {
					gvk := gvkOf(r.Object)
					id := resourceID{gvk.Group, gvk.Kind, namespaceOf(r.Object), nameOf(r.Object)}
					if seen[id] {
						s.Warnings = append(s.Warnings, fmt.Sprintf("%s: duplicated resource %s %s %s: the first one is used", r.Source, id.kind, id.name, id.namespace))
						continue
					}
					seen[id] = true
				}
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// parseResources reads the resources of a file as the CLI does: every
// non-empty document is one resource (a List is not expanded), with a kind;
// a namespaced kind without namespace is put in "default"; numbers become
// float64.
func (s *Suite) parseResources(file string, data []byte) ([]*Resource, error) {
	docs, err := manifest.SplitNonEmptyDocuments(data)
	if err != nil {
		return nil, &LoadError{File: file, Err: err}
	}
	var out []*Resource
	for i, doc := range docs {
		source := file
		if len(docs) > 1 {
			source = fmt.Sprintf("%s#%d", file, i+1)
		}
		obj, err := manifest.Decode(doc)
		if err != nil {
			return nil, &LoadError{File: source, Err: err}
		}
		if obj == nil {
			continue
		}
		kind, _ := obj["kind"].(string)
		if kind == "" {
			return nil, &LoadError{File: source, Field: "kind", Err: errors.New("Object 'Kind' is missing")} //nolint:staticcheck // ST1005: apimachinery's message, word for word
		}
		normalizeNilMaps(obj)
		if namespaceOf(obj) == "" && !s.clusterScoped(gvkOf(obj)) {
			md, _ := obj["metadata"].(map[string]any)
			if md == nil {
				md = map[string]any{}
				obj["metadata"] = md
			}
			md["namespace"] = "default"
		}
		obj = toFloats(obj).(map[string]any)
		out = append(out, &Resource{Key: resourceKey(obj), Source: source, Object: obj})
	}
	return out, nil
}

// versionsToTry are the versions tried when the CLI's discovery data does
// not have a kind at the version a resource gives (the CLI decides the
// scope from the group and kind only).
var versionsToTry = []string{"v1", "v2", "v1beta1", "v1beta2", "v1alpha1", "v2beta1", "v2beta2", "v1alpha2", "v1alpha3"}

// clusterScoped says whether the CLI's discovery data knows the kind as
// cluster-scoped. Unknown kinds are namespaced, as in the CLI.
func (s *Suite) clusterScoped(gvk schema.GroupVersionKind) bool {
	versions := append([]string{gvk.Version}, versionsToTry...)
	for _, v := range versions {
		if m, err := s.mapper.RESTMapping(gvk.GroupKind(), v); err == nil {
			return m.Scope.Name() != "namespace"
		}
	}
	return false
}

// gvrOf maps a kind to its resource: discovery data and the test's CRDs,
// else the conventional lower-case plural (as the CLI does offline).
func (s *Suite) gvrOf(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	for _, m := range []*fixtures.Static{s.context, s.mapper} {
		if m == nil {
			continue
		}
		if mapping, err := m.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
			return mapping.Resource
		}
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	return gvr
}

func gvkOf(obj map[string]any) schema.GroupVersionKind {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	return schema.FromAPIVersionAndKind(apiVersion, kind)
}

func nameOf(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	s, _ := md["name"].(string)
	return s
}

func namespaceOf(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	s, _ := md["namespace"].(string)
	return s
}

// resourceKey is the CLI's response key: apiVersion,kind,namespace,name.
func resourceKey(obj map[string]any) string {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	return apiVersion + "," + kind + "," + namespaceOf(obj) + "," + nameOf(obj)
}

// normalizeNilMaps turns null metadata maps (`annotations:` with no value)
// into empty maps, as the CLI does.
func normalizeNilMaps(obj map[string]any) {
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return
	}
	for _, k := range []string{"labels", "annotations"} {
		if v, ok := md[k]; ok && v == nil {
			md[k] = map[string]any{}
		}
	}
}

// toFloats converts every integer to float64, as the Kyverno CLI does with
// the resources of a test before evaluating them.
func toFloats(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = toFloats(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = toFloats(e)
		}
		return t
	case int64:
		return float64(t)
	case int:
		return float64(t)
	case int32:
		return float64(t)
	}
	return v
}

// ---- payloads ----

func (s *Suite) loadPayloads() error {
	t := s.Doc.Test
	for i, p := range t.JSONPayloads {
		field := fmt.Sprintf("jsonPayloads[%d]", i)
		obj, err := loadPayload(s.path(p))
		if err != nil {
			return s.wrap(field, fmt.Errorf("failed to load JSON payload %s: %w", p, err))
		}
		s.payloads = append(s.payloads, &Payload{Name: p, Source: s.path(p), Object: obj})
	}
	for _, kind := range []struct {
		field string
		paths []string
		dst   *[]*Payload
		shape admission.Shape
	}{{"envoyPayloads", t.EnvoyPayloads, &s.envoy, admission.ShapeEnvoy}, {"httpPayloads", t.HTTPPayloads, &s.http, admission.ShapeHTTP}} {
		for i, p := range kind.paths {
			field := fmt.Sprintf("%s[%d]", kind.field, i)
			full := s.path(p)
			data, err := os.ReadFile(full)
			if err != nil {
				return s.wrap(field, err)
			}
			var obj map[string]any
			if err := json.Unmarshal(data, &obj); err != nil {
				return s.wrap(field, &LoadError{File: full, Err: err})
			}
			if obj == nil {
				obj = map[string]any{}
			}
			// The CLI decodes the payload into the request message: one
			// that is not a CheckRequest does not load.
			if _, _, err := authz.Prepare(kind.shape, obj); err != nil {
				return s.wrap(field, &LoadError{File: full, Err: fmt.Errorf("not a valid %s CheckRequest: %w", kind.shape, err)})
			}
			*kind.dst = append(*kind.dst, &Payload{Name: full, Source: full, Object: obj})
		}
	}
	return nil
}

// loadPayload reads a JSON payload as the CLI does: a .json file with
// encoding/json (every number a float64), a YAML file's documents (one:
// the payload). It must be an object.
func loadPayload(p string) (map[string]any, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var payload any
	switch strings.ToLower(filepath.Ext(p)) {
	case ".json":
		if err := json.Unmarshal(data, &payload); err != nil {
			return nil, err
		}
	case ".yaml", ".yml":
		docs, err := manifest.SplitNonEmptyDocuments(data)
		if err != nil {
			return nil, err
		}
		var objects []any
		for _, d := range docs {
			o, err := manifest.Decode(d)
			if err != nil {
				return nil, err
			}
			objects = append(objects, o)
		}
		if len(objects) == 1 {
			payload = objects[0]
		} else {
			payload = objects
		}
	default:
		return nil, fmt.Errorf("unrecognized payload format, must be yaml or json (%s)", p)
	}
	if payload == nil {
		return nil, errors.New("the payload is empty or null")
	}
	m, ok := payload.(map[string]any)
	if !ok || m == nil {
		return nil, errors.New("a JSON payload must be a top-level object")
	}
	return m, nil
}

// ---- expected resources (patchedResources, generatedResource) ----

// resourceFromFile finds the resource of a file with the given apiVersion,
// kind, namespace and name.
func (s *Suite) resourceFromFile(p, apiVersion, kind, namespace, name string) (map[string]any, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	rs, err := s.parseResources(p, data)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		gvk := gvkOf(r.Object)
		if gvk.GroupVersion().String() == apiVersion && gvk.Kind == kind && namespaceOf(r.Object) == namespace && nameOf(r.Object) == name {
			return r.Object, nil
		}
	}
	return nil, fmt.Errorf("resource with name %s not found in manifest", name)
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

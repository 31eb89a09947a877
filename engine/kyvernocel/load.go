package kyvernocel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Loaders for the Kyverno CLI test inputs that feed the CEL libraries, read
// as `kyverno test` reads them (cmd/cli/kubectl-kyverno: apis/v1alpha1,
// commands/test, store, processor). Errors name the file and the field.

// ---- context file (cli.kyverno.io/v1alpha1, kind Context) ----

// ContextFile is a Kyverno CLI context file, named by a test's `context`
// field. Like the CLI, the loader does not check apiVersion and kind, and
// rejects unknown fields.
type ContextFile struct {
	metav1.TypeMeta   `json:",inline,omitempty"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ContextSpec `json:"spec"`
}

// ContextSpec is the spec of a ContextFile.
type ContextSpec struct {
	// Resources are served to resource.Get/List (the CLI's fake provider).
	Resources []unstructured.Unstructured `json:"resources,omitempty"`
	// Images are served to image.GetMetadata, by exact image string.
	Images []ImageData `json:"images,omitempty"`
}

// ImageData is the image metadata of a context file; image.GetMetadata
// returns its JSON form.
type ImageData struct {
	Image         string           `json:"image"`
	ResolvedImage string           `json:"resolvedImage"`
	Registry      string           `json:"registry"`
	Repository    string           `json:"repository"`
	Tag           string           `json:"tag,omitempty"`
	Digest        string           `json:"digest,omitempty"`
	ImageIndex    *json.RawMessage `json:"imageIndex,omitempty"`
	Manifest      *json.RawMessage `json:"manifest,omitempty"`
	ConfigData    *json.RawMessage `json:"config,omitempty"`
}

// LoadContextFile reads a context file.
func LoadContextFile(path string) (*ContextFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseContextFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseContextFile decodes a context file (YAML or JSON; the first document).
func ParseContextFile(data []byte) (*ContextFile, error) {
	var c ContextFile
	if err := unmarshalStrict(data, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// unmarshalStrict decodes YAML as the Kyverno CLI does (sigs.k8s.io/yaml
// UnmarshalStrict: unknown and duplicate fields are errors), and when that
// fails, says which fields, with their paths, when it can.
func unmarshalStrict(data []byte, v any) error {
	err := yaml.UnmarshalStrict(data, v)
	if err == nil {
		return nil
	}
	jsonData, jerr := yaml.YAMLToJSON(data)
	if jerr != nil {
		return err
	}
	fresh := reflect.New(reflect.TypeOf(v).Elem()).Interface()
	strictErrs, serr := sigsjson.UnmarshalStrict(jsonData, fresh)
	if serr == nil && len(strictErrs) > 0 {
		msgs := make([]string, len(strictErrs))
		for i, e := range strictErrs {
			msgs[i] = e.Error()
		}
		return errors.New(strings.Join(msgs, ", "))
	}
	return err
}

// AddContextFile adds a context file's resources and images to s. Resources
// of a kind s cannot map are an error, as in the Kyverno CLI.
func (s *Static) AddContextFile(c *ContextFile) error {
	for i := range c.Spec.Resources {
		r := &c.Spec.Resources[i]
		if err := s.AddObject(r); err != nil {
			return fmt.Errorf("spec.resources[%d] (%s %s): %w", i, r.GetKind(), objectKey(r), err)
		}
	}
	for i, img := range c.Spec.Images {
		raw, err := json.Marshal(img)
		if err != nil {
			return fmt.Errorf("spec.images[%d]: %w", i, err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("spec.images[%d]: %w", i, err)
		}
		s.AddImageData(img.Image, m)
	}
	return nil
}

func objectKey(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return ns + "/" + o.GetName()
	}
	return o.GetName()
}

// ---- clusterResources (cli.kyverno.io/v1alpha1, kind ClusterResource) ----

// ClusterResourceFile is a Kyverno CLI ClusterResource file, named by a
// test's `clusterResources` list.
type ClusterResourceFile struct {
	metav1.TypeMeta   `json:",inline,omitempty"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterResourceSpec `json:"spec"`
}

// ClusterResourceSpec is the spec of a ClusterResourceFile.
type ClusterResourceSpec struct {
	// CRDs are paths of CustomResourceDefinition files, relative to the test
	// directory.
	CRDs      []string                     `json:"crds,omitempty"`
	Resources []*unstructured.Unstructured `json:"resources,omitempty"`
}

// LoadClusterResourceFile reads a ClusterResource file (strictly, as the CLI).
func LoadClusterResourceFile(path string) (*ClusterResourceFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c ClusterResourceFile
	if err := unmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// crdNames is the part of a CustomResourceDefinition the mapper needs.
type crdNames struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Plural string `json:"plural"`
			Kind   string `json:"kind"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name string `json:"name"`
		} `json:"versions"`
	} `json:"spec"`
}

// LoadCRDFile reads a CustomResourceDefinition file and registers its kind
// (every version) with s.
func (s *Static) LoadCRDFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd crdNames
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	sp := crd.Spec
	switch {
	case sp.Group == "":
		return fmt.Errorf("%s: spec.group is required", path)
	case sp.Names.Plural == "" || sp.Names.Kind == "":
		return fmt.Errorf("%s: spec.names.plural and spec.names.kind are required", path)
	case len(sp.Versions) == 0:
		return fmt.Errorf("%s: spec.versions is required", path)
	}
	for _, v := range sp.Versions {
		s.RegisterKind(schema.GroupVersionKind{Group: sp.Group, Version: v.Name, Kind: sp.Names.Kind},
			sp.Names.Plural, sp.Scope != "Cluster")
	}
	return nil
}

// ---- apiCallResponses ----

// APICallResponseEntry is one entry of a test's apiCallResponses: a static
// response to HTTP calls of a URL (and method).
type APICallResponseEntry struct {
	URL      string          `json:"url,omitempty"`
	URLPath  string          `json:"urlPath,omitempty"`
	Method   string          `json:"method,omitempty"`
	Response APICallResponse `json:"response"`
}

// APICallResponse is a static HTTP response.
type APICallResponse struct {
	StatusCode int             `json:"statusCode,omitempty"`
	Body       json.RawMessage `json:"body"`
}

// ResolvedURL is the url, or else the urlPath.
func (e APICallResponseEntry) ResolvedURL() string {
	if u := strings.TrimSpace(e.URL); u != "" {
		return u
	}
	return strings.TrimSpace(e.URLPath)
}

// ValidateAPICallResponses checks the entries as the Kyverno CLI does before
// a test run, with its messages.
func ValidateAPICallResponses(entries []APICallResponseEntry) error {
	seen := make(map[string]struct{}, len(entries))
	for i, e := range entries {
		if err := validateAPICallResponseEntry(i, e); err != nil {
			return err
		}
		resolved := e.ResolvedURL()
		key := resolved
		if m := strings.ToUpper(strings.TrimSpace(e.Method)); m != "" {
			key = m + ":" + resolved
		}
		if _, dup := seen[key]; dup {
			return fmt.Errorf("apiCallResponses: duplicate entry for %q (key %q) — each method+url combination must be unique", resolved, key)
		}
		seen[key] = struct{}{}
	}
	return nil
}

func validateAPICallResponseEntry(i int, e APICallResponseEntry) error {
	u := strings.TrimSpace(e.URL)
	up := strings.TrimSpace(e.URLPath)
	if u == "" && up == "" {
		return fmt.Errorf("apiCallResponses[%d]: either url or urlPath is required", i)
	}
	if u != "" && up != "" {
		return fmt.Errorf("apiCallResponses[%d]: url and urlPath are mutually exclusive", i)
	}
	if u != "" {
		parsed, err := url.Parse(u)
		if err != nil {
			return fmt.Errorf("apiCallResponses[%d]: url %q is not a valid URL: %w", i, u, err)
		}
		if parsed.Scheme != "http" && parsed.Scheme != "https" {
			return fmt.Errorf("apiCallResponses[%d]: url %q must be an absolute https/http URL", i, u)
		}
		if parsed.Hostname() == "" {
			return fmt.Errorf("apiCallResponses[%d]: url %q has scheme but no host", i, u)
		}
	}
	if up != "" && !strings.HasPrefix(up, "/") {
		return fmt.Errorf("apiCallResponses[%d]: urlPath %q must be an absolute path starting with '/'", i, up)
	}
	if m := strings.ToUpper(strings.TrimSpace(e.Method)); m != "" && m != "GET" && m != "POST" {
		return fmt.Errorf("apiCallResponses[%d]: method must be GET or POST", i)
	}
	label := u
	if label == "" {
		label = up
	}
	if d := strings.TrimSpace(string(e.Response.Body)); d == "" || d == "null" {
		return fmt.Errorf("apiCallResponses[%d] %q: response.body is required", i, label)
	}
	var obj any
	if err := json.Unmarshal(e.Response.Body, &obj); err != nil {
		return fmt.Errorf("apiCallResponses[%d] %q: response.body must be valid JSON: %w", i, label, err)
	}
	if _, ok := obj.(map[string]any); !ok {
		return fmt.Errorf("apiCallResponses[%d] %q: response.body must be a JSON object", i, label)
	}
	if sc := e.Response.StatusCode; sc != 0 && (sc < 100 || sc > 599) {
		return fmt.Errorf("apiCallResponses[%d] %q: statusCode %d must be between 100 and 599", i, label, sc)
	}
	return nil
}

// AddAPICallResponses serves the entries to http.* as the Kyverno CLI's mock
// does: the response of a call is {"body": <body>, "statusCode": <code, 200
// by default>}, looked up by "<METHOD>:<url>" and then by "<url>" (an entry
// without method); headers and the request body are not matched.
func (s *Static) AddAPICallResponses(entries []APICallResponseEntry) error {
	for _, e := range entries {
		var body any
		if len(e.Response.Body) > 0 {
			if err := json.Unmarshal(e.Response.Body, &body); err != nil {
				return fmt.Errorf("apiCallResponses %q: invalid body: %w", e.ResolvedURL(), err)
			}
		}
		sc := e.Response.StatusCode
		if sc == 0 {
			sc = 200
		}
		s.SetHTTPMock(e.Method, e.ResolvedURL(), map[string]any{"body": body, "statusCode": sc})
	}
	return nil
}

// ---- globalContextEntries ----

// GlobalContextEntryValue is one entry of a test's globalContextEntries: the
// data of a GlobalContextEntry, inline (data or resources) or from files.
type GlobalContextEntryValue struct {
	Name          string                    `json:"name"`
	Data          json.RawMessage           `json:"data,omitempty"`
	Resources     []json.RawMessage         `json:"resources,omitempty"`
	ResourceFiles []string                  `json:"resourceFiles,omitempty"`
	FieldPath     string                    `json:"fieldPath,omitempty"`
	Projections   []GlobalContextProjection `json:"projections,omitempty"`
}

// GlobalContextProjection names a JMESPath extract of an entry.
type GlobalContextProjection struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// ValidateGlobalContextEntries checks the entries as the Kyverno CLI does,
// with its messages.
func ValidateGlobalContextEntries(entries []GlobalContextEntryValue) error {
	seen := make(map[string]struct{}, len(entries))
	for _, e := range entries {
		name := strings.TrimSpace(e.Name)
		if name == "" {
			return fmt.Errorf("globalContextEntries: name is required")
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("globalContextEntries: duplicate name %q", name)
		}
		seen[name] = struct{}{}
		for _, p := range e.Projections {
			if strings.TrimSpace(p.Name) == "" {
				return fmt.Errorf("globalContextEntries entry %q: projection name is required", e.Name)
			}
			if strings.TrimSpace(p.Path) == "" {
				return fmt.Errorf("globalContextEntries entry %q projection %q: path is required", e.Name, p.Name)
			}
		}
		data := strings.TrimSpace(string(e.Data))
		hasData := data != "" && data != "null"
		hasResources := e.Resources != nil
		hasFiles := e.ResourceFiles != nil
		n := 0
		for _, b := range []bool{hasData, hasResources, hasFiles} {
			if b {
				n++
			}
		}
		if n > 1 {
			return fmt.Errorf("globalContextEntries entry %q: data, resources, and resourceFiles are mutually exclusive", e.Name)
		}
		if n == 0 {
			return fmt.Errorf("globalContextEntries entry %q: one of data, resources, or resourceFiles is required", e.Name)
		}
		if hasData {
			var obj any
			if err := json.Unmarshal(e.Data, &obj); err != nil {
				return fmt.Errorf("globalContextEntries entry %q: data must be valid JSON: %w", e.Name, err)
			}
			if _, ok := obj.(map[string]any); !ok {
				return fmt.Errorf("globalContextEntries entry %q: data must be a JSON object", e.Name)
			}
		}
		for j, r := range e.Resources {
			var obj any
			if err := json.Unmarshal(r, &obj); err != nil {
				return fmt.Errorf("globalContextEntries entry %q resources[%d]: must be valid JSON: %w", e.Name, j, err)
			}
			if _, ok := obj.(map[string]any); !ok {
				return fmt.Errorf("globalContextEntries entry %q resources[%d]: must be a JSON object (Kubernetes resource manifest)", e.Name, j)
			}
		}
		for j, f := range e.ResourceFiles {
			f = strings.TrimSpace(f)
			if f == "" {
				return fmt.Errorf("globalContextEntries entry %q resourceFiles[%d]: file path must not be empty", e.Name, j)
			}
			if filepath.IsAbs(f) || strings.HasPrefix(filepath.ToSlash(f), "/") {
				return fmt.Errorf("globalContextEntries entry %q resourceFiles[%d]: file path must not be absolute", e.Name, j)
			}
			if c := filepath.ToSlash(filepath.Clean(f)); c == ".." || strings.HasPrefix(c, "../") {
				return fmt.Errorf("globalContextEntries entry %q resourceFiles[%d]: file path must not escape the test directory", e.Name, j)
			}
		}
	}
	return nil
}

// ResolveGlobalContextEntry computes the data an entry serves, as the Kyverno
// CLI does: the data object, or the list of resources (inline or read from
// resourceFiles, relative to dir, multi-document YAML), then fieldPath, then
// projections (an object of projection name → value), both JMESPath.
func ResolveGlobalContextEntry(dir string, e GlobalContextEntryValue) (any, error) {
	var root any
	switch {
	case e.ResourceFiles != nil || e.Resources != nil:
		list := make([]any, 0, len(e.Resources))
		for i, r := range e.Resources {
			if len(r) == 0 {
				return nil, fmt.Errorf("globalContextEntries %q resources: resources[%d]: empty resource", e.Name, i)
			}
			var obj map[string]any
			if err := json.Unmarshal(r, &obj); err != nil {
				return nil, fmt.Errorf("globalContextEntries %q resources: resources[%d]: invalid JSON: %w", e.Name, i, err)
			}
			if obj == nil {
				return nil, fmt.Errorf("globalContextEntries %q resources: resources[%d]: resource must be a JSON object, got null", e.Name, i)
			}
			list = append(list, obj)
		}
		for _, f := range e.ResourceFiles {
			objs, err := loadResourceFile(filepath.Join(dir, f))
			if err != nil {
				return nil, fmt.Errorf("globalContextEntries %q resourceFiles %q: %w", e.Name, f, err)
			}
			list = append(list, objs...)
		}
		root = list
	default:
		if len(e.Data) == 0 {
			if len(e.Projections) > 0 {
				return nil, fmt.Errorf("globalContextEntries %q: data is required when projections are set", e.Name)
			}
			return nil, nil
		}
		if err := json.Unmarshal(e.Data, &root); err != nil {
			return nil, fmt.Errorf("globalContextEntries %q: %w", e.Name, err)
		}
		if root == nil {
			return nil, nil
		}
	}
	if e.FieldPath != "" {
		var err error
		if root, err = jmespathSearch(e.FieldPath, root); err != nil {
			return nil, fmt.Errorf("globalContextEntries %q fieldPath: %w", e.Name, err)
		}
	}
	if len(e.Projections) == 0 {
		return root, nil
	}
	out := make(map[string]any, len(e.Projections))
	for _, p := range e.Projections {
		if p.Name == "" {
			return nil, fmt.Errorf("globalContextEntries %q projection name must not be empty", e.Name)
		}
		v, err := jmespathSearch(p.Path, root)
		if err != nil {
			return nil, fmt.Errorf("globalContextEntries %q projection %q path %q: %w", e.Name, p.Name, p.Path, err)
		}
		out[p.Name] = v
	}
	return out, nil
}

// loadResourceFile reads a multi-document YAML file of objects (empty
// documents skipped).
func loadResourceFile(path string) ([]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	docs, err := splitYAMLDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("split YAML documents: %w", err)
	}
	var out []any
	for j, doc := range docs {
		var obj map[string]any
		if err := k8syaml.UnmarshalStrict(doc, &obj); err != nil {
			return nil, fmt.Errorf("document[%d]: invalid YAML: %w", j, err)
		}
		if len(obj) == 0 {
			continue
		}
		// normalise numbers as the CLI's JSON round trip does
		raw, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("document[%d]: JSON marshal: %w", j, err)
		}
		var v map[string]any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("document[%d]: JSON marshal: %w", j, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func splitYAMLDocuments(data []byte) ([][]byte, error) {
	var docs [][]byte
	reader := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		b, err := reader.Read()
		if err == io.EOF || len(b) == 0 {
			break
		} else if err != nil {
			return docs, errors.New("unable to read yaml")
		}
		if !isEmptyYAMLDocument(b) {
			docs = append(docs, b)
		}
	}
	return docs, nil
}

func isEmptyYAMLDocument(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// ---- a whole test ----

// TestContext holds the fields of a Kyverno CLI test file (kyverno-test.yaml,
// cli.kyverno.io/v1alpha1 Test) that feed the CEL libraries; the JSON names
// are the test file's.
type TestContext struct {
	Context              string                    `json:"context,omitempty"`
	ClusterResources     []string                  `json:"clusterResources,omitempty"`
	APICallResponses     []APICallResponseEntry    `json:"apiCallResponses,omitempty"`
	GlobalContextEntries []GlobalContextEntryValue `json:"globalContextEntries,omitempty"`
}

// LoadTestContext builds the Static context of the Kyverno CLI test in
// testFile, as `kyverno test` builds its library context. Paths are relative
// to the test's directory.
//
// When the test has clusterResources, the context is in cluster mode and,
// as in Kyverno (whose fake cluster holds every object of the test),
// objects — the test's resources, target resources and param resources —
// are visible to resource.Get/List too. Unlike Kyverno, which then ignores
// the context file, the mocks and the global context entries for CEL
// policies, Static serves them in both modes.
func LoadTestContext(testFile string, tc TestContext, objects ...*unstructured.Unstructured) (*Static, error) {
	dir := filepath.Dir(testFile)
	s := NewStatic()
	if len(tc.ClusterResources) > 0 {
		s.SetClusterMode(true)
		var resources []*unstructured.Unstructured
		for i, p := range tc.ClusterResources {
			c, err := LoadClusterResourceFile(filepath.Join(dir, p))
			if err != nil {
				return nil, fmt.Errorf("%s: clusterResources[%d]: %w", testFile, i, err)
			}
			for j, crd := range c.Spec.CRDs {
				if err := s.LoadCRDFile(filepath.Join(dir, crd)); err != nil {
					return nil, fmt.Errorf("%s: spec.crds[%d]: %w", filepath.Join(dir, p), j, err)
				}
			}
			resources = append(resources, c.Spec.Resources...)
		}
		for _, r := range append(resources, objects...) {
			if err := s.AddObject(r); err != nil {
				return nil, fmt.Errorf("%s: clusterResources: %s %s: %w", testFile, r.GetKind(), objectKey(r), err)
			}
		}
	}
	if err := ValidateAPICallResponses(tc.APICallResponses); err != nil {
		return nil, fmt.Errorf("%s: %w", testFile, err)
	}
	if err := ValidateGlobalContextEntries(tc.GlobalContextEntries); err != nil {
		return nil, fmt.Errorf("%s: %w", testFile, err)
	}
	if err := s.AddAPICallResponses(tc.APICallResponses); err != nil {
		return nil, fmt.Errorf("%s: %w", testFile, err)
	}
	for _, e := range tc.GlobalContextEntries {
		data, err := ResolveGlobalContextEntry(dir, e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", testFile, err)
		}
		s.SetGlobalContextEntry(e.Name, data)
	}
	if tc.Context != "" {
		path := filepath.Join(dir, tc.Context)
		c, err := LoadContextFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: context: %w", testFile, err)
		}
		if err := s.AddContextFile(c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return s, nil
}

package schema

import (
	"bytes"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	yamlv2 "go.yaml.in/yaml/v2"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/arbiter-pdp/arbiter/internal/gen/schemagen"
)

// TestGeneratedIsCurrent: zz_generated_builtin.go is what the generator
// produces now, from the client-go of go.mod. A version bump that forgets
// `go generate ./engine/schema` fails here.
func TestGeneratedIsCurrent(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	want, err := schemagen.Generate("")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("zz_generated_builtin.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("zz_generated_builtin.go is stale: run `go generate ./engine/schema` (or `make generate`)")
	}
}

// clientGoTypeConverter is the reference: client-go's own converter.
var clientGoTypeConverter = applyconfigurations.NewTypeConverter(clientgoscheme.Scheme)

// TestBuiltinSchemaIsClientGos: the parsed built-in schema equals the one
// client-go's converter uses.
func TestBuiltinSchemaIsClientGos(t *testing.T) {
	if err := LoadBuiltin(); err != nil {
		t.Fatal(err)
	}
	p, err := parsedBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	ref, err := clientGoTypeConverter.ObjectToTyped(pod)
	if err != nil {
		t.Fatal(err)
	}
	if !sameTypes(p.Schema.Types, ref.Schema().Types) {
		t.Fatal("the built-in schema differs from client-go's")
	}
	if clientGoVersion != schemagen.LinkedVersion() && schemagen.LinkedVersion() != "" {
		t.Fatalf("generated from client-go %s, linked %s", clientGoVersion, schemagen.LinkedVersion())
	}
	// objectMetaSchemaYAML holds the same types as the full schema.
	meta, err := metaTypes()
	if err != nil {
		t.Fatal(err)
	}
	if len(meta) < 5 {
		t.Fatalf("ObjectMeta's schema has %d types", len(meta))
	}
	for _, td := range meta {
		full, ok := p.Schema.FindNamedType(td.Name)
		if !ok || !sameTypes([]smdschema.TypeDef{full}, []smdschema.TypeDef{td}) {
			t.Errorf("type %s of objectMetaSchemaYAML differs from the built-in schema's", td.Name)
		}
	}
}

// TestBuiltinKindsAreTheSchemes: the table is client-go's scheme, named as
// the scheme names them.
func TestBuiltinKindsAreTheSchemes(t *testing.T) {
	known := clientgoscheme.Scheme.AllKnownTypes()
	if len(known) != len(builtinKinds) {
		t.Errorf("client-go's scheme has %d kinds, the table %d", len(known), len(builtinKinds))
	}
	p, err := parsedBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	inSchema := 0
	for gvk := range known {
		want, err := clientgoscheme.Scheme.ToOpenAPIDefinitionName(gvk)
		if err != nil {
			t.Fatal(err)
		}
		name, in, ok := BuiltinTypeName(gvk)
		if !ok || name != want {
			t.Errorf("%v: table has %q (%v), the scheme %q", gvk, name, ok, want)
		}
		if _, found := p.Schema.FindNamedType(name); found != in {
			t.Errorf("%v: inSchema %v, but FindNamedType says %v", gvk, in, found)
		}
		if in {
			inSchema++
		}
		if got, want := (*Schemas)(nil).For(gvk) != nil, in || SubresourceBody(gvk) != nil; got != want {
			t.Errorf("%v: For gives a converter: %v, want %v", gvk, got, want)
		}
	}
	t.Logf("%d kinds, %d described by the schema", len(known), inSchema)
	if inSchema < 150 {
		t.Errorf("only %d kinds in the schema", inSchema)
	}
}

// TestBuiltinConverterIsClientGos: for a sample of kinds and objects, the
// converter gives the same typed value (same schema, same type, same value)
// and the same errors as applyconfigurations.NewTypeConverter.
func TestBuiltinConverterIsClientGos(t *testing.T) {
	objects := []string{
		fixturePod,
		fixtureDeployment,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"b"}},"data":{"k":"v"},"binaryData":{"b":"AAE="},"immutable":true}`,
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ns","labels":{"kubernetes.io/metadata.name":"ns"}},"spec":{"finalizers":["kubernetes"]}}`,
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"ports":[{"port":80,"protocol":"TCP","targetPort":"http"}],"selector":{"app":"a"}}}`,
		`{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"c"},"spec":{"schedule":"* * * * *","jobTemplate":{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"i"}]}}}}}}`,
		`{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j"},"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"i"}]}}}}`,
		`{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"s"},"spec":{"serviceName":"s","selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}`,
		`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"d"},"spec":{"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}}}`,
		`{"apiVersion":"networking.k8s.io/v1","kind":"Ingress","metadata":{"name":"i"},"spec":{"rules":[{"host":"h","http":{"paths":[{"path":"/","pathType":"Prefix","backend":{"service":{"name":"s","port":{"number":80}}}}]}}]}}`,
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"r"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`,
		`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"MutatingAdmissionPolicy","metadata":{"name":"m"},"spec":{"reinvocationPolicy":"Never","mutations":[{"patchType":"ApplyConfiguration","applyConfiguration":{"expression":"Object{}"}}]}}`,
		`{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{"name":"p"},"spec":{"minAvailable":1,"selector":{"matchLabels":{"a":"b"}}}}`,
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"type":"Opaque","stringData":{"a":"b"}}`,
		// Errors: an unknown field, a wrong type, a duplicate key.
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"bogus":1}}`,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":1}}}`,
		`{"apiVersion":"v1","kind":"Pod","spec":{"containers":[{"name":"a"},{"name":"a"}]}}`,
		// Kinds the schema lacks, unregistered kinds, unversioned kinds.
		`{"apiVersion":"v1","kind":"ListOptions"}`,
		`{"apiVersion":"v1","kind":"PodList","items":[]}`,
		`{"apiVersion":"example.com/v1","kind":"Widget"}`,
		`{"apiVersion":"example.com/v1","kind":"Status"}`,
		`{"kind":"Pod"}`,
	}
	p, err := parsedBuiltin()
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range objects {
		obj := mustJSON(t, src)
		u := &unstructured.Unstructured{Object: obj}
		for _, opts := range [][]typed.ValidationOptions{nil, {typed.AllowDuplicates}} {
			got, gerr := Builtin().ObjectToTyped(u, opts...)
			want, werr := clientGoTypeConverter.ObjectToTyped(u, opts...)
			if errString(gerr) != errString(werr) {
				t.Errorf("%s: error %q, client-go %q", src, errString(gerr), errString(werr))
				continue
			}
			if werr != nil {
				continue
			}
			// (TestBuiltinSchemaIsClientGos compares the schemas.)
			if !sameYAML(got.TypeRef(), want.TypeRef()) || got.Schema() != &p.Schema {
				t.Errorf("%s: different type", src)
			}
			if !value.Equals(got.AsValue(), want.AsValue()) {
				t.Errorf("%s: different value", src)
			}
			back, err := Builtin().TypedToObject(got)
			if err != nil || !reflect.DeepEqual(back.(*unstructured.Unstructured).Object, obj) {
				t.Errorf("%s: TypedToObject: %v", src, err)
			}
		}
	}
	// A typed (structured) object converts as well.
	gvk := k8sschema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cm, _ := clientgoscheme.Scheme.New(gvk)
	cm.GetObjectKind().SetGroupVersionKind(gvk)
	got, gerr := Builtin().ObjectToTyped(cm)
	want, werr := clientGoTypeConverter.ObjectToTyped(cm)
	if gerr != nil || werr != nil || !value.Equals(got.AsValue(), want.AsValue()) {
		t.Errorf("typed ConfigMap: %v, %v", gerr, werr)
	}
}

// TestEngineSchemaDoesNotLinkClientGo: nothing engine/schema links is
// client-go (its tests may import it).
func TestEngineSchemaDoesNotLinkClientGo(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "k8s.io/client-go" || strings.HasPrefix(dep, "k8s.io/client-go/") {
			t.Errorf("engine/schema links %s", dep)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sameTypes compares schema types by their YAML form (schema.Map caches its
// field index in unexported fields, which reflect.DeepEqual would compare;
// defaults hold map[interface{}]interface{}, which encoding/json refuses).
func sameTypes(a, b []smdschema.TypeDef) bool { return sameYAML(a, b) }

func sameYAML(a, b any) bool {
	ya, err1 := yamlv2.Marshal(a)
	yb, err2 := yamlv2.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ya, yb)
}

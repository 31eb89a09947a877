package clusterdata_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

func object(t testing.TB, doc string) *manifest.Object {
	t.Helper()
	content, err := manifest.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return manifest.NewObject("test.yaml", content)
}

func configMap(ns, name string, labels map[string]any) *manifest.Object {
	md := map[string]any{"name": name, "namespace": ns}
	if labels != nil {
		md["labels"] = labels
	}
	return manifest.NewObject("test", map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": map[string]any{"k": "v"}})
}

// maxConfigMaps allows at most 3 ConfigMaps per namespace, counting those
// stored, and reads one by name and a global context entry.
const maxConfigMaps = `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: max-configmaps}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
  - name: existing
    expression: resource.List("v1", "configmaps", object.metadata.namespace).items
  - name: limits
    expression: dyn(resource.Get("v1", "configmaps", "kube-system", "limits"))
  - name: labelled
    expression: 'resource.List("v1", "configmaps", "", {"team": "a"}).items'
  validations:
  - expression: 'size(variables.existing) < (variables.limits == null ? 3 : int(variables.limits.data.max))'
    messageExpression: "'namespace ' + object.metadata.namespace + ' has ' + string(size(variables.existing)) + ' ConfigMaps'"
`

func request(ns, name string) *admission.Request {
	req := &admission.Request{Operation: admission.OpCreate, Object: configMap(ns, name, nil).Content}
	req.Fill()
	return req
}

func TestPolicyReadsTheView(t *testing.T) {
	ps, err := engine.Compile([]*manifest.Object{object(t, maxConfigMaps)}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	view := clusterdata.New([]*manifest.Object{
		configMap("full", "a", map[string]any{"team": "a"}), configMap("full", "b", nil), configMap("full", "c", nil),
		configMap("some", "a", nil),
	})
	for _, tc := range []struct {
		ns      string
		allowed bool
		message string
	}{
		{"full", false, "namespace full has 3 ConfigMaps"},
		{"some", true, ""},
		{"none", true, ""},
	} {
		reads := &clusterdata.Reads{}
		c := &clusterdata.Context{Resources: view, Reads: reads}
		d := ps.Evaluate(context.Background(), request(tc.ns, "new"), &engine.EvalOptions{Context: c})
		if d.Allowed != tc.allowed || !strings.Contains(d.Message, tc.message) {
			t.Fatalf("%s: allowed %v %q", tc.ns, d.Allowed, d.Message)
		}
		var got []string
		for _, r := range reads.List() {
			got = append(got, r.String())
		}
		// Variables are lazy: labelled is never evaluated, so never read.
		want := []string{
			"get v1 configmaps kube-system/limits: not found",
			fmt.Sprintf("list v1 configmaps %s: %d objects", tc.ns, map[string]int{"full": 3, "some": 1, "none": 0}[tc.ns]),
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: reads %q, want %q", tc.ns, got, want)
		}
	}
	// A limit stored in the view changes the decision.
	limits := configMap("kube-system", "limits", nil)
	limits.Content["data"] = map[string]any{"max": "5"}
	view2 := view.Apply([]clusterdata.Change{{Key: clusterdata.KeyOf(limits), Object: limits}})
	d := ps.Evaluate(context.Background(), request("full", "new"), &engine.EvalOptions{Context: &clusterdata.Context{Resources: view2}})
	if !d.Allowed {
		t.Fatalf("with limits: %s", d.Message)
	}
}

// A part that is not given fails with an error naming what is not
// configured.
func TestContextUnconfigured(t *testing.T) {
	c := &clusterdata.Context{}
	ctx := context.Background()
	_, err := c.ListResources(ctx, "v1", "configmaps", "", nil)
	if !errors.Is(err, clusterdata.ErrNoObjects) || !strings.HasPrefix(err.Error(), "resource.List: no context objects are configured") {
		t.Errorf("list: %v", err)
	}
	if _, err := c.GetResource(ctx, "v1", "configmaps", "a", "b"); !errors.Is(err, clusterdata.ErrNoObjects) {
		t.Errorf("get: %v", err)
	}
	if _, err := c.PostResource(ctx, "authorization.k8s.io/v1", "subjectaccessreviews", "", nil); !errors.Is(err, clusterdata.ErrNoPost) {
		t.Errorf("post: %v", err)
	}
	if _, err := c.GetGlobalReference(ctx, "e", ""); !errors.Is(err, clusterdata.ErrNoGlobalContext) {
		t.Errorf("globalContext: %v", err)
	}
	if _, err := c.GetImageData(ctx, "nginx"); !errors.Is(err, clusterdata.ErrNoImageData) {
		t.Errorf("image: %v", err)
	}
	if _, err := c.HTTP().Get(ctx, "https://x", nil); !errors.Is(err, clusterdata.ErrNoHTTP) || !strings.Contains(err.Error(), "http.Get https://x") {
		t.Errorf("http: %v", err)
	}
	if h, err := c.HTTP().Client(ctx, "not a bundle"); err == nil {
		t.Errorf("client with a bad bundle: %v", h)
	}
	// ToGVR knows the built-in kinds without objects.
	if gvr, err := c.ToGVR(ctx, "apps/v1", "Deployment"); err != nil || gvr.Resource != "deployments" {
		t.Errorf("toGVR: %v %v", gvr, err)
	}
	var _ kyvernocel.Context = c
}

// The engine's error result names what is not configured.
func TestUnconfiguredInADecision(t *testing.T) {
	ps, err := engine.Compile([]*manifest.Object{object(t, maxConfigMaps)}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := ps.Evaluate(context.Background(), request("a", "x"), &engine.EvalOptions{Context: &clusterdata.Context{}})
	if len(d.Results) != 1 || d.Results[0].Result != "error" || !strings.Contains(d.Results[0].Message, "no context objects are configured") {
		t.Fatalf("results %+v", d.Results)
	}
}

func TestReadString(t *testing.T) {
	for _, tc := range []struct {
		r    clusterdata.Read
		want string
	}{
		{clusterdata.Read{Op: "get", APIVersion: "v1", Resource: "namespaces", Name: "a", Count: 1}, "get v1 namespaces a"},
		{clusterdata.Read{Op: "list", APIVersion: "apps/v1", Resource: "deployments", Count: 2}, "list apps/v1 deployments: 2 objects"},
		{clusterdata.Read{Op: "globalContext", Name: "e", Projection: "p", Error: "boom"}, "globalContext e p: error: boom"},
		{clusterdata.Read{Op: "image", Name: "nginx", Count: 1}, "image nginx"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}

// readerOnly hides a view's values (clusterdata.Context then converts the
// object GetResource returns, as it does for a live cluster).
type readerOnly struct{ clusterdata.Reader }

// resource.Get in a decision reads the same from a view's shared values as
// from a conversion of the object per read: results, messages, costs and
// reads.
func TestGetValueDecisionsAgree(t *testing.T) {
	withData := configMap("full", "a", map[string]any{"team": "a"})
	withData.Content["data"] = map[string]any{"k": "v", "n": "3", "list": "a,b"}
	view := clusterdata.New([]*manifest.Object{withData, configMap("full", "b", nil), configMap("kube-system", "limits", nil)})
	get := `resource.Get("v1", "configmaps", "full", "a")`
	for _, expr := range []string{
		get + `.data.k == "v"`,
		get + `.data.k == "w"`,
		`dyn(resource.Get("v1", "configmaps", "full", "zz")) == null`,
		`has(` + get + `.metadata.labels) && !has(` + get + `.metadata.annotations)`,
		`dyn(` + get + `.data).all(k, k in ["k", "n", "list"])`,
		`dyn(` + get + `.data).exists(k, ` + get + `.data[k] == "3")`,
		get + ` == ` + get,
		get + ` == resource.Get("v1", "configmaps", "full", "b")`,
		get + `.data.nokey == "x"`,
		`dyn(resource.Get("not/a/version", "configmaps", "full", "a")) == null`,
		`dyn(resource.Get("v1", "nothings", "full", "a")) == null`,
		`int(` + get + `.data.n) + size(` + get + `.data.list.split(",")) == 5`,
		`resource.Get("v1", "configmaps", object.metadata.namespace, "a").metadata.name == "a"`,
		`[resource.Get("v1", "configmaps", "full", "a"), resource.Get("v1", "configmaps", "full", "b")].map(o, o.metadata.name) == ["a", "b"]`,
		`resource.List("v1", "configmaps", "full").items[0] == ` + get,
	} {
		doc := `{"apiVersion":"policies.kyverno.io/v1","kind":"ValidatingPolicy","metadata":{"name":"p"},"spec":{
			"validationActions":["Deny"],
			"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},
			"validations":[{"expression":` + strconvQuote(expr) + `,"messageExpression":` + strconvQuote(`'read ' + string(`+get+`.data.k)`) + `}]}}`
		content, err := manifest.DecodeJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		ps, err := engine.Compile([]*manifest.Object{manifest.NewObject("test", content)}, engine.Options{})
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		var decisions []*engine.Decision
		var reads [][]clusterdata.Read
		for _, r := range []clusterdata.Reader{view, readerOnly{view}, view} {
			c := &clusterdata.Context{Resources: r, Reads: &clusterdata.Reads{}}
			decisions = append(decisions, ps.Evaluate(context.Background(), request("full", "new"), &engine.EvalOptions{Context: c}))
			reads = append(reads, c.Reads.List())
		}
		for i := 1; i < len(decisions); i++ {
			if !reflect.DeepEqual(decisions[i], decisions[0]) || !reflect.DeepEqual(reads[i], reads[0]) {
				t.Errorf("%s: decision %d:\n%+v\n%v\nwant\n%+v\n%v", expr, i, decisions[i], reads[i], decisions[0], reads[0])
			}
		}
		t.Logf("%s: allowed %v, %q, %d reads", expr, decisions[0].Allowed, decisions[0].Message, len(reads[0]))
	}
}

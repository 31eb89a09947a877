package kyvernocel

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The Kyverno CLI suites under testdata/suites that use the libraries: each
// is evaluated end to end (context inputs → Static → Bind → the policies'
// variables and validations) and every ValidatingPolicy result it expects
// must come out.

type suiteFile struct {
	TestContext `json:",inline"`
	Policies    []string `json:"policies"`
	Resources   []string `json:"resources"`
	Variables   string   `json:"variables"`
	Results     []struct {
		Policy             string   `json:"policy"`
		Resources          []string `json:"resources"`
		Result             string   `json:"result"`
		Kind               string   `json:"kind"`
		IsValidatingPolicy bool     `json:"isValidatingPolicy"`
	} `json:"results"`
}

type suitePolicy struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		AuditAnnotations []struct {
			ValueExpression string `json:"valueExpression"`
		} `json:"auditAnnotations"`
		Variables []struct {
			Name       string `json:"name"`
			Expression string `json:"expression"`
		} `json:"variables"`
		MatchConditions []struct {
			Name       string `json:"name"`
			Expression string `json:"expression"`
		} `json:"matchConditions"`
		Validations []struct {
			Expression        string `json:"expression"`
			Message           string `json:"message"`
			MessageExpression string `json:"messageExpression"`
		} `json:"validations"`
	} `json:"spec"`
}

func readDocs(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := splitYAMLDocuments(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return docs
}

func TestKyvernoSuites(t *testing.T) {
	dirs, err := filepath.Glob("testdata/suites/*/kyverno-test.yaml")
	if err != nil || len(dirs) != 11 {
		t.Fatalf("suites: %v %v", dirs, err)
	}
	envs := map[bool]*cel.Env{false: newTestEnv(t, Options{}), true: newTestEnv(t, Options{Namespaced: true})}
	total := 0
	for _, testFile := range dirs {
		dir := filepath.Dir(testFile)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			raw, err := os.ReadFile(testFile)
			if err != nil {
				t.Fatal(err)
			}
			var suite suiteFile
			if err := yaml.Unmarshal(raw, &suite); err != nil {
				t.Fatal(err)
			}
			var resources []*unstructured.Unstructured
			for _, f := range suite.Resources {
				for _, doc := range readDocs(t, filepath.Join(dir, f)) {
					u := &unstructured.Unstructured{}
					if err := yaml.Unmarshal(doc, &u.Object); err != nil {
						t.Fatal(err)
					}
					if u.GetNamespace() == "" && u.GetKind() != "Namespace" {
						u.SetNamespace("default") // as the Kyverno CLI does
					}
					resources = append(resources, u)
				}
			}
			namespaces := map[string]map[string]any{}
			if suite.Variables != "" {
				var values struct {
					Namespaces []map[string]any `json:"namespaces"`
				}
				data, err := os.ReadFile(filepath.Join(dir, suite.Variables))
				if err != nil {
					t.Fatal(err)
				}
				if err := yaml.Unmarshal(data, &values); err != nil {
					t.Fatal(err)
				}
				for _, ns := range values.Namespaces {
					u := unstructured.Unstructured{Object: ns}
					namespaces[u.GetName()] = ns
				}
			}
			static, err := LoadTestContext(testFile, suite.TestContext, resources...)
			if err != nil {
				t.Fatalf("LoadTestContext: %v", err)
			}
			policies := map[string]suitePolicy{}
			for _, f := range suite.Policies {
				for _, doc := range readDocs(t, filepath.Join(dir, f)) {
					var p suitePolicy
					if err := yaml.Unmarshal(doc, &p); err != nil {
						t.Fatal(err)
					}
					if p.Kind == "ValidatingPolicy" || p.Kind == "NamespacedValidatingPolicy" {
						policies[p.Metadata.Name] = p
					}
				}
			}
			checked := 0
			for _, want := range suite.Results {
				p, ok := policies[want.Policy]
				if !ok {
					continue // a kyverno.io policy of the same suite
				}
				for _, key := range want.Resources {
					obj := findResource(resources, want.Kind, key)
					if obj == nil {
						t.Fatalf("%s: resource %s %s not found", want.Policy, want.Kind, key)
					}
					got, msg := evalSuitePolicy(t, envs[p.Kind == "NamespacedValidatingPolicy"], static, p, obj, namespaces, "")
					if got != want.Result {
						t.Errorf("%s on %s %s: %s (%s), want %s", want.Policy, want.Kind, key, got, msg, want.Result)
					}
					checked++
				}
			}
			if checked == 0 {
				t.Fatal("no ValidatingPolicy result checked")
			}
			total += checked
		})
	}
	t.Logf("%d expectations checked", total)
}

func findResource(resources []*unstructured.Unstructured, kind, key string) *unstructured.Unstructured {
	ns, name, hasNS := strings.Cut(key, "/")
	if !hasNS {
		name, ns = key, ""
	}
	for _, r := range resources {
		if r.GetKind() == kind && r.GetName() == name && (ns == "" || r.GetNamespace() == ns) {
			return r
		}
	}
	return nil
}

// evalSuitePolicy evaluates a ValidatingPolicy the way Kyverno's engine does
// for a CREATE: matchConditions, variables (lazily: errors surface where
// used), validations in order. It returns pass, fail, skip or error.
func evalSuitePolicy(t *testing.T, env *cel.Env, c Context, p suitePolicy, obj *unstructured.Unstructured, namespaces map[string]map[string]any, username string) (string, string) {
	t.Helper()
	gvk := obj.GroupVersionKind()
	ns := obj.GetNamespace()
	nsObj, ok := namespaces[ns]
	if !ok && ns != "" {
		nsObj = map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{
			"name": ns, "labels": map[string]any{"kubernetes.io/metadata.name": ns}}}
	}
	act := Bind(c, p.Metadata.Namespace)
	act["object"] = obj.Object
	act["oldObject"] = nil
	act["namespaceObject"] = nsObj
	act["request"] = map[string]any{
		"operation": "CREATE", "namespace": ns, "name": obj.GetName(),
		"kind":   map[string]any{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind},
		"object": obj.Object, "userInfo": map[string]any{"username": username},
	}
	vars := map[string]any{}
	act["variables"] = vars
	eval := func(expr string) ref.Val {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: compile %q: %v", p.Metadata.Name, expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatalf("%s: program %q: %v", p.Metadata.Name, expr, err)
		}
		out, _, err := prg.Eval(act)
		if err != nil {
			return types.WrapErr(err)
		}
		return out
	}
	for _, mc := range p.Spec.MatchConditions {
		if v := eval(mc.Expression); v != types.True {
			return "skip", mc.Name
		}
	}
	for _, v := range p.Spec.Variables {
		vars[v.Name] = eval(v.Expression) // errors are kept and surface on use
	}
	for _, v := range p.Spec.Validations {
		out := eval(v.Expression)
		switch {
		case types.IsError(out):
			return "error", out.(*types.Err).String()
		case out != types.True:
			msg := v.Message
			if v.MessageExpression != "" {
				m := eval(v.MessageExpression)
				if types.IsError(m) {
					msg = "failed to evaluate message expression: " + m.(*types.Err).String()
				} else {
					msg = string(m.(types.String))
				}
			}
			return "fail", msg
		}
	}
	return "pass", "success"
}

func TestSuiteHelpers(t *testing.T) {
	keys := sortedKeys(map[string]int{"b": 1, "a": 2})
	if !sort.StringsAreSorted(keys) || len(keys) != 2 {
		t.Fatal(keys)
	}
}

package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// A golden case is a YAML file in testdata/golden: policies, exceptions,
// Namespaces and resources, and one document of kind Expect
// (apiVersion test.arbiter.dev/v1) saying what each resource's decision is.
type expectDoc struct {
	APIVersion  string    `json:"apiVersion"`
	Kind        string    `json:"kind"`
	Description string    `json:"description"`
	Mode        string    `json:"mode"`      // admission (default), background, cli
	Operation   string    `json:"operation"` // default CREATE
	Now         string    `json:"now"`       // RFC 3339; default 2026-06-01T00:00:00Z
	UserInfo    *userInfo `json:"userInfo"`
	LoadError   string    `json:"loadError"` // the set must fail to load with this text
	// Images is the fake registry of ImageValidatingPolicies (image
	// reference as written → what the verifier says of it).
	Images map[string]fakeImage `json:"images"`
	Cases  []expectedCase       `json:"cases"`
}

type userInfo struct {
	Username string   `json:"username"`
	Groups   []string `json:"groups"`
}

type expectedCase struct {
	// Resource is "Kind namespace/name" or "Kind name" of a resource in the file.
	Resource    string         `json:"resource"`
	Operation   string         `json:"operation"`
	Mode        string         `json:"mode"`
	SubResource string         `json:"subResource"`
	UserInfo    *userInfo      `json:"userInfo"`
	OldObject   map[string]any `json:"oldObject"`
	Allowed     *bool          `json:"allowed"`
	Message     *string        `json:"message"`
	// MessageContains is text the denial message must contain.
	MessageContains string           `json:"messageContains"`
	Warnings        []string         `json:"warnings"`
	Results         []expectedResult `json:"results"`
	// Mutated is the object the mutations must leave (compared as JSON);
	// NotMutated says they must leave it unchanged.
	Mutated    map[string]any `json:"mutated"`
	NotMutated bool           `json:"notMutated"`
}

type expectedResult struct {
	Policy  string  `json:"policy"`
	Rule    string  `json:"rule"`
	Result  string  `json:"result"`
	Message *string `json:"message"`
	// MessageContains is text the result message must contain.
	MessageContains string            `json:"messageContains"`
	Properties      map[string]string `json:"properties"`
	// AbsentProperties are properties the result must not have.
	AbsentProperties []string `json:"absentProperties"`
	Exceptions       []string `json:"exceptions"`
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) { runGolden(t, file) })
	}
}

func runGolden(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	var exp *expectDoc
	var objs []*manifest.Object
	for _, d := range docs {
		if d.Kind() == "Expect" && strings.HasPrefix(d.APIVersion(), "test.arbiter.dev/") {
			b, _ := yaml.Marshal(d.Object)
			exp = &expectDoc{}
			if err := yaml.UnmarshalStrict(b, exp); err != nil {
				t.Fatalf("Expect document: %v", err)
			}
			continue
		}
		objs = append(objs, manifest.NewObject(d.Source(), d.Object))
	}
	if exp == nil {
		t.Fatal("no Expect document")
	}
	ps, err := engine.Compile(objs, engine.Options{})
	if exp.LoadError != "" {
		if err == nil || !strings.Contains(err.Error(), exp.LoadError) {
			t.Fatalf("load error = %v, want it to contain %q", err, exp.LoadError)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	if exp.Now != "" {
		if now, err = time.Parse(time.RFC3339, exp.Now); err != nil {
			t.Fatal(err)
		}
	}
	resources := map[string]*manifest.Object{}
	for _, o := range objs {
		if engine.Classify(o) == engine.ClassResource || engine.Classify(o) == engine.ClassNamespace {
			resources[o.Ref()] = o
		}
	}
	if len(exp.Cases) == 0 {
		t.Fatal("no cases")
	}
	for i, c := range exp.Cases {
		o, ok := resources[c.Resource]
		if !ok {
			t.Fatalf("case %d: no resource %q in the file", i, c.Resource)
		}
		op := firstNonEmpty(c.Operation, exp.Operation, admission.OpCreate)
		req := &admission.Request{Operation: op, SubResource: c.SubResource}
		switch op {
		case admission.OpDelete:
			req.OldObject = o.Content
		case admission.OpUpdate:
			req.Object = o.Content
			req.OldObject = o.Content
			if c.OldObject != nil {
				req.OldObject = c.OldObject
			}
		default:
			req.Object = o.Content
		}
		switch firstNonEmpty(c.Mode, exp.Mode, "admission") {
		case "admission":
			req.Mode = admission.ModeAdmission
		case "background":
			req.Mode = admission.ModeBackground
		case "cli":
			req.Mode = admission.ModeCLI
		default:
			t.Fatalf("case %d: unknown mode", i)
		}
		if ui := firstUser(c.UserInfo, exp.UserInfo); ui != nil {
			req.UserInfo = admission.UserInfo{Username: ui.Username, Groups: ui.Groups}
		}
		req.Fill()
		gk := schema.FromAPIVersionAndKind(o.APIVersion, o.Kind).GroupKind()
		if req.Namespace == "" && admission.IsNamespaced(gk) {
			req.Namespace = "default"
		}
		before := jsonOf(o.Content)
		opts := &engine.EvalOptions{Now: now}
		if exp.Images != nil {
			opts.ImageVerifier = fakeVerifier(exp.Images)
		}
		d := ps.Evaluate(context.Background(), req, opts)
		if jsonOf(o.Content) != before {
			t.Errorf("case %d (%s %s): the engine modified the request's object", i, op, c.Resource)
		}
		checkDecision(t, fmt.Sprintf("case %d (%s %s)", i, op, c.Resource), c, d)
	}
}

func checkDecision(t *testing.T, name string, c expectedCase, d *engine.Decision) {
	t.Helper()
	if c.Allowed != nil && d.Allowed != *c.Allowed {
		t.Errorf("%s: allowed = %v, want %v (denials %q)", name, d.Allowed, *c.Allowed, d.Denials)
	}
	if c.Message != nil && d.Message != *c.Message {
		t.Errorf("%s: message =\n  %q\nwant\n  %q", name, d.Message, *c.Message)
	}
	if c.MessageContains != "" && !strings.Contains(d.Message, c.MessageContains) {
		t.Errorf("%s: message =\n  %q\nwant it to contain\n  %q", name, d.Message, c.MessageContains)
	}
	if c.Warnings != nil || len(d.Warnings) > 0 {
		if !reflect.DeepEqual(nilIfEmpty(d.Warnings), nilIfEmpty(c.Warnings)) {
			t.Errorf("%s: warnings = %q, want %q", name, d.Warnings, c.Warnings)
		}
	}
	if c.NotMutated && d.Mutated != nil {
		t.Errorf("%s: mutated to %s, want unchanged", name, jsonOf(d.Mutated))
	}
	if c.Mutated != nil && jsonOf(d.Mutated) != jsonOf(c.Mutated) {
		t.Errorf("%s: mutated =\n  %s\nwant\n  %s", name, jsonOf(d.Mutated), jsonOf(c.Mutated))
	}
	got := make([]string, len(d.Results))
	for i, r := range d.Results {
		got[i] = fmt.Sprintf("%s/%s=%s", r.Policy, r.Rule, r.Result)
	}
	want := make([]string, len(c.Results))
	for i, r := range c.Results {
		want[i] = fmt.Sprintf("%s/%s=%s", r.Policy, r.Rule, r.Result)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s: results\n  %v\nwant\n  %v", name, got, want)
		for _, r := range d.Results {
			t.Logf("  %s %q %s %q %v %v", r.Policy, r.Rule, r.Result, r.Message, r.Properties, r.Exceptions())
		}
		return
	}
	for i, w := range c.Results {
		r := d.Results[i]
		if w.Message != nil && r.Message != *w.Message {
			t.Errorf("%s: %s message =\n  %q\nwant\n  %q", name, r.Policy, r.Message, *w.Message)
		}
		if w.MessageContains != "" && !strings.Contains(r.Message, w.MessageContains) {
			t.Errorf("%s: %s message =\n  %q\nwant it to contain\n  %q", name, r.Policy, r.Message, w.MessageContains)
		}
		for k, v := range w.Properties {
			if r.Properties[k] != v {
				t.Errorf("%s: %s property %s = %q, want %q (all: %v)", name, r.Policy, k, r.Properties[k], v, r.Properties)
			}
		}
		for _, k := range w.AbsentProperties {
			if v, ok := r.Properties[k]; ok {
				t.Errorf("%s: %s has property %s = %q, want none", name, r.Policy, k, v)
			}
		}
		if w.Exceptions != nil {
			g := append([]string(nil), r.Exceptions()...)
			sort.Strings(g)
			e := append([]string(nil), w.Exceptions...)
			sort.Strings(e)
			if !reflect.DeepEqual(nilIfEmpty(g), nilIfEmpty(e)) {
				t.Errorf("%s: %s exceptions = %v, want %v", name, r.Policy, r.Exceptions(), w.Exceptions)
			}
		}
	}
}

// jsonOf renders an object as JSON with sorted keys (numbers as JSON
// numbers, so 1 and 1.0 compare equal).
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	var norm any
	if err := json.Unmarshal(b, &norm); err != nil {
		return err.Error()
	}
	b, _ = json.Marshal(norm)
	return string(b)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func firstUser(u ...*userInfo) *userInfo {
	for _, v := range u {
		if v != nil {
			return v
		}
	}
	return nil
}

package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// A VAP golden case is a YAML file in testdata/vap: ValidatingAdmissionPolicies,
// bindings, params, Namespaces, Kyverno policies and resources, and one
// Expect document (apiVersion test.arbiter.dev/v1) that also checks the
// HTTP code and reason of a denial and the audit annotations.
type vapExpectDoc struct {
	APIVersion  string            `json:"apiVersion"`
	Kind        string            `json:"kind"`
	Description string            `json:"description"`
	Operation   string            `json:"operation"`
	Mode        string            `json:"mode"`
	UserInfo    *userInfo         `json:"userInfo"`
	LoadError   string            `json:"loadError"`
	Cases       []vapExpectedCase `json:"cases"`
}

type vapExpectedCase struct {
	expectedCase `json:",inline"`
	Code         int32             `json:"code"`
	Reason       *string           `json:"reason"`
	Annotations  map[string]string `json:"auditAnnotations"`
	// NoAnnotations requires that the decision has no audit annotations.
	NoAnnotations bool `json:"noAuditAnnotations"`
	// Denials are the exact denials, in order.
	Denials []string `json:"denials"`
	// Namespace overrides the request's namespace.
	Namespace string `json:"namespace"`
	// ResourceKind and ResourceVersion override the request's resource (for
	// requests on another version of a kind).
	ResourceVersion string `json:"resourceVersion"`
}

func TestVAPGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/vap/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no VAP golden cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) { runVAPGolden(t, file) })
	}
}

func runVAPGolden(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	var exp *vapExpectDoc
	var objs []*manifest.Object
	for _, d := range docs {
		if d.Kind() == "Expect" && strings.HasPrefix(d.APIVersion(), "test.arbiter.dev/") {
			b, _ := yaml.Marshal(d.Object)
			exp = &vapExpectDoc{}
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
	resources := map[string]*manifest.Object{}
	for _, o := range objs {
		if c := engine.Classify(o); c == engine.ClassResource || c == engine.ClassNamespace {
			resources[o.Ref()] = o
		}
	}
	if len(exp.Cases) == 0 {
		t.Fatal("no cases")
	}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for i, c := range exp.Cases {
		o, ok := resources[c.Resource]
		if !ok {
			t.Fatalf("case %d: no resource %q in the file", i, c.Resource)
		}
		if ps.IsParam(o) {
			t.Fatalf("case %d: %s is a param", i, c.Resource)
		}
		doc := &expectDoc{Operation: exp.Operation, Mode: exp.Mode, UserInfo: exp.UserInfo}
		req := goldenRequest(o, c.expectedCase, doc, now)
		switch firstNonEmpty(c.Mode, exp.Mode, "admission") {
		case "background":
			req.Mode = admission.ModeBackground
		case "cli":
			req.Mode = admission.ModeCLI
		}
		if c.Namespace != "" {
			req.Namespace = c.Namespace
		}
		if c.ResourceVersion != "" {
			req.Resource.Version = c.ResourceVersion
		}
		d := ps.Evaluate(context.Background(), req, nil)
		name := fmt.Sprintf("case %d (%s %s)", i, req.Operation, c.Resource)
		checkDecision(t, name, c.expectedCase, d)
		if c.Code != 0 && d.Code != c.Code {
			t.Errorf("%s: code = %d, want %d", name, d.Code, c.Code)
		}
		if c.Reason != nil && d.Reason != *c.Reason {
			t.Errorf("%s: reason = %q, want %q", name, d.Reason, *c.Reason)
		}
		if c.Denials != nil && !reflect.DeepEqual(d.Denials, c.Denials) {
			t.Errorf("%s: denials =\n  %q\nwant\n  %q", name, d.Denials, c.Denials)
		}
		for k, v := range c.Annotations {
			if got, ok := d.AuditAnnotations[k]; !ok || got != v {
				t.Errorf("%s: audit annotation %s = %q, want %q (all: %v)", name, k, got, v, d.AuditAnnotations)
			}
		}
		if c.NoAnnotations && len(d.AuditAnnotations) > 0 {
			t.Errorf("%s: audit annotations %v, want none", name, d.AuditAnnotations)
		}
	}
}

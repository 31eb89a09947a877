package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// TestExportVAPGolden exports the ValidatingPolicies of the golden cases as
// ValidatingAdmissionPolicies, loads them back, and requires that every
// admission case gets the same decision (allowed or denied, with or
// without warnings) from the export as from the source policy with its
// exceptions.
func TestExportVAPGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	exported, refused, compared := 0, 0, 0
	for _, file := range files {
		objs, exp := readGolden(t, file)
		if exp == nil || exp.LoadError != "" {
			continue
		}
		now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
		if exp.Now != "" {
			now, _ = time.Parse(time.RFC3339, exp.Now)
		}
		ps, err := engine.Compile(objs, engine.Options{})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, x := range ps.ExportVAP(now) {
			if x.Refused != "" {
				refused++
				t.Logf("%s: %s %s not exported: %s", filepath.Base(file), x.Kind, x.Policy, x.Refused)
				continue
			}
			exported++
			var source, target []*manifest.Object
			for _, o := range objs {
				switch engine.Classify(o) {
				case engine.ClassPolicy:
					if o.Name == x.Policy && o.Kind == x.Kind {
						source = append(source, o)
					}
				case engine.ClassException:
					source = append(source, o)
				case engine.ClassNamespace:
					source = append(source, o)
					target = append(target, o)
				}
			}
			for _, content := range x.Objects {
				target = append(target, manifest.NewObject("export:"+x.Policy, roundTrip(t, content)))
			}
			src, err := engine.Compile(source, engine.Options{})
			if err != nil {
				t.Fatalf("%s: source of %s: %v", file, x.Policy, err)
			}
			dst, err := engine.Compile(target, engine.Options{})
			if err != nil {
				t.Fatalf("%s: the export of %s does not load: %v", file, x.Policy, err)
			}
			resources := map[string]*manifest.Object{}
			for _, o := range objs {
				if c := engine.Classify(o); c == engine.ClassResource || c == engine.ClassNamespace {
					resources[o.Ref()] = o
				}
			}
			for i, c := range exp.Cases {
				if firstNonEmpty(c.Mode, exp.Mode, "admission") != "admission" {
					continue
				}
				o := resources[c.Resource]
				if o == nil {
					continue
				}
				req := goldenRequest(o, c, exp, now)
				a := src.Evaluate(context.Background(), req, &engine.EvalOptions{Now: now})
				req = goldenRequest(o, c, exp, now)
				b := dst.Evaluate(context.Background(), req, &engine.EvalOptions{Now: now})
				compared++
				if a.Allowed != b.Allowed || (len(a.Warnings) > 0) != (len(b.Warnings) > 0) {
					t.Errorf("%s case %d (%s), policy %s: ValidatingPolicy allowed=%v warnings=%q, exported VAP allowed=%v warnings=%q (%q)",
						filepath.Base(file), i, c.Resource, x.Policy, a.Allowed, a.Warnings, b.Allowed, b.Warnings, b.Denials)
				}
			}
		}
	}
	t.Logf("%d policies exported, %d refused; %d decisions compared", exported, refused, compared)
	if exported < 20 || compared < 50 {
		t.Fatalf("too little compared: %d exported, %d decisions", exported, compared)
	}
}

func roundTrip(t *testing.T, content map[string]any) map[string]any {
	t.Helper()
	b, err := yaml.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.Parse("export.yaml", b)
	if err != nil || len(docs) != 1 {
		t.Fatalf("exported YAML does not parse back: %v\n%s", err, b)
	}
	return docs[0].Object
}

func readGolden(t *testing.T, file string) ([]*manifest.Object, *expectDoc) {
	t.Helper()
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
			if err := yaml.Unmarshal(b, exp); err != nil {
				t.Fatalf("%s: Expect document: %v", file, err)
			}
			continue
		}
		objs = append(objs, manifest.NewObject(d.Source(), d.Object))
	}
	return objs, exp
}

// goldenRequest builds a case's request as the golden runner does.
func goldenRequest(o *manifest.Object, c expectedCase, exp *expectDoc, now time.Time) *admission.Request {
	op := firstNonEmpty(c.Operation, exp.Operation, admission.OpCreate)
	req := &admission.Request{Operation: op, SubResource: c.SubResource, Mode: admission.ModeAdmission}
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
	if ui := firstUser(c.UserInfo, exp.UserInfo); ui != nil {
		req.UserInfo = admission.UserInfo{Username: ui.Username, Groups: ui.Groups}
	}
	req.Fill()
	gk := schema.FromAPIVersionAndKind(o.APIVersion, o.Kind).GroupKind()
	if req.Namespace == "" && admission.IsNamespaced(gk) {
		req.Namespace = "default"
	}
	return req
}

package engine_test

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// TestExportMAPGolden exports the MutatingPolicies of the golden cases as
// MutatingAdmissionPolicies, loads them back, and requires that every
// admission case of an exported policy gets the same mutated object (and
// the same allowed or denied) from the export as from the source policy
// with its exceptions.
func TestExportMAPGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	exported, refused, compared, mutated := 0, 0, 0, 0
	for _, file := range files {
		objs, exp := readGolden(t, file)
		if exp == nil || exp.LoadError != "" {
			continue
		}
		now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
		if exp.Now != "" {
			now, _ = time.Parse(time.RFC3339, exp.Now)
		}
		ps, err := engine.Compile(objs, engine.Options{MutateExisting: true})
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, x := range ps.ExportMAP(now) {
			if x.Refused != "" {
				refused++
				t.Logf("%s: %s %s not exported: %s", filepath.Base(file), x.Kind, x.Policy, x.Refused)
				continue
			}
			exported++
			var source, target []*manifest.Object
			for _, o := range objs {
				switch engine.Classify(o) {
				case engine.ClassMutatingPolicy:
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
			for i, c := range exp.Cases {
				if firstNonEmpty(c.Mode, exp.Mode, "admission") != "admission" {
					continue
				}
				var o *manifest.Object
				for _, r := range objs {
					if c := engine.Classify(r); (c == engine.ClassResource || c == engine.ClassNamespace) && r.Ref() == exp.Cases[i].Resource {
						o = r
					}
				}
				if o == nil {
					continue
				}
				a := src.Evaluate(context.Background(), goldenRequest(o, c, exp, now), &engine.EvalOptions{Now: now})
				b := dst.Evaluate(context.Background(), goldenRequest(o, c, exp, now), &engine.EvalOptions{Now: now})
				compared++
				if a.Mutated != nil {
					mutated++
				}
				if !a.Allowed && strings.Contains(a.Message, "may not turn the object into another one") {
					// Arbiter refuses a mutation that renames the object;
					// a MutatingAdmissionPolicy does not (docs/cli.md).
					continue
				}
				// A denied request's partial mutations are not admitted.
				if a.Allowed != b.Allowed || a.Allowed && !reflect.DeepEqual(a.Mutated, b.Mutated) {
					t.Errorf("%s case %d (%s), policy %s: MutatingPolicy allowed=%v mutated=%v %q; exported MAP allowed=%v mutated=%v %q",
						filepath.Base(file), i, c.Resource, x.Policy, a.Allowed, a.Mutated, a.Denials, b.Allowed, b.Mutated, b.Denials)
				}
			}
		}
	}
	t.Logf("%d policies exported, %d refused; %d decisions compared, %d of them mutated", exported, refused, compared, mutated)
	if exported < 5 || compared < 15 || mutated < 8 {
		t.Fatalf("too little compared: %d exported, %d decisions, %d mutated", exported, compared, mutated)
	}
}

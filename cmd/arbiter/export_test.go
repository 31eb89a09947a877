package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// arbiter export vap prints a ValidatingAdmissionPolicy and binding per
// exportable policy, names refused ones with the reason, and exits 1 then.
func TestExportVAP(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	var out, errOut bytes.Buffer
	err := runExport(&out, &errOut, []string{"../../engine/testdata/golden/exception-images.yaml"}, now, (*engine.PolicySet).ExportVAP)
	if err != nil {
		t.Fatalf("export: %v (%s)", err, errOut.String())
	}
	docs, err := manifest.Parse("out.yaml", out.Bytes())
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, out.String())
	}
	if len(docs) == 0 || len(docs)%2 != 0 {
		t.Fatalf("%d documents:\n%s", len(docs), out.String())
	}
	objs := manifest.FromDocuments(docs)
	if engine.Classify(objs[0]) != engine.ClassVAP || engine.Classify(objs[1]) != engine.ClassVAPBinding ||
		!strings.HasPrefix(objs[0].Name, "vpol-") || objs[1].Name != objs[0].Name+"-binding" {
		t.Fatalf("unexpected objects: %s %s, %s %s", objs[0].Kind, objs[0].Name, objs[1].Kind, objs[1].Name)
	}
	if _, err := engine.Compile(objs, engine.Options{}); err != nil {
		t.Fatalf("the export does not load back: %v", err)
	}
	if !strings.Contains(out.String(), "variables.allowedImages") {
		t.Fatalf("exceptions.allowedImages not replaced:\n%s", out.String())
	}

	out.Reset()
	errOut.Reset()
	err = runExport(&out, &errOut, []string{"../../engine/testdata/golden/controls-granted.yaml"}, now, (*engine.PolicySet).ExportVAP)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitDenied {
		t.Fatalf("refused export: %v", err)
	}
	if !strings.Contains(errOut.String(), "define compensating controls (spec.validations), which a generated ValidatingAdmissionPolicy cannot evaluate") {
		t.Fatalf("reason: %q", errOut.String())
	}
}

// arbiter export map prints a MutatingAdmissionPolicy and binding per
// exportable MutatingPolicy (its exceptions folded in), names refused ones
// with the reason on stderr, and exits 1 then.
func TestExportMAP(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	var out, errOut bytes.Buffer
	err := runExport(&out, &errOut, []string{"../../engine/testdata/golden/mpol-exceptions.yaml"}, now, (*engine.PolicySet).ExportMAP)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitDenied {
		t.Fatalf("pin-images must be refused: %v", err)
	}
	if !strings.Contains(errOut.String(), "MutatingPolicy pin-images: not exported: it does not load as a MutatingAdmissionPolicy") ||
		!strings.Contains(errOut.String(), "spec.matchConditions[0].expression") {
		t.Fatalf("reason: %q", errOut.String())
	}
	docs, err := manifest.Parse("out.yaml", out.Bytes())
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, out.String())
	}
	objs := manifest.FromDocuments(docs)
	if len(objs) != 2 || engine.Classify(objs[0]) != engine.ClassMAP || engine.Classify(objs[1]) != engine.ClassMAPBinding ||
		objs[0].Name != "mpol-add-managed" || objs[1].Name != "mpol-add-managed-binding" {
		t.Fatalf("unexpected objects:\n%s", out.String())
	}
	// The live exceptions are negated matchConditions; the expired one is left out.
	for _, want := range []string{"name: legacy", "name: audited", "matchPolicy: Exact"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "expired") {
		t.Errorf("the expired exception was folded in:\n%s", out.String())
	}
	if _, err := engine.Compile(objs, engine.Options{}); err != nil {
		t.Fatalf("the export does not load back: %v", err)
	}

	out.Reset()
	errOut.Reset()
	err = runExport(&out, &errOut, []string{"../../engine/testdata/golden/mpol-mutate-existing-refused.yaml"}, now, (*engine.PolicySet).ExportMAP)
	if !errors.As(err, &ee) || ee.code != exitDenied || out.Len() != 0 {
		t.Fatalf("mutate-existing export: %v, output %q", err, out.String())
	}
	if !strings.Contains(errOut.String(), "it mutates existing resources") {
		t.Fatalf("reason: %q", errOut.String())
	}
}

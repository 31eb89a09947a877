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
	err := runExportVAP(&out, &errOut, []string{"../../engine/testdata/golden/exception-images.yaml"}, now)
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
	err = runExportVAP(&out, &errOut, []string{"../../engine/testdata/golden/controls-granted.yaml"}, now)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitDenied {
		t.Fatalf("refused export: %v", err)
	}
	if !strings.Contains(errOut.String(), "define compensating controls (spec.validations), which a generated ValidatingAdmissionPolicy cannot evaluate") {
		t.Fatalf("reason: %q", errOut.String())
	}
}

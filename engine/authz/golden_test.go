package authz_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

var update = flag.Bool("update", false, "rewrite testdata/golden")

// A case file (testdata/cases/NAME.yaml) holds policies and one document
// of kind Requests (apiVersion test.arbiter.dev/v1): the requests to
// decide, each an Envoy or HTTP CheckRequest (or an admission object).
// Every decision is rendered into testdata/golden/NAME.txt (go test
// -update rewrites it); the table of TestDecisions checks the facts that
// matter independently of the rendering.
type requestsDoc struct {
	Requests []caseRequest `json:"requests"`
}

type caseRequest struct {
	Name   string         `json:"name"`
	Shape  string         `json:"shape"` // Envoy, HTTP, or Kubernetes
	Object map[string]any `json:"object"`
}

// loadCase compiles the policies of a case file and returns its requests.
func loadCase(t *testing.T, file string) (*engine.PolicySet, []caseRequest) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*manifest.Object
	var reqs requestsDoc
	for _, o := range manifest.FromDocuments(docs) {
		if o.Kind == "Requests" {
			b, _ := json.Marshal(o.Content)
			if err := json.Unmarshal(b, &reqs); err != nil {
				t.Fatal(err)
			}
			continue
		}
		objs = append(objs, o)
	}
	ps, err := engine.Compile(objs, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ps, reqs.Requests
}

func shapeOf(t *testing.T, s string) admission.Shape {
	switch s {
	case "Envoy":
		return admission.ShapeEnvoy
	case "HTTP":
		return admission.ShapeHTTP
	case "", "Kubernetes":
		return admission.ShapeAdmission
	}
	t.Fatalf("unknown shape %q", s)
	return 0
}

func decide(t *testing.T, ps *engine.PolicySet, r caseRequest) *engine.Decision {
	t.Helper()
	req := &admission.Request{Object: r.Object, Shape: shapeOf(t, r.Shape), Mode: admission.ModeAdmission}
	if req.Shape == admission.ShapeAdmission {
		req.Fill()
	}
	return ps.Evaluate(context.Background(), req, &engine.EvalOptions{Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
}

// render writes a decision as the golden files show it.
func render(b *bytes.Buffer, name string, d *engine.Decision) {
	fmt.Fprintf(b, "== %s\nallowed: %v\n", name, d.Allowed)
	if !d.Allowed {
		fmt.Fprintf(b, "code: %d\nmessage: %s\n", d.Code, d.Message)
	}
	if a := d.Authorization; a != nil {
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, a.JSON, "", "  "); err != nil {
			pretty.Write(a.JSON)
		}
		fmt.Fprintf(b, "authorization: policy=%q allowed=%v code=%d\n%s\n", a.Policy, a.Allowed, a.Code, pretty.String())
	}
	for _, r := range d.Results {
		fmt.Fprintf(b, "result: %s %s/%s %s: %s\n", r.PolicyKind, r.Policy, r.Rule, r.Result, r.Message)
	}
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/cases/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			ps, reqs := loadCase(t, file)
			var b bytes.Buffer
			for _, r := range reqs {
				render(&b, r.Name, decide(t, ps, r))
			}
			golden := filepath.Join("testdata", "golden", name+".txt")
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if got := b.String(); got != string(want) {
				t.Errorf("%s differs from the decisions (go test -update rewrites it):\n%s", golden, got)
			}
		})
	}
}

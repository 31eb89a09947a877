package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/psa"
)

// A Pod Security query case is a YAML file in testdata/psa-query: a
// PodSecurityConfiguration (or none), Namespaces, PolicyExceptions and
// resources, and one ExpectQuery document with the inventory of Pod
// Security levels (PolicySet.PodSecurityInfos) and, per resource, the Pod
// Security levels that Applicable reports, one line each:
//
//	inventory:  LEVEL [ACTIONS] RESOURCES MODE:VERSION(defaults,NS,...) ... exceptions=KEY,...
//	applicable: PodSecurity LEVEL [ACTIONS] MODE:VERSION(NS) ... KEY=MATCH; ...
type psaQueryDoc struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Inventory  []string       `json:"inventory"`
	Cases      []psaQueryCase `json:"cases"`
}

type psaQueryCase struct {
	Resource  string `json:"resource"`
	Operation string `json:"operation"`
	Username  string `json:"username"`
	// Synthetic leaves the object out (Applicable without an object: the
	// exceptions are not evaluated).
	Synthetic  bool     `json:"synthetic"`
	Applicable []string `json:"applicable"`
}

func TestPSAQueryGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/psa-query/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Pod Security query cases: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) { runPSAQuery(t, file) })
	}
}

func psaInventoryLine(in psa.Info) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s] %s", in.Level, strings.Join(in.Actions, ","), psaResourcesWord(in.Resources))
	for _, u := range in.Uses {
		var where []string
		if u.Defaults {
			where = append(where, "defaults")
		}
		where = append(where, u.Namespaces...)
		fmt.Fprintf(&b, " %s:%s(%s)", u.Mode, u.Version, strings.Join(where, ","))
	}
	var keys []string
	for _, ex := range in.Exceptions {
		keys = append(keys, ex.Key())
	}
	fmt.Fprintf(&b, " exceptions=%s", strings.Join(keys, ","))
	return b.String()
}

// psaResourcesWord abbreviates the resources of a level: none, pods, or
// pods+workloads (the list is checked once, in TestPSAQueryResources).
func psaResourcesWord(rs []string) string {
	switch {
	case len(rs) == 0:
		return "none"
	case len(rs) == 1 && rs[0] == "v1/pods":
		return "pods"
	case len(rs) == 9 && rs[0] == "v1/pods":
		return "pods+workloads"
	}
	return strings.Join(rs, ",")
}

func psaApplicableLine(a engine.Applicable) string {
	var b strings.Builder
	key := a.Name
	if a.Namespace != "" {
		key = a.Namespace + "/" + a.Name
	}
	fmt.Fprintf(&b, "%s %s", a.Kind, key)
	if in := a.PodSecurity; in != nil {
		fmt.Fprintf(&b, " [%s] %s", strings.Join(in.Actions, ","), psaResourcesWord(in.Resources))
		for _, u := range in.Uses {
			fmt.Fprintf(&b, " %s:%s(%s)", u.Mode, u.Version, strings.Join(u.Namespaces, ","))
		}
	}
	var exs []string
	for _, e := range a.Exceptions {
		s := e.Exception.Key() + "=" + e.Match
		if e.HasControls {
			s += " (controls)"
		}
		exs = append(exs, s)
	}
	if len(exs) > 0 {
		fmt.Fprintf(&b, " | %s", strings.Join(exs, "; "))
	}
	return b.String()
}

func runPSAQuery(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := manifest.Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	var exp *psaQueryDoc
	var objs []*manifest.Object
	for _, d := range docs {
		if d.Kind() == "ExpectQuery" && strings.HasPrefix(d.APIVersion(), "test.arbiter.dev/") {
			b, _ := yaml.Marshal(d.Object)
			exp = &psaQueryDoc{}
			if err := yaml.UnmarshalStrict(b, exp); err != nil {
				t.Fatalf("ExpectQuery document: %v", err)
			}
			continue
		}
		objs = append(objs, manifest.NewObject(d.Source(), d.Object))
	}
	if exp == nil {
		t.Fatal("no ExpectQuery document")
	}
	ps, err := engine.Compile(objs, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var inventory []string
	for _, in := range ps.PodSecurityInfos() {
		inventory = append(inventory, psaInventoryLine(in))
	}
	if got, want := strings.Join(inventory, "\n"), strings.Join(exp.Inventory, "\n"); got != want {
		t.Errorf("inventory:\n%s\nwant:\n%s", got, want)
	}
	resources := map[string]*manifest.Object{}
	for _, o := range objs {
		if c := engine.Classify(o); c == engine.ClassResource || c == engine.ClassNamespace {
			resources[o.Ref()] = o
		}
	}
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for i, c := range exp.Cases {
		o, ok := resources[c.Resource]
		if !ok {
			t.Fatalf("case %d: no resource %q in the file", i, c.Resource)
		}
		req := &admission.Request{Operation: firstNonEmpty(c.Operation, admission.OpCreate), Mode: admission.ModeAdmission,
			UserInfo: admission.UserInfo{Username: c.Username}}
		obj := o.Content
		if c.Synthetic {
			md, _ := o.Content["metadata"].(map[string]any)
			obj = map[string]any{"apiVersion": o.APIVersion, "kind": o.Kind,
				"metadata": map[string]any{"name": md["name"], "namespace": md["namespace"], "labels": md["labels"]}}
		}
		if req.Operation == admission.OpDelete {
			req.OldObject = obj
		} else {
			req.Object = obj
		}
		req.Fill()
		var lines []string
		for _, a := range ps.Applicable(context.Background(), req, !c.Synthetic, &engine.EvalOptions{Now: now}) {
			lines = append(lines, psaApplicableLine(a))
		}
		if got, want := strings.Join(lines, "\n"), strings.Join(c.Applicable, "\n"); got != want {
			t.Errorf("case %d (%s %s): applicable:\n%s\nwant:\n%s", i, req.Operation, c.Resource, got, want)
		}
		if c.Synthetic || o.Kind == "Namespace" {
			continue
		}
		// The decision has results at exactly those levels, with those
		// actions (a skip for an exemption is no level that applies).
		var applied, decided []string
		for _, a := range ps.Applicable(context.Background(), req, true, &engine.EvalOptions{Now: now}) {
			if a.PodSecurity != nil {
				applied = append(applied, a.PodSecurity.Level+" "+strings.Join(a.PodSecurity.Actions, ","))
			}
		}
		d := ps.Evaluate(context.Background(), req, &engine.EvalOptions{Now: now})
		actions := map[string][]string{}
		var levels []string
		for _, r := range d.Results {
			if r.PolicyKind != psa.KindPodSecurity || r.Rule == "namespace-labels" || r.Properties["exemption"] != "" {
				continue
			}
			if _, ok := actions[r.Policy]; !ok {
				levels = append(levels, r.Policy)
			}
			actions[r.Policy] = append(actions[r.Policy], r.Actions...)
		}
		for _, l := range levels {
			var ordered []string
			for _, a := range []string{"Deny", "Audit", "Warn"} {
				if slices.Contains(actions[l], a) {
					ordered = append(ordered, a)
				}
			}
			decided = append(decided, l+" "+strings.Join(ordered, ","))
		}
		if got, want := strings.Join(applied, "; "), strings.Join(decided, "; "); got != want {
			t.Errorf("case %d (%s %s): Applicable says %q, the decision's results %q", i, req.Operation, c.Resource, got, want)
		}
	}
}

// The resources of a level: v1/pods, and the workload resources when it
// audits or warns.
func TestPSAQueryResources(t *testing.T) {
	config := manifest.NewObject("config.yaml", map[string]any{
		"apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
		"defaults": map[string]any{"enforce": "baseline", "audit": "restricted"},
	})
	ps, err := engine.Compile([]*manifest.Object{config}, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	infos := ps.PodSecurityInfos()
	if len(infos) != 2 {
		t.Fatalf("levels: %+v", infos)
	}
	if got := strings.Join(infos[0].Resources, ","); infos[0].Level != "baseline" || got != "v1/pods" {
		t.Errorf("baseline (enforce): %s", got)
	}
	want := "v1/pods,v1/replicationcontrollers,v1/podtemplates,apps/v1/deployments,apps/v1/replicasets,apps/v1/statefulsets,apps/v1/daemonsets,batch/v1/jobs,batch/v1/cronjobs"
	if got := strings.Join(infos[1].Resources, ","); infos[1].Level != "restricted" || got != want {
		t.Errorf("restricted (audit): %s", got)
	}
	if got := strings.Join(engine.PodSecurityLevels(), ","); got != "baseline,restricted" {
		t.Errorf("levels: %s", got)
	}
}

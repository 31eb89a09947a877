package mpol_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// jsonPatches are JSONPatch expressions ("%d" is a small number): changes,
// changes back, no-ops, failed tests, errors, identity changes, values read
// from the object, null containers, whole-document replacements.
var jsonPatches = []string{
	`[JSONPatch{op: "add", path: "/metadata/labels/k%d", value: "v"}]`,
	`[JSONPatch{op: "add", path: "/metadata/labels/app", value: object.metadata.labels.app}]`,
	`[JSONPatch{op: "replace", path: "/spec/containers/0/image", value: "img%d"}]`,
	`[JSONPatch{op: "remove", path: "/metadata/labels/k%d"}]`,
	`[JSONPatch{op: "test", path: "/metadata/labels/app", value: "nope"}, JSONPatch{op: "add", path: "/metadata/labels/never", value: "x"}]`,
	`[JSONPatch{op: "test", path: "/metadata/labels/app", value: object.metadata.labels.app}, JSONPatch{op: "add", path: "/metadata/annotations/t%d", value: "x"}]`,
	`[JSONPatch{op: "add", path: "/spec/nope/x", value: 1}]`,
	`[JSONPatch{op: "replace", path: "/metadata/name", value: "other"}]`,
	`[JSONPatch{op: "add", path: "/metadata/labels/k%d", value: "v"}, JSONPatch{op: "move", from: "/metadata/namespace", path: "/metadata/labels/ns"}]`,
	`[JSONPatch{op: "replace", path: "/metadata", value: {"name": dyn("p%d"), "namespace": dyn("ns")}}]`,
	`[JSONPatch{op: "remove", path: "/kind"}]`,
	`[JSONPatch{op: "add", path: "/metadata/uid", value: "u%d"}]`,
	`[JSONPatch{op: "add", path: "/spec/containers/-", value: {"name": "c%d", "image": "x"}}]`,
	`[JSONPatch{op: "copy", from: "/spec/containers/0", path: "/spec/containers/-"}]`,
	`[JSONPatch{op: "move", from: "/metadata/annotations", path: "/metadata/moved"}]`,
	`[JSONPatch{op: "move", from: "/metadata/moved", path: "/metadata/annotations"}]`,
	`[JSONPatch{op: "add", path: "/metadata/annotations/n%d", value: string(object.spec.containers.size())}]`,
	`[JSONPatch{op: "add", path: "/spec/initContainers", value: [object.spec.containers[0]]}]`,
	`[JSONPatch{op: "remove", path: "/metadata/labels/app"}, JSONPatch{op: "add", path: "/metadata/labels/app", value: "web"}]`,
	`[JSONPatch{op: "replace", path: "/metadata/labels/app", value: "web%d"}]`,
	`object.spec.containers.transformList(i, c, !has(c.imagePullPolicy), JSONPatch{op: "add", path: "/spec/containers/" + string(i) + "/imagePullPolicy", value: "IfNotPresent"})`,
	`[JSONPatch{op: "add", path: "/spec/securityContext", value: null}]`,
	`[JSONPatch{op: "add", path: "/spec/securityContext", value: {"runAsUser": %d}}]`,
	`[JSONPatch{op: "add", path: "/spec/securityContext/fsGroup", value: %d}]`,
	`true ? [] : [JSONPatch{op: "add", path: "/x", value: 1}]`,
	`has(object.metadata.labels.k1) ? [JSONPatch{op: "add", path: "/metadata/labels/seen", value: "k1"}] : []`,
	`[JSONPatch{op: "replace", path: "", value: {"apiVersion": dyn("v1"), "kind": dyn("Pod"), "metadata": dyn({"name": dyn("p"), "namespace": dyn("ns"), "labels": dyn({"app": "web"})}), "spec": object.spec}}]`,
	`[JSONPatch{op: "remove", path: "/spec/containers/1"}]`,
	`[JSONPatch{op: "add", path: "/spec/volumes/0/emptyDir/medium", value: "Memory"}, JSONPatch{op: "remove", path: "/spec/volumes/0/emptyDir/medium"}]`,
	`[JSONPatch{op: "add", path: "/spec/containers/0/securityContext/runAsUser", value: 1}]`,
	`[JSONPatch{op: "add", path: "/spec/containers/0/securityContext/runAsUser", value: 1.0}]`,
	`[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("a/b"), value: object.metadata.name}]`,
}

const inPlacePod = `apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: ns
  labels: {app: web}
  annotations: {a: b}
spec:
  containers:
  - {name: c1, image: nginx, securityContext: {runAsUser: 1}}
  - {name: c2, image: busybox}
  volumes:
  - {name: v, emptyDir: {}}
`

// randomPolicy is a MutatingPolicy of one to three JSON patches, with a
// variable, audit annotations, conditions and failurePolicy at random.
func randomPolicy(r *rand.Rand, name string) string {
	var b strings.Builder
	b.WriteString(onPods)
	if r.IntN(3) == 0 {
		b.WriteString("failurePolicy: Ignore\n")
	}
	if r.IntN(5) == 0 {
		b.WriteString("matchConditions:\n- name: c\n  expression: \"!has(object.metadata.labels.k2)\"\n")
	}
	vars := r.IntN(4) == 0
	if vars {
		b.WriteString("variables:\n- name: img\n  expression: object.spec.containers[0].image\n- name: c0\n  expression: object.spec.containers[0]\n")
	}
	b.WriteString("mutations:\n")
	for i := range 1 + r.IntN(3) {
		expr := jsonPatches[r.IntN(len(jsonPatches))]
		if vars && r.IntN(2) == 0 {
			// The variables read (the container as it was), then changed.
			expr = fmt.Sprintf(`[JSONPatch{op: "add", path: "/metadata/annotations/img%d", value: variables.img + string(variables.c0.image) + string(variables.c0.securityContext.runAsUser)}]`, i)
			if i%2 == 1 {
				expr = `[JSONPatch{op: "replace", path: "/spec/containers/0/image", value: "changed"}, JSONPatch{op: "add", path: "/spec/containers/0/securityContext/runAsUser", value: 7}]`
			}
		}
		if strings.Contains(expr, "%d") {
			expr = fmt.Sprintf(expr, r.IntN(3))
		}
		fmt.Fprintf(&b, "- patchType: JSONPatch\n  jsonPatch:\n    expression: %s\n", strings.ReplaceAll(mustJSON(expr), "\n", " "))
	}
	if r.IntN(4) == 0 {
		v := "string(object.spec.containers[0].image) + string(object.metadata.labels.size())"
		if vars {
			v += " + string(variables.img) + string(variables.c0.image)"
		}
		b.WriteString("auditAnnotations:\n- key: image\n  valueExpression: " + mustJSON(v) + "\n")
	}
	return policy(name, b.String())
}

func mustJSON(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// mutate runs the set on a fresh copy of the Pod; it returns the results,
// the object as mutated, and the request's object afterwards.
func mutate(t *testing.T, s *mpol.Set, mode admission.Mode, exact bool) ([]outcome.Result, map[string]any, map[string]any) {
	t.Helper()
	obj := decode(t, inPlacePod)
	req := &admission.Request{Object: obj, Mode: mode}
	req.Fill()
	rq := celeval.NewRequest(context.Background(), req, celeval.Config{ExactCost: exact})
	var out outcome.Outcome
	s.Mutate(rq, &out)
	return out.Results, rq.Object(), obj
}

// TestInPlaceAsCopying runs random chains of MutatingPolicies with their
// JSON patches applied in place by one Patcher and by copying, and checks
// the results (Mutated included) and the objects are the same, and that
// the request's object never changes.
func TestInPlaceAsCopying(t *testing.T) {
	n := 400
	if testing.Short() {
		n = 60
	}
	pristine := decode(t, inPlacePod)
	mutatedSeen, unchangedSeen := 0, 0
	for seed := range uint64(n) {
		r := rand.New(rand.NewPCG(seed, 41))
		var docs []string
		for i := range 2 + r.IntN(8) {
			docs = append(docs, randomPolicy(r, fmt.Sprintf("p%02d", i)))
		}
		s := newSet(t, docs...)
		mode := []admission.Mode{admission.ModeAdmission, admission.ModeCLI, admission.ModeBackground}[r.IntN(3)]
		exact := r.IntN(2) == 0
		rerun := r.IntN(3) == 0
		run := func(copyOnly bool) ([]outcome.Result, map[string]any) {
			mpol.SetCopyOnly(copyOnly)
			celeval.SetRerunAlways(rerun)
			defer func() {
				mpol.SetCopyOnly(false)
				celeval.SetRerunAlways(false)
			}()
			results, got, obj := mutate(t, s, mode, exact)
			if !reflect.DeepEqual(obj, pristine) {
				t.Fatalf("seed %d (copy only %v): the request's object changed: %s", seed, copyOnly, show(obj))
			}
			return results, got
		}
		wantResults, want := run(true)
		gotResults, got := run(false)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: in place:\n%s\nby copying:\n%s\npolicies:\n%s", seed, show(got), show(want), strings.Join(docs, "---\n"))
		}
		if !reflect.DeepEqual(gotResults, wantResults) {
			t.Fatalf("seed %d: in place:\n%v\nby copying:\n%v\npolicies:\n%s", seed, gotResults, wantResults, strings.Join(docs, "---\n"))
		}
		for _, res := range gotResults {
			if res.Mutated {
				mutatedSeen++
			} else if res.Result == outcome.Pass {
				unchangedSeen++
			}
		}
	}
	if mutatedSeen == 0 || unchangedSeen == 0 {
		t.Errorf("%d mutated results, %d unchanged passes", mutatedSeen, unchangedSeen)
	}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

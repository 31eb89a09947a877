package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// TestSameChangesSameDigestAndDecisions: for random object sets, two
// servers (two stores) fed the same changes in the same order have equal
// revisions and digests after every change, and give the same decisions.
func TestSameChangesSameDigestAndDecisions(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed*31))
			a := startServer(t, server.Config{})
			b := startServer(t, server.Config{})
			ctx := context.Background()
			pods := make([][]byte, 8)
			for i := range pods {
				pods[i], _ = json.Marshal(map[string]any{
					"apiVersion": "v1", "kind": "Pod",
					"metadata": map[string]any{"name": fmt.Sprintf("app%d-x", i%4), "namespace": fmt.Sprintf("ns-%d", i%3),
						"labels": map[string]any{"tier": fmt.Sprint(i % 2)}},
					"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": fmt.Sprintf("img:%d", i)}}},
				})
			}
			for step := 0; step < 40; step++ {
				objs := randomObjects(rng)
				ca, erra := a.LoadObjects(ctx, objs)
				cb, errb := b.LoadObjects(ctx, objs)
				if (erra == nil) != (errb == nil) {
					t.Fatalf("step %d: %v vs %v", step, erra, errb)
				}
				if ca.Revision != cb.Revision || ca.Digest != cb.Digest {
					t.Fatalf("step %d: %d/%s vs %d/%s", step, ca.Revision, ca.Digest, cb.Revision, cb.Digest)
				}
				for _, p := range pods {
					ra, err := a.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: p})
					if err != nil {
						t.Fatal(err)
					}
					rb, err := b.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: p})
					if err != nil {
						t.Fatal(err)
					}
					if render(ra) != render(rb) {
						t.Fatalf("step %d: decisions differ:\n%s\n%s", step, render(ra), render(rb))
					}
				}
			}
		})
	}
}

func render(r *arbiterv1.DecideResponse) string {
	s := fmt.Sprintf("%v %d %s %q %q", r.GetAllowed(), r.GetRevision(), r.GetDigest(), r.GetWarnings(), r.GetStatus().GetMessage())
	for _, x := range r.GetResults() {
		s += fmt.Sprintf(" [%s %s %s %q %v]", x.GetPolicy(), x.GetRule(), x.GetResult(), x.GetMessage(), x.GetExceptions())
	}
	return s
}

// randomObjects returns 1–4 random upserts: policies with namespace
// selectors, exceptions, and Namespaces.
func randomObjects(rng *rand.Rand) []*manifest.Object {
	var out []*manifest.Object
	used := map[string]bool{}
	for n := 1 + rng.IntN(4); len(out) < n; {
		var o *manifest.Object
		switch rng.IntN(3) {
		case 0:
			name := fmt.Sprintf("p%d", rng.IntN(6))
			o = manifest.NewObject("rand", map[string]any{
				"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
				"metadata": map[string]any{"name": name},
				"spec": map[string]any{
					"validationActions": []any{[]string{"Deny", "Warn", "Audit"}[rng.IntN(3)]},
					"matchConstraints": map[string]any{
						"namespaceSelector": map[string]any{"matchLabels": map[string]any{"env": fmt.Sprint(rng.IntN(2))}},
						"resourceRules": []any{map[string]any{
							"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"},
						}}},
					"validations": []any{map[string]any{
						"expression": fmt.Sprintf("!object.metadata.name.startsWith('app%d')", rng.IntN(4)),
						"message":    "no " + name,
					}},
				},
			})
		case 1:
			name := fmt.Sprintf("e%d", rng.IntN(6))
			o = manifest.NewObject("rand", map[string]any{
				"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
				"metadata": map[string]any{"name": name, "namespace": "exc"},
				"spec": map[string]any{
					"policyRefs":      []any{map[string]any{"name": fmt.Sprintf("p%d", rng.IntN(6)), "kind": "ValidatingPolicy"}},
					"matchConditions": []any{map[string]any{"name": "l", "expression": fmt.Sprintf("object.metadata.labels.tier == '%d'", rng.IntN(2))}},
				},
			})
		default:
			o = manifest.NewObject("rand", map[string]any{
				"apiVersion": "v1", "kind": "Namespace",
				"metadata": map[string]any{"name": fmt.Sprintf("ns-%d", rng.IntN(3)), "labels": map[string]any{"env": fmt.Sprint(rng.IntN(2))}},
			})
		}
		if used[o.Ref()] {
			continue
		}
		used[o.Ref()] = true
		out = append(out, o)
	}
	return out
}

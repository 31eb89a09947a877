package imageverify_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/imageverify"
)

// benchSetup is a Pod with 3 containers (images pinned to their digests,
// each signed with a cosign key) and a policy verifying them with the
// public key.
func benchSetup(b *testing.B) (*testRegistry, *engine.PolicySet, *admission.Request) {
	r := newRegistry(b)
	key := newCosignKey(b)
	var containers []any
	for i := range 3 {
		d := r.push(fmt.Sprintf("app%d:v1", i))
		key.sign(b, d, d, nil)
		containers = append(containers, map[string]any{"name": fmt.Sprintf("c%d", i), "image": d.String()})
	}
	policy := map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy",
		"metadata": map[string]any{"name": "cosign-key"},
		"spec": map[string]any{
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"},
			}}},
			"matchImageReferences": []any{map[string]any{"glob": r.host + "/*"}},
			"attestors": []any{map[string]any{"name": "key", "cosign": map[string]any{
				"key": map[string]any{"data": key.pem}, "ctlog": map[string]any{"insecureIgnoreTlog": true},
			}}},
			"validations": []any{map[string]any{
				"expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.key])).all(e, e > 0)",
				"message":    "not signed",
			}},
		},
	}
	ps, err := engine.Compile([]*manifest.Object{manifest.NewObject("bench", policy)}, engine.Options{})
	if err != nil {
		b.Fatal(err)
	}
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "app", "namespace": "apps"},
		"spec":     map[string]any{"containers": containers},
	}
	req := &admission.Request{Operation: admission.OpCreate, Object: pod, Namespace: "apps", Mode: admission.ModeAdmission}
	req.Fill()
	return r, ps, req
}

// BenchmarkEvaluateCosignCached: a decision whose verifications are cached
// (issue 19: at most 50 µs).
func BenchmarkEvaluateCosignCached(b *testing.B) {
	r, ps, req := benchSetup(b)
	v := newVerifier(b, r, imageverify.Config{}, imageverify.Options{})
	opts := &engine.EvalOptions{ImageVerifier: v}
	if d := ps.Evaluate(context.Background(), req, opts); !d.Allowed {
		b.Fatalf("denied: %s", d.Message)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d := ps.Evaluate(context.Background(), req, opts); !d.Allowed {
			b.Fatal(d.Message)
		}
	}
}

// BenchmarkEvaluateCosignUncached: every decision reads the 3 images and
// their signatures from the (in-process) registry and verifies them.
func BenchmarkEvaluateCosignUncached(b *testing.B) {
	r, ps, req := benchSetup(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		v := newVerifier(b, r, imageverify.Config{}, imageverify.Options{})
		if d := ps.Evaluate(context.Background(), req, &engine.EvalOptions{ImageVerifier: v}); !d.Allowed {
			b.Fatal(d.Message)
		}
	}
}

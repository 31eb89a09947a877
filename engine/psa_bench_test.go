package engine_test

import (
	"context"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// BenchmarkPodSecurityAdmission decides a compliant and a violating Pod at
// the restricted level (enforce, audit and warn restricted:latest, from a
// PodSecurityConfiguration's defaults or from the namespace's labels) with
// Pod Security Admission alone — no other policy — through
// PolicySet.Evaluate.
func BenchmarkPodSecurityAdmission(b *testing.B) {
	config := manifest.NewObject("config", map[string]any{
		"apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
		"defaults": map[string]any{"enforce": "restricted", "audit": "restricted", "warn": "restricted"},
	})
	namespace := manifest.NewObject("namespace", map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": "bench", "labels": map[string]any{
			"pod-security.kubernetes.io/enforce": "restricted",
			"pod-security.kubernetes.io/audit":   "restricted",
			"pod-security.kubernetes.io/warn":    "restricted",
		}},
	})
	_, pods := loadSet(b, "testdata/pss/compliant-pod.yaml", "testdata/pss/violating-pod.yaml")
	for _, set := range []struct {
		name string
		objs []*manifest.Object
	}{{"config", []*manifest.Object{config}}, {"labels", []*manifest.Object{namespace}}} {
		ps, err := engine.Compile(set.objs, engine.Options{})
		if err != nil {
			b.Fatal(err)
		}
		for _, pod := range []struct {
			name    string
			allowed bool
		}{{"compliant-pod", true}, {"violating-pod", false}} {
			o := resourceNamed(b, pods, pod.name)
			b.Run(set.name+"/"+pod.name, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					req := &admission.Request{Object: o.Content}
					req.Fill()
					d := ps.Evaluate(ctx, req, nil)
					if d.Allowed != pod.allowed || len(d.Results) != 1 {
						b.Fatalf("allowed %v, %d results", d.Allowed, len(d.Results))
					}
				}
			})
		}
	}
}

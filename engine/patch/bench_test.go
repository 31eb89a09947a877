package patch

import (
	"encoding/json"
	"errors"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// benchOps is a typical mutation of a Pod: a label added to the existing
// labels, an annotation whose key holds a "/", a container's image replaced.
func benchOps() []Op {
	return []Op{
		{Op: "add", Path: "/metadata/labels/team", Value: "payments"},
		{Op: "add", Path: "/metadata/annotations/policies.example.com~1mutated-by", Value: "add-defaults"},
		{Op: "replace", Path: "/spec/containers/0/image", Value: "registry.example.com/shop/web:1.8.4"},
	}
}

func benchPod(b *testing.B) map[string]any {
	return decodeObject(b, corpus(b)["pod.json"])
}

// BenchmarkApplyJSONPatch applies the 3-operation patch to a Pod.
func BenchmarkApplyJSONPatch(b *testing.B) {
	pod, ops := benchPod(b), benchOps()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ApplyJSONPatch(pod, ops); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyJSONPatchEvanphx is the same patch as kube-apiserver and
// Kyverno apply it: the operations built as jsonpatch.Operations, the Pod
// encoded to JSON, evanphx's Apply, and the result decoded back into
// JSON-shaped data (manifest.DecodeJSON) for the next policy.
func BenchmarkApplyJSONPatchEvanphx(b *testing.B) {
	pod, ops := benchPod(b), benchOps()
	b.ReportAllocs()
	for b.Loop() {
		p, ok := buildReference(ops)
		if !ok {
			b.Fatal("build")
		}
		doc, err := json.Marshal(pod)
		if err != nil {
			b.Fatal(err)
		}
		out, err := p.Apply(doc)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := manifest.DecodeJSON(out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDiff diffs the Pod and ApplyJSONPatch's result (which shares
// the untouched subtrees, as in the engine), then writes the patch.
func BenchmarkDiff(b *testing.B) {
	pod := benchPod(b)
	after, err := ApplyJSONPatch(pod, benchOps())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("shared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(Diff(pod, after)) != 3 {
				b.Fatal("not 3 operations")
			}
		}
	})
	b.Run("shared+Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Marshal(Diff(pod, after)); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Two separately decoded objects: every subtree walked.
	unshared := deepCopy(after)
	b.Run("unshared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if len(Diff(pod, unshared)) != 3 {
				b.Fatal("not 3 operations")
			}
		}
	})
}

// chainPatches are ten mutations, as ten policies would make them.
func chainPatches() [][]Op {
	return [][]Op{
		benchOps(),
		{{Op: "add", Path: "/metadata/labels/cost-center", Value: "cc-42"}},
		{{Op: "test", Path: "/spec/securityContext/runAsNonRoot", Value: true}, {Op: "add", Path: "/spec/securityContext/runAsGroup", Value: int64(3000)}},
		{{Op: "add", Path: "/spec/containers/0/securityContext/seccompProfile", Value: map[string]any{"type": "RuntimeDefault"}}},
		{{Op: "add", Path: "/spec/containers/1/securityContext/allowPrivilegeEscalation", Value: false}},
		{{Op: "add", Path: "/spec/containers/0/env/-", Value: map[string]any{"name": "REGION", "value": "eu-west-1"}}},
		{{Op: "replace", Path: "/spec/containers/1/resources/limits/memory", Value: "256Mi"}},
		{{Op: "add", Path: "/metadata/annotations/sidecar.example.com~1injected", Value: "true"}},
		{{Op: "add", Path: "/spec/tolerations/-", Value: map[string]any{"key": "dedicated", "operator": "Equal", "value": "shop", "effect": "NoSchedule"}}},
		{{Op: "test", Path: "/metadata/labels/tier", Value: "backend"}, {Op: "add", Path: "/metadata/labels/never", Value: "x"}},
	}
}

// BenchmarkApplyJSONPatchChain10 applies ten patches in turn to a Pod, each
// to the previous result (one a no-op through its failed test), then
// computes and writes the patch from the Pod to the result: the mutation
// half of an admission request through ten mutating policies.
func BenchmarkApplyJSONPatchChain10(b *testing.B) {
	pod, chain := benchPod(b), chainPatches()
	b.ReportAllocs()
	for b.Loop() {
		obj := pod
		for _, ops := range chain {
			var err error
			if obj, err = ApplyJSONPatch(obj, ops); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := Marshal(Diff(pod, obj)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyJSONPatchChain10Evanphx is the same chain as kube-apiserver
// and Kyverno run it: a JSON round trip per patch.
func BenchmarkApplyJSONPatchChain10Evanphx(b *testing.B) {
	pod, chain := benchPod(b), chainPatches()
	b.ReportAllocs()
	for b.Loop() {
		obj := pod
		for _, ops := range chain {
			p, _ := buildReference(ops)
			doc, err := json.Marshal(obj)
			if err != nil {
				b.Fatal(err)
			}
			out, err := p.Apply(doc)
			if errors.Is(err, jsonpatch.ErrTestFailed) {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			if obj, err = manifest.DecodeJSON(out); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkPatcherChain10 is BenchmarkApplyJSONPatchChain10 through one
// Patcher, which copies each container once for the ten patches.
func BenchmarkPatcherChain10(b *testing.B) {
	pod, chain := benchPod(b), chainPatches()
	b.ReportAllocs()
	for b.Loop() {
		p := NewPatcher(pod, Options{})
		for _, ops := range chain {
			if _, err := p.Apply(ops); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := Marshal(Diff(pod, p.Object())); err != nil {
			b.Fatal(err)
		}
	}
}

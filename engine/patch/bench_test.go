package patch

import (
	"encoding/json"
	"testing"

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

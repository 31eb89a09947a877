package schema

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
)

// benchApplyConfiguration is the benchmark's apply configuration: set a label
// and a container's securityContext, on fixturePod (two containers, an init
// container, three volumes, managed fields).
const benchApplyConfiguration = podHead + `
metadata:
  labels:
    example.com/mutated: "true"
spec:
  containers:
  - name: web
    securityContext:
      runAsNonRoot: true
      runAsUser: 1000
`

// BenchmarkApplyConfiguration: go test -run '^$' -bench ApplyConfiguration -benchmem ./engine/schema
func BenchmarkApplyConfiguration(b *testing.B) {
	pod := mustJSON(b, fixturePod)
	ac := mustJSON(b, benchApplyConfiguration)
	tc := Builtin()
	if _, err := ApplyConfiguration(tc, pod, ac, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := ApplyConfiguration(tc, pod, ac, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyConfigurationParts: where the time goes. "smd" is the
// structured-merge-diff path (what ApplyConfiguration did before the fast
// path, and what k8s.io/apiserver does); "validate-live" and "merge" are
// the two halves of the fast path.
func BenchmarkApplyConfigurationParts(b *testing.B) {
	pod := mustJSON(b, fixturePod)
	ac := mustJSON(b, benchApplyConfiguration)
	tc := Builtin()
	root := tc.(fastTyper).fastType(k8sschema.GroupVersionKind{Version: "v1", Kind: "Pod"})
	b.Run("smd", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := applySMD(tc, &unstructured.Unstructured{Object: pod}, &unstructured.Unstructured{Object: ac}, false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := fastApply(root, pod, ac, false); !ok {
				b.Fatal("not fast")
			}
		}
	})
	b.Run("validate-live", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !root.valid(pod, true) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("merge", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := root.merge(pod, ac); !ok {
				b.Fatal("no merge")
			}
		}
	})
}

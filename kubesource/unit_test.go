package kubesource

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/arbiter-pdp/arbiter/store"
)

func TestFloor(t *testing.T) {
	const term = uint64(1) << TermBits
	tests := []struct {
		name        string
		transitions int32
		current     uint64
		want        uint64
	}{
		{"first holder, empty store", 0, 0, 1*term + 1},
		{"first holder, store from before HA", 0, 57, 1*term + 1},
		{"second holder", 1, 1*term + 40, 2*term + 1},
		{"a lagging replica still jumps past earlier terms", 5, 2*term + 3, 6*term + 1},
		{"a recreated Lease (transitions reset) still moves up", 0, 7*term + 9, 8*term + 1},
		{"negative transitions read as zero", -3, 0, 1*term + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Floor(tt.transitions, tt.current)
			if got != tt.want {
				t.Fatalf("Floor(%d, %d) = %d (term %d), want %d (term %d)", tt.transitions, tt.current, got, got>>TermBits, tt.want, tt.want>>TermBits)
			}
			if got <= tt.current {
				t.Fatalf("floor %d is not above the current revision %d", got, tt.current)
			}
		})
	}
}

func TestIdentityCarriesTheAddress(t *testing.T) {
	for _, addr := range []string{"10.0.0.7:50051", "[::1]:50051", "arbiter-0.arbiter.ns.svc:50051"} {
		a, b := Identity(addr), Identity(addr)
		if a == b {
			t.Errorf("two candidacies of %s have the same identity %s", addr, a)
		}
		if got := AddressOf(a); got != addr {
			t.Errorf("AddressOf(%q) = %q, want %q", a, got, addr)
		}
	}
	if got := AddressOf("plain:1"); got != "plain:1" {
		t.Errorf("AddressOf without a nonce = %q", got)
	}
}

func TestNormalize(t *testing.T) {
	meta := func(extra map[string]any) map[string]any {
		m := map[string]any{"name": "x", "uid": "u-1", "creationTimestamp": "2026-01-01T00:00:00Z",
			"resourceVersion": "42", "generation": int64(3), "managedFields": []any{map[string]any{"manager": "kubectl"}}}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	tests := []struct {
		name     string
		obj      map[string]any
		want     string // JSON of the normalized object
		notEqual bool
	}{
		{"policy: volatile metadata and status go, status.generated stays",
			map[string]any{"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": meta(nil),
				"spec": map[string]any{"a": int64(1)}, "status": map[string]any{"generated": true, "conditionStatus": map[string]any{"ready": true}}},
			`{"apiVersion":"policies.kyverno.io/v1","kind":"ValidatingPolicy","metadata":{"creationTimestamp":"2026-01-01T00:00:00Z","name":"x","uid":"u-1"},"spec":{"a":1},"status":{"generated":true}}`, false},
		{"policy without generated: no status",
			map[string]any{"apiVersion": "policies.kyverno.io/v1beta1", "kind": "NamespacedValidatingPolicy", "metadata": meta(nil),
				"spec": map[string]any{}, "status": map[string]any{"conditionStatus": map[string]any{"ready": false}}},
			`{"apiVersion":"policies.kyverno.io/v1beta1","kind":"NamespacedValidatingPolicy","metadata":{"creationTimestamp":"2026-01-01T00:00:00Z","name":"x","uid":"u-1"},"spec":{}}`, false},
		{"kubectl's last-applied annotation goes, others stay",
			map[string]any{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
				"metadata": meta(map[string]any{"annotations": map[string]any{lastApplied: "{}", "team": "a"}}), "status": map[string]any{"typeChecking": map[string]any{}}},
			`{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy","metadata":{"annotations":{"team":"a"},"creationTimestamp":"2026-01-01T00:00:00Z","name":"x","uid":"u-1"}}`, false},
		{"Namespace keeps its status (namespaceObject)",
			map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": meta(map[string]any{"annotations": map[string]any{lastApplied: "{}"}}),
				"status": map[string]any{"phase": "Active"}},
			`{"apiVersion":"v1","kind":"Namespace","metadata":{"creationTimestamp":"2026-01-01T00:00:00Z","name":"x","uid":"u-1"},"status":{"phase":"Active"}}`, false},
		{"a param keeps its status",
			map[string]any{"apiVersion": "example.com/v1", "kind": "Limits", "metadata": meta(nil), "status": map[string]any{"max": int64(3)}},
			`{"apiVersion":"example.com/v1","kind":"Limits","metadata":{"creationTimestamp":"2026-01-01T00:00:00Z","name":"x","uid":"u-1"},"status":{"max":3}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: tt.obj}
			before, _ := json.Marshal(tt.obj)
			got, err := json.Marshal(normalize(u))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("normalize =\n%s\nwant\n%s", got, tt.want)
			}
			if after, _ := json.Marshal(tt.obj); string(after) != string(before) {
				t.Fatal("normalize modified the informer's object")
			}
			// Another resourceVersion and managedFields: the same bytes.
			u2 := u.DeepCopy()
			u2.SetResourceVersion("43")
			u2.SetManagedFields(nil)
			if got2, _ := json.Marshal(normalize(u2)); string(got2) != string(got) {
				t.Fatalf("a resourceVersion-only change stores different bytes:\n%s\n%s", got, got2)
			}
		})
	}
}

func TestKeyOfSource(t *testing.T) {
	k := store.Key{Group: "policies.kyverno.io", Kind: "PolicyException", Namespace: "ns", Name: "e"}
	for _, src := range []string{sourceOf(k), "store:" + k.String()} {
		got, ok := keyOfSource(src)
		if !ok || got != k {
			t.Errorf("keyOfSource(%q) = %v %v", src, got, ok)
		}
	}
	for _, src := range []string{"", "changes[0]", "file.yaml", "kube:bad"} {
		if k, ok := keyOfSource(src); ok {
			t.Errorf("keyOfSource(%q) = %v, want none", src, k)
		}
	}
}

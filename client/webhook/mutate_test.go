package webhook_test

import (
	"encoding/json"
	"net/http"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"

	"github.com/arbiter-pdp/arbiter/client/webhook"
	"github.com/arbiter-pdp/arbiter/server"
)

func podReview(t *testing.T, uid string, pod []byte) []byte {
	t.Helper()
	b, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       apitypes.UID("uid-" + uid),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Name:      "web",
			Namespace: "apps",
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: pod},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMutateEndpoint: the API server's mutating call (/mutate) gets the
// mutations as a JSONPatch (no validation: a Pod only the mutation makes
// compliant is allowed there); its validating call (/validate) validates
// the object as it will be admitted: the original Pod is denied with the
// validating policy's message, the patched one allowed.
func TestMutateEndpoint(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, "testdata/mutation")
	s := startShim(t, ds.addr, webhook.Config{})
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"apps"},"spec":{"containers":[{"name":"app","image":"nginx"}]}}`)

	resp, body := s.postTo(t, "/mutate?timeout=10s", podReview(t, "1", pod))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/mutate: HTTP %d: %s", resp.StatusCode, body)
	}
	out := decodeReview(t, body).Response
	if !out.Allowed || out.PatchType == nil || *out.PatchType != admissionv1.PatchTypeJSONPatch || len(out.Patch) == 0 || out.UID != "uid-1" {
		t.Fatalf("/mutate response: %+v", out)
	}
	p, err := jsonpatch.DecodePatch(out.Patch)
	if err != nil {
		t.Fatalf("patch %s: %v", out.Patch, err)
	}
	mutated, err := p.Apply(pod)
	if err != nil {
		t.Fatal(err)
	}

	resp, body = s.post(t, podReview(t, "2", pod))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/validate: HTTP %d: %s", resp.StatusCode, body)
	}
	out = decodeReview(t, body).Response
	if out.Allowed || out.Patch != nil || out.Result == nil || out.Result.Message != "Policy require-team failed: a team label is required" {
		t.Fatalf("/validate of the original pod: %+v", out)
	}

	resp, body = s.post(t, podReview(t, "3", mutated))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/validate: HTTP %d: %s", resp.StatusCode, body)
	}
	out = decodeReview(t, body).Response
	if !out.Allowed || out.Patch != nil {
		t.Fatalf("/validate of the mutated pod %s: %+v", mutated, out)
	}
}

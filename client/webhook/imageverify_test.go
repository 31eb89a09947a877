package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/arbiter-pdp/arbiter/client/webhook"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/imageverify"
	"github.com/arbiter-pdp/arbiter/internal/ivtest"
	"github.com/arbiter-pdp/arbiter/server"
)

// TestMutateDigest: an ImageValidatingPolicy (mutateDigest and verifyDigest
// by default) behind the shim, against an in-process registry: /mutate
// pins the signed image's tag to its digest (the JSONPatch), /validate
// admits the pinned Pod and denies the unpinned one (verifyDigest) and
// an unsigned image (the policy's message).
func TestMutateDigest(t *testing.T) {
	r := ivtest.NewRegistry(t)
	key := ivtest.NewCosignKey(t)
	signed := r.Push("app:v1")
	key.Sign(t, signed)
	unsigned := r.Push("unsigned:v1")
	v, err := imageverify.New(imageverify.Config{InsecureRegistries: []string{r.Host}}, imageverify.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ds := startDecisionServer(t, server.Config{ImageVerifier: v})
	if _, err := ds.LoadObjects(context.Background(), []*manifest.Object{manifest.NewObject("ivpol", r.Policy("signed-images", key))}); err != nil {
		t.Fatal(err)
	}
	s := startShim(t, ds.addr, webhook.Config{})
	podOf := func(image string) []byte {
		b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "web", "namespace": "apps"},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": image}}}})
		return b
	}
	pod := podOf(r.Ref("app:v1"))

	resp, body := s.postTo(t, "/mutate?timeout=10s", podReview(t, "1", pod))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/mutate: HTTP %d: %s", resp.StatusCode, body)
	}
	out := decodeReview(t, body).Response
	if !out.Allowed || out.PatchType == nil || *out.PatchType != admissionv1.PatchTypeJSONPatch {
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
	if want := podOf(r.Ref("app:v1") + "@" + signed.DigestStr()); !jsonEqual(t, mutated, want) {
		t.Fatalf("/mutate patch %s gives %s, want %s", out.Patch, mutated, want)
	}

	for i, c := range []struct {
		pod     []byte
		allowed bool
		message string
	}{
		{mutated, true, ""},
		{pod, false, "Policy signed-images failed: image " + r.Ref("app:v1") + " does not have a digest"},
		{podOf(unsigned.String()), false, "Policy signed-images failed: images must be signed"},
	} {
		resp, body := s.post(t, podReview(t, "v"+string(rune('0'+i)), c.pod))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/validate: HTTP %d: %s", resp.StatusCode, body)
		}
		out := decodeReview(t, body).Response
		var msg string
		if out.Result != nil {
			msg = out.Result.Message
		}
		if out.Allowed != c.allowed || msg != c.message || out.Patch != nil {
			t.Errorf("/validate of %s: allowed %v, message %q; want %v, %q", c.pod, out.Allowed, msg, c.allowed, c.message)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

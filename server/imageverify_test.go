package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/imageverify"
	"github.com/arbiter-pdp/arbiter/internal/gctune"
	"github.com/arbiter-pdp/arbiter/internal/ivtest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/metrics"
)

// imagePod is a Decide request for a Pod whose containers run images.
func imagePod(name string, images ...string) *arbiterv1.DecideRequest {
	var containers []any
	for i, img := range images {
		containers = append(containers, map[string]any{"name": "c" + string(rune('0'+i)), "image": img})
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": "apps"},
		"spec":     map[string]any{"containers": containers}})
	return &arbiterv1.DecideRequest{ObjectJson: b}
}

// startImageServer starts a server whose image verifier reaches the
// in-process registry r, holding r's cosign policy "signed-images".
func startImageServer(t testing.TB, r *ivtest.Registry, key *ivtest.CosignKey, m *metrics.Metrics) *testServer {
	t.Helper()
	v, err := imageverify.New(imageverify.Config{InsecureRegistries: []string{r.Host}, Timeout: imageverify.Duration(5e9)},
		imageverify.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Config{ImageVerifier: v, Metrics: m})
	if _, err := ts.LoadObjects(context.Background(), []*manifest.Object{manifest.NewObject("ivpol", r.Policy("signed-images", key))}); err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestImageVerificationOverGRPC: an ImageValidatingPolicy through Decide
// over gRPC, against images pushed to an in-process registry and signed
// with a cosign key: a signed image given by tag is admitted and pinned to
// its digest (the patch), an unsigned one is denied with the policy's
// message, an image without a digest is denied by verifyDigest when
// nothing pins it; the verifier's counters are metrics; once the registry
// is down an image not yet verified is an error result, denied under
// failurePolicy Fail, and the server keeps serving the other requests.
func TestImageVerificationOverGRPC(t *testing.T) {
	r := ivtest.NewRegistry(t)
	key := ivtest.NewCosignKey(t)
	signed := r.Push("app:v1")
	key.Sign(t, signed)
	r.Push("unsigned:v1")
	late := r.Push("late:v1")
	key.Sign(t, late)
	m := metrics.New()
	ts := startImageServer(t, r, key, m)
	ctx := context.Background()

	// Signed, by tag: admitted, the tag pinned to the verified digest.
	req := imagePod("signed", r.Ref("app:v1"))
	resp, err := ts.c.Decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || resp.GetPatchType() != "JSONPatch" {
		t.Fatalf("signed image: allowed %v, patch type %q: %v", resp.GetAllowed(), resp.GetPatchType(), resp)
	}
	p, err := jsonpatch.DecodePatch(resp.GetPatch())
	if err != nil {
		t.Fatalf("patch %s: %v", resp.GetPatch(), err)
	}
	mutated, err := p.Apply(req.GetObjectJson())
	if err != nil {
		t.Fatal(err)
	}
	var pod struct {
		Spec struct {
			Containers []struct{ Image string } `json:"containers"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(mutated, &pod); err != nil {
		t.Fatal(err)
	}
	if want := r.Ref("app:v1") + "@" + signed.DigestStr(); len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Image != want {
		t.Fatalf("patch %s: image %v, want %s", resp.GetPatch(), pod.Spec.Containers, want)
	}
	var passed bool
	for _, res := range resp.GetResults() {
		if res.GetPolicy() == "signed-images" && res.GetSource() == "KyvernoImageValidatingPolicy" && res.GetResult() == "pass" {
			passed = true
		}
	}
	if !passed {
		t.Fatalf("no pass of signed-images: %v", resp.GetResults())
	}

	// The pinned Pod (what the API server admits), validated only: allowed,
	// from the cache.
	hits := gather(t, m, "arbiter_image_verification_cache_total", map[string]string{"result": "hit"})
	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: mutated, Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || len(resp.GetPatch()) != 0 {
		t.Fatalf("pinned pod: %v", resp)
	}
	if got := gather(t, m, "arbiter_image_verification_cache_total", map[string]string{"result": "hit"}); got <= hits {
		t.Fatalf("cache hits %v after %v: the pinned image was verified again", got, hits)
	}

	// Unsigned: denied with the policy's message.
	resp, err = ts.c.Decide(ctx, imagePod("unsigned", r.Ref("unsigned:v1")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllowed() || resp.GetStatus().GetMessage() != "Policy signed-images failed: images must be signed" {
		t.Fatalf("unsigned image: allowed %v, message %q", resp.GetAllowed(), resp.GetStatus().GetMessage())
	}

	// verifyDigest: a tag that nothing pins (validation only) is denied
	// before any registry access.
	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: imagePod("tag", r.Ref("app:v1")).GetObjectJson(), Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY})
	if err != nil {
		t.Fatal(err)
	}
	if want := "Policy signed-images failed: image " + r.Ref("app:v1") + " does not have a digest"; resp.GetAllowed() || resp.GetStatus().GetMessage() != want {
		t.Fatalf("tag, validation only: allowed %v, message %q, want %q", resp.GetAllowed(), resp.GetStatus().GetMessage(), want)
	}

	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"arbiter_image_verifications_total", map[string]string{"outcome": "verified"}},
		{"arbiter_image_verifications_total", map[string]string{"outcome": "not_verified"}},
		{"arbiter_image_verification_cache_total", map[string]string{"result": "miss"}},
		{"arbiter_image_registry_requests_total", nil},
		{"arbiter_image_registry_request_duration_seconds", nil},
	} {
		if got := gather(t, m, c.name, c.labels); got < 1 {
			t.Errorf("%s%v = %v, want ≥ 1", c.name, c.labels, got)
		}
	}
	if got := gather(t, m, "arbiter_image_verifications_total", map[string]string{"outcome": "error"}); got != 0 {
		t.Errorf("verification errors before the registry is down: %v", got)
	}

	// The registry goes down.
	r.Stop()
	resp, err = ts.c.Decide(ctx, imagePod("late", r.Ref("late:v1")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllowed() || len(resp.GetResults()) == 0 {
		t.Fatalf("registry down: allowed %v: %v", resp.GetAllowed(), resp)
	}
	// The digest cannot be pinned (an error under Deny), so the image keeps
	// its tag and verifyDigest fails it too.
	var errored bool
	for _, res := range resp.GetResults() {
		if res.GetResult() == "error" && res.GetRule() == "mutateDigest" && strings.Contains(res.GetMessage(), "failed to update digest: failed to resolve digest for image "+r.Ref("late:v1")) {
			errored = true
		}
	}
	if !errored {
		t.Errorf("registry down: no mutateDigest error: %v", resp.GetResults())
	}
	if msg := resp.GetStatus().GetMessage(); !strings.HasPrefix(msg, "Policy signed-images error: failed to update digest: ") {
		t.Errorf("registry down: message %q", msg)
	}
	// Validation only (the webhook's validating call of an already pinned
	// image): the image cannot be read, an error.
	lateReq := &arbiterv1.DecideRequest{ObjectJson: imagePod("late", late.String()).GetObjectJson(), Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY}
	resp, err = ts.c.Decide(ctx, lateReq)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllowed() || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetResult() != "error" ||
		!strings.HasPrefix(resp.GetStatus().GetMessage(), "Policy signed-images error: failed to evaluate policy: ") {
		t.Errorf("registry down, validation only: allowed %v, message %q: %v", resp.GetAllowed(), resp.GetStatus().GetMessage(), resp.GetResults())
	}
	// ... and the server keeps serving: a Pod of other images, and the
	// pinned Pod whose verification is cached.
	resp, err = ts.c.Decide(ctx, imagePod("elsewhere", "nginx:1.29@sha256:"+strings.Repeat("a", 64)))
	if err != nil || !resp.GetAllowed() {
		t.Fatalf("registry down, other images: %v %v", resp, err)
	}
	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: mutated, Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY})
	if err != nil || !resp.GetAllowed() {
		t.Fatalf("registry down, pinned pod verified before: %v %v", resp, err)
	}
	if got := gather(t, m, "arbiter_image_registry_errors_total", nil); got < 1 {
		t.Errorf("arbiter_image_registry_errors_total = %v after the registry went down", got)
	}
}

// BenchmarkDecideImageVerification: Decide over gRPC on loopback of a Pod
// with 3 containers against a cosign public-key ImageValidatingPolicy,
// the verifications cached (the first decision, before the timer, reads
// and verifies the images). tags: the admission call that pins the 3 tags
// to their digests (tags resolved from memory for tagTTL) and validates;
// digests: the webhook's validating call of the pinned Pod.
func BenchmarkDecideImageVerification(b *testing.B) {
	gctune.Apply() // as arbiter serve does
	r := ivtest.NewRegistry(b)
	key := ivtest.NewCosignKey(b)
	var tags, digests []string
	for i := range 3 {
		d := r.Push(fmt.Sprintf("app%d:v1", i))
		key.Sign(b, d)
		tags = append(tags, r.Ref(fmt.Sprintf("app%d:v1", i)))
		digests = append(digests, r.Ref(fmt.Sprintf("app%d:v1", i))+"@"+d.DigestStr())
	}
	ts := startImageServer(b, r, key, nil)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		req    *arbiterv1.DecideRequest
		pinned bool
	}{
		{"tags", imagePod("app", tags...), true},
		{"digests", &arbiterv1.DecideRequest{ObjectJson: imagePod("app", digests...).GetObjectJson(), Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY}, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			check := func() {
				resp, err := ts.c.Decide(ctx, c.req)
				if err != nil || !resp.GetAllowed() || (len(resp.GetPatch()) > 0) != c.pinned {
					b.Fatal(resp, err)
				}
			}
			check()
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				check()
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/10].Microseconds()), "µs-p10")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "µs-median")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "µs-p99")
		})
	}
}

// TestImageVerificationPullSecrets: a policy's credentials.secrets are
// resolved from the v1 Secrets the server stores (StoreSecrets): before
// the Secret is stored the registry answers 401 (an error, denied);
// once it is, the image is read and verified.
func TestImageVerificationPullSecrets(t *testing.T) {
	r := ivtest.NewAuthRegistry(t, "robot", "s3cret")
	key := ivtest.NewCosignKey(t)
	d := r.Push("app:v1")
	r.Sign(key, d)
	var srv atomic.Pointer[server.Server]
	v, err := imageverify.New(imageverify.Config{InsecureRegistries: []string{r.Host}}, imageverify.Options{Logger: quietLogger(),
		SecretKeychain: func(namespace string, names []string) authn.Keychain {
			return srv.Load().PullSecretsKeychain(namespace, names)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Config{ImageVerifier: v, StoreSecrets: true})
	srv.Store(ts.Server)
	ctx := context.Background()
	policy := r.Policy("private-images", key)
	policy["spec"].(map[string]any)["credentials"] = map[string]any{"secrets": []any{"apps/regcred"}}
	if _, err := ts.LoadObjects(ctx, []*manifest.Object{manifest.NewObject("ivpol", policy)}); err != nil {
		t.Fatal(err)
	}
	req := &arbiterv1.DecideRequest{ObjectJson: imagePod("private", d.String()).GetObjectJson(), Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY}

	resp, err := ts.c.Decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if msg := resp.GetStatus().GetMessage(); resp.GetAllowed() || !strings.HasPrefix(msg, "Policy private-images error: ") || !strings.Contains(msg, "UNAUTHORIZED") {
		t.Fatalf("without the secret: allowed %v, message %q", resp.GetAllowed(), msg)
	}

	auth := base64.StdEncoding.EncodeToString([]byte("robot:s3cret"))
	dockerConfig := `{"auths":{"` + r.Host + `":{"auth":"` + auth + `"}}}`
	secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "regcred", "namespace": "apps"},
		"type": "kubernetes.io/dockerconfigjson", "data": map[string]any{".dockerconfigjson": base64.StdEncoding.EncodeToString([]byte(dockerConfig))}}
	if _, err := ts.LoadObjects(ctx, []*manifest.Object{manifest.NewObject("secret", secret)}); err != nil {
		t.Fatal(err)
	}
	resp, err = ts.c.Decide(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetPolicy() != "private-images" || resp.GetResults()[0].GetResult() != "pass" {
		t.Fatalf("with the secret: allowed %v, message %q: %v", resp.GetAllowed(), resp.GetStatus().GetMessage(), resp.GetResults())
	}

	// A bare name is a Secret of the namespace given (the policy's).
	reg, err := name.NewRegistry(r.Host, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		namespace, secret, user string
	}{{"apps", "regcred", "robot"}, {"", "apps/regcred", "robot"}, {"other", "regcred", ""}, {"apps", "missing", ""}} {
		a, err := ts.PullSecretsKeychain(c.namespace, []string{c.secret}).Resolve(reg)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := a.Authorization()
		if err != nil || cfg.Username != c.user {
			t.Errorf("secret %q in namespace %q: user %q (%v), want %q", c.secret, c.namespace, cfg.Username, err, c.user)
		}
	}
}

// TestImageVerificationRegistryDownIgnore: failurePolicy Ignore does not
// admit an image that cannot be read (Kyverno's webhook consults it only
// for matchConditions and exception errors): the error denies under Deny.
func TestImageVerificationRegistryDownIgnore(t *testing.T) {
	r := ivtest.NewRegistry(t)
	key := ivtest.NewCosignKey(t)
	d := r.Push("app:v1")
	key.Sign(t, d)
	v, err := imageverify.New(imageverify.Config{InsecureRegistries: []string{r.Host}}, imageverify.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Config{ImageVerifier: v})
	policy := r.Policy("signed-images", key)
	policy["spec"].(map[string]any)["failurePolicy"] = "Ignore"
	if _, err := ts.LoadObjects(context.Background(), []*manifest.Object{manifest.NewObject("ivpol", policy)}); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	for _, req := range []*arbiterv1.DecideRequest{
		imagePod("tag", r.Ref("app:v1")),
		{ObjectJson: imagePod("digest", d.String()).GetObjectJson(), Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY},
	} {
		resp, err := ts.c.Decide(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetAllowed() || !strings.HasPrefix(resp.GetStatus().GetMessage(), "Policy signed-images error: ") {
			t.Errorf("registry down, failurePolicy Ignore, %s: allowed %v, message %q", req.GetObjectJson(), resp.GetAllowed(), resp.GetStatus().GetMessage())
		}
	}
}

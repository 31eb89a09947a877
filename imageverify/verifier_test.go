package imageverify_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sigstore/sigstore-go/pkg/testing/ca"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/imageverify"
)

func newVerifier(t testing.TB, r *testRegistry, cfg imageverify.Config, opts imageverify.Options) *imageverify.Verifier {
	t.Helper()
	cfg.InsecureRegistries = append(cfg.InsecureRegistries, r.host)
	v, err := imageverify.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func keyAttestor(name, pem string, tlog bool) kyvernocel.ImageAttestor {
	a := &kyvernoapi.Attestor{Name: name, Cosign: &kyvernoapi.Cosign{Key: &kyvernoapi.CosignKey{Data: pem}}}
	if !tlog {
		a.Cosign.CTLog = &kyvernoapi.CTLog{InsecureIgnoreTlog: true}
	}
	return kyvernocel.ImageAttestor{Spec: a}
}

func image(t testing.TB, v *imageverify.Verifier, ref string) *kyvernocel.VerifierImage {
	t.Helper()
	img, err := v.Image(context.Background(), ref, kyvernocel.ImageOptions{})
	if err != nil {
		t.Fatalf("Image(%s): %v", ref, err)
	}
	return img
}

func verifySig(t testing.TB, v *imageverify.Verifier, ref string, a kyvernocel.ImageAttestor) kyvernocel.Verdict {
	t.Helper()
	vd, err := v.VerifySignatures(context.Background(), image(t, v, ref), a, kyvernocel.ImageOptions{})
	if err != nil {
		t.Fatalf("VerifySignatures(%s): %v", ref, err)
	}
	return vd
}

func TestImage(t *testing.T) {
	r := newRegistry(t)
	d := r.push("app:v1")
	v := newVerifier(t, r, imageverify.Config{}, imageverify.Options{})
	img := image(t, v, r.ref("app:v1"))
	if img.Digest != d.DigestStr() || img.Tag != "v1" || img.ResolvedImage != r.ref("app:v1@"+d.DigestStr()) {
		t.Fatalf("image = %+v", img)
	}
	if img.Data["Manifest"].(map[string]any)["SchemaVersion"] != int64(2) {
		t.Fatalf("Manifest = %v", img.Data["Manifest"])
	}
	// plain HTTP is refused to registries that are not insecure
	strict, _ := imageverify.New(imageverify.Config{}, imageverify.Options{})
	if _, err := strict.Image(context.Background(), r.ref("app:v1"), kyvernocel.ImageOptions{}); err == nil || !strings.Contains(err.Error(), "plain HTTP") {
		t.Fatalf("err = %v, want plain HTTP refused", err)
	}
	// unless the policy allows it
	if _, err := strict.Image(context.Background(), r.ref("app:v1"), kyvernocel.ImageOptions{Credentials: &kyvernoapi.ImageCredentials{AllowInsecureRegistry: true}}); err != nil {
		t.Fatal(err)
	}
}

func TestCosignKey(t *testing.T) {
	r := newRegistry(t)
	key, other := newCosignKey(t), newCosignKey(t)
	signed := r.push("app:signed")
	key.sign(t, signed, signed, nil)
	r.push("app:unsigned")
	wrong := r.push("app:wrong-key")
	other.sign(t, wrong, wrong, nil)
	tampered := r.push("app:tampered")
	key.sign(t, tampered, signed, nil) // a signature of another digest
	annotated := r.push("app:annotated")
	key.sign(t, annotated, annotated, map[string]any{"env": "prod"})
	v := newVerifier(t, r, imageverify.Config{}, imageverify.Options{})
	a := keyAttestor("key", key.pem, false)
	for _, c := range []struct {
		image  string
		a      kyvernocel.ImageAttestor
		ok     bool
		reason string
	}{
		{"app:signed", a, true, ""},
		{r.ref("app@" + signed.DigestStr())[len(r.host)+1:], a, true, ""},
		{"app:unsigned", a, false, "no signatures found"},
		{"app:wrong-key", a, false, "failed to verify cosign signatures"},
		{"app:tampered", a, false, "failed to verify cosign signatures"},
		{"app:annotated", kyvernocel.ImageAttestor{Spec: &kyvernoapi.Attestor{Name: "k", Cosign: &kyvernoapi.Cosign{Key: &kyvernoapi.CosignKey{Data: key.pem}, CTLog: &kyvernoapi.CTLog{InsecureIgnoreTlog: true}, Annotations: map[string]string{"env": "prod"}}}}, true, ""},
		{"app:signed", kyvernocel.ImageAttestor{Spec: &kyvernoapi.Attestor{Name: "k", Cosign: &kyvernoapi.Cosign{Key: &kyvernoapi.CosignKey{Data: key.pem}, CTLog: &kyvernoapi.CTLog{InsecureIgnoreTlog: true}, Annotations: map[string]string{"env": "prod"}}}}, false, "no signature matched the required annotations"},
		// the transparency log is checked without insecureIgnoreTlog:
		// without a configured trusted root, nothing verifies
		{"app:signed", keyAttestor("tlog", key.pem, true), false, "no Sigstore trusted root configured"},
	} {
		vd := verifySig(t, v, r.ref(c.image), c.a)
		if vd.Verified != c.ok || !strings.Contains(vd.Reason, c.reason) {
			t.Errorf("%s with %s: verdict %+v, want verified=%v reason containing %q", c.image, c.a.Spec.Name, vd, c.ok, c.reason)
		}
	}
}

func TestCosignAttestation(t *testing.T) {
	r := newRegistry(t)
	key := newCosignKey(t)
	d := r.push("app:attested")
	key.attest(t, d, "https://cyclonedx.org/bom", map[string]any{"bomFormat": "CycloneDX"})
	v := newVerifier(t, r, imageverify.Config{}, imageverify.Options{})
	img := image(t, v, r.ref("app:attested"))
	att := &kyvernoapi.Attestation{Name: "sbom", InToto: &kyvernoapi.InToto{Type: "https://cyclonedx.org/bom"}}
	vd, err := v.VerifyAttestation(context.Background(), img, att, keyAttestor("key", key.pem, false), kyvernocel.ImageOptions{})
	if err != nil || !vd.Verified || vd.PredicateType != "https://cyclonedx.org/bom" || !strings.Contains(string(vd.Payload), `"bomFormat":"CycloneDX"`) {
		t.Fatalf("verdict %+v (payload %s), %v", vd, vd.Payload, err)
	}
	missing := &kyvernoapi.Attestation{Name: "vuln", InToto: &kyvernoapi.InToto{Type: "https://cosign.sigstore.dev/attestation/vuln/v1"}}
	vd, err = v.VerifyAttestation(context.Background(), img, missing, keyAttestor("key", key.pem, false), kyvernocel.ImageOptions{})
	if err != nil || vd.Verified || !strings.Contains(vd.Reason, "required predicate type https://cosign.sigstore.dev/attestation/vuln/v1 not found") {
		t.Fatalf("missing attestation: verdict %+v, %v", vd, err)
	}
	unattested := r.push("app:plain")
	_ = unattested
	vd, err = v.VerifyAttestation(context.Background(), image(t, v, r.ref("app:plain")), att, keyAttestor("key", key.pem, false), kyvernocel.ImageOptions{})
	if err != nil || vd.Verified {
		t.Fatalf("unattested: verdict %+v, %v", vd, err)
	}
}

func keylessAttestor(name string, ids ...kyvernoapi.Identity) kyvernocel.ImageAttestor {
	// The virtual Sigstore's certificates carry no SCT (no CT log).
	return kyvernocel.ImageAttestor{Spec: &kyvernoapi.Attestor{Name: name, Cosign: &kyvernoapi.Cosign{
		Keyless: &kyvernoapi.Keyless{Identities: ids}, CTLog: &kyvernoapi.CTLog{InsecureIgnoreSCT: true},
	}}}
}

func TestKeyless(t *testing.T) {
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(t)
	const issuer = "https://token.actions.example"
	good := r.push("app:keyless")
	r.attachBundle(vs, good, "builder@example.com", issuer, "https://sigstore.dev/cosign/sign/v1", time.Now().Add(5*time.Minute))
	expired := r.push("app:expired")
	// logged 30 minutes after the signing, when the ten-minute certificate
	// had expired
	r.attachBundle(vs, expired, "builder@example.com", issuer, "https://sigstore.dev/cosign/sign/v1", time.Now().Add(30*time.Minute))
	r.push("app:unsigned")
	v := newVerifier(t, r, imageverify.Config{}, imageverify.Options{TrustedMaterial: vs})
	right := keylessAttestor("keyless", kyvernoapi.Identity{Issuer: issuer, Subject: "builder@example.com"})
	for _, c := range []struct {
		image string
		a     kyvernocel.ImageAttestor
		ok    bool
	}{
		{"app:keyless", right, true},
		{"app:keyless", keylessAttestor("regexp", kyvernoapi.Identity{IssuerRegExp: `^https://token\.actions\.`, SubjectRegExp: `@example\.com$`}), true},
		{"app:keyless", keylessAttestor("wrong-subject", kyvernoapi.Identity{Issuer: issuer, Subject: "someone@else.com"}), false},
		{"app:keyless", keylessAttestor("wrong-issuer", kyvernoapi.Identity{Issuer: "https://accounts.example", Subject: "builder@example.com"}), false},
		{"app:expired", right, false},
		{"app:unsigned", right, false},
	} {
		vd := verifySig(t, v, r.ref(c.image), c.a)
		if vd.Verified != c.ok {
			t.Errorf("%s with %s: verdict %+v, want verified=%v", c.image, c.a.Spec.Name, vd, c.ok)
		}
		t.Logf("%s with %s: %v %s", c.image, c.a.Spec.Name, vd.Verified, vd.Reason)
	}
	// without a trust root, keyless verification never verifies (and
	// nothing is fetched)
	bare := newVerifier(t, r, imageverify.Config{}, imageverify.Options{})
	if vd := verifySig(t, bare, r.ref("app:keyless"), right); vd.Verified || !strings.Contains(vd.Reason, "no Sigstore trusted root configured") {
		t.Errorf("no trust root: verdict %+v", vd)
	}
}

func notaryAttestor(name, pem string) kyvernocel.ImageAttestor {
	return kyvernocel.ImageAttestor{Spec: &kyvernoapi.Attestor{Name: name, Notary: &kyvernoapi.Notary{Certs: &kyvernoapi.StringOrExpression{Value: pem}}}}
}

func TestNotary(t *testing.T) {
	r := newRegistry(t)
	cert := newNotaryCert(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	other := newNotaryCert(t, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	// expires two seconds after signing
	expiredCert := newNotaryCert(t, time.Now().Add(-time.Hour), time.Now().Add(2*time.Second))
	signed := r.push("app:signed")
	r.notarySign(cert, signed)
	sbom := r.pushReferrer(signed, "sbom/cyclone-dx", "application/vnd.cyclonedx+json", []byte(`{"bomFormat":"CycloneDX"}`), nil)
	r.notarySign(cert, sbom)
	r.push("app:unsigned")
	old := r.push("app:old")
	r.notarySign(expiredCert, old)
	v := newVerifier(t, r, imageverify.Config{}, imageverify.Options{})
	time.Sleep(time.Until(expiredCert.cert.NotAfter.Add(time.Second)))
	for _, c := range []struct {
		image string
		a     kyvernocel.ImageAttestor
		ok    bool
	}{
		{"app:signed", notaryAttestor("notary", cert.pem), true},
		{"app:signed", notaryAttestor("other", other.pem), false},
		{"app:unsigned", notaryAttestor("notary", cert.pem), false},
		{"app:old", notaryAttestor("expired", expiredCert.pem), false},
	} {
		vd := verifySig(t, v, r.ref(c.image), c.a)
		if vd.Verified != c.ok {
			t.Errorf("%s with %s: verdict %+v, want verified=%v", c.image, c.a.Spec.Name, vd, c.ok)
		}
		t.Logf("%s with %s: %v %s", c.image, c.a.Spec.Name, vd.Verified, vd.Reason)
	}
	img := image(t, v, r.ref("app:signed"))
	att := &kyvernoapi.Attestation{Name: "sbom", Referrer: &kyvernoapi.Referrer{Type: "sbom/cyclone-dx"}}
	vd, err := v.VerifyAttestation(context.Background(), img, att, notaryAttestor("notary", cert.pem), kyvernocel.ImageOptions{})
	if err != nil || !vd.Verified || string(vd.Payload) != `{"bomFormat":"CycloneDX"}` {
		t.Fatalf("referrer: verdict %+v, %v", vd, err)
	}
	vd, err = v.VerifyAttestation(context.Background(), img, att, notaryAttestor("other", other.pem), kyvernocel.ImageOptions{})
	if err != nil || vd.Verified {
		t.Fatalf("referrer, other cert: verdict %+v, %v", vd, err)
	}
	b, err := v.ReferrerPayload(context.Background(), img, "sbom/cyclone-dx", kyvernocel.ImageOptions{})
	if err != nil || string(b) != `{"bomFormat":"CycloneDX"}` {
		t.Fatalf("payload %s, %v", b, err)
	}
	if _, err := v.ReferrerPayload(context.Background(), img, "sbom/spdx", kyvernocel.ImageOptions{}); err == nil || err.Error() != "artifact of type sbom/spdx not found" {
		t.Fatalf("err = %v", err)
	}
}

func TestRegistryDown(t *testing.T) {
	r := newRegistry(t)
	key := newCosignKey(t)
	d := r.push("app:signed")
	key.sign(t, d, d, nil)
	v := newVerifier(t, r, imageverify.Config{Timeout: imageverify.Duration(2 * time.Second)}, imageverify.Options{})
	img := image(t, v, r.ref("app:signed"))
	r.Stop()
	// the image was read: verifying its signatures reaches the registry,
	// which is down — an error, not "unsigned"
	if vd, err := v.VerifySignatures(context.Background(), img, keyAttestor("key", key.pem, false), kyvernocel.ImageOptions{}); err == nil {
		t.Fatalf("verdict %+v, want an error", vd)
	}
	if _, err := v.Image(context.Background(), r.ref("app:other"), kyvernocel.ImageOptions{}); err == nil {
		t.Fatal("want an error")
	}
}

func TestCacheAndConcurrency(t *testing.T) {
	r := newRegistry(t)
	key := newCosignKey(t)
	n := 1000 // issue 19: 1,000 distinct images verified concurrently
	if testing.Short() {
		n = 100
	}
	refs := make([]string, n)
	for i := range refs {
		d := r.push("app:" + "v" + itoa(i))
		key.sign(t, d, d, nil)
		refs[i] = r.ref(d.RepositoryStr() + "@" + d.DigestStr())
	}
	const limit = 4
	// (a generous timeout: a call's includes its wait for a slot, long for
	// 1,000 callers on 4 slots on a loaded machine)
	v := newVerifier(t, r, imageverify.Config{MaxConcurrent: limit, Timeout: imageverify.Duration(10 * time.Minute)}, imageverify.Options{})
	a := keyAttestor("key", key.pem, false)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			img, err := v.Image(context.Background(), ref, kyvernocel.ImageOptions{})
			if err != nil {
				errs <- err
				return
			}
			vd, err := v.VerifySignatures(context.Background(), img, a, kyvernocel.ImageOptions{})
			if err != nil {
				errs <- err
			} else if !vd.Verified {
				errs <- &verdictErr{vd}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := v.Stats()
	if s.MaxInFlight > limit || s.MaxInFlight == 0 {
		t.Fatalf("max in flight = %d, limit %d", s.MaxInFlight, limit)
	}
	before := s.RegistryRequests
	for _, ref := range refs[:10] {
		if vd := verifySig(t, v, ref, a); !vd.Verified {
			t.Fatal(vd)
		}
	}
	if s2 := v.Stats(); s2.RegistryRequests != before {
		t.Fatalf("cached verification reached the registry: %d requests", s2.RegistryRequests-before)
	}
	t.Logf("%d images verified with at most %d requests in flight; %d requests, %s total registry latency", n, s.MaxInFlight, s.RegistryRequests, s.RegistryLatency)
}

type verdictErr struct{ vd kyvernocel.Verdict }

func (e *verdictErr) Error() string { return "not verified: " + e.vd.Reason }

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}

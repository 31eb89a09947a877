package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/client/webhook"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

const (
	alice       = "user=alice@example.com groups=developers,system:authenticated credential=JTI=9b2f6c1e-4a58-4d2e-8f1a-0c3e5d7b9a11"
	teamMissing = `[{"message":"pods should carry a team label","policy":"audit-team-label","expressionIndex":0,"validationActions":["Audit"]}]`
	latestWarn  = "Policy warn-latest-tag failed: images should be pinned to a version, not :latest"
)

// TestAdmissionReviews posts AdmissionReviews as kube-apiserver sends them
// (testdata/reviews, written by testdata/genreviews.go with the API
// server's own code) over HTTPS to the shim, in front of a real decision
// server holding the 16 Pod Security policies, the test policies and an
// exception, and checks every field of each response.
func TestAdmissionReviews(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, pssDir, policiesDir)
	s := startShim(t, ds.addr, webhook.Config{})

	// The denial of the violating pod, as the decision service words it.
	violating := decodeReview(t, review(t, "create-violating-pod.json")).Request
	c, err := client.Dial(context.Background(), ds.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	direct, err := c.Decide(context.Background(), &arbiterv1.DecideRequest{ObjectJson: violating.Object.Raw, Namespace: "team-a"})
	if err != nil {
		t.Fatal(err)
	}
	violatingMsg := direct.GetStatus().GetMessage()
	if !strings.HasPrefix(violatingMsg, "Policy disallow-capabilities failed: Any capabilities added beyond the allowed list") ||
		strings.Count(violatingMsg, "; Policy ") != 11 {
		t.Fatalf("denial of the violating pod: %q", violatingMsg)
	}

	cases := []struct {
		file       string
		apiVersion string
		allowed    bool
		code       int32
		message    string
		warnings   []string
		// annotations besides revision, digest and decision-id
		annotations map[string]string
	}{
		{
			file: "create-violating-pod.json", code: 400, message: violatingMsg,
			annotations: map[string]string{"validation_failure": teamMissing},
		},
		{
			file: "create-violating-pod-v1beta1.json", apiVersion: "admission.k8s.io/v1beta1", code: 400, message: violatingMsg,
			annotations: map[string]string{"validation_failure": teamMissing},
		},
		{
			file: "create-compliant-pod.json", allowed: true, warnings: []string{latestWarn},
			annotations: map[string]string{"validation_failure": teamMissing},
		},
		{
			file: "create-compliant-pod-dryrun.json", allowed: true, warnings: []string{latestWarn},
			annotations: map[string]string{"validation_failure": teamMissing, "dry-run": "true"},
		},
		{
			// The exception exempts it from require-run-as-nonroot.
			file: "create-legacy-root-pod.json", allowed: true,
			annotations: map[string]string{"exceptions": `{"require-run-as-nonroot":["legacy/legacy-app-runs-as-root"]}`},
		},
		{
			file: "create-configmap-dryrun.json", allowed: true,
			warnings: []string{"Policy echo-request failed: operation=CREATE kind=ConfigMap resource=configmaps subResource= name=settings namespace=team-a " +
				alice + " dryRun=true options=CreateOptions/kubectl-client-side-apply object=true oldObject=false"},
			annotations: map[string]string{"dry-run": "true"},
		},
		{
			file: "update-configmap.json", allowed: true,
			warnings: []string{"Policy echo-request failed: operation=UPDATE kind=ConfigMap resource=configmaps subResource= name=settings namespace=team-a " +
				alice + " dryRun=false options=UpdateOptions/kubectl-edit object=true oldObject=true"},
		},
		{
			// DELETE: the API server sends only oldObject.
			file: "delete-configmap.json", allowed: true,
			warnings: []string{"Policy echo-request failed: operation=DELETE kind=ConfigMap resource=configmaps subResource= name=settings namespace=team-a " +
				alice + " dryRun=false options=DeleteOptions/ object=false oldObject=true"},
		},
		{
			file: "delete-protected-pod.json", code: 400,
			message: "Policy protect-pods failed: pod db-0 is protected (arbiter.dev/protected=true); remove the label first",
		},
		{
			// A subresource: only the policy matching pods/ephemeralcontainers
			// applies, not the Pod Security policies (they match pods).
			file: "update-pod-ephemeralcontainers.json", code: 400,
			message: "Policy deny-privileged-debug failed: ephemeral debug containers may not be privileged",
			warnings: []string{"Policy echo-request failed: operation=UPDATE kind=Pod resource=pods subResource=ephemeralcontainers name=web namespace=team-a " +
				alice + " dryRun=false options=UpdateOptions/kubectl-debug object=true oldObject=true"},
		},
		{
			// The kubelet's status update of the violating pod: no policy matches pods/status.
			file: "update-pod-status.json", allowed: true,
		},
	}
	ids := map[string]bool{}
	for _, tc := range cases {
		t.Run(strings.TrimSuffix(tc.file, ".json"), func(t *testing.T) {
			body := review(t, tc.file)
			in := decodeReview(t, body)
			resp, b := s.post(t, body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("HTTP %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			if bytes.Contains(b, []byte(`"patch`)) || bytes.Contains(b, []byte(`"request"`)) {
				t.Fatalf("a validating webhook answers no patch and no request: %s", b)
			}
			out := decodeReview(t, b)
			wantVersion := tc.apiVersion
			if wantVersion == "" {
				wantVersion = "admission.k8s.io/v1"
			}
			if out.APIVersion != wantVersion || out.Kind != "AdmissionReview" || in.APIVersion != wantVersion {
				t.Fatalf("apiVersion %q kind %q, want %s AdmissionReview", out.APIVersion, out.Kind, wantVersion)
			}
			r := out.Response
			if r == nil || r.UID != in.Request.UID || r.UID == "" {
				t.Fatalf("response uid: %+v, want %q", r, in.Request.UID)
			}
			if r.Allowed != tc.allowed {
				t.Fatalf("allowed %v, want %v (%+v)", r.Allowed, tc.allowed, r.Result)
			}
			if tc.allowed {
				if r.Result != nil {
					t.Fatalf("result %+v on an allowed request", r.Result)
				}
			} else {
				want := &metav1.Status{Status: metav1.StatusFailure, Code: tc.code, Reason: metav1.StatusReasonBadRequest, Message: tc.message}
				if r.Result == nil || *r.Result != *want {
					t.Fatalf("result\n got %+v\nwant %+v", r.Result, want)
				}
			}
			if strings.Join(r.Warnings, "\n") != strings.Join(tc.warnings, "\n") {
				t.Fatalf("warnings\n got %q\nwant %q", r.Warnings, tc.warnings)
			}
			if r.Patch != nil || r.PatchType != nil {
				t.Fatalf("patch on a validating response")
			}
			checkAnnotations(t, r.AuditAnnotations, ds, tc.annotations)
			id := r.AuditAnnotations[webhook.AnnotationDecisionID]
			if ids[id] {
				t.Fatalf("decision id %s repeated", id)
			}
			ids[id] = true
		})
	}
}

var decisionID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// checkAnnotations checks the audit annotations: the decision's revision,
// digest and id, then want; and that the API server accepts each key
// (it records KEY as "<webhook name>/KEY", which must be a qualified name).
func checkAnnotations(t *testing.T, got map[string]string, ds *decisionServer, want map[string]string) {
	t.Helper()
	if got[webhook.AnnotationRevision] != strconv.FormatUint(ds.commit.Revision, 10) || ds.commit.Revision == 0 {
		t.Fatalf("revision annotation %q, want %d", got[webhook.AnnotationRevision], ds.commit.Revision)
	}
	if got[webhook.AnnotationDigest] != ds.commit.Digest || !strings.HasPrefix(ds.commit.Digest, "sha256:") {
		t.Fatalf("digest annotation %q, want %q", got[webhook.AnnotationDigest], ds.commit.Digest)
	}
	if !decisionID.MatchString(got[webhook.AnnotationDecisionID]) {
		t.Fatalf("decision id annotation %q", got[webhook.AnnotationDecisionID])
	}
	if len(got) != len(want)+3 {
		t.Fatalf("annotations %v, want revision, digest, decision-id and %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("annotation %s = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if errs := validation.IsQualifiedName("validate.arbiter.dev/" + k); len(errs) > 0 {
			t.Fatalf("annotation key %q: the API server would drop it: %v", k, errs)
		}
	}
}

// TestDecideRequestConversion checks the AdmissionRequest → DecideRequest
// mapping field by field, and that object and oldObject are the bytes the
// API server sent, not a re-encoding.
func TestDecideRequestConversion(t *testing.T) {
	body := review(t, "update-pod-ephemeralcontainers.json")
	var raw struct {
		Request struct {
			Object, OldObject, Options json.RawMessage
		}
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	in := decodeReview(t, body).Request
	got, err := webhook.DecideRequest(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.GetObjectJson(), raw.Request.Object) || !bytes.Equal(got.GetOldObjectJson(), raw.Request.OldObject) {
		t.Fatalf("object bytes re-encoded")
	}
	want := &arbiterv1.DecideRequest{
		Operation:          arbiterv1.Operation_OPERATION_UPDATE,
		Kind:               &arbiterv1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:           &arbiterv1.GroupVersionResource{Version: "v1", Resource: "pods"},
		SubResource:        "ephemeralcontainers",
		RequestKind:        &arbiterv1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		RequestResource:    &arbiterv1.GroupVersionResource{Version: "v1", Resource: "pods"},
		RequestSubResource: "ephemeralcontainers",
		Name:               "web",
		Namespace:          "team-a",
		Mode:               arbiterv1.Mode_MODE_ADMISSION,
		Uid:                "c8a0b8e9-8d35-4a71-8ce5-7ebdcfd0e1f8",
		UserInfo: &arbiterv1.UserInfo{
			Username: "alice@example.com",
			Uid:      "2f6c1e4a-58d2-4e8f-9a0c-3e5d7b9a1100",
			Groups:   []string{"developers", "system:authenticated"},
			Extra:    map[string]*arbiterv1.StringList{"authentication.kubernetes.io/credential-id": {Values: []string{"JTI=9b2f6c1e-4a58-4d2e-8f1a-0c3e5d7b9a11"}}},
		},
	}
	got.ObjectJson, got.OldObjectJson = nil, nil
	opts := got.GetOptions().AsMap()
	got.Options = nil
	if got.String() != want.String() {
		t.Fatalf("DecideRequest\n got %v\nwant %v", got, want)
	}
	if opts["kind"] != "UpdateOptions" || opts["fieldManager"] != "kubectl-debug" {
		t.Fatalf("options %v", opts)
	}

	// dryRun is passed on; DELETE carries only the old object.
	dr, err := webhook.DecideRequest(decodeReview(t, review(t, "create-configmap-dryrun.json")).Request)
	if err != nil || !dr.GetDryRun() {
		t.Fatalf("dry run: %v %v", dr.GetDryRun(), err)
	}
	del, err := webhook.DecideRequest(decodeReview(t, review(t, "delete-configmap.json")).Request)
	if err != nil || del.GetObjectJson() != nil || del.GetOldObjectJson() == nil || del.GetOperation() != arbiterv1.Operation_OPERATION_DELETE {
		t.Fatalf("delete: %v %v", del, err)
	}
	bad := *in
	bad.Operation = "PATCH"
	if _, err := webhook.DecideRequest(&bad); err == nil {
		t.Fatal("an unknown operation was accepted")
	}
}

// TestBadRequests: what is not an AdmissionReview is refused, never allowed.
func TestBadRequests(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, pssDir)
	s := startShim(t, ds.addr, webhook.Config{})
	for _, tc := range []struct {
		name string
		body string
		code int
	}{
		{"not json", "{nope", 400},
		{"no request", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400},
		{"wrong version", `{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"x","operation":"CREATE","object":{}}}`, 400},
		{"wrong kind", `{"apiVersion":"admission.k8s.io/v1","kind":"Pod"}`, 400},
		{"unknown operation", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"PATCH","object":{}}}`, 400},
		{"create without object", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"CREATE"}}`, 400},
		{"delete without old object", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"DELETE","object":null}}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := s.post(t, []byte(tc.body))
			if resp.StatusCode != tc.code {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.code, b)
			}
			checkStatusBody(t, b, tc.code)
		})
	}
	resp, _ := s.get(t, "/validate")
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /validate: HTTP %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+"/validate", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/yaml")
	if resp, _ := s.do(t, req); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("yaml: HTTP %d", resp.StatusCode)
	}
}

// checkStatusBody: an error answer carries a metav1.Status.
func checkStatusBody(t *testing.T, b []byte, code int) *metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(b, &st); err != nil || st.Kind != "Status" || st.Status != metav1.StatusFailure || st.Code != int32(code) || st.Message == "" {
		t.Fatalf("status body %s (%v)", b, err)
	}
	return &st
}

// TestBodyLimit: bodies over MaxBodyBytes get 413, with or without a
// Content-Length.
func TestBodyLimit(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, pssDir)
	const limit = 64 << 10
	s := startShim(t, ds.addr, webhook.Config{MaxBodyBytes: limit})
	body := review(t, "create-compliant-pod.json")
	if resp, b := s.post(t, body); resp.StatusCode != http.StatusOK {
		t.Fatalf("small body: HTTP %d %s", resp.StatusCode, b)
	}
	// A real AdmissionReview padded past the limit with a large annotation.
	big := bytes.Replace(body, []byte(`"labels":{`), []byte(`"annotations":{"pad":"`+strings.Repeat("x", limit)+`"},"labels":{`), 1)
	resp, b := s.post(t, big)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("large body: HTTP %d %s", resp.StatusCode, b)
	}
	if st := checkStatusBody(t, b, 413); st.Reason != metav1.StatusReasonRequestEntityTooLarge {
		t.Fatalf("reason %q", st.Reason)
	}
	// Streamed, without a Content-Length.
	req, _ := http.NewRequest(http.MethodPost, s.url+"/validate", struct{ *bytes.Reader }{bytes.NewReader(big)})
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	if resp, b := s.do(t, req); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("streamed large body: HTTP %d %s", resp.StatusCode, b)
	}
}

// TestDecisionServiceDown: when the decision service cannot answer, the
// shim answers 500 (so the API server applies failurePolicy), quickly, and
// is not ready; it never allows.
func TestDecisionServiceDown(t *testing.T) {
	body := review(t, "create-compliant-pod.json")
	check500 := func(t *testing.T, s *shim, path string, within time.Duration) *metav1.Status {
		t.Helper()
		start := time.Now()
		resp, b := s.postTo(t, path, body)
		if took := time.Since(start); took > within {
			t.Fatalf("took %v, want ≤ %v", took, within)
		}
		if resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("HTTP %d, want 500: %s", resp.StatusCode, b)
		}
		if bytes.Contains(b, []byte(`"allowed"`)) {
			t.Fatalf("an error answer carried a decision: %s", b)
		}
		st := checkStatusBody(t, b, 500)
		if st.Reason != metav1.StatusReasonInternalError || !strings.HasPrefix(st.Message, "decision service: ") {
			t.Fatalf("status %+v", st)
		}
		return st
	}
	t.Run("stopped", func(t *testing.T) {
		ds := startDecisionServer(t, server.Config{}, pssDir)
		s := startShim(t, ds.addr, webhook.Config{ReadyCacheTTL: time.Millisecond})
		if resp, b := s.post(t, body); resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d %s", resp.StatusCode, b)
		}
		if resp, _ := s.get(t, "/readyz"); resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz %d with the server up", resp.StatusCode)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ds.Shutdown(ctx)
		cancel()
		st := check500(t, s, "/validate?timeout=10s", 2*time.Second)
		if !strings.Contains(st.Message, "Unavailable") {
			t.Fatalf("message %q", st.Message)
		}
		waitStatus(t, s, "/readyz", http.StatusServiceUnavailable)
		if resp, _ := s.get(t, "/healthz"); resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz %d: the shim itself is alive", resp.StatusCode)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := lis.Addr().String()
		lis.Close()
		s := startShim(t, addr, webhook.Config{})
		check500(t, s, "/validate?timeout=10s", 2*time.Second)
		if resp, b := s.get(t, "/readyz"); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("/readyz %d %s", resp.StatusCode, b)
		}
	})
	t.Run("not serving", func(t *testing.T) {
		// A follower that cannot reach its primary stays NOT_SERVING; the
		// shim's health-checked connection sends it nothing.
		lis, _ := net.Listen("tcp", "127.0.0.1:0")
		primary := lis.Addr().String()
		lis.Close()
		ds := startDecisionServer(t, server.Config{Follow: primary})
		s := startShim(t, ds.addr, webhook.Config{})
		check500(t, s, "/validate?timeout=10s", 2*time.Second)
		resp, b := s.get(t, "/readyz")
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "not serving") {
			t.Fatalf("/readyz %d %s", resp.StatusCode, b)
		}
	})
	t.Run("silent", func(t *testing.T) {
		// A peer that accepts connections and never answers: the deadline
		// ends the call, and the API server's ?timeout= lowers it to 80%.
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer lis.Close()
		go func() {
			for {
				conn, err := lis.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
			}
		}()
		s := startShim(t, lis.Addr().String(), webhook.Config{Timeout: 300 * time.Millisecond})
		start := time.Now()
		st := check500(t, s, "/validate", 2*time.Second)
		if took := time.Since(start); took < 300*time.Millisecond || !strings.Contains(st.Message, "DeadlineExceeded") {
			t.Fatalf("took %v (want ≥ the 300ms deadline): %q", took, st.Message)
		}
		s = startShim(t, lis.Addr().String(), webhook.Config{Timeout: 8 * time.Second})
		start = time.Now()
		check500(t, s, "/validate?timeout=1s", 2*time.Second)
		if took := time.Since(start); took < 800*time.Millisecond {
			t.Fatalf("took %v, want the 800ms of ?timeout=1s", took)
		}
	})
}

func waitStatus(t *testing.T, s *shim, path string, code int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, b := s.get(t, path)
		if resp.StatusCode == code {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: HTTP %d %s, want %d", path, resp.StatusCode, b, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHealthAndReadiness: /healthz always; /readyz follows the decision
// service's gRPC health, cached for ReadyCacheTTL.
func TestHealthAndReadiness(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, pssDir)
	s := startShim(t, ds.addr, webhook.Config{ReadyCacheTTL: time.Hour})
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, b := s.get(t, path)
		if resp.StatusCode != http.StatusOK || string(b) != "ok\n" {
			t.Fatalf("%s: HTTP %d %q", path, resp.StatusCode, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ds.Shutdown(ctx)
	cancel()
	// Cached for an hour: still ready.
	if resp, _ := s.get(t, "/readyz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d within the cache time", resp.StatusCode)
	}
	if resp, _ := s.get(t, "/nope"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/nope: HTTP %d", resp.StatusCode)
	}
}

// TestCertificateRotation: new certificate files are served on the next
// handshakes, without a restart: a Secret volume update (symlink swap) and
// an in-place rewrite (with a moment when certificate and key do not match,
// during which the previous pair is kept).
func TestCertificateRotation(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, pssDir)
	s := startShim(t, ds.addr, webhook.Config{})
	body := review(t, "create-compliant-pod.json")
	first := s.certs.current
	if got := s.presented(t); !got.Equal(first) {
		t.Fatalf("serving serial %v, want %v", got.SerialNumber, first.SerialNumber)
	}

	second := s.certs.rotate()
	if got := s.presented(t); !got.Equal(second) {
		t.Fatalf("after the Secret update: serial %v, want %v", got.SerialNumber, second.SerialNumber)
	}
	s.client.CloseIdleConnections()
	resp, b := s.post(t, body)
	if resp.StatusCode != http.StatusOK || !resp.TLS.PeerCertificates[0].Equal(second) {
		t.Fatalf("HTTP %d over serial %v: %s", resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber, b)
	}

	third := s.certs.rewrite(func() {
		// Certificate written, key not yet: the previous pair goes on.
		if got := s.presented(t); !got.Equal(second) {
			t.Fatalf("with a mismatched pair on disk: serial %v, want %v", got.SerialNumber, second.SerialNumber)
		}
	})
	if got := s.presented(t); !got.Equal(third) {
		t.Fatalf("after the rewrite: serial %v, want %v", got.SerialNumber, third.SerialNumber)
	}
}

// TestMonotonic: a monotonic shim demands at least the highest revision it
// has seen; a replica below it waits for the revision within the deadline,
// or the call fails.
func TestMonotonic(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, pssDir)
	s := startShim(t, ds.addr, webhook.Config{Monotonic: true, Timeout: 5 * time.Second})
	body := review(t, "create-compliant-pod.json")
	if resp, b := s.post(t, body); resp.StatusCode != http.StatusOK || s.Revision() != 1 {
		t.Fatalf("HTTP %d revision %d: %s", resp.StatusCode, s.Revision(), b)
	}
	s.ObserveRevision(2)
	done := make(chan *admissionv1.AdmissionReview, 1)
	go func() {
		var out *admissionv1.AdmissionReview
		defer func() { done <- out }() // also after a t.Fatal (Goexit) in the helpers
		resp, b := s.post(t, body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("HTTP %d %s", resp.StatusCode, b)
			return
		}
		out = decodeReview(t, b)
	}()
	time.Sleep(200 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("answered below the revision floor")
	default:
	}
	if _, err := ds.LoadObjects(context.Background(), readObjects(t, policiesDir)); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if out == nil || out.Response.AuditAnnotations[webhook.AnnotationRevision] != "2" {
		t.Fatalf("response %+v, want one at revision 2", out)
	}

	s = startShim(t, ds.addr, webhook.Config{Monotonic: true, Timeout: 300 * time.Millisecond})
	s.ObserveRevision(99)
	resp, b := s.post(t, body)
	// The replica's FAILED_PRECONDITION, or the deadline when it ends first.
	if resp.StatusCode != http.StatusInternalServerError ||
		!strings.Contains(string(b), "FailedPrecondition") && !strings.Contains(string(b), "DeadlineExceeded") {
		t.Fatalf("HTTP %d %s, want 500", resp.StatusCode, b)
	}
}

// TestNoEngineImport: the shim is a client; it never links the engine,
// the server or the store.
func TestNoEngineImport(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"/engine", "/server", "/store"} {
			if strings.HasPrefix(pkg, "github.com/arbiter-pdp/arbiter"+banned) {
				t.Errorf("client/webhook depends on %s", pkg)
			}
		}
	}
}

// TestConcurrentReviews: reviews and probes in parallel over one HTTP/2
// connection each answer their own request (run with -race).
func TestConcurrentReviews(t *testing.T) {
	ds := startDecisionServer(t, server.Config{}, pssDir, policiesDir)
	s := startShim(t, ds.addr, webhook.Config{Monotonic: true, ReadyCacheTTL: time.Millisecond})
	files := []string{"create-violating-pod.json", "create-compliant-pod.json", "delete-configmap.json", "update-pod-ephemeralcontainers.json", "create-violating-pod-v1beta1.json"}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var err error
			// The helpers may t.Fatal (Goexit): the deferred send still comes.
			defer func() { errs <- err }()
			for i := range 25 {
				if i%5 == 0 {
					if resp, _ := s.get(t, "/readyz"); resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("/readyz %d", resp.StatusCode)
						return
					}
				}
				body := review(t, files[(g+i)%len(files)])
				in := decodeReview(t, body)
				resp, b := s.post(t, body)
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("HTTP %d %s", resp.StatusCode, b)
					return
				}
				out := decodeReview(t, b)
				if out.Response.UID != in.Request.UID || out.APIVersion != in.APIVersion {
					err = fmt.Errorf("answer %s %s to %s %s", out.APIVersion, out.Response.UID, in.APIVersion, in.Request.UID)
					return
				}
			}
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s.Revision() != ds.commit.Revision {
		t.Fatalf("revision seen %d, want %d", s.Revision(), ds.commit.Revision)
	}
}

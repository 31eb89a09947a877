package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// A PodSecurityConfiguration in the upstream format (no metadata) is
// stored like any other object, decides Pods with kube-apiserver's
// message, and an exempted controller service account is warned about in
// the log (once) and in Status for as long as it is configured.
func TestPodSecurityStored(t *testing.T) {
	logs := &psaLogBuffer{}
	ts := startServer(t, server.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	config := map[string]any{
		"apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
		"defaults":   map[string]any{"enforce": "baseline"},
		"exemptions": map[string]any{"usernames": []any{"system:serviceaccount:kube-system:replicaset-controller"}},
	}
	exception := map[string]any{
		"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
		"metadata": map[string]any{"name": "agent", "namespace": "ops"},
		"spec": map[string]any{
			"policyRefs":      []any{map[string]any{"kind": "PodSecurity", "name": "baseline"}},
			"matchConditions": []any{map[string]any{"name": "agent", "expression": "object.metadata.name == 'agent'"}},
		},
	}
	write := func(objs ...map[string]any) *arbiterv1.WriteAck {
		t.Helper()
		var changes []*arbiterv1.Change
		for _, o := range objs {
			changes = append(changes, &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, o)})
		}
		ack, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: changes})
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		return ack
	}
	ack := write(config, exception)
	pod := func(name string) []byte {
		return vapObjectJSON(t, map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": name, "namespace": "apps"},
			"spec":     map[string]any{"hostNetwork": true, "containers": []any{map[string]any{"name": "app", "image": "app:1"}}}})
	}
	resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod("web"), MinRevision: ack.GetRevision()})
	if err != nil {
		t.Fatal(err)
	}
	want := `pods "web" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`
	if resp.GetAllowed() || resp.GetStatus().GetCode() != 403 || resp.GetStatus().GetReason() != "Forbidden" || resp.GetStatus().GetMessage() != want {
		t.Fatalf("decision: allowed=%v status=%v", resp.GetAllowed(), resp.GetStatus())
	}
	if rs := resp.GetResults(); len(rs) != 1 || rs[0].GetPolicyKind() != "PodSecurity" || rs[0].GetPolicy() != "baseline" || rs[0].GetResult() != "fail" {
		t.Fatalf("results: %v", rs)
	}
	if got := resp.GetAuditAnnotations()["pod-security.kubernetes.io/enforce-policy"]; got != "baseline:latest" {
		t.Fatalf("audit annotations: %v", resp.GetAuditAnnotations())
	}
	// The exception on PodSecurity exempts the agent.
	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod("agent")})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetResult() != "skip" || resp.GetResults()[0].GetMessage() != "rule is skipped due to policy exception: ops/agent" {
		t.Fatalf("exempted by exception: allowed=%v results=%v", resp.GetAllowed(), resp.GetResults())
	}
	// The controller's service account is exempt: its Pods skip Pod Security.
	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod("web-1234"),
		UserInfo: &arbiterv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller"}})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || resp.GetAuditAnnotations()["pod-security.kubernetes.io/exempt"] != "user" {
		t.Fatalf("exempt user: allowed=%v annotations=%v", resp.GetAllowed(), resp.GetAuditAnnotations())
	}
	st, err := ts.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !hasWarning(st.GetWarnings(), `exempts the controller service account "system:serviceaccount:kube-system:replicaset-controller"`) {
		t.Fatalf("status warnings: %q", st.GetWarnings())
	}
	if n := strings.Count(logs.String(), "exempts the controller service account"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, logs.String())
	}
	// Another commit does not log it again.
	write(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "apps"}})
	if n := strings.Count(logs.String(), "exempts the controller service account"); n != 1 {
		t.Fatalf("logged %d times after an unrelated commit", n)
	}
	// A second configuration is refused, naming it.
	second := map[string]any{
		"apiVersion": "pod-security.admission.config.k8s.io/v1", "kind": "PodSecurityConfiguration",
		"metadata": map[string]any{"name": "strict"}, "defaults": map[string]any{"enforce": "restricted"},
	}
	_, err = ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: vapObjectJSON(t, second)}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "PodSecurityConfiguration strict") || !strings.Contains(err.Error(), "a second PodSecurityConfiguration") {
		t.Fatalf("second configuration: %v", err)
	}
	// Without the exemption the warning goes.
	delete(config, "exemptions")
	write(config)
	if st, _ = ts.c.Status(ctx); hasWarning(st.GetWarnings(), "controller service account") {
		t.Fatalf("status warnings after the fix: %q", st.GetWarnings())
	}
}

func hasWarning(ws []string, s string) bool {
	for _, w := range ws {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

type psaLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *psaLogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *psaLogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

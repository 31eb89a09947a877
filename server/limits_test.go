package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/authz"
	"github.com/arbiter-pdp/arbiter/server/limits"
)

// wantLimit checks that err is RESOURCE_EXHAUSTED naming the limit's flag,
// with a QuotaFailure detail whose subject is the flag.
func wantLimit(t *testing.T, err error, flag string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("got %v, want ResourceExhausted", err)
	}
	if !strings.Contains(st.Message(), "--"+flag) {
		t.Fatalf("message does not name --%s: %s", flag, st.Message())
	}
	for _, d := range st.Details() {
		if qf, ok := d.(*errdetails.QuotaFailure); ok && len(qf.GetViolations()) == 1 && qf.GetViolations()[0].GetSubject() == flag {
			return
		}
	}
	t.Fatalf("no QuotaFailure detail for %s: %v", flag, st.Details())
}

func namespaceJSON(name string, pad int) []byte {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "annotations": map[string]any{"pad": strings.Repeat("x", pad)}}})
	return b
}

func upserts(objs ...[]byte) *arbiterv1.WriteBatch {
	b := &arbiterv1.WriteBatch{}
	for _, o := range objs {
		b.Changes = append(b.Changes, &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: o})
	}
	return b
}

func TestLimitMaxRequestBytes(t *testing.T) {
	ts := startServer(t, server.Config{Limits: limits.Config{MaxRequestBytes: 64 << 10}})
	ctx := context.Background()
	req := podRequest("big", "default", false)
	var obj map[string]any
	_ = json.Unmarshal(req.ObjectJson, &obj)
	obj["metadata"].(map[string]any)["annotations"] = map[string]any{"pad": strings.Repeat("x", 100<<10)}
	req.ObjectJson, _ = json.Marshal(obj)
	_, err := ts.c.Decide(ctx, req)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("got %v, want ResourceExhausted: message larger than max", err)
	}
	// Under the limit: fine.
	if _, err := ts.c.Decide(ctx, podRequest("small", "default", false)); err != nil {
		t.Fatal(err)
	}
}

func TestLimitMaxObjectBytes(t *testing.T) {
	ts := startServer(t, server.Config{Limits: limits.Config{MaxObjectBytes: 4096}})
	ctx := context.Background()
	big := podRequest("big", "default", false)
	var obj map[string]any
	_ = json.Unmarshal(big.ObjectJson, &obj)
	obj["metadata"].(map[string]any)["annotations"] = map[string]any{"pad": strings.Repeat("x", 5000)}
	big.ObjectJson, _ = json.Marshal(obj)

	_, err := ts.c.Decide(ctx, big)
	wantLimit(t, err, "max-object-bytes")
	if !strings.Contains(status.Convert(err).Message(), "object_json") {
		t.Fatalf("the error does not name the field: %v", err)
	}
	// As a Struct.
	st, err := structpbFrom(obj)
	if err != nil {
		t.Fatal(err)
	}
	_, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{Object: st})
	wantLimit(t, err, "max-object-bytes")
	// In a batch: the item fails, the batch goes on.
	resp, err := ts.c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{Items: []*arbiterv1.BatchItem{{Request: big}, {Request: podRequest("ok", "default", false)}}})
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.GetItems()[0].GetError(); e.GetCode() != int32(codes.ResourceExhausted) || !strings.Contains(e.GetMessage(), "--max-object-bytes") {
		t.Fatalf("batch item 0: %v", e)
	}
	if resp.GetItems()[1].GetDecision() == nil {
		t.Fatalf("batch item 1 was not decided: %v", resp.GetItems()[1])
	}
	// In a write: refused whole, naming the change.
	_, err = ts.c.Write(ctx, upserts(namespaceJSON("small", 10), namespaceJSON("large", 5000)))
	wantLimit(t, err, "max-object-bytes")
	if !strings.Contains(status.Convert(err).Message(), "changes[1]") {
		t.Fatalf("the error does not name the change: %v", err)
	}
	if rev := ts.Current().Revision; rev != 0 {
		t.Fatalf("revision %d after a refused write", rev)
	}
	if _, err := ts.c.Write(ctx, upserts(namespaceJSON("small", 10))); err != nil {
		t.Fatal(err)
	}
}

func TestLimitMaxBatchObjects(t *testing.T) {
	ts := startServer(t, server.Config{Limits: limits.Config{MaxBatchObjects: 3}})
	ctx := context.Background()
	var objs [][]byte
	for i := 0; i < 4; i++ {
		objs = append(objs, namespaceJSON(fmt.Sprintf("ns-%d", i), 0))
	}
	_, err := ts.c.Write(ctx, upserts(objs...))
	wantLimit(t, err, "max-batch-objects")
	if rev := ts.Current().Revision; rev != 0 {
		t.Fatalf("revision %d after a refused write", rev)
	}
	if _, err := ts.c.Write(ctx, upserts(objs[:3]...)); err != nil {
		t.Fatal(err)
	}
}

func TestLimitMaxObjects(t *testing.T) {
	ts := startServer(t, server.Config{Limits: limits.Config{MaxObjects: 5}})
	ctx := context.Background()
	var objs [][]byte
	for i := 0; i < 6; i++ {
		objs = append(objs, namespaceJSON(fmt.Sprintf("ns-%d", i), 0))
	}
	if _, err := ts.c.Write(ctx, upserts(objs[:4]...)); err != nil {
		t.Fatal(err)
	}
	_, err := ts.c.Write(ctx, upserts(objs[4:]...))
	wantLimit(t, err, "max-objects")
	if n := ts.Current().Objects(); n != 4 {
		t.Fatalf("%d objects after a refused write, want 4", n)
	}
	// Up to the limit is fine, and so is a push that replaces content.
	if _, err := ts.c.Write(ctx, upserts(objs[4])); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.c.Push(ctx, objs[:2], nil, 0); err != nil {
		t.Fatal(err)
	}
	// LoadObjects (serve --load) goes through the same check.
	_, err = ts.LoadObjects(ctx, readObjects(t, pssDir))
	if err == nil || !strings.Contains(err.Error(), "--max-objects") {
		t.Fatalf("load over the limit: %v", err)
	}
}

// costlyPolicies are policies whose validation is cheap to write and
// expensive to run on a pod with many containers.
func costlyPolicies(n int) [][]byte {
	var out [][]byte
	for i := 0; i < n; i++ {
		b, _ := json.Marshal(map[string]any{
			"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
			"metadata": map[string]any{"name": fmt.Sprintf("costly-%d", i)},
			"spec": map[string]any{
				"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
					"apiGroups": []any{""}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"pods"}}}},
				"validations": []any{map[string]any{
					"expression": "object.spec.containers.all(c, object.spec.containers.all(d, c.name.size() + d.name.size() >= 0))",
					"message":    "unreachable"}},
			},
		})
		out = append(out, b)
	}
	return out
}

func manyContainers(n int) *arbiterv1.DecideRequest {
	cs := make([]any, n)
	for i := range cs {
		cs[i] = map[string]any{"name": fmt.Sprintf("c%d", i), "image": "x"}
	}
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "many", "namespace": "default"}, "spec": map[string]any{"containers": cs}})
	return &arbiterv1.DecideRequest{ObjectJson: b}
}

func TestLimitMaxDecisionCost(t *testing.T) {
	ctx := context.Background()
	pod := manyContainers(100)
	// Without a decision budget every policy passes (each is within the
	// per-policy budget).
	free := startServer(t, server.Config{})
	if _, err := free.c.Write(ctx, upserts(costlyPolicies(4)...)); err != nil {
		t.Fatal(err)
	}
	resp, err := free.c.Decide(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() {
		t.Fatalf("denied without a decision budget: %s", resp.GetStatus().GetMessage())
	}
	// With a budget that two policies exhaust, the rest are errors: denied.
	ts := startServer(t, server.Config{Limits: limits.Config{MaxDecisionCost: 200_000}})
	if _, err := ts.c.Write(ctx, upserts(costlyPolicies(4)...)); err != nil {
		t.Fatal(err)
	}
	resp, err = ts.c.Decide(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllowed() {
		t.Fatal("allowed although the decision cost budget ran out")
	}
	var errs int
	for _, r := range resp.GetResults() {
		if r.GetResult() == "error" {
			errs++
			t.Log(r.GetMessage())
			if !strings.Contains(r.GetMessage(), "decision cost budget of 200000 exceeded") {
				t.Fatalf("error result does not name the budget: %s", r.GetMessage())
			}
		}
	}
	if errs == 0 || errs == len(resp.GetResults()) {
		t.Fatalf("%d of %d results are budget errors; want some, not all", errs, len(resp.GetResults()))
	}
	// Small requests stay within it.
	resp, err = ts.c.Decide(ctx, manyContainers(2))
	if err != nil || !resp.GetAllowed() {
		t.Fatalf("small pod: %v %v", resp.GetStatus(), err)
	}
}

func TestLimitRatePerIdentity(t *testing.T) {
	p := newPKI(t)
	a, err := authz.New(authz.Config{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := p.serverTLS(t, tls.RequireAndVerifyClientCert, time.Second)
	ts := startServer(t, server.Config{GRPCOptions: []grpc.ServerOption{creds}, Authz: a,
		Limits: limits.Config{RateLimit: 1, RateBurst: 5}})
	ctx := context.Background()
	greedy := dialTLS(t, ts.addr, p, p.client(t, "greedy"), "")
	var refused error
	for i := 0; i < 10; i++ {
		if _, err := greedy.Status(ctx); err != nil {
			refused = err
			if i < 5 {
				t.Fatalf("call %d refused within the burst: %v", i, err)
			}
			break
		}
	}
	if status.Code(refused) != codes.ResourceExhausted || !strings.Contains(refused.Error(), "--rate-limit") || !strings.Contains(refused.Error(), "cn:greedy") {
		t.Fatalf("got %v, want ResourceExhausted naming --rate-limit and the identity", refused)
	}
	// Another identity has its own budget.
	if _, err := dialTLS(t, ts.addr, p, p.client(t, "polite"), "").Status(ctx); err != nil {
		t.Fatalf("another identity: %v", err)
	}
	// Health checks are never limited.
	for i := 0; i < 10; i++ {
		if _, err := greedy.Serving(ctx); err != nil {
			t.Fatalf("health check %d: %v", i, err)
		}
	}
}

func TestLimitRPCTimeout(t *testing.T) {
	ts := startServer(t, server.Config{MinRevisionWait: 10 * time.Second, Limits: limits.Config{RPCTimeout: 300 * time.Millisecond}})
	ctx := context.Background()
	req := podRequest("p", "default", false)
	req.MinRevision = 99
	// No deadline from the caller: the server's applies, and a wait for a
	// revision that never comes ends with it (here, MinRevisionWait is
	// longer than --rpc-timeout).
	start := time.Now()
	_, err := ts.c.Decide(ctx, req)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %v; the server's deadline is 300ms", took)
	}
	if c := status.Code(err); c != codes.FailedPrecondition && c != codes.DeadlineExceeded {
		t.Fatalf("got %v", err)
	}
	// A longer deadline from the caller is capped.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start = time.Now()
	_, err = ts.c.Decide(cctx, req)
	if took := time.Since(start); took > 3*time.Second || err == nil {
		t.Fatalf("took %v (err %v); the server caps deadlines at 300ms", took, err)
	}
}

// TestRPCTimeoutKeepsMinRevisionWait: the server's default deadline does not
// make an unmet min_revision wait longer than MinRevisionWait.
func TestRPCTimeoutKeepsMinRevisionWait(t *testing.T) {
	ts := startServer(t, server.Config{MinRevisionWait: 200 * time.Millisecond, Limits: limits.Config{RPCTimeout: 10 * time.Second}})
	req := podRequest("p", "default", false)
	req.MinRevision = 99
	start := time.Now()
	_, err := ts.c.Decide(context.Background(), req)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("took %v; MinRevisionWait is 200ms", took)
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("got %v, want FailedPrecondition", err)
	}
}

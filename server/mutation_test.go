package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// mutationFixture: a MutatingPolicy that labels Pods and a ValidatingPolicy
// that requires the label, so only the mutated object is compliant.
const mutationFixture = `apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata:
  name: add-team
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: 'Object{metadata: Object.metadata{labels: {"team": "platform"}}}'
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: require-team
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
    - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
      message: a team label is required
`

// TestDecideMutates: over gRPC, Decide mutates then validates the mutated
// object, and returns the RFC 6902 patch that turns the request's object
// into it; STAGES_VALIDATE_ONLY validates the object as given (denied, no
// patch), STAGES_MUTATE_ONLY returns the patch without validating.
func TestDecideMutates(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, mutationFixture))); err != nil {
		t.Fatal(err)
	}
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"apps"},"spec":{"containers":[{"name":"app","image":"nginx"}]}}`)

	resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || len(resp.GetResults()) != 2 || resp.GetPatchType() != "JSONPatch" {
		t.Fatalf("all stages: allowed %v, %d results, patch type %q", resp.GetAllowed(), len(resp.GetResults()), resp.GetPatchType())
	}
	if r := resp.GetResults()[0]; r.GetPolicy() != "add-team" || r.GetResult() != "pass" || r.GetSource() != "KyvernoMutatingPolicy" {
		t.Fatalf("mutation result: %v", r)
	}
	p, err := jsonpatch.DecodePatch(resp.GetPatch())
	if err != nil {
		t.Fatalf("patch %s: %v", resp.GetPatch(), err)
	}
	mutated, err := p.Apply(pod)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(mutated, &obj); err != nil {
		t.Fatal(err)
	}
	if labels, _ := obj["metadata"].(map[string]any)["labels"].(map[string]any); labels["team"] != "platform" {
		t.Fatalf("patch %s gives %s", resp.GetPatch(), mutated)
	}

	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod, Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllowed() || len(resp.GetPatch()) != 0 || len(resp.GetResults()) != 1 || resp.GetStatus().GetMessage() != "Policy require-team failed: a team label is required" {
		t.Fatalf("validate only: %v", resp)
	}

	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod, Stages: arbiterv1.Stages_STAGES_MUTATE_ONLY})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || len(resp.GetPatch()) == 0 || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetPolicy() != "add-team" {
		t.Fatalf("mutate only: %v", resp)
	}
}

const mapFixture = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: label-configmaps
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  reinvocationPolicy: Never
  mutations:
    - patchType: JSONPatch
      jsonPatch:
        expression: '[JSONPatch{op: "add", path: "/metadata/labels", value: {"mutated": "yes"}}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: label-configmaps
spec:
  policyName: label-configmaps
`

// TestMutatingAdmissionPolicyOverGRPC: a MutatingAdmissionPolicy with its
// binding, written to the server, mutates over gRPC and is listed by the
// query API.
func TestMutatingAdmissionPolicyOverGRPC(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, mapFixture))); err != nil {
		t.Fatal(err)
	}
	cm := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"apps"}}`)
	resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: cm})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.GetAllowed() || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetPolicyKind() != "MutatingAdmissionPolicy" ||
		string(resp.GetPatch()) != `[{"op":"add","path":"/metadata/labels","value":{"mutated":"yes"}}]` {
		t.Fatalf("decision: %v (patch %s)", resp, resp.GetPatch())
	}
	list, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{Kind: "MutatingAdmissionPolicy"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetPolicies()) != 1 || list.GetPolicies()[0].GetName() != "label-configmaps" || len(list.GetPolicies()[0].GetBindings()) != 1 ||
		len(list.GetPolicies()[0].GetManifestJson()) == 0 {
		t.Fatalf("listed: %v", list.GetPolicies())
	}
}

// TestMutationExceptionsAtRevisions: a PolicyException written at a later
// revision skips a MutatingPolicy from exactly that revision on (no patch,
// the result "skip" naming the exception, so the validation that needed
// the mutation denies), Explain says which exception skipped which
// mutation, and an expired exception no longer skips it.
func TestMutationExceptionsAtRevisions(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	write := func(yamlText string) uint64 {
		t.Helper()
		var changes []*arbiterv1.Change
		for _, o := range readObjects(t, writeFixture(t, yamlText)) {
			b, err := json.Marshal(o.Content)
			if err != nil {
				t.Fatal(err)
			}
			changes = append(changes, &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: b})
		}
		ack, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: changes})
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		return ack.GetRevision()
	}
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"apps"},"spec":{"containers":[{"name":"app","image":"nginx"}]}}`)
	decide := func(rev uint64) *arbiterv1.DecideResponse {
		t.Helper()
		resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod, MinRevision: rev})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetRevision() < rev {
			t.Fatalf("decided at revision %d, asked for at least %d", resp.GetRevision(), rev)
		}
		return resp
	}
	exceptionAt := func(expires string) string {
		return `apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: web-keeps-its-labels, namespace: apps}
spec:
  expiresAt: "` + expires + `"
  policyRefs: [{name: add-team, kind: MutatingPolicy}]
  matchConditions:
    - {name: is-web, expression: "object.metadata.name == 'web'"}
`
	}

	r1 := write(mutationFixture)
	if resp := decide(r1); !resp.GetAllowed() || len(resp.GetPatch()) == 0 || !resp.GetResults()[0].GetMutated() {
		t.Fatalf("revision %d, no exception: %v", r1, resp)
	}

	ex, err := ts.c.Query.Explain(ctx, &arbiterv1.ExplainRequest{Request: &arbiterv1.DecideRequest{ObjectJson: pod, MinRevision: r1}})
	if err != nil {
		t.Fatal(err)
	}
	applied := false
	for _, s := range ex.GetSteps() {
		applied = applied || s.GetPolicy() == "add-team" && s.GetNote() == "pass: success (the object was mutated)"
	}
	if !applied {
		t.Fatalf("Explain does not say add-team mutated the object: %v", ex.GetSteps())
	}

	r2 := write(exceptionAt(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
	resp := decide(r2)
	if resp.GetAllowed() || len(resp.GetPatch()) != 0 || resp.GetStatus().GetMessage() != "Policy require-team failed: a team label is required" {
		t.Fatalf("revision %d, exception: %v", r2, resp)
	}
	mr := resp.GetResults()[0]
	if mr.GetPolicy() != "add-team" || mr.GetResult() != "skip" || mr.GetMutated() ||
		mr.GetMessage() != "rule is skipped due to policy exception: apps/web-keeps-its-labels" {
		t.Fatalf("mutation result under the exception: %v", mr)
	}
	ex, err = ts.c.Query.Explain(ctx, &arbiterv1.ExplainRequest{Request: &arbiterv1.DecideRequest{ObjectJson: pod, MinRevision: r2}})
	if err != nil {
		t.Fatal(err)
	}
	noted := false
	for _, s := range ex.GetSteps() {
		if s.GetPolicy() == "add-team" && strings.Contains(s.GetException(), "web-keeps-its-labels") {
			noted = true
		}
	}
	if !noted {
		t.Fatalf("Explain does not say which exception skipped add-team: %v", ex.GetSteps())
	}

	r3 := write(exceptionAt("2020-01-01T00:00:00Z"))
	if resp := decide(r3); !resp.GetAllowed() || len(resp.GetPatch()) == 0 {
		t.Fatalf("revision %d, expired exception: %v", r3, resp)
	}
}

// TestAdmittedObjects: a batch or stream asking for admitted_objects gets,
// for each item a mutation changed, the object the patch would give
// (indented by two spaces) and no patch; an item left unchanged gets
// neither; the verdicts and results are those of plain decisions.
func TestAdmittedObjects(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, mutationFixture))); err != nil {
		t.Fatal(err)
	}
	mutated := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"apps"},"spec":{"containers":[{"name":"app","image":"nginx"}]}}`)
	unchanged := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"ok","namespace":"apps","labels":{"team":"platform"}}}`)
	items := []*arbiterv1.BatchItem{
		{Name: "mutated", Request: &arbiterv1.DecideRequest{ObjectJson: mutated}},
		{Name: "unchanged", Request: &arbiterv1.DecideRequest{ObjectJson: unchanged}},
		{Name: "validate only", Request: &arbiterv1.DecideRequest{ObjectJson: mutated, Stages: arbiterv1.Stages_STAGES_VALIDATE_ONLY}},
	}
	check := func(how string, got []*arbiterv1.ItemResult) {
		t.Helper()
		if len(got) != len(items) {
			t.Fatalf("%s: %d items", how, len(got))
		}
		for i, it := range got {
			plain, err := ts.c.Decide(ctx, items[i].GetRequest())
			if err != nil {
				t.Fatal(err)
			}
			d := it.GetDecision()
			if d.GetAllowed() != plain.GetAllowed() || len(d.GetPatch()) != 0 || d.GetPatchType() != "" {
				t.Errorf("%s: item %d: allowed %v (plain %v), patch %q", how, i, d.GetAllowed(), plain.GetAllowed(), d.GetPatch())
			}
			if got, want := len(d.GetResults())+len(it.GetPolicyReportJson()), len(plain.GetResults()); it.GetPolicyReportJson() == nil && got != want {
				t.Errorf("%s: item %d: %d results, plain %d", how, i, got, want)
			}
			if len(plain.GetPatch()) == 0 {
				if it.GetAdmittedObjectJson() != nil {
					t.Errorf("%s: item %d: unchanged, but admitted object %s", how, i, it.GetAdmittedObjectJson())
				}
				continue
			}
			p, err := jsonpatch.DecodePatch(plain.GetPatch())
			if err != nil {
				t.Fatal(err)
			}
			want, err := p.Apply(items[i].GetRequest().GetObjectJson())
			if err != nil {
				t.Fatal(err)
			}
			var wantIndented bytes.Buffer
			if err := json.Indent(&wantIndented, want, "", "  "); err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, it.GetAdmittedObjectJson(), want) || !bytes.Contains(it.GetAdmittedObjectJson(), []byte("\n  \"kind\": \"Pod\"")) {
				t.Errorf("%s: item %d: admitted object\n%s\nwant (the patch applied)\n%s", how, i, it.GetAdmittedObjectJson(), wantIndented.Bytes())
			}
		}
		if got[0].GetAdmittedObjectJson() == nil {
			t.Errorf("%s: the mutated item has no admitted object", how)
		}
	}
	for _, reports := range []bool{false, true} {
		batch, err := ts.c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{Items: items, AdmittedObjects: true, PolicyReports: reports})
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("batch (reports %v)", reports), batch.GetItems())

		stream, err := ts.c.Decision.DecideStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&arbiterv1.DecideStreamRequest{Items: items, AdmittedObjects: true, PolicyReports: reports}); err != nil {
			t.Fatal(err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var got []*arbiterv1.ItemResult
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, m.GetItems()...)
		}
		check(fmt.Sprintf("stream (reports %v)", reports), got)
	}
}

// jsonEqual says whether two JSON texts hold the same value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Errorf("%s: %v", a, err)
		return false
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// TestJSONPrefix: json_prefix starts every line but the first of the
// report's and the admitted object's JSON, which are otherwise the bytes
// given without it; a prefix of anything but spaces and tabs, or longer
// than 16, is refused naming the field.
func TestJSONPrefix(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, mutationFixture))); err != nil {
		t.Fatal(err)
	}
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"apps"},"spec":{"containers":[{"name":"app","image":"nginx"}]}}`)
	items := []*arbiterv1.BatchItem{{Name: "web", Request: &arbiterv1.DecideRequest{ObjectJson: pod}}}
	decide := func(prefix string) (*arbiterv1.ItemResult, error) {
		resp, err := ts.c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{Items: items, PolicyReports: true, AdmittedObjects: true, JsonPrefix: prefix})
		if err != nil {
			return nil, err
		}
		return resp.GetItems()[0], nil
	}
	plain, err := decide("")
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"  ", "\t", "                "} {
		got, err := decide(prefix)
		if err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		for _, c := range []struct{ name, got, plain string }{
			{"report", string(got.GetPolicyReportJson()), string(plain.GetPolicyReportJson())},
			{"admitted object", string(got.GetAdmittedObjectJson()), string(plain.GetAdmittedObjectJson())},
		} {
			if !strings.Contains(c.plain, "\n") {
				t.Fatalf("%s: not indented: %s", c.name, c.plain)
			}
			if want := strings.ReplaceAll(c.plain, "\n", "\n"+prefix); c.got != want {
				t.Errorf("prefix %q: %s\n%s\nwant\n%s", prefix, c.name, c.got, want)
			}
		}
	}
	for _, bad := range []string{"x", " \n", "                 "} {
		_, err := decide(bad)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "json_prefix") {
			t.Errorf("prefix %q: %v, want INVALID_ARGUMENT naming json_prefix", bad, err)
		}
		stream, err := ts.c.Decision.DecideStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&arbiterv1.DecideStreamRequest{Items: items, JsonPrefix: bad}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "json_prefix") {
			t.Errorf("stream, prefix %q: %v, want INVALID_ARGUMENT naming json_prefix", bad, err)
		}
	}
}

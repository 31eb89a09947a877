package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/decisionlog"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

// maxConfigMapsPolicy denies a ConfigMap when its namespace holds 2
// already (or the limit of the kube-system/limits ConfigMap), and a Pod
// when the GlobalContextEntry of Deployments counts none in its
// namespace.
const maxConfigMapsPolicy = `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: max-configmaps}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
  - name: existing
    expression: resource.List("v1", "configmaps", object.metadata.namespace).items
  - name: limits
    expression: dyn(resource.Get("v1", "configmaps", "kube-system", "limits"))
  validations:
  - expression: 'size(variables.existing) < (variables.limits == null ? 2 : int(variables.limits.data.max))'
    messageExpression: "'namespace ' + object.metadata.namespace + ' has ' + string(size(variables.existing)) + ' ConfigMaps'"
---
apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: deployments}
spec:
  kubernetesResource: {group: apps, version: v1, resource: deployments}
  projections:
  - {name: namespaces, jmesPath: "[].metadata.namespace"}
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: pods-need-a-deployment}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: 'object.metadata.namespace in globalContext.Get("deployments", "namespaces")'
    message: no Deployment in this namespace
`

func contextObjects(t testing.TB, docs string) []*manifest.Object {
	t.Helper()
	ds, err := manifest.Parse("context.yaml", []byte(docs))
	if err != nil {
		t.Fatal(err)
	}
	return manifest.FromDocuments(ds)
}

func cmJSON(ns, name string) []byte {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name, "namespace": ns}})
	return b
}

func podJSON(ns, name string) []byte {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}}})
	return b
}

func upsert(b []byte) *arbiterv1.Change {
	return &arbiterv1.Change{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: b}
}

func decide(t *testing.T, ts *testServer, obj []byte, minRev uint64) *arbiterv1.DecideResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: obj, MinRevision: minRev})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Context objects are stored beside the policies, revisioned, replicated
// and read by decisions at exactly their revision: a policy limiting
// ConfigMaps per namespace with resource.List and resource.Get, and one
// reading a GlobalContextEntry of Deployments, decide on the primary and
// on a follower alike; each write of a context object changes the next
// decisions at its revision (min_revision gives read-your-writes);
// Explain and the decision log say what a decision read.
func TestContextObjectsInDecisions(t *testing.T) {
	ctx := context.Background()
	logPath := filepath.Join(t.TempDir(), "decisions.jsonl")
	dl, err := decisionlog.New(decisionlog.Config{Output: logPath})
	if err != nil {
		t.Fatal(err)
	}
	primary := startServer(t, server.Config{DecisionLog: dl})
	follower := startServer(t, server.Config{Follow: primary.addr, ReplicaID: "f1"})
	commit, err := primary.LoadObjects(ctx, contextObjects(t, maxConfigMapsPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []*testServer{primary, follower} {
		if r := decide(t, ts, cmJSON("apps", "a"), commit.Revision); !r.GetAllowed() {
			t.Fatalf("empty namespace: %s", r.GetStatus().GetMessage())
		}
		if r := decide(t, ts, podJSON("apps", "p"), commit.Revision); r.GetAllowed() || !strings.Contains(r.GetStatus().GetMessage(), "no Deployment in this namespace") {
			t.Fatalf("pod without deployment: %v", r.GetStatus())
		}
	}
	// Two ConfigMaps and a Deployment stored as context objects.
	ack, err := primary.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
		upsert(cmJSON("apps", "one")), upsert(cmJSON("apps", "two")), upsert(cmJSON("other", "one")),
		upsert([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"apps"},"spec":{"replicas":1}}`)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range []*testServer{primary, follower} {
		r := decide(t, ts, cmJSON("apps", "three"), ack.GetRevision())
		if r.GetAllowed() || !strings.Contains(r.GetStatus().GetMessage(), "namespace apps has 2 ConfigMaps") || r.GetRevision() != ack.GetRevision() || r.GetDigest() != ack.GetDigest() {
			t.Fatalf("%s: full namespace: %v (rev %d)", ts.addr, r.GetStatus(), r.GetRevision())
		}
		if r := decide(t, ts, cmJSON("other", "two"), ack.GetRevision()); !r.GetAllowed() {
			t.Fatalf("other namespace: %v", r.GetStatus())
		}
		if r := decide(t, ts, podJSON("apps", "p"), ack.GetRevision()); !r.GetAllowed() {
			t.Fatalf("pod with deployment: %v", r.GetStatus())
		}
	}
	// A limit raises the bound; deleting one ConfigMap makes room.
	ack2, err := primary.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
		upsert([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"limits","namespace":"kube-system"},"data":{"max":"3"}}`)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := decide(t, follower, cmJSON("apps", "three"), ack2.GetRevision()); !r.GetAllowed() {
		t.Fatalf("with limit 3: %v", r.GetStatus())
	}
	// Explain lists the reads, distinct and sorted.
	ex, err := arbiterv1.NewQueryServiceClient(follower.c.Conn()).Explain(ctx, &arbiterv1.ExplainRequest{Request: &arbiterv1.DecideRequest{ObjectJson: cmJSON("apps", "three"), MinRevision: ack2.GetRevision()}})
	if err != nil {
		t.Fatal(err)
	}
	var reads []string
	for _, r := range ex.GetContextReads() {
		reads = append(reads, fmt.Sprintf("%s %s %s %s/%s %d", r.GetOp(), r.GetApiVersion(), r.GetResource(), r.GetNamespace(), r.GetName(), r.GetCount()))
	}
	if want := []string{"get v1 configmaps kube-system/limits 1", "list v1 configmaps apps/ 2"}; strings.Join(reads, "|") != strings.Join(want, "|") {
		t.Fatalf("explain reads %q, want %q", reads, want)
	}
	// Digests agree: the follower stores exactly what the primary stores.
	waitRevision(t, follower, ack2.GetRevision())
	if fr, fd := follower.Store().Revision(); fr != ack2.GetRevision() || fd != ack2.GetDigest() {
		t.Fatalf("follower at %d %s, primary %d %s", fr, fd, ack2.GetRevision(), ack2.GetDigest())
	}
	st, err := follower.c.Status(ctx)
	if err != nil || st.GetContextObjects() != 5 || st.GetObjects() != 8 {
		t.Fatalf("status: %v %v", st, err)
	}
	// The decision log says what each decision read: keys, never content.
	if err := dl.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, logPath)
	var found bool
	for _, l := range lines {
		if txt := jsonText(l["contextReads"]); strings.Contains(txt, `"op":"list"`) && strings.Contains(txt, `"namespace":"apps"`) && strings.Contains(txt, `"count":2`) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no decision log line with the list read: %v", lines)
	}
}

// A write of context objects that are neither CRDs nor params keeps the
// compiled policy set; a write of policies recompiles it.
func TestContextWriteKeepsThePolicySet(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, server.Config{})
	if _, err := ts.LoadObjects(ctx, contextObjects(t, maxConfigMapsPolicy)); err != nil {
		t.Fatal(err)
	}
	before := ts.Current().Set
	if _, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{upsert(cmJSON("a", "b"))}}); err != nil {
		t.Fatal(err)
	}
	if ts.Current().Set != before {
		t.Fatal("a context write recompiled the policies")
	}
	crd := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},
		"spec":{"group":"example.com","scope":"Namespaced","names":{"kind":"Widget","plural":"widgets"},"versions":[{"name":"v1","served":true,"storage":true}]}}`
	if _, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{upsert([]byte(crd))}}); err != nil {
		t.Fatal(err)
	}
	if ts.Current().Set == before {
		t.Fatal("a CRD write kept the policies (their mutation schemas read CRDs)")
	}
	// The CRD maps its kind: a Widget without namespace is refused.
	_, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{upsert([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}`))}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "metadata.namespace") {
		t.Fatalf("widget without namespace: %v", err)
	}
}

// Secrets are stored only when the server is told to; then they are read
// by policies and replicated like any context object.
func TestSecretsStoredOnlyWhenEnabled(t *testing.T) {
	ctx := context.Background()
	secret := []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"creds","namespace":"apps"},"data":{"token":"c2VjcmV0"}}`)
	off := startServer(t, server.Config{})
	_, err := off.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{upsert(secret)}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "Secret apps/creds") || !strings.Contains(err.Error(), "--store-secrets") {
		t.Fatalf("secret refused: %v", err)
	}
	if _, err := off.LoadObjects(ctx, contextObjects(t, string(secret))); err == nil {
		t.Fatal("serve --load stored a Secret")
	}
	on := startServer(t, server.Config{StoreSecrets: true})
	if _, err := on.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{upsert(secret)}}); err != nil {
		t.Fatal(err)
	}
	// A follower of a primary that stores Secrets stores them too.
	f := startServer(t, server.Config{Follow: on.addr})
	rev, _ := on.Store().Revision()
	waitRevision(t, f, rev)
	if _, ok := f.Current().Object(store.Key{Kind: "Secret", Namespace: "apps", Name: "creds"}); !ok {
		t.Fatal("follower lacks the Secret")
	}
}

// push (replace_all) makes the stored objects, context objects included,
// equal to those pushed.
func TestPushReplacesContextObjects(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, server.Config{})
	if _, err := ts.c.Push(ctx, [][]byte{cmJSON("a", "one"), cmJSON("a", "two")}, nil, 0); err != nil {
		t.Fatal(err)
	}
	ack, err := ts.c.Push(ctx, [][]byte{cmJSON("a", "two"), cmJSON("b", "three")}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ack.GetUpserted() != 1 || ack.GetDeleted() != 1 {
		t.Fatalf("ack %v", ack)
	}
	var keys []string
	ts.Current().Range(func(k store.Key, _ *manifest.Object) bool {
		keys = append(keys, k.String())
		return true
	})
	if len(keys) != 2 || !strings.Contains(keys[0], "two") || !strings.Contains(keys[1], "three") {
		t.Fatalf("stored %q", keys)
	}
}

// A decision at revision R reads exactly the context objects of R, while
// commits change them concurrently: each decision's count of ConfigMaps is
// the count its revision holds.
func TestContextReadsItsRevision(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, server.Config{})
	commit, err := ts.LoadObjects(ctx, contextObjects(t, `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: count}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: 'size(resource.List("v1", "configmaps", "apps").items) < 0'
    messageExpression: string(size(resource.List("v1", "configmaps", "apps").items))
`))
	if err != nil {
		t.Fatal(err)
	}
	base := commit.Revision
	const writes = 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < writes; i++ {
			if _, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{upsert(cmJSON("apps", fmt.Sprintf("cm-%02d", i)))}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	seen := make([]map[uint64]bool, 4)
	for reader := range seen {
		seen[reader] = map[uint64]bool{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: podJSON("apps", "p")})
				if err != nil {
					t.Error(err)
					return
				}
				seen[reader][resp.GetRevision()] = true
				if want := fmt.Sprintf("Policy count failed: %d", resp.GetRevision()-base); resp.GetStatus().GetMessage() != want {
					t.Errorf("revision %d: %q, want %q", resp.GetRevision(), resp.GetStatus().GetMessage(), want)
					return
				}
			}
		}()
	}
	wg.Wait()
	revs := map[uint64]bool{}
	for _, s := range seen {
		for r := range s {
			revs[r] = true
		}
	}
	if len(revs) < 2 {
		t.Fatalf("decisions saw %d revisions: the writes did not overlap them", len(revs))
	}
	<-done
}

// Namespaces are policy objects (the namespaceObject of requests) and also
// what resource.Get/List read as v1 namespaces, at the revision that holds
// them (Kyverno's listers serve them; Kyverno's karpenter-mpol chainsaw
// test reads a Namespace's labels this way).
func TestNamespacesReadAsResources(t *testing.T) {
	ctx := context.Background()
	ts := startServer(t, server.Config{})
	commit, err := ts.LoadObjects(ctx, contextObjects(t, `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: team-label}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  variables:
  - name: ns
    expression: dyn(resource.Get("v1", "namespaces", "", object.metadata.namespace))
  validations:
  - expression: 'variables.ns != null && has(variables.ns.metadata.labels) && "team" in variables.ns.metadata.labels'
    message: the namespace has no team label
  - expression: 'resource.List("v1", "namespaces", "").items.size() >= 1'
    message: no namespace listed
---
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {team: a}}
---
apiVersion: v1
kind: Namespace
metadata: {name: bare}
`))
	if err != nil {
		t.Fatal(err)
	}
	if r := decide(t, ts, cmJSON("apps", "x"), commit.Revision); !r.GetAllowed() {
		t.Fatalf("labelled namespace: %v", r.GetStatus())
	}
	if r := decide(t, ts, cmJSON("bare", "x"), commit.Revision); r.GetAllowed() || !strings.Contains(r.GetStatus().GetMessage(), "no team label") {
		t.Fatalf("bare namespace: %v", r.GetStatus())
	}
	// A label added in a later revision is read at that revision.
	ack, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
		upsert([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bare","labels":{"team":"b"}}}`)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := decide(t, ts, cmJSON("bare", "x"), ack.GetRevision()); !r.GetAllowed() {
		t.Fatalf("after the label: %v", r.GetStatus())
	}
	// Deleted, it reads as null again.
	ack, err = ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
		{Op: arbiterv1.ChangeOp_CHANGE_OP_DELETE, Key: &arbiterv1.ObjectKey{Kind: "Namespace", Name: "bare"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := decide(t, ts, cmJSON("bare", "x"), ack.GetRevision()); r.GetAllowed() {
		t.Fatalf("after the delete: %v", r.GetStatus())
	}
}

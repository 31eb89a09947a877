package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/decisionlog"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/metrics"
)

// psaQueryFixture: a PodSecurityConfiguration (enforce baseline, warn
// restricted; kube-system exempt), Namespaces with and without Pod Security
// labels, a ValidatingPolicy on Pods, and PolicyExceptions naming the
// levels: one that matches a Pod by name, one with compensating controls,
// one expired.
const psaQueryFixture = `
apiVersion: pod-security.admission.config.k8s.io/v1
kind: PodSecurityConfiguration
defaults:
  enforce: baseline
  warn: restricted
exemptions:
  namespaces: [kube-system]
---
apiVersion: v1
kind: Namespace
metadata: {name: apps}
---
apiVersion: v1
kind: Namespace
metadata:
  name: prod
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: v1.30
---
apiVersion: v1
kind: Namespace
metadata:
  name: dev
  labels:
    pod-security.kubernetes.io/enforce-version: v1.29
    pod-security.kubernetes.io/warn: baseline
---
apiVersion: v1
kind: Namespace
metadata:
  name: kube-system
  labels:
    pod-security.kubernetes.io/enforce: restricted
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: require-team, labels: {owner: platform}}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
    - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
      message: pods need a team label
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: legacy, namespace: ops}
spec:
  policyRefs: [{kind: PodSecurity, name: restricted}]
  matchConditions:
    - {name: legacy, expression: "object.metadata.name == 'legacy'"}
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: agent, namespace: ops}
spec:
  policyRefs: [{kind: PodSecurity, name: baseline}]
  matchConditions:
    - {name: agent, expression: "object.metadata.name == 'agent'"}
  validations:
    - {expression: "has(object.metadata.annotations)", message: an exception needs a ticket annotation}
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: long-gone, namespace: ops}
spec:
  policyRefs: [{kind: PodSecurity, name: baseline}]
  expiresAt: "2020-01-01T00:00:00Z"
`

func startPSAQueryServer(t *testing.T, cfg server.Config) *testServer {
	t.Helper()
	ts := startServer(t, cfg)
	if _, err := ts.LoadObjects(context.Background(), readObjects(t, writeFixture(t, psaQueryFixture))); err != nil {
		t.Fatal(err)
	}
	return ts
}

func policyNames(ps []*arbiterv1.PolicyInfo) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.GetKind()+"/"+p.GetName())
	}
	return out
}

func podSecurityUses(p *arbiterv1.PolicyInfo) string {
	var out []string
	for _, u := range p.GetPodSecurity() {
		where := slices.Clone(u.GetNamespaces())
		if u.GetDefaults() {
			where = append([]string{"defaults"}, where...)
		}
		out = append(out, fmt.Sprintf("%s:%s(%s)", u.GetMode(), u.GetVersion(), strings.Join(where, ",")))
	}
	return strings.Join(out, " ")
}

// Pod Security levels are policies of kind PodSecurity in the inventory:
// listed (and counted by Status) when in effect somewhere, filtered like
// the others, with where they are in effect, their actions (the modes),
// resources, exceptions and the configuration as manifest.
func TestPodSecurityInventory(t *testing.T) {
	ts := startPSAQueryServer(t, server.Config{})
	ctx := context.Background()
	all, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := ts.c.Query.Status(ctx, &arbiterv1.StatusRequest{})
	if err != nil || int(st.GetPolicies()) != len(all.GetPolicies()) || st.GetPolicies() != 3 {
		t.Fatalf("status counts %d policies, the list has %v (%v)", st.GetPolicies(), policyNames(all.GetPolicies()), err)
	}
	for _, c := range []struct {
		req  *arbiterv1.ListPoliciesRequest
		want []string
	}{
		{&arbiterv1.ListPoliciesRequest{}, []string{"ValidatingPolicy/require-team", "PodSecurity/baseline", "PodSecurity/restricted"}},
		{&arbiterv1.ListPoliciesRequest{Kind: "PodSecurity"}, []string{"PodSecurity/baseline", "PodSecurity/restricted"}},
		{&arbiterv1.ListPoliciesRequest{Kind: "ValidatingPolicy"}, []string{"ValidatingPolicy/require-team"}},
		{&arbiterv1.ListPoliciesRequest{Kind: "ValidatingAdmissionPolicy"}, []string{}},
		{&arbiterv1.ListPoliciesRequest{Action: "Deny"}, []string{"PodSecurity/baseline", "PodSecurity/restricted"}},
		{&arbiterv1.ListPoliciesRequest{Action: "Warn"}, []string{"PodSecurity/baseline", "PodSecurity/restricted"}},
		{&arbiterv1.ListPoliciesRequest{Action: "Audit"}, []string{"ValidatingPolicy/require-team"}},
		{&arbiterv1.ListPoliciesRequest{Kind: "PodSecurity", Action: "Audit"}, []string{}},
		// Pod Security levels are not namespaced policies and have no labels.
		{&arbiterv1.ListPoliciesRequest{Namespace: "prod"}, []string{}},
		{&arbiterv1.ListPoliciesRequest{LabelSelector: "owner=platform"}, []string{"ValidatingPolicy/require-team"}},
		{&arbiterv1.ListPoliciesRequest{LabelSelector: "owner!=platform"}, []string{"PodSecurity/baseline", "PodSecurity/restricted"}},
	} {
		resp, err := ts.c.Query.ListPolicies(ctx, c.req)
		if err != nil {
			t.Fatalf("list %v: %v", c.req, err)
		}
		if got := policyNames(resp.GetPolicies()); !slices.Equal(got, c.want) {
			t.Errorf("list %v = %v, want %v", c.req, got, c.want)
		}
	}

	byName := map[string]*arbiterv1.PolicyInfo{}
	for _, p := range all.GetPolicies() {
		byName[p.GetKind()+"/"+p.GetName()] = p
	}
	workloads := "v1/pods,v1/replicationcontrollers,v1/podtemplates,apps/v1/deployments,apps/v1/replicasets,apps/v1/statefulsets,apps/v1/daemonsets,batch/v1/jobs,batch/v1/cronjobs"
	for _, c := range []struct {
		name, actions, uses, exceptions string
	}{
		// dev's enforce is the default level at its v1.29 label.
		{"PodSecurity/baseline", "Deny,Warn", "enforce:latest(defaults,apps) enforce:v1.29(dev) warn:latest(dev)", "ops/agent,ops/long-gone"},
		// kube-system is exempt: its label is in effect nowhere.
		{"PodSecurity/restricted", "Deny,Warn", "enforce:v1.30(prod) warn:latest(defaults,apps,prod)", "ops/legacy"},
	} {
		p := byName[c.name]
		if p == nil {
			t.Fatalf("%s not listed", c.name)
		}
		if got := strings.Join(p.GetActions(), ","); got != c.actions {
			t.Errorf("%s actions %s, want %s", c.name, got, c.actions)
		}
		if got := podSecurityUses(p); got != c.uses {
			t.Errorf("%s in effect %s, want %s", c.name, got, c.uses)
		}
		if got := strings.Join(p.GetExceptions(), ","); got != c.exceptions {
			t.Errorf("%s exceptions %s, want %s", c.name, got, c.exceptions)
		}
		if got := strings.Join(p.GetResources(), ","); got != workloads {
			t.Errorf("%s resources %s", c.name, got)
		}
		if !p.GetAdmissionEnabled() || !p.GetBackgroundEnabled() || len(p.GetLabels()) != 0 || p.GetNamespace() != "" {
			t.Errorf("%s: %v", c.name, p)
		}
		var manifest map[string]any
		if err := json.Unmarshal(p.GetManifestJson(), &manifest); err != nil || manifest["kind"] != "PodSecurityConfiguration" {
			t.Errorf("%s manifest: %s (%v)", c.name, p.GetManifestJson(), err)
		}
	}
	lean, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{Kind: "PodSecurity", WithoutManifests: true})
	if err != nil || len(lean.GetPolicies()) != 2 || len(lean.GetPolicies()[0].GetManifestJson()) != 0 {
		t.Fatalf("without manifests: %v %v", lean, err)
	}

	for _, c := range []struct {
		kind, name string
		code       codes.Code
		exceptions []string
	}{
		{"PodSecurity", "restricted", codes.OK, []string{"ops/legacy"}},
		{"PodSecurity", "baseline", codes.OK, []string{"ops/agent", "ops/long-gone"}},
		{"PodSecurity", "privileged", codes.NotFound, nil},
		{"", "restricted", codes.OK, []string{"ops/legacy"}}, // any kind
		{"ValidatingAdmissionPolicy", "baseline", codes.NotFound, nil},
	} {
		resp, err := ts.c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Kind: c.kind, Name: c.name})
		if status.Code(err) != c.code {
			t.Errorf("get %s %s: %v, want %v", c.kind, c.name, err, c.code)
			continue
		}
		if err != nil {
			continue
		}
		if got := podSecurityUses(resp.GetPolicy()); got != podSecurityUses(byName["PodSecurity/"+c.name]) || len(resp.GetPolicy().GetManifestJson()) == 0 {
			t.Errorf("get %s: %v", c.name, resp.GetPolicy())
		}
		var got []string
		for _, ex := range resp.GetExceptions() {
			got = append(got, ex.GetNamespace()+"/"+ex.GetName())
			if refs := ex.GetPolicies(); len(refs) != 1 || refs[0].GetKind() != "PodSecurity" || refs[0].GetName() != c.name || !refs[0].GetExists() {
				t.Errorf("get %s: exception %s references %v", c.name, ex.GetName(), refs)
			}
		}
		if !slices.Equal(got, c.exceptions) {
			t.Errorf("get %s: exceptions %v, want %v", c.name, got, c.exceptions)
		}
	}
}

// Without a configuration, a level is listed when a namespace's labels set
// it, or (with no actions: it checks nothing) when exceptions name it.
func TestPodSecurityInventoryWithoutConfiguration(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	fixture := `
apiVersion: v1
kind: Namespace
metadata: {name: plain}
---
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: someday, namespace: ops}
spec:
  policyRefs: [{kind: PodSecurity, name: restricted}]
`
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, fixture))); err != nil {
		t.Fatal(err)
	}
	list, err := ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{})
	if err != nil || !slices.Equal(policyNames(list.GetPolicies()), []string{"PodSecurity/restricted"}) {
		t.Fatalf("list: %v %v", list, err)
	}
	p := list.GetPolicies()[0]
	if len(p.GetActions()) != 0 || len(p.GetResources()) != 0 || len(p.GetPodSecurity()) != 0 || p.GetAdmissionEnabled() || len(p.GetManifestJson()) != 0 ||
		!slices.Equal(p.GetExceptions(), []string{"ops/someday"}) {
		t.Fatalf("a level named only by an exception: %v", p)
	}
	if _, err := ts.c.Query.GetPolicy(ctx, &arbiterv1.GetPolicyRequest{Kind: "PodSecurity", Name: "baseline"}); status.Code(err) != codes.NotFound {
		t.Fatalf("baseline is in effect nowhere: %v", err)
	}
	// Labelling a namespace brings its levels (LoadObjects upserts: the
	// exception stays).
	labelled := `
apiVersion: v1
kind: Namespace
metadata:
  name: plain
  labels: {pod-security.kubernetes.io/warn: baseline}
`
	if _, err := ts.LoadObjects(ctx, readObjects(t, writeFixture(t, labelled))); err != nil {
		t.Fatal(err)
	}
	st, err := ts.c.Query.Status(ctx, &arbiterv1.StatusRequest{})
	if err != nil || st.GetPolicies() != 2 {
		t.Fatalf("status after labelling: %v %v", st, err)
	}
	list, err = ts.c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{})
	if err != nil || !slices.Equal(policyNames(list.GetPolicies()), []string{"PodSecurity/baseline", "PodSecurity/restricted"}) ||
		podSecurityUses(list.GetPolicies()[0]) != "warn:latest(plain)" || len(list.GetPolicies()[0].GetExceptions()) != 0 {
		t.Fatalf("list: %v %v", list, err)
	}
}

func applicableLines(resp *arbiterv1.ApplicableResponse) []string {
	out := []string{}
	for _, p := range resp.GetPolicies() {
		line := p.GetPolicy().GetKind() + "/" + p.GetPolicy().GetName() + " [" + strings.Join(p.GetPolicy().GetActions(), ",") + "]"
		if u := podSecurityUses(p.GetPolicy()); u != "" {
			line += " " + u
		}
		var exs []string
		for _, e := range p.GetExceptions() {
			exs = append(exs, e.GetException().GetName()+"="+e.GetMatch())
		}
		if len(exs) > 0 {
			line += " | " + strings.Join(exs, "; ")
		}
		out = append(out, line)
	}
	return out
}

// Applicable reports the Pod Security levels that apply to a Pod, a
// workload resource or a Namespace, with the modes and versions of its
// namespace and the exceptions naming them, evaluated on the object.
func TestPodSecurityApplicable(t *testing.T) {
	ts := startPSAQueryServer(t, server.Config{})
	ctx := context.Background()
	obj := func(apiVersion, kind, ns, name string, spec map[string]any) []byte {
		md := map[string]any{"name": name}
		if ns != "" {
			md["namespace"] = ns
		}
		o := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md}
		if spec != nil {
			o["spec"] = spec
		}
		return vapObjectJSON(t, o)
	}
	podSpec := map[string]any{"containers": []any{map[string]any{"name": "app", "image": "app:1"}}}
	deploySpec := map[string]any{"template": map[string]any{"spec": podSpec}}
	for _, c := range []struct {
		name string
		req  *arbiterv1.ApplicableRequest
		want []string
	}{
		{"pod in a namespace with the defaults", &arbiterv1.ApplicableRequest{ObjectJson: obj("v1", "Pod", "apps", "web", podSpec)}, []string{
			"ValidatingPolicy/require-team [Audit]",
			"PodSecurity/baseline [Deny] enforce:latest(apps) | agent=does not match; long-gone=expired",
			"PodSecurity/restricted [Warn] warn:latest(apps) | legacy=does not match",
		}},
		{"pod an exception matches", &arbiterv1.ApplicableRequest{ObjectJson: obj("v1", "Pod", "prod", "legacy", podSpec)}, []string{
			"ValidatingPolicy/require-team [Audit]",
			"PodSecurity/restricted [Deny,Warn] enforce:v1.30(prod) warn:latest(prod) | legacy=matches",
		}},
		{"pod with compensating controls", &arbiterv1.ApplicableRequest{ObjectJson: obj("v1", "Pod", "dev", "agent", podSpec)}, []string{
			"ValidatingPolicy/require-team [Audit]",
			"PodSecurity/baseline [Deny,Warn] enforce:v1.29(dev) warn:latest(dev) | agent=matches; long-gone=expired",
		}},
		// (The ValidatingPolicy applies to the pod controllers too, autogen.)
		{"workload resource: audit and warn only", &arbiterv1.ApplicableRequest{ObjectJson: obj("apps/v1", "Deployment", "prod", "legacy", deploySpec)}, []string{
			"ValidatingPolicy/require-team [Audit]",
			"PodSecurity/restricted [Warn] warn:latest(prod) | legacy=matches",
		}},
		{"workload resource with only an enforced level", &arbiterv1.ApplicableRequest{ObjectJson: obj("batch/v1", "Job", "apps", "once", deploySpec)}, []string{
			"ValidatingPolicy/require-team [Audit]",
			"PodSecurity/restricted [Warn] warn:latest(apps) | legacy=does not match",
		}},
		{"exempt namespace", &arbiterv1.ApplicableRequest{ObjectJson: obj("v1", "Pod", "kube-system", "proxy", podSpec)}, []string{
			"ValidatingPolicy/require-team [Audit]",
		}},
		{"resource Pod Security does not handle", &arbiterv1.ApplicableRequest{ObjectJson: obj("v1", "ConfigMap", "prod", "c", nil)}, []string{}},
		{"namespace: the levels its labels set, exceptions not evaluated", &arbiterv1.ApplicableRequest{ObjectJson: vapObjectJSON(t, map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "payments",
				"labels": map[string]any{"pod-security.kubernetes.io/enforce": "restricted"}}})}, []string{
			"PodSecurity/restricted [Deny,Warn] enforce:latest(payments) warn:latest(payments) | legacy=not evaluated",
		}},
		{"exempt namespace object", &arbiterv1.ApplicableRequest{ObjectJson: obj("v1", "Namespace", "", "kube-system", nil)}, []string{}},
		{"kind, namespace and labels only", &arbiterv1.ApplicableRequest{Kind: &arbiterv1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: "prod", Name: "legacy"}, []string{
			"ValidatingPolicy/require-team [Audit]",
			"PodSecurity/restricted [Deny,Warn] enforce:v1.30(prod) warn:latest(prod) | legacy=not evaluated",
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, err := ts.c.Query.Applicable(ctx, c.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := applicableLines(resp); !slices.Equal(got, c.want) {
				t.Errorf("applicable:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
		})
	}
}

// An expired PolicyException of a Pod Security level is reported as
// expired (metrics, decision log) once per decision whose level was
// checked; not when the request is exempt.
func TestPodSecurityExpiredException(t *testing.T) {
	m := metrics.New()
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	dl, err := decisionlog.New(decisionlog.Config{Output: path})
	if err != nil {
		t.Fatal(err)
	}
	ts := startPSAQueryServer(t, server.Config{Metrics: m, DecisionLog: dl})
	m.RegisterState(ts.State)
	ctx := context.Background()
	pod := func(ns string) *arbiterv1.DecideRequest {
		return &arbiterv1.DecideRequest{ObjectJson: vapObjectJSON(t, map[string]any{"apiVersion": "v1", "kind": "Pod",
			"metadata": map[string]any{"name": "web", "namespace": ns, "labels": map[string]any{"team": "a"}},
			"spec":     map[string]any{"containers": []any{map[string]any{"name": "app", "image": "app:1"}}}})}
	}
	// apps: baseline enforced; dev: baseline at two versions (two results);
	// kube-system: exempt; prod: restricted only.
	for _, ns := range []string{"apps", "dev", "kube-system", "prod"} {
		if _, err := ts.c.Decide(ctx, pod(ns)); err != nil {
			t.Fatal(err)
		}
	}
	if got := gather(t, m, "arbiter_exception_grants_total", map[string]string{"exception": "ops/long-gone", "result": "expired"}); got != 2 {
		t.Errorf("expired ops/long-gone counted %v times, want 2", got)
	}
	if got := gather(t, m, "arbiter_policies", nil); got != 3 {
		t.Errorf("arbiter_policies = %v, want 3 (as Status)", got)
	}
	if err := dl.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 4 {
		t.Fatalf("%d decision log lines", len(lines))
	}
	for i, want := range []string{`["ops/long-gone"]`, `["ops/long-gone"]`, `null`, `null`} {
		ex, _ := lines[i]["exceptions"].(map[string]any)
		if got := jsonText(ex["expired"]); got != want {
			t.Errorf("decision %d: expired %s, want %s", i, got, want)
		}
	}
}

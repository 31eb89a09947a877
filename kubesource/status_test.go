package kubesource

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/store"
)

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Hour)
)

func ready() rbacResult { return rbacResult{granted: true, message: MessageReadyForReporting} }

func cond(typ string, ok bool, msg string, at time.Time, gen int64) metav1.Condition {
	c := metav1.Condition{Type: typ, Status: metav1.ConditionFalse, Reason: ReasonFailed, Message: msg, LastTransitionTime: metav1.NewTime(at), ObservedGeneration: gen}
	if ok {
		c.Status, c.Reason = metav1.ConditionTrue, ReasonSucceeded
	}
	return c
}

func types(st policyStatus) string {
	var out []string
	for _, c := range st.ConditionStatus.Conditions {
		out = append(out, c.Type+"="+string(c.Status))
	}
	return strings.Join(out, ",")
}

// TestBuildStatus: the conditions, their order, reasons, messages and
// times, ready, the revision message, status.generated and autogen.
func TestBuildStatus(t *testing.T) {
	const rev = 1<<32 + 7
	healthy := statusInput{now: t0, generation: 1, webhook: webhookConfigured, rbac: ready(), holds: rev, revision: rev}

	t.Run("a new policy: Kyverno's two conditions, in Kyverno's order", func(t *testing.T) {
		st := buildStatus(policyStatus{}, healthy)
		want := []metav1.Condition{
			cond(ConditionWebhookConfigured, true, "Webhook configured.", t0, 1),
			cond(ConditionRBACPermissionsGranted, true, "Policy is ready for reporting.", t0, 1),
		}
		if got, _ := json.Marshal(st.ConditionStatus.Conditions); string(got) != mustJSON(want) {
			t.Fatalf("conditions %s\nwant %s", got, mustJSON(want))
		}
		if st.ConditionStatus.Ready == nil || !*st.ConditionStatus.Ready {
			t.Fatal("not ready")
		}
		if m := st.ConditionStatus.Message; m != "Arbiter revision 4294967303 holds generation 1." {
			t.Fatalf("message %q", m)
		}
		b, _ := json.Marshal(st)
		if !strings.Contains(string(b), `"generated":false`) || !strings.Contains(string(b), `"autogen":{}`) {
			t.Fatalf("status %s: generated and autogen are always written, as Kyverno's", b)
		}
	})

	t.Run("the order is restored in one update", func(t *testing.T) {
		cur := policyStatus{ConditionStatus: conditionStatus{Conditions: []metav1.Condition{
			cond("Custom", true, "someone else's", t0, 0),
			cond(ConditionRBACPermissionsGranted, true, "Policy is ready for reporting.", t0, 1),
		}}}
		st := buildStatus(cur, statusInput{now: t1, generation: 1, webhook: webhookConfigured, rbac: ready(), holds: rev, revision: rev})
		if got := types(st); got != "WebhookConfigured=True,RBACPermissionsGranted=True,Custom=True" {
			t.Fatalf("conditions %s", got)
		}
		if !st.ConditionStatus.Conditions[1].LastTransitionTime.Time.Equal(t0) {
			t.Fatal("an unchanged condition moved its lastTransitionTime")
		}
	})

	t.Run("lastTransitionTime moves when the status flips, not when the message does", func(t *testing.T) {
		st := buildStatus(policyStatus{}, healthy)
		in := healthy
		in.now, in.rbac = t1, rbacOutcome(true, []string{"list /v1, Resource=pods: "}, false)
		st2 := buildStatus(st, in)
		rbac := st2.ConditionStatus.Conditions[1]
		if rbac.Status != metav1.ConditionFalse || rbac.Reason != ReasonFailed || !rbac.LastTransitionTime.Time.Equal(t1) {
			t.Fatalf("flipped condition %+v", rbac)
		}
		if rbac.Message != "Policy is not ready for reporting, missing permissions: list /v1, Resource=pods: ." {
			t.Fatalf("message %q", rbac.Message)
		}
		if *st2.ConditionStatus.Ready {
			t.Fatal("ready with a False condition")
		}
		in.now = t1.Add(time.Hour)
		in.rbac = rbacOutcome(true, []string{"get /v1, Resource=pods: "}, true)
		st3 := buildStatus(st2, in)
		if c := st3.ConditionStatus.Conditions[1]; !c.LastTransitionTime.Time.Equal(t1) || !strings.HasSuffix(c.Message, messageAutogenHint) {
			t.Fatalf("same status, new message: %+v", c)
		}
	})

	t.Run("background only: no WebhookConfigured", func(t *testing.T) {
		st := buildStatus(policyStatus{}, healthy)
		in := healthy
		in.backgroundOnly = true
		st = buildStatus(st, in)
		if got := types(st); got != "RBACPermissionsGranted=True" {
			t.Fatalf("conditions %s", got)
		}
	})

	t.Run("background disabled needs no permission", func(t *testing.T) {
		r := rbacOutcome(false, []string{"ignored"}, false)
		if !r.granted || r.message != "Background scanning disabled; reporting permissions not required." {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("webhook state unknown: the condition is left as it is", func(t *testing.T) {
		cur := buildStatus(policyStatus{}, healthy)
		in := healthy
		in.now, in.webhook = t1, webhookUnknown
		st := buildStatus(cur, in)
		if !sameStatus(cur, st) {
			t.Fatalf("unknown changed the status: %s", mustJSON(st))
		}
		fresh := buildStatus(policyStatus{}, in)
		if got := types(fresh); got != "RBACPermissionsGranted=True" {
			t.Fatalf("conditions %s", got)
		}
	})

	t.Run("a refused generation: Ready false with the error, and back", func(t *testing.T) {
		cur := buildStatus(policyStatus{}, healthy)
		in := healthy
		in.now, in.generation, in.revision = t1, 2, rev+3
		in.refused = "spec.validations[0].expression: undeclared reference to 'nope'"
		st := buildStatus(cur, in)
		if got := types(st); got != "WebhookConfigured=True,RBACPermissionsGranted=True,PolicyCached=False" {
			t.Fatalf("conditions %s", got)
		}
		if c := st.ConditionStatus.Conditions[2]; c.Message != in.refused || c.Reason != ReasonFailed {
			t.Fatalf("PolicyCached %+v", c)
		}
		if *st.ConditionStatus.Ready {
			t.Fatal("ready while refused")
		}
		if m := st.ConditionStatus.Message; m != "Arbiter refused generation 2 (see the PolicyCached condition); revision 4294967303 holds the version Arbiter decides with." {
			t.Fatalf("message %q", m)
		}
		in.refused, in.generation, in.now, in.revision, in.holds = "", 3, t1.Add(time.Minute), rev+4, rev+4
		st = buildStatus(st, in)
		if got := types(st); got != "WebhookConfigured=True,RBACPermissionsGranted=True" || !*st.ConditionStatus.Ready {
			t.Fatalf("fixed: conditions %s ready %v", got, *st.ConditionStatus.Ready)
		}
		if m := st.ConditionStatus.Message; m != "Arbiter revision 4294967307 holds generation 3." {
			t.Fatalf("message %q", m)
		}
	})

	t.Run("refused with nothing stored", func(t *testing.T) {
		in := statusInput{now: t0, generation: 1, webhook: webhookNotConfigured, rbac: ready(), refused: "bad", revision: rev}
		st := buildStatus(policyStatus{}, in)
		if got := types(st); got != "WebhookConfigured=False,RBACPermissionsGranted=True,PolicyCached=False" {
			t.Fatalf("conditions %s", got)
		}
		if c := st.ConditionStatus.Conditions[0]; c.Message != "Policy is not configured in the webhook." {
			t.Fatalf("WebhookConfigured %+v", c)
		}
		if m := st.ConditionStatus.Message; m != "Arbiter refused generation 1 (see the PolicyCached condition); no revision holds this policy." {
			t.Fatalf("message %q", m)
		}
	})

	t.Run("a new primary keeps the revision of an unchanged generation", func(t *testing.T) {
		cur := buildStatus(policyStatus{Generated: true}, healthy)
		in := healthy
		in.now, in.holds, in.revision = t1, 2<<32+2, 2<<32+2 // the next term
		st := buildStatus(cur, in)
		if !sameStatus(cur, st) {
			t.Fatalf("a new term rewrote the status:\n%s\n%s", mustJSON(cur), mustJSON(st))
		}
		if !st.Generated {
			t.Fatal("status.generated was not kept")
		}
		// A store restored below the revision named: the revision is renamed.
		in.holds, in.revision = 5, 5
		if m := buildStatus(cur, in).ConditionStatus.Message; m != "Arbiter revision 5 holds generation 1." {
			t.Fatalf("message %q", m)
		}
	})

	t.Run("autogen configurations", func(t *testing.T) {
		p := readPolicies(t, "testdata/webhooks/subresources.yaml")
		var deploymentsOnly *policyInfo
		for _, x := range p {
			if x.name == "deployments-only" {
				deploymentsOnly = x
			}
		}
		in := healthy
		in.autogen = autogenConfigs(deploymentsOnly)
		st := buildStatus(policyStatus{}, in)
		b, _ := json.Marshal(st.Autogen)
		want := `{"configs":{"defaults":{"spec":`
		if !strings.HasPrefix(string(b), want) || !strings.Contains(string(b), `"targets":[{"group":"apps","kind":"Deployment","resource":"deployments","version":"v1"}]`) {
			t.Fatalf("autogen %s", b)
		}
	})
}

// TestDecodeStatus: what a cluster object's status reads as.
func TestDecodeStatus(t *testing.T) {
	st := decodeStatus(map[string]any{"generated": true, "conditionStatus": map[string]any{"ready": true, "message": "m",
		"conditions": []any{map[string]any{"type": "WebhookConfigured", "status": "True", "reason": "Succeeded", "message": "Webhook configured.", "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": int64(2)}}}})
	if !st.Generated || st.ConditionStatus.Message != "m" || len(st.ConditionStatus.Conditions) != 1 || st.ConditionStatus.Conditions[0].ObservedGeneration != 2 {
		t.Fatalf("%+v", st)
	}
	if st := decodeStatus(map[string]any{"generated": true, "conditionStatus": "garbage"}); !st.Generated {
		t.Fatalf("a malformed status lost generated: %+v", st)
	}
}

// TestPermissions: Kyverno's SubjectAccessReviews (get, list, watch of
// every group/version/resource of the rules and the autogen rules, taken
// literally, for the reporting user without groups) and its messages;
// answers are reused until they expire.
func TestPermissions(t *testing.T) {
	cs := fake.NewClientset()
	var reviews []authorizationv1.SubjectAccessReviewSpec
	cs.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
		sar := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		reviews = append(reviews, sar.Spec)
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = ra.Resource != "pods/ephemeralcontainers"
		return true, sar, nil
	})
	p := &permissions{client: cs.AuthorizationV1(), user: "system:serviceaccount:arbiter:reports", ttl: time.Hour, cache: map[permKey]permAnswer{}}
	policies := readPolicies(t, "testdata/webhooks/subresources.yaml")
	var restrict, autogenned *policyInfo
	for _, x := range policies {
		switch x.name {
		case "restrict-image-registries":
			restrict = x
		case "deployments-only":
			autogenned = x
		}
	}
	denied := p.denied(context.Background(), restrict)
	r := rbacOutcome(restrict.background, denied, len(restrict.variants) > 0)
	want := "Policy is not ready for reporting, missing permissions: get /v1, Resource=pods/ephemeralcontainers: ; list /v1, Resource=pods/ephemeralcontainers: ; watch /v1, Resource=pods/ephemeralcontainers: ."
	if r.granted || r.message != want {
		t.Fatalf("got %+v\nwant %q", r, want)
	}
	if len(reviews) != 6 {
		t.Fatalf("%d reviews, want 6 (2 resources × 3 verbs)", len(reviews))
	}
	for _, s := range reviews {
		if s.User != "system:serviceaccount:arbiter:reports" || s.Groups != nil || s.ResourceAttributes.Subresource != "" {
			t.Fatalf("review %+v", s)
		}
	}
	if d := p.denied(context.Background(), autogenned); d != nil {
		t.Fatalf("denied %v", d)
	}
	// pods again (cached), apps/v1 deployments: 3 more.
	if len(reviews) != 9 {
		t.Fatalf("%d reviews, want 9 (pods answered from the cache)", len(reviews))
	}
	p.ttl = 0
	p.expire()
	p.denied(context.Background(), restrict)
	if len(reviews) != 15 {
		t.Fatalf("%d reviews after expiry, want 15", len(reviews))
	}
}

// TestPolicyInfo: what the webhooks and status read of each kind.
func TestPolicyInfo(t *testing.T) {
	ps := readPolicies(t, "testdata/webhooks/selection.yaml", "testdata/webhooks/mutating.yaml")
	byName := map[string]*policyInfo{}
	for _, p := range ps {
		byName[p.key.String()] = p
	}
	bg := byName[store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindValidatingPolicy, Name: "background-only"}.String()]
	if bg.inWebhook() || !bg.backgroundOnly() {
		t.Fatalf("background-only: %+v", bg)
	}
	gen := byName[store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindValidatingPolicy, Name: "generated"}.String()]
	if gen.inWebhook() || gen.backgroundOnly() {
		t.Fatalf("generated: %+v", gen)
	}
	mp := byName[store.Key{Group: kyvernoapi.Group, Kind: kyvernoapi.KindMutatingPolicy, Name: "slow-conditional"}.String()]
	if !mp.mutating || mp.failure != "Ignore" || *mp.timeout != 45 || len(mp.variants) != 2 {
		t.Fatalf("slow-conditional: %+v", mp)
	}
	if got := len(gvrsOf(mp)); got != 7 {
		t.Fatalf("%d resources to report on, want pods and the 6 controllers", got)
	}
}

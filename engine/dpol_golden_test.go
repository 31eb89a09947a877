package engine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/dpol"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// deletionCase is what a golden case in deletion mode expects of a
// DeletingPolicy's decision on a resource of the file (dpol-*.yaml).
type deletionCase struct {
	Policy string `json:"policy"`
	// Verdict is delete, not matched, condition false, excepted or error.
	Verdict string `json:"verdict"`
	// Condition is the name of the condition that was false.
	Condition string `json:"condition"`
	// ExemptedBy are the exceptions (namespace/name) that exempt it.
	ExemptedBy []string `json:"exemptedBy"`
	// ErrorContains is text the error must contain.
	ErrorContains string `json:"errorContains"`
}

func runDeletionGolden(t *testing.T, ps *engine.PolicySet, objs []*manifest.Object, exp *expectDoc, resources map[string]*manifest.Object, now time.Time) {
	policies := map[string]dpol.Bound{}
	var only string
	for _, o := range objs {
		if engine.Classify(o) != engine.ClassDeletingPolicy {
			continue
		}
		b, ok := ps.DeletingPolicy(o.Kind, o.Namespace, o.Name)
		if !ok {
			t.Fatalf("%s not in the set", o.Ref())
		}
		policies[o.Ref()] = b
		only = o.Ref()
	}
	for i, c := range exp.Cases {
		name := c.Policy
		if name == "" {
			if len(policies) != 1 {
				t.Fatalf("case %d: name the policy (the file has %d)", i, len(policies))
			}
			name = only
		}
		b, ok := policies[name]
		if !ok {
			t.Fatalf("case %d: no DeletingPolicy %q in the file", i, name)
		}
		o, ok := resources[c.Resource]
		if !ok {
			t.Fatalf("case %d: no resource %q in the file", i, c.Resource)
		}
		cand := dpol.Candidate{Object: o.Content}
		if o.Namespace != "" {
			cand.Namespace, _ = ps.Namespace(o.Namespace)
		}
		d := b.Evaluate(context.Background(), cand, dpol.Options{Now: now})
		what := "case " + c.Resource
		if d.Verdict.String() != c.Verdict {
			t.Errorf("%s: verdict %q (%s), want %q", what, d.Verdict, d.Reason(), c.Verdict)
		}
		if d.Condition != c.Condition {
			t.Errorf("%s: false condition %q, want %q", what, d.Condition, c.Condition)
		}
		if !slices.Equal(d.Exceptions, c.ExemptedBy) {
			t.Errorf("%s: exempted by %q, want %q", what, d.Exceptions, c.ExemptedBy)
		}
		if c.ErrorContains != "" && (d.Err == nil || !strings.Contains(d.Err.Error(), c.ErrorContains)) {
			t.Errorf("%s: error %v, want it to contain %q", what, d.Err, c.ErrorContains)
		}
		if c.ErrorContains == "" && d.Err != nil {
			t.Errorf("%s: unexpected error %v", what, d.Err)
		}
	}
}

package vap_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/vap"
)

// The API server's defaults: failurePolicy Fail; in match resources
// matchPolicy Equivalent, selectors {} and rule scope "*".
func TestDefaults(t *testing.T) {
	p := pol("p", fail)
	p.Spec.FailurePolicy = nil
	d := vap.DefaultPolicy(p)
	if p.Spec.MatchConstraints.MatchPolicy != nil {
		t.Fatal("DefaultPolicy changed its argument")
	}
	m := d.Spec.MatchConstraints
	if *d.Spec.FailurePolicy != admissionregistrationv1.Fail || *m.MatchPolicy != admissionregistrationv1.Equivalent ||
		m.NamespaceSelector == nil || m.ObjectSelector == nil || *m.ResourceRules[0].Scope != admissionregistrationv1.AllScopes {
		t.Fatalf("defaults: %+v", d.Spec)
	}
	b := bind("b", "p")
	b.Spec.MatchResources = &admissionregistrationv1.MatchResources{ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{configmaps}}
	db := vap.DefaultBinding(b)
	if mr := db.Spec.MatchResources; *mr.MatchPolicy != admissionregistrationv1.Equivalent || mr.NamespaceSelector == nil ||
		mr.ObjectSelector == nil || *mr.ExcludeResourceRules[0].Scope != admissionregistrationv1.AllScopes {
		t.Fatalf("binding defaults: %+v", db.Spec.MatchResources)
	}
	if db.Spec.ParamRef != nil || vap.DefaultBinding(bind("x", "p")).Spec.MatchResources != nil {
		t.Fatal("a binding without matchResources or paramRef gets none")
	}
}

// Field errors carry the path of the field, as the API server's validation.
func TestFieldPaths(t *testing.T) {
	p := pol("p", fail, V("true", "", ""), V("'s'", "", ""))
	p.Spec.Variables = []admissionregistrationv1.Variable{{Name: "ok", Expression: "1"}, {Name: "in", Expression: "2"}}
	_, errs := vap.CompilePolicy(p)
	got := map[string]bool{}
	for _, e := range errs {
		got[e.Field] = true
	}
	for _, f := range []string{"spec.validations[1].expression", "spec.variables[1].name"} {
		if !got[f] {
			t.Errorf("no error for %s in %v", f, errs)
		}
	}
	b := bind("b", "p", "Block")
	_, errs = vap.CompileBinding(b)
	if len(errs) != 1 || errs[0].Field != "spec.validationActions[0]" {
		t.Fatalf("binding errors: %v", errs)
	}
}

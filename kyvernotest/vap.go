package kyvernotest

import (
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/vap"
)

// ValidatingAdmissionPolicies in `kyverno test` (Kyverno 1.19,
// pkg/admissionpolicy/validate.go): a policy without bindings is matched
// on its matchConstraints and evaluated once; with bindings, its
// matchConstraints are not consulted: each binding that matches (its
// matchResources) is evaluated and the last one's verdict is the policy's.
// The verdict is skip ("match conditions aren't met") when the
// matchConditions are false, error when a decision is an evaluation
// error, fail when one denies (validationActions are not consulted), else
// pass. A policy that matches nothing gives an empty response ("Excluded").
//
// Arbiter evaluates with kube-apiserver's semantics; to run Kyverno's
// suites it gives a policy without bindings an implicit binding, gives a
// policy with bindings matchConstraints that match every request (as
// Kyverno does not read them), and fills what Kyverno's CLI does not
// require of a binding (validationActions, paramRef.parameterNotFoundAction:
// Kyverno never reads them) with Deny and Allow, so the API server's
// validation accepts it.

// implicitBindingPrefix names the binding given to a policy that has none.
const implicitBindingPrefix = "kyverno-cli-implicit-"

// prepareVAP returns the policy objects of a suite ready for Arbiter: the
// VAPs and bindings completed as described above.
func prepareVAP(objs []*manifest.Object) []*manifest.Object {
	bound := map[string]bool{}
	var policies []*manifest.Object
	out := make([]*manifest.Object, 0, len(objs))
	for _, o := range objs {
		switch engine.Classify(o) {
		case engine.ClassVAP:
			policies = append(policies, o)
		case engine.ClassVAPBinding:
			spec, _ := o.Content["spec"].(map[string]any)
			name, _ := spec["policyName"].(string)
			bound[name] = true
			o = completeBinding(o)
		}
		out = append(out, o)
	}
	for i, o := range out {
		if engine.Classify(o) == engine.ClassVAP && bound[o.Name] {
			out[i] = matchEverything(o)
		}
	}
	for _, p := range policies {
		if bound[p.Name] {
			continue
		}
		out = append(out, manifest.NewObject(p.Source, map[string]any{
			"apiVersion": p.APIVersion,
			"kind":       vap.KindBinding,
			"metadata":   map[string]any{"name": implicitBindingPrefix + p.Name},
			"spec": map[string]any{
				"policyName":        p.Name,
				"validationActions": []any{"Deny"},
			},
		}))
	}
	return out
}

// matchEverything returns the policy with matchConstraints that match
// every request on a resource.
func matchEverything(o *manifest.Object) *manifest.Object {
	spec, _ := o.Content["spec"].(map[string]any)
	if spec == nil {
		return o
	}
	content := make(map[string]any, len(o.Content))
	for k, v := range o.Content {
		content[k] = v
	}
	newSpec := make(map[string]any, len(spec))
	for k, v := range spec {
		newSpec[k] = v
	}
	newSpec["matchConstraints"] = map[string]any{
		"resourceRules": []any{map[string]any{
			"apiGroups": []any{"*"}, "apiVersions": []any{"*"}, "operations": []any{"*"}, "resources": []any{"*"},
		}},
	}
	content["spec"] = newSpec
	return manifest.NewObject(o.Source, content)
}

// completeBinding fills validationActions and
// paramRef.parameterNotFoundAction when a binding lacks them.
func completeBinding(o *manifest.Object) *manifest.Object {
	spec, _ := o.Content["spec"].(map[string]any)
	if spec == nil {
		return o
	}
	_, hasActions := spec["validationActions"]
	ref, _ := spec["paramRef"].(map[string]any)
	_, hasAction := ref["parameterNotFoundAction"]
	if hasActions && (ref == nil || hasAction) {
		return o
	}
	content := make(map[string]any, len(o.Content))
	for k, v := range o.Content {
		content[k] = v
	}
	newSpec := make(map[string]any, len(spec)+1)
	for k, v := range spec {
		newSpec[k] = v
	}
	if !hasActions {
		newSpec["validationActions"] = []any{"Deny"}
	}
	if ref != nil && !hasAction {
		newRef := make(map[string]any, len(ref)+1)
		for k, v := range ref {
			newRef[k] = v
		}
		newRef["parameterNotFoundAction"] = "Allow"
		newSpec["paramRef"] = newRef
	}
	content["spec"] = newSpec
	return manifest.NewObject(o.Source, content)
}

// vapResponses are the CLI responses of the suite's VAPs for a decision:
// one per policy, with the result of its last matching binding.
func (s *Suite) vapResponses(d *engine.Decision, obj map[string]any) []response {
	out := make([]response, 0, len(s.vaps))
	for _, name := range s.vaps {
		resp := response{policyKind: vap.KindPolicy, policyName: name, resource: obj}
		for _, r := range d.Results {
			if r.PolicyKind == vap.KindPolicy && r.PolicyName == name {
				resp.results = []outcome.Result{r}
			}
		}
		out = append(out, resp)
	}
	return out
}

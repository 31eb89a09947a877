package kyvernotest

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/mapol"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// MutatingAdmissionPolicies in `kyverno test` (Kyverno 1.19,
// pkg/admissionpolicy/mutate.go, processMAPNoBindings and
// processMAPWithoutClient) are not evaluated as kube-apiserver evaluates
// them:
//
//   - a policy without bindings is matched on its matchConstraints and
//     applied (kube-apiserver never applies it);
//   - with bindings, the policy's matchConstraints are not read: each
//     binding whose matchResources match (none: every request) mutates;
//   - params are the test's paramResources, whatever their kind: with a
//     paramRef selector, the params whose labels it selects, in file order,
//     form one list (`params.items[i]`); with a name, the first param of
//     that name (its namespace is not compared); with a namespace only, the
//     first param in it;
//   - a mutation that fails, or matchConditions that cannot be evaluated,
//     give no response (the row is "Not found"); a policy that does not
//     match gives none either.
//
// Arbiter evaluates MAPs with kube-apiserver's semantics (engine/mapol);
// to run Kyverno's suites it gives a policy without bindings an implicit
// binding, gives a policy with bindings matchConstraints that match every
// request, and points each paramRef at what Kyverno would pass: the param
// it would pick, or a param object of the policy's paramKind whose `items`
// are the params a selector selects. The response of a policy is its last
// invocation's result, unless that is an error.
//
// Still different from Kyverno's CLI: the request of every kind is the
// test's (Kyverno gives MAPs a CREATE request, and an empty user name is
// `system:kyverno:background-scan` there); apply configurations are merged
// with the kinds' schemas (Kyverno's CLI merges MAPs schema-less: every
// list is atomic); several matching bindings mutate the object in turn
// (Kyverno: each mutates the original object, the last one's result is
// kept); the patched resource of a MAP row is the resource as every
// mutating policy left it (Kyverno: as the MAPs left it).

// paramListPrefix names the param object that stands for a list of params.
const paramListPrefix = "kyverno-cli-params-"

// prepareMAP returns the policy objects of a suite with its MAPs and
// bindings prepared as described above, and the param objects bindings
// are pointed at that are not among the suite's params.
func prepareMAP(objs []*manifest.Object, params []*Resource) []*manifest.Object {
	bound := map[string]bool{}
	policies := map[string]*manifest.Object{}
	var order []*manifest.Object
	for _, o := range objs {
		switch engine.Classify(o) {
		case engine.ClassMAP:
			policies[o.Name] = o
			order = append(order, o)
		case engine.ClassMAPBinding:
			spec, _ := o.Content["spec"].(map[string]any)
			name, _ := spec["policyName"].(string)
			bound[name] = true
		}
	}
	if len(order) == 0 {
		return objs
	}
	out := make([]*manifest.Object, 0, len(objs)+len(order))
	var extra []*manifest.Object
	for _, o := range objs {
		switch engine.Classify(o) {
		case engine.ClassMAP:
			if bound[o.Name] {
				o = withSpec(o, "matchConstraints", map[string]any{
					"resourceRules": []any{map[string]any{
						"apiGroups": []any{"*"}, "apiVersions": []any{"*"}, "operations": []any{"*"}, "resources": []any{"*"},
					}},
				})
			}
		case engine.ClassMAPBinding:
			var p *manifest.Object
			o, p = kyvernoParams(o, policies, params)
			if p != nil {
				extra = append(extra, p)
			}
		}
		out = append(out, o)
	}
	for _, p := range order {
		if bound[p.Name] {
			continue
		}
		out = append(out, manifest.NewObject(p.Source, map[string]any{
			"apiVersion": p.APIVersion,
			"kind":       mapol.KindBinding,
			"metadata":   map[string]any{"name": implicitBindingPrefix + p.Name},
			"spec":       map[string]any{"policyName": p.Name},
		}))
	}
	return append(out, extra...)
}

// withSpec returns o with spec[key] set to value (o is not modified).
func withSpec(o *manifest.Object, key string, value any) *manifest.Object {
	spec, _ := o.Content["spec"].(map[string]any)
	content := make(map[string]any, len(o.Content))
	for k, v := range o.Content {
		content[k] = v
	}
	newSpec := make(map[string]any, len(spec)+1)
	for k, v := range spec {
		newSpec[k] = v
	}
	newSpec[key] = value
	content["spec"] = newSpec
	return manifest.NewObject(o.Source, content)
}

// kyvernoParams points a binding's paramRef at the params Kyverno's CLI
// passes, and returns the param object that stands for a selector's list
// (nil when there is none to add). A binding whose paramRef selects
// nothing is left as it is.
func kyvernoParams(b *manifest.Object, policies map[string]*manifest.Object, params []*Resource) (*manifest.Object, *manifest.Object) {
	spec, _ := b.Content["spec"].(map[string]any)
	ref, _ := spec["paramRef"].(map[string]any)
	if ref == nil {
		return b, nil
	}
	name, _ := ref["name"].(string)
	namespace, _ := ref["namespace"].(string)
	newRef := make(map[string]any, len(ref)+1)
	for k, v := range ref {
		newRef[k] = v
	}
	if sel, ok := ref["selector"].(map[string]any); ok {
		selector, err := labelSelector(sel)
		if err != nil {
			return b, nil
		}
		var items []any
		for _, p := range params {
			md, _ := p.Object["metadata"].(map[string]any)
			lbls, _ := md["labels"].(map[string]any)
			set := labels.Set{}
			for k, v := range lbls {
				s, _ := v.(string)
				set[k] = s
			}
			if selector.Matches(set) {
				items = append(items, p.Object)
			}
		}
		if len(items) == 0 {
			return b, nil
		}
		policyName, _ := spec["policyName"].(string)
		pol := policies[policyName]
		if pol == nil {
			return b, nil
		}
		apiVersion, kind, ok := mapol.ParamKindOf(pol)
		if !ok {
			return b, nil
		}
		listName := paramListPrefix + b.Name
		if namespace == "" {
			namespace = "default"
		}
		delete(newRef, "selector")
		newRef["name"], newRef["namespace"] = listName, namespace
		list := manifest.NewObject(b.Source, map[string]any{
			"apiVersion": apiVersion,
			"kind":       kind,
			"metadata":   map[string]any{"name": listName, "namespace": namespace},
			"items":      items,
		})
		return withSpec(b, "paramRef", newRef), list
	}
	// the first param of that name (the namespace is not compared), else
	// the first in that namespace
	for _, p := range params {
		pn, pns := nameOf(p.Object), namespaceOf(p.Object)
		if (name != "" && pn == name) || (name == "" && namespace != "" && pns == namespace) {
			newRef["name"], newRef["namespace"] = pn, pns
			if pns == "" {
				delete(newRef, "namespace")
			}
			return withSpec(b, "paramRef", newRef), nil
		}
	}
	return b, nil
}

func labelSelector(m map[string]any) (labels.Selector, error) {
	var ls metav1.LabelSelector
	if ml, ok := m["matchLabels"].(map[string]any); ok {
		ls.MatchLabels = map[string]string{}
		for k, v := range ml {
			ls.MatchLabels[k] = fmt.Sprint(v)
		}
	}
	if exprs, ok := m["matchExpressions"].([]any); ok {
		for _, e := range exprs {
			em, _ := e.(map[string]any)
			key, _ := em["key"].(string)
			op, _ := em["operator"].(string)
			req := metav1.LabelSelectorRequirement{Key: key, Operator: metav1.LabelSelectorOperator(op)}
			vals, _ := em["values"].([]any)
			for _, v := range vals {
				req.Values = append(req.Values, fmt.Sprint(v))
			}
			ls.MatchExpressions = append(ls.MatchExpressions, req)
		}
	}
	return metav1.LabelSelectorAsSelector(&ls)
}

// mapResponses are the CLI responses of the suite's MAPs for a decision:
// one per policy that has a result other than an error, with its last
// invocation's result (its rule named after the policy, as the CLI names
// it).
func (s *Suite) mapResponses(d *engine.Decision, patched map[string]any) []response {
	var out []response
	for _, name := range s.maps {
		var last *outcome.Result
		for i := range d.Results {
			if r := &d.Results[i]; r.PolicyKind == mapol.KindPolicy && r.PolicyName == name {
				last = r
			}
		}
		if last == nil || last.Result == outcome.Error {
			continue
		}
		r := *last
		r.Rule = name // the CLI names the rule after the policy
		out = append(out, response{policyKind: mapol.KindPolicy, policyName: name, results: []outcome.Result{r}, resource: patched})
	}
	return out
}

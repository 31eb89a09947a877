package kyvernotest

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/ivpol"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/mpol"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
)

// response is what the Kyverno CLI calls an engine response: one policy's
// verdict on one resource or payload, with zero rule responses (the
// resource was not selected, "Excluded") or one (Arbiter's Result).
type response struct {
	policyKind string
	policyName string
	results    []outcome.Result
	// resource is the evaluated object (patched/generated resource checks):
	// for the admission kinds, the resource as every mutating policy left
	// it (the CLI's patched resource of mutations, and the resource the
	// validations saw).
	resource map[string]any
	// patchedTarget is, for a pass result of a mutate-existing policy on a
	// target, the target as every mutate-existing policy left it.
	patchedTarget map[string]any
	// generation marks a GeneratingPolicy's response: its generated
	// objects are compared with the expectation, one row each (none: the
	// result alone is checked).
	generation bool
	generated  []map[string]any
}

// responses are the responses of a run by resource key, keys in order.
type responses struct {
	keys  []string
	byKey map[string][]response
}

func newResponses() *responses { return &responses{byKey: map[string][]response{}} }

func (r *responses) add(key string, rs ...response) {
	if _, ok := r.byKey[key]; !ok {
		r.keys = append(r.keys, key)
		r.byKey[key] = nil
	}
	r.byKey[key] = append(r.byKey[key], rs...)
}

// Row is one checked expectation, as a row of the CLI's result table.
type Row struct {
	ID     int    `json:"id"`
	Policy string `json:"policy"`
	Rule   string `json:"rule"`
	// Resource is apiVersion/kind/namespace/name, or a payload name.
	Resource string `json:"resource"`
	// Expected is the result the test expects.
	Expected string `json:"expected"`
	// Result is Pass when the expectation holds, Fail when not.
	Result string `json:"result"`
	// Reason is Ok, "Want X, got Y", Excluded, Not found, or a resource
	// comparison problem.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	Failure bool   `json:"failure"`
}

// Result words of the rows.
const (
	RowPass = "Pass"
	RowFail = "Fail"
)

// SuiteResult is the outcome of one Test.
type SuiteResult struct {
	// File is the test file; Index the document in it (1-based).
	File  string `json:"file"`
	Index int    `json:"index"`
	// Name is the test's metadata.name.
	Name     string   `json:"name"`
	Rows     []Row    `json:"rows"`
	Passed   int      `json:"passed"`
	Failed   int      `json:"failed"`
	Warnings []string `json:"warnings,omitempty"`
	// Error is set when the suite cannot be loaded or run.
	Error string `json:"error,omitempty"`
	// Policies, Resources, Exceptions count the loaded inputs.
	Policies   int `json:"policies"`
	Resources  int `json:"resources"`
	Exceptions int `json:"exceptions"`

	err error
}

// Err returns the load error of the suite, if any.
func (r *SuiteResult) Err() error { return r.err }

// Run evaluates a loaded suite and checks its expected results (those the
// filter keeps; nil keeps all).
func Run(ctx context.Context, s *Suite, filter *Filter) *SuiteResult {
	res := &SuiteResult{
		File: s.Doc.Path, Index: s.Doc.Index, Name: s.Doc.Test.ObjectMeta.Name,
		Policies: s.PolicyCount(), Resources: s.ResourceCount(), Exceptions: s.ExceptionCount(),
		Warnings: s.Warnings,
	}
	tests := filter.apply(s.Doc.Test.Results)
	if len(tests) == 0 {
		return res
	}
	// for each resource, the default run (the values' request.operation,
	// else CREATE), then one run per operation results name explicitly
	trigger := newResponses()
	ops := explicitOperations(tests)
	byOp := map[string]*responses{}
	for _, op := range ops {
		byOp[op] = newResponses()
	}
	var targetResps []response
	for _, r := range s.resources {
		resps, targets, err := s.evalResource(ctx, r, s.defaultOperation())
		if err != nil {
			res.Error, res.err = err.Error(), err
			return res
		}
		trigger.add(r.Key, resps...)
		targetResps = append(targetResps, targets...)
		for _, op := range ops {
			resps, targets, err := s.evalResource(ctx, r, op)
			if err != nil {
				res.Error, res.err = err.Error(), err
				return res
			}
			byOp[op].add(r.Key, resps...)
			targetResps = append(targetResps, targets...)
		}
	}
	target := s.targetResponses(targetResps)
	for _, p := range s.payloads {
		trigger.add(p.Name, s.evalJSON(ctx, p)...)
	}
	for _, p := range s.http {
		trigger.add(p.Name, s.evalAuthz(ctx, p, admission.ShapeHTTP)...)
	}
	for _, p := range s.envoy {
		trigger.add(p.Name, s.evalAuthz(ctx, p, admission.ShapeEnvoy)...)
	}
	c := &checker{suite: s, id: 1}
	for _, t := range tests {
		rs := trigger
		if t.Operation != "" {
			rs = byOp[t.Operation]
		}
		c.check(t, rs, target)
	}
	res.Rows = c.rows
	res.Passed, res.Failed = c.passed, c.failed
	return res
}

func explicitOperations(tests []TestResult) []string {
	seen := map[string]bool{}
	var ops []string
	for _, t := range tests {
		if t.Operation != "" && !seen[t.Operation] {
			seen[t.Operation] = true
			ops = append(ops, t.Operation)
		}
	}
	sort.Strings(ops)
	return ops
}

// defaultOperation is the operation of the default run: the values'
// request.operation when it is CREATE, UPDATE or DELETE, else CREATE.
func (s *Suite) defaultOperation() string {
	switch op := s.globalOperation(); op {
	case admission.OpUpdate, admission.OpDelete:
		return op
	}
	return admission.OpCreate
}

// evalResource evaluates every policy on a resource with an operation, as
// the CLI's policy processor does: CREATE with the resource as object,
// UPDATE with it as object and oldObject, DELETE as oldObject only. It
// returns the resource's responses, then those of the mutate-existing
// policies on the targets (which the CLI also counts among the
// resource's); an error is what makes the CLI fail the test.
func (s *Suite) evalResource(ctx context.Context, r *Resource, op string) ([]response, []response, error) {
	obj := r.Object
	req := &admission.Request{
		Operation: op,
		Name:      nameOf(obj),
		Namespace: namespaceOf(obj),
		UserInfo:  s.userInfo,
		Mode:      admission.ModeCLI,
	}
	req.Kind, req.Resource, req.SubResource = s.requestResource(gvkOf(obj))
	switch op {
	case admission.OpUpdate:
		req.Object, req.OldObject = obj, obj
	case admission.OpDelete:
		req.OldObject = obj
	default:
		req.Operation = admission.OpCreate
		req.Object = obj
	}
	if req.Namespace != "" {
		req.NamespaceObject = s.namespaceObject(req.Namespace)
	}
	req.Fill()
	d := s.policySet.Evaluate(ctx, req, &engine.EvalOptions{Context: s.context, ImageVerifier: s.imageVerifier})
	// the resource as the mutations left it: the patched resource of every
	// mutating policy's response, and what the validations saw
	patched := obj
	if d.Mutated != nil {
		patched = d.Mutated
	}
	// MutatingAdmissionPolicies first, then MutatingPolicies, as the CLI
	// lists them
	k8s := s.mapResponses(d, patched)
	var json []response
	for _, p := range s.mpols {
		resp := response{policyKind: p.Kind, policyName: p.Name, resource: patched}
		if r, ok := mpolResultOf(d, p); ok {
			resp.results = []outcome.Result{r}
		} else if simpleVariants(p) {
			// the CLI drops an empty response of a policy (or autogen
			// variant) whose only constraint is one plain resource rule
			continue
		}
		k8s = append(k8s, resp)
	}
	var targets []response
	if len(s.targets) > 0 && s.hasMutateExisting() {
		var err error
		if targets, err = s.mutateTargets(ctx, req); err != nil {
			return nil, nil, err
		}
		// the CLI also lists them among the resource's responses, with
		// an empty patched resource
		for _, t := range targets {
			t.resource, t.patchedTarget = map[string]any{}, nil
			k8s = append(k8s, t)
		}
	}
	for _, p := range s.policies {
		jsonMode := p.Spec.EvaluationMode() == kyvernoapi.EvaluationModeJSON
		resp := response{policyKind: p.Kind, policyName: p.Name, resource: patched}
		if r, ok := resultOf(d, p); ok {
			resp.results = []outcome.Result{r}
		} else if jsonMode || simpleMatch(p.Spec.MatchConstraints) {
			// the CLI drops an empty response of a policy whose only
			// constraint is one plain resource rule
			continue
		}
		if jsonMode {
			json = append(json, resp)
		} else {
			k8s = append(k8s, resp)
		}
	}
	// ImageValidatingPolicies: the CLI's HandleValidating only (no digest
	// pinning), one response per policy; an empty one as ValidatingPolicy's
	for _, p := range s.ivpols {
		jsonMode := p.Spec.EvaluationMode() == kyvernoapi.EvaluationModeJSON
		resp := response{policyKind: p.Kind, policyName: p.Name, resource: patched}
		if r, ok := ivpolResultOf(d, p); ok {
			resp.results = []outcome.Result{r}
		} else if jsonMode || simpleMatch(p.Spec.MatchConstraints) {
			continue
		}
		if jsonMode {
			json = append(json, resp)
		} else {
			k8s = append(k8s, resp)
		}
	}
	k8s = append(k8s, s.vapResponses(d, patched)...)
	// GeneratingPolicies, on the resource as the mutations leave it: a
	// response only for those that selected it
	if len(s.gpols) > 0 {
		for _, g := range s.policySet.Generate(ctx, req, &engine.EvalOptions{Context: s.context, ImageVerifier: s.imageVerifier}) {
			k8s = append(k8s, response{
				policyKind: g.PolicyKind, policyName: g.PolicyName, results: []outcome.Result{g.Result},
				resource: patched, generation: true, generated: g.Generated,
			})
		}
	}
	return append(k8s, json...), targets, nil
}

// requestResource returns the kind, resource and subresource of a request
// on a resource: a kind the values' subresources name is requested as that
// subresource of its parent resource (a v1 Binding as pods/binding, with
// kind Binding), as the API server requests it; others as themselves.
//
// Deliberate difference: Kyverno 1.19's CLI evaluates CEL policies on the
// parent's kind with no subresource (so `pods/binding` never matches);
// the suites written after it expect the API server's request.
func (s *Suite) requestResource(gvk schema.GroupVersionKind) (schema.GroupVersionKind, schema.GroupVersionResource, string) {
	if s.values != nil {
		for _, sub := range s.values.Subresources {
			sg := schema.GroupVersionKind{Group: sub.Subresource.Group, Version: sub.Subresource.Version, Kind: sub.Subresource.Kind}
			if gvk != sg {
				continue
			}
			parent := schema.GroupVersionKind{Group: sub.ParentResource.Group, Version: sub.ParentResource.Version, Kind: sub.ParentResource.Kind}
			gvr := s.gvrOf(parent)
			name, subresource, ok := strings.Cut(sub.Subresource.Name, "/")
			if ok && name != "" {
				gvr.Resource = name
			}
			return gvk, gvr, subresource
		}
	}
	return gvk, s.gvrOf(gvk), ""
}

// hasMutateExisting says whether a policy of the suite mutates existing
// resources (evaluation.mutateExisting.enabled).
func (s *Suite) hasMutateExisting() bool {
	for _, p := range s.mpols {
		if p.Spec.MutateExistingEnabled() {
			return true
		}
	}
	return false
}

// mutateTargets evaluates the mutate-existing policies that a request on a
// resource sets off on the suite's targets (its targetResources). Each
// result is one response; a pass carries the target as every policy left
// it. An expression that cannot select targets fails the test, as in the
// CLI.
func (s *Suite) mutateTargets(ctx context.Context, req *admission.Request) ([]response, error) {
	targets := make([]engine.Target, len(s.targets))
	for i, t := range s.targets {
		targets[i] = engine.Target{Object: t.Object, Resource: s.gvrOf(gvkOf(t.Object))}
	}
	res := s.policySet.MutateExisting(ctx, req, targets, &engine.EvalOptions{Context: s.targetContext})
	if len(res.Errors) > 0 {
		msgs := make([]string, len(res.Errors))
		for i, e := range res.Errors {
			msgs[i] = fmt.Sprintf("policy %s: %s", e.Policy, e.Message)
		}
		return nil, s.errorf("targetResources", "failed to discover the targets of %s %s: %s", req.Kind.Kind, displayKey(resourceKey(req.Object)), strings.Join(msgs, "; "))
	}
	var out []response
	for _, tr := range res.Targets {
		for _, r := range tr.Results {
			resp := response{policyKind: r.PolicyKind, policyName: r.PolicyName, results: []outcome.Result{r}}
			if r.Result == outcome.Pass {
				resp.patchedTarget = tr.Patched
			}
			out = append(out, resp)
		}
	}
	return out, nil
}

// targetResponses are the responses of the targets: for each target, the
// responses whose patched target is that object (apiVersion, kind,
// namespace, name), as the CLI's target map.
func (s *Suite) targetResponses(resps []response) *responses {
	out := newResponses()
	for _, t := range s.targets {
		for _, resp := range resps {
			p := resp.patchedTarget
			if p == nil {
				continue
			}
			ns := namespaceOf(t.Object)
			if ns == "" {
				ns = namespaceOf(p)
			}
			if gvkOf(p) == gvkOf(t.Object) && nameOf(p) == nameOf(t.Object) && namespaceOf(p) == ns {
				out.add(t.Key, resp)
			}
		}
	}
	return out
}

func mpolResultOf(d *engine.Decision, p *mpol.Policy) (outcome.Result, bool) {
	for _, r := range d.Results {
		if r.PolicyKind == p.Kind && r.PolicyName == p.Name && r.PolicyNamespace == p.Namespace {
			return r, true
		}
	}
	return outcome.Result{}, false
}

// simpleVariants says whether the CLI drops the empty responses of a
// MutatingPolicy and of each of its autogen variants (each is a response
// of its own there): every one's matchConstraints are simple.
func simpleVariants(p *mpol.Policy) bool {
	for _, m := range p.VariantConstraints() {
		if !simpleMatch(m) {
			return false
		}
	}
	return true
}

// evalJSON evaluates the JSON-mode policies on a JSON payload (only
// `object` is set); Kubernetes-mode policies do not apply to payloads.
func (s *Suite) evalJSON(ctx context.Context, p *Payload) []response {
	req := &admission.Request{
		Operation: admission.OpCreate,
		Object:    p.Object,
		Mode:      admission.ModeCLI,
	}
	d := s.policySet.Evaluate(ctx, req, &engine.EvalOptions{Context: s.context, ImageVerifier: s.imageVerifier})
	var out []response
	for _, pol := range s.policies {
		if pol.Spec.EvaluationMode() != kyvernoapi.EvaluationModeJSON {
			continue
		}
		resp := response{policyKind: pol.Kind, policyName: pol.Name, resource: p.Object}
		if r, ok := resultOf(d, pol); ok {
			resp.results = []outcome.Result{r}
		}
		out = append(out, resp)
	}
	for _, pol := range s.ivpols {
		if pol.Spec.EvaluationMode() != kyvernoapi.EvaluationModeJSON {
			continue
		}
		// Kyverno's CLI dereferences the missing result of a JSON-mode
		// ImageValidatingPolicy whose matchConditions are false and
		// panics; Arbiter has no response then (Not found).
		if r, ok := ivpolResultOf(d, pol); ok {
			out = append(out, response{policyKind: pol.Kind, policyName: pol.Name, resource: p.Object, results: []outcome.Result{r}})
		}
	}
	return out
}

// evalAuthz evaluates an Envoy or HTTP payload: the engine evaluates it
// with the authorization policies of that mode (the admission policies do
// not see it), and every one of them has a response, as in the CLI.
func (s *Suite) evalAuthz(ctx context.Context, p *Payload, shape admission.Shape) []response {
	req := &admission.Request{Object: p.Object, Shape: shape, Mode: admission.ModeCLI}
	d := s.policySet.Evaluate(ctx, req, &engine.EvalOptions{Context: s.context})
	var out []response
	for _, pol := range s.authz {
		if pol.Mode != shape {
			continue
		}
		resp := response{policyKind: pol.Kind, policyName: pol.Name, resource: map[string]any{}}
		for _, r := range d.Results {
			if r.PolicyKind == pol.Kind && r.PolicyName == pol.Name {
				resp.results = []outcome.Result{r}
				break
			}
		}
		out = append(out, resp)
	}
	return out
}

func ivpolResultOf(d *engine.Decision, p *ivpol.Policy) (outcome.Result, bool) {
	for _, r := range d.Results {
		if r.PolicyKind == p.Kind && r.PolicyName == p.Name && r.PolicyNamespace == p.Namespace {
			return r, true
		}
	}
	return outcome.Result{}, false
}

func resultOf(d *engine.Decision, p *vpol.Policy) (outcome.Result, bool) {
	for _, r := range d.Results {
		if r.PolicyKind == p.Kind && r.PolicyName == p.Name && r.PolicyNamespace == p.Namespace {
			return r, true
		}
	}
	return outcome.Result{}, false
}

// simpleMatch is the CLI's (misnamed) hasSelector: true when the
// constraints are exactly one resource rule without resource names, and no
// namespace selector, object selector or exclusion. The CLI keeps the empty
// response of a policy that does not select a resource only when this is
// false; the row then passes as "Excluded".
func simpleMatch(m *admissionregistrationv1.MatchResources) bool {
	if m == nil {
		return false
	}
	if m.NamespaceSelector != nil && (len(m.NamespaceSelector.MatchLabels) > 0 || len(m.NamespaceSelector.MatchExpressions) > 0) {
		return false
	}
	if m.ObjectSelector != nil && (len(m.ObjectSelector.MatchLabels) > 0 || len(m.ObjectSelector.MatchExpressions) > 0) {
		return false
	}
	if len(m.ExcludeResourceRules) != 0 || len(m.ResourceRules) != 1 {
		return false
	}
	return len(m.ResourceRules[0].ResourceNames) == 0
}

// checker turns expectations into rows, as the CLI's printTestResult does.
type checker struct {
	suite          *Suite
	id             int
	rows           []Row
	passed, failed int
}

func lastSegment(s string) string {
	parts := strings.Split(s, "/")
	return parts[len(parts)-1]
}

// displayKey renders a response key for the table.
func displayKey(key string) string {
	return strings.ReplaceAll(key, ",", "/")
}

// selectKeys returns the response keys an expectation names, among the
// targets' then the resources' (a key in both is named twice): by name or
// namespace/name (and resourceSpecs), or every key when it names none
// that exists.
func selectKeys(t TestResult, maps ...*responses) []string {
	var keys []string
	if t.Resources != nil {
		for _, r := range t.Resources {
			nsName := strings.Split(r, "/")
			for _, rs := range maps {
				for _, key := range rs.keys {
					parts := strings.Split(key, ",")
					switch len(nsName) {
					case 1:
						if r == parts[len(parts)-1] {
							keys = append(keys, key)
						}
					case 2:
						if len(parts) >= 2 && nsName[0] == parts[len(parts)-2] && nsName[1] == parts[len(parts)-1] {
							keys = append(keys, key)
						}
					}
				}
			}
		}
		for _, spec := range t.ResourceSpecs {
			for _, rs := range maps {
				for _, key := range rs.keys {
					parts := strings.Split(key, ",")
					if len(parts) < 4 {
						continue
					}
					gv := spec.Version
					if spec.Group != "" {
						gv = spec.Group + "/" + spec.Version
					}
					if gv != parts[0] || spec.Namespace != parts[len(parts)-2] {
						continue
					}
					if spec.Name == parts[len(parts)-1] {
						keys = append(keys, key)
					}
				}
			}
		}
	}
	if len(keys) == 0 {
		for _, rs := range maps {
			keys = append(keys, rs.keys...)
		}
	}
	return keys
}

// check checks an expectation against the responses of the resources
// (trigger) and of the targets of mutate-existing policies (target), as
// the CLI's printTestResult does.
func (c *checker) check(t TestResult, trigger, target *responses) {
	policyName := lastSegment(t.Policy)
	for _, key := range selectKeys(t, target, trigger) {
		var rows []Row
		skipped := false
		for _, resp := range trigger.byKey[key] {
			if resp.policyName != policyName {
				continue
			}
			// Arbiter's policy kinds are rule-less: every rule response
			// is checked, whatever rule the expectation names
			if resp.generation {
				rows = append(rows, c.checkGenerated(t, key, resp)...)
				continue
			}
			for _, r := range resp.results {
				ok, message, reason := c.checkResult(t, resp.resource, r)
				if !t.FailOnMissingResources && strings.Contains(message, "not found in manifest") {
					skipped = true
					continue
				}
				rows = append(rows, c.row(t, r.Rule, key, ok, message, reason))
			}
			if len(rows) == 0 && !skipped {
				// no rule response: the resource was excluded, a pass
				rows = append(rows, c.excluded(t, key))
			}
		}
		// A target's responses are those carrying it patched, whatever
		// their policy (the CLI does not compare the policy here), each
		// compared with its patched target.
		for _, resp := range target.byKey[key] {
			for _, r := range resp.results {
				if r.Result != outcome.Pass {
					continue
				}
				ok, message, reason := c.checkResult(t, resp.patchedTarget, r)
				rows = append(rows, c.row(t, r.Rule, key, ok, message, reason))
				break
			}
		}
		if len(rows) == 0 && !skipped {
			rows = append(rows, c.notFound(t, key))
		}
		c.rows = append(c.rows, rows...)
	}
}

// checkGenerated checks a GeneratingPolicy's response as the CLI does: each
// generated object against the expected generated resources (a row named
// after the object), or, when nothing was generated, the result alone.
func (c *checker) checkGenerated(t TestResult, key string, resp response) []Row {
	var rows []Row
	for _, r := range resp.results {
		if len(resp.generated) == 0 {
			ok, message, reason := c.checkResultOnly(t, r)
			rows = append(rows, c.row(t, r.Rule, key, ok, message, reason))
			continue
		}
		for _, g := range resp.generated {
			ok, message, reason := c.checkResult(t, g, r)
			row := c.row(t, r.Rule, key, ok, message, reason)
			row.Resource = nameOf(g)
			rows = append(rows, row)
		}
	}
	return rows
}

// checkResultOnly compares the result word only.
func (c *checker) checkResultOnly(t TestResult, r outcome.Result) (bool, string, string) {
	if r.Result != t.Result {
		return false, r.Message, fmt.Sprintf("Want %s, got %s", t.Result, r.Result)
	}
	return true, r.Message, "Ok"
}

func (c *checker) row(t TestResult, rule, key string, ok bool, message, reason string) Row {
	row := Row{
		ID: c.id, Policy: t.Policy, Rule: rule, Resource: displayKey(key),
		Expected: t.Result, Reason: reason, Message: message,
	}
	c.id++
	if ok {
		row.Result = RowPass
		c.passed++
	} else {
		row.Result = RowFail
		row.Failure = true
		c.failed++
	}
	return row
}

func (c *checker) excluded(t TestResult, key string) Row {
	row := Row{
		ID: c.id, Policy: t.Policy, Rule: t.Rule, Resource: displayKey(key),
		Expected: t.Result, Result: RowPass, Reason: "Excluded", Message: "Excluded",
	}
	c.id++
	c.passed++
	return row
}

func (c *checker) notFound(t TestResult, key string) Row {
	row := Row{
		ID: c.id, Policy: t.Policy, Rule: t.Rule, Resource: displayKey(key),
		Expected: t.Result, Result: RowFail, Reason: "Not found", Message: "Not found", Failure: true,
	}
	c.id++
	c.failed++
	return row
}

// checkResult compares a rule response with an expectation: expected
// patched/generated resources (compared with actual) first, then the
// result word.
func (c *checker) checkResult(t TestResult, actual map[string]any, r outcome.Result) (bool, string, string) {
	if t.PatchedResources != "" {
		if ok, msg, reason := c.compareResource(actual, t.PatchedResources, "PatchedResources", "Patched resource didn't match the patched resource in the test result"); !ok {
			return false, msg, reason
		}
	}
	if t.GeneratedResource != "" && len(t.GeneratedResources) == 0 {
		if ok, msg, reason := c.compareResource(actual, t.GeneratedResource, "GeneratedResource", "Patched resource didn't match the generated resource in the test result"); !ok {
			return false, msg, reason
		}
	} else if len(t.GeneratedResources) > 0 {
		matched := false
		var lastMsg, lastReason string
		for _, g := range t.GeneratedResources {
			ok, msg, reason := c.compareResource(actual, g, "GeneratedResources", "Generated resource didn't match any of the expected generated resources in the test result")
			if ok {
				matched = true
				break
			}
			lastMsg, lastReason = msg, reason
		}
		if !matched {
			return false, lastMsg, lastReason
		}
	}
	return c.checkResultOnly(t, r)
}

func (c *checker) compareResource(actual map[string]any, file, what, diffMsg string) (bool, string, string) {
	gvk := gvkOf(actual)
	expected, err := c.suite.resourceFromFile(c.suite.path(file), gvk.GroupVersion().String(), gvk.Kind, namespaceOf(actual), nameOf(actual))
	if err != nil {
		return false, fmt.Sprintf("error: failed to load %s resource (%v)", what, err), "Resource error"
	}
	a, e := deepCopy(actual).(map[string]any), deepCopy(expected).(map[string]any)
	fixupGenerateLabels(a)
	fixupGenerateLabels(e)
	// The CLI's comparison: the JSON merge patch from the tidied actual
	// object to the tidied expected one must be empty, i.e. their JSON is
	// equal (numbers as numbers, lists whole and in order).
	if !reflect.DeepEqual(tidy(toFloats(a)), tidy(toFloats(e))) {
		return false, diffMsg, "Resource diff"
	}
	return true, "", "Ok"
}

// fixupGenerateLabels does what the CLI does to both objects before
// comparing them: their labels become those not prefixed
// generate.kyverno.io/ plus app.kubernetes.io/managed-by: kyverno (so an
// object without labels equals one with only that label). Labels that are
// not all strings are dropped, as the CLI's unstructured reading drops them.
func fixupGenerateLabels(obj map[string]any) {
	labels := map[string]any{"app.kubernetes.io/managed-by": "kyverno"}
	md, ok := obj["metadata"].(map[string]any)
	if _, present := obj["metadata"]; present && !ok {
		return // the CLI cannot set labels under a metadata that is not an object
	}
	if md == nil {
		md = map[string]any{}
		obj["metadata"] = md
	}
	if current, ok := md["labels"].(map[string]any); ok {
		strs := true
		for _, v := range current {
			if _, ok := v.(string); !ok {
				strs = false
				break
			}
		}
		if strs {
			for k, v := range current {
				if !strings.HasPrefix(k, "generate.kyverno.io/") {
					labels[k] = v
				}
			}
		}
	}
	md["labels"] = labels
}

// tidy drops nulls, empty maps and empty lists, as the CLI's comparison does.
func tidy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range t {
			if e = tidy(e); e != nil {
				out[k] = e
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		var out []any
		for _, e := range t {
			if e = tidy(e); e != nil {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	}
	return v
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

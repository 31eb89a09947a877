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
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
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
	// resource is the evaluated object (patched/generated resource checks).
	resource map[string]any
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
	// the default run (the values' request.operation, else CREATE), then
	// one run per operation results name explicitly
	trigger := newResponses()
	for _, r := range s.resources {
		trigger.add(r.Key, s.evalResource(ctx, r, s.defaultOperation())...)
	}
	byOp := map[string]*responses{}
	for _, op := range explicitOperations(tests) {
		rs := newResponses()
		for _, r := range s.resources {
			rs.add(r.Key, s.evalResource(ctx, r, op)...)
		}
		byOp[op] = rs
	}
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
		c.check(t, rs)
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
// UPDATE with it as object and oldObject, DELETE as oldObject only.
func (s *Suite) evalResource(ctx context.Context, r *Resource, op string) []response {
	obj := r.Object
	gvk := gvkOf(obj)
	if s.values != nil {
		for _, sub := range s.values.Subresources {
			sg := schema.GroupVersionKind{Group: sub.Subresource.Group, Version: sub.Subresource.Version, Kind: sub.Subresource.Kind}
			if gvk == sg {
				gvk = schema.GroupVersionKind{Group: sub.ParentResource.Group, Version: sub.ParentResource.Version, Kind: sub.ParentResource.Kind}
			}
		}
	}
	req := &admission.Request{
		Operation: op,
		Kind:      gvk,
		Resource:  s.gvrOf(gvk),
		Name:      nameOf(obj),
		Namespace: namespaceOf(obj),
		UserInfo:  s.userInfo,
		Mode:      admission.ModeCLI,
	}
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
	d := s.policySet.Evaluate(ctx, req, &engine.EvalOptions{Context: s.context})
	var k8s, json []response
	for _, p := range s.policies {
		jsonMode := p.Spec.EvaluationMode() == kyvernoapi.EvaluationModeJSON
		resp := response{policyKind: p.Kind, policyName: p.Name, resource: obj}
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
	k8s = append(k8s, s.vapResponses(d, obj)...)
	return append(k8s, json...)
}

// evalJSON evaluates the JSON-mode policies on a JSON payload (only
// `object` is set); Kubernetes-mode policies do not apply to payloads.
func (s *Suite) evalJSON(ctx context.Context, p *Payload) []response {
	req := &admission.Request{
		Operation: admission.OpCreate,
		Object:    p.Object,
		Mode:      admission.ModeCLI,
	}
	d := s.policySet.Evaluate(ctx, req, &engine.EvalOptions{Context: s.context})
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

// selectKeys returns the response keys an expectation names: by name or
// namespace/name (and resourceSpecs), or every key when it names none that
// exists.
func selectKeys(t TestResult, rs *responses) []string {
	var keys []string
	if t.Resources != nil {
		for _, r := range t.Resources {
			nsName := strings.Split(r, "/")
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
		for _, spec := range t.ResourceSpecs {
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
	if len(keys) == 0 {
		keys = append(keys, rs.keys...)
	}
	return keys
}

func (c *checker) check(t TestResult, rs *responses) {
	policyName := lastSegment(t.Policy)
	for _, key := range selectKeys(t, rs) {
		var rows []Row
		skipped := false
		for _, resp := range rs.byKey[key] {
			if resp.policyName != policyName {
				continue
			}
			// Arbiter's policy kinds are rule-less: every rule response
			// is checked, whatever rule the expectation names
			for _, r := range resp.results {
				ok, message, reason := c.checkResult(t, resp, r)
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
		if len(rows) == 0 && !skipped {
			rows = append(rows, c.notFound(t, key))
		}
		c.rows = append(c.rows, rows...)
	}
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
// patched/generated resources first, then the result word.
func (c *checker) checkResult(t TestResult, resp response, r outcome.Result) (bool, string, string) {
	actual := resp.resource
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
	if r.Result != t.Result {
		return false, r.Message, fmt.Sprintf("Want %s, got %s", t.Result, r.Result)
	}
	return true, r.Message, "Ok"
}

func (c *checker) compareResource(actual map[string]any, file, what, diffMsg string) (bool, string, string) {
	gvk := gvkOf(actual)
	expected, err := c.suite.resourceFromFile(c.suite.path(file), gvk.GroupVersion().String(), gvk.Kind, namespaceOf(actual), nameOf(actual))
	if err != nil {
		return false, fmt.Sprintf("error: failed to load %s resource (%v)", what, err), "Resource error"
	}
	if !reflect.DeepEqual(tidy(toFloats(deepCopy(actual))), tidy(toFloats(deepCopy(expected)))) {
		return false, diffMsg, "Resource diff"
	}
	return true, "", "Ok"
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

package gpol

import (
	"fmt"
	"maps"
	"strings"

	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// SourceGeneratingPolicy is the PolicyReport source of the kind's results.
const SourceGeneratingPolicy = "KyvernoGeneratingPolicy"

// PropGeneratedResources is the report property listing what a policy
// generated ("<group>/<version>, Kind=<kind> Name=<name>[ Namespace=<ns>]",
// joined by "; "), as Kyverno reports it.
const PropGeneratedResources = "generated-resources"

// Message of a policy that generated (or had nothing to generate).
const passMessage = "policy evaluated successfully"

// Result is what one policy did with a trigger: its result and the
// objects it generated (none unless it passed).
type Result struct {
	outcome.Result
	// Generated are the objects the policy would create, in the order its
	// generate expressions gave them, with their namespace set.
	Generated []map[string]any
}

// Set is the GeneratingPolicies and NamespacedGeneratingPolicies of a
// policy set, with their exceptions. It is immutable.
type Set struct {
	entries []Bound
}

// Bound is a policy with the exceptions that name it.
type Bound struct {
	Policy     *Policy
	Exceptions *exception.Bound
}

// NewSet builds the set of policies, bounds[i] being the exceptions bound
// to policies[i].
func NewSet(policies []*Policy, bounds []*exception.Bound) *Set {
	s := &Set{entries: make([]Bound, len(policies))}
	for i, p := range policies {
		s.entries[i] = Bound{Policy: p, Exceptions: bounds[i]}
	}
	return s
}

// Empty says whether the set has no policy.
func (s *Set) Empty() bool { return s == nil || len(s.entries) == 0 }

// Policies returns the compiled policies, in order.
func (s *Set) Policies() []*Policy {
	if s == nil {
		return nil
	}
	out := make([]*Policy, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.Policy
	}
	return out
}

// Has says whether the set has a policy of that kind and name.
func (s *Set) Has(kind, name string) bool {
	if s == nil {
		return false
	}
	for _, e := range s.entries {
		if e.Policy.Kind == kind && e.Policy.Name == name {
			return true
		}
	}
	return false
}

// ExceptionsFor returns the exceptions bound to a policy.
func (s *Set) ExceptionsFor(p *Policy) []*exception.Exception {
	if s == nil {
		return nil
	}
	for _, e := range s.entries {
		if e.Policy == p && e.Exceptions != nil {
			return e.Exceptions.Exceptions
		}
	}
	return nil
}

// Generate evaluates every policy of the set on a trigger request, in
// order, as Kyverno's generating policy engine does
// (pkg/cel/policies/gpol/engine and compiler): a policy whose
// matchConstraints do not select the trigger, or one of whose
// matchConditions is false, has no result; otherwise a PolicyException
// that names it and whose matchConditions hold exempts the trigger (skip,
// or pass with reportResult: pass; nothing generated); otherwise its
// variables and generate expressions are evaluated, each
// generator.Apply call adding objects, and the result is a pass carrying
// them (an error when an expression fails: nothing generated). In the
// admission and background modes, a policy whose admission is disabled,
// or a namespaced policy of another namespace, does not apply; the CLI
// mode evaluates every policy, as Kyverno's CLI does.
func (s *Set) Generate(rq *celeval.Request) []Result {
	if s.Empty() {
		return nil
	}
	req := rq.Attributes()
	var out []Result
	for _, e := range s.entries {
		p := e.Policy
		if !applies(p, req) {
			continue
		}
		ok, err := p.match.Matches(req, rq.Namespace())
		if err != nil {
			out = append(out, result(rq, p, outcome.RuleMatch, outcome.Error, "failed to execute matching: "+err.Error(), nil))
			out[len(out)-1].Cause = outcome.CauseMatch
			continue
		}
		if !ok {
			continue
		}
		if err := rq.Stopped(); err != nil {
			r := result(rq, p, outcome.RuleEvaluation, outcome.Error, err.Error()+"; the policy was not evaluated", nil)
			r.Cause = outcome.CauseEvaluation
			out = append(out, r)
			continue
		}
		if r, ok := celeval.Run(rq, &p.scope, func(st *celeval.State) evalResult { return e.evaluate(rq, st) }).get(); ok {
			r.Expired = e.Exceptions.Expired(rq.Now())
			if rq.Traced() {
				rq.Note(p.Key(), "", outcome.PhaseResult, strings.Join(r.Exceptions(), ", "), r.Message)
			}
			out = append(out, r)
		}
	}
	return out
}

// applies says whether a policy applies in the request's mode.
func applies(p *Policy, req *admission.Request) bool {
	switch req.Mode {
	case admission.ModeAdmission, admission.ModeBackground:
		return p.Spec.AdmissionEnabled() && (!p.Namespaced() || req.Namespace == p.Namespace)
	}
	return true
}

// evalResult is a policy's result, or none (ok false: not matched).
type evalResult struct {
	r  Result
	ok bool
}

func (e evalResult) get() (Result, bool) { return e.r, e.ok }

// activation resolves `generator` to the evaluation's collector.
type activation struct{ g generatorValue }

func (a activation) ResolveName(name string) (any, bool) {
	if name == GeneratorVar {
		return a.g, true
	}
	return nil, false
}

func (b Bound) evaluate(rq *celeval.Request, st *celeval.State) evalResult {
	p := b.Policy
	c := &collector{}
	if p.Namespaced() {
		c.ns = p.Namespace
	}
	st.SetResolver(activation{generatorValue{c}})
	errResult := func(msg string, err error) evalResult {
		r := result(rq, p, "", outcome.Error, msg+": "+err.Error(), nil)
		r.Cause = outcome.CauseEvaluation
		return evalResult{r: r, ok: true}
	}
	ver := b.Exceptions.Evaluate(st, p.Namespaced(), admissionregistrationv1.Fail, exception.ErrorStops)
	if ver.Full {
		res, msg, props, keys := exception.Exemption(ver.Granted)
		r := result(rq, p, outcome.RuleException, res, msg, props)
		r.Cause, r.Granted = outcome.CauseException, keys
		return evalResult{r: r, ok: true}
	}
	if ver.Err != nil {
		return errResult("failed to evaluate policy", ver.Err)
	}
	st.SetExceptions(ver.AllowedImages, ver.AllowedValues)
	st.Label(outcome.PhaseMatchCondition, "", "")
	matched, err := st.Match(p.matchConditions, admissionregistrationv1.Fail)
	if err != nil {
		return errResult("failed to evaluate policy", err)
	}
	if !matched {
		return evalResult{}
	}
	for i, g := range p.generations {
		st.Label(phaseGenerate, celeval.Index(i), "")
		if g.tpl != nil {
			if err := applyTemplate(p, g.tpl, st, c); err != nil {
				return errResult("failed to evaluate policy", err)
			}
			continue
		}
		if _, err := st.Eval(g.prog); err != nil {
			return errResult("failed to evaluate policy", err)
		}
	}
	var props map[string]string
	for _, aa := range p.auditAnnotations {
		st.Label(outcome.PhaseAuditAnnotation, aa.key, "")
		out, err := st.Eval(aa.prog)
		if err != nil {
			return errResult("failed to evaluate policy", fmt.Errorf("failed to evaluate auditAnnotation %q: %w", aa.key, err))
		}
		s, err := celeval.AsString(out)
		if err != nil {
			if out == types.NullValue {
				continue
			}
			return errResult("failed to evaluate policy", fmt.Errorf("failed to convert auditAnnotation %q expression: %w", aa.key, err))
		}
		if s != "" {
			if props == nil {
				props = map[string]string{}
			}
			props[aa.key] = s
		}
	}
	if len(c.generated) > 0 {
		if props == nil {
			props = map[string]string{}
		}
		props[PropGeneratedResources] = describe(c.generated)
	}
	r := result(rq, p, "", outcome.Pass, passMessage, props)
	return evalResult{r: Result{Result: r.Result, Generated: c.generated}, ok: true}
}

// applyTemplate renders a template and generates its resources as
// generator.Apply does, each in its rendered metadata.namespace: for a
// namespaced policy, none means the policy's namespace and another is
// refused (Kyverno's applyTemplate).
func applyTemplate(p *Policy, tpl *template, st *celeval.State, c *collector) error {
	resources, err := tpl.render(st)
	if err != nil {
		return fmt.Errorf("failed to render generation template: %w", err)
	}
	var namespaces []string
	grouped := map[string][]map[string]any{}
	for _, r := range resources {
		md, _ := r["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		if p.Namespaced() {
			if ns == "" {
				ns = p.Namespace
			} else if ns != p.Namespace {
				return fmt.Errorf("cross-namespace generation denied: a policy in namespace %q cannot generate resources into namespace %q", p.Namespace, ns)
			}
		}
		if _, ok := grouped[ns]; !ok {
			namespaces = append(namespaces, ns)
		}
		grouped[ns] = append(grouped[ns], r)
	}
	for _, ns := range namespaces {
		if err := c.generate(ns, grouped[ns]); err != nil {
			return fmt.Errorf("failed to generate resources: %w", err)
		}
	}
	return nil
}

// phaseGenerate labels the generate expressions in traces.
const phaseGenerate = "generate"

// describe lists generated objects as Kyverno's report property does.
func describe(objs []map[string]any) string {
	parts := make([]string, len(objs))
	for i, o := range objs {
		apiVersion, _ := o["apiVersion"].(string)
		kind, _ := o["kind"].(string)
		md, _ := o["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		ns, _ := md["namespace"].(string)
		s := schema.FromAPIVersionAndKind(apiVersion, kind).String() + " Name=" + name
		if ns != "" {
			s += " Namespace=" + ns
		}
		parts[i] = s
	}
	return strings.Join(parts, "; ")
}

// result makes a result of the policy.
func result(rq *celeval.Request, p *Policy, rule, res, message string, props map[string]string) Result {
	r := outcome.Result{
		Policy:          p.Key(),
		PolicyName:      p.Name,
		PolicyNamespace: p.Namespace,
		PolicyKind:      p.Kind,
		Rule:            rule,
		Result:          res,
		Message:         message,
		Source:          SourceGeneratingPolicy,
		Scored:          p.scored,
		Category:        p.category,
		Severity:        p.severity,
	}
	proc := ""
	switch rq.Attributes().Mode {
	case admission.ModeAdmission:
		proc = outcome.Process(true)
	case admission.ModeBackground:
		proc = outcome.Process(false)
	}
	if proc != "" {
		props = maps.Clone(props)
		if props == nil {
			props = map[string]string{}
		}
		props[outcome.PropProcess] = proc
	}
	if props == nil {
		props = map[string]string{}
	}
	r.Properties = props
	return Result{Result: r}
}

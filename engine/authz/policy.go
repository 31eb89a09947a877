package authz

import (
	"fmt"

	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Policy is a compiled authorization policy. It is immutable.
type Policy struct {
	Kind   string
	Name   string
	Source string
	// Mode is admission.ShapeEnvoy or admission.ShapeHTTP: the requests
	// the policy evaluates.
	Mode        admission.Shape
	Spec        *kyvernoapi.ValidatingPolicySpec
	Labels      map[string]string
	Annotations map[string]string

	failurePolicy   admissionregistrationv1.FailurePolicyType
	matchConditions []*celeval.Program
	rules           []*celeval.Program
	scope           celeval.Scope
	scored          bool
	category        string
	severity        string
}

// Key returns the policy's report name (its name: authorization policies
// are cluster-scoped).
func (p *Policy) Key() string { return p.Name }

// IsAuthorization says whether an object is an authorization policy: a
// ValidatingPolicy whose spec.evaluation.mode is Envoy or HTTP.
func IsAuthorization(o *manifest.Object) bool {
	if o.Kind != kyvernoapi.KindValidatingPolicy || o.Group() != kyvernoapi.Group {
		return false
	}
	mode, _ := kyvernoapi.EvaluationModeOf(o.Content)
	return mode == kyvernoapi.EvaluationModeEnvoy || mode == kyvernoapi.EvaluationModeHTTP
}

// Compile loads and compiles one authorization policy, as kyverno-authz's
// compiler does: matchConditions (bool), variables (each typed for the
// ones after it), validations (a CheckResponse of the mode, or null).
func Compile(env *Env, o *manifest.Object) (*Policy, *manifest.LoadError) {
	if err := kyvernoapi.CheckVersion(o); err != nil {
		return nil, err
	}
	var vp kyvernoapi.ValidatingPolicy
	if err := manifest.DecodeStrict(o, &vp); err != nil {
		return nil, err
	}
	if vp.Name == "" {
		return nil, manifest.Errorf(o, "metadata.name", "required")
	}
	spec := &vp.Spec
	p := &Policy{
		Kind:          o.Kind,
		Name:          vp.Name,
		Source:        o.Source,
		Spec:          spec,
		Labels:        vp.Labels,
		Annotations:   vp.Annotations,
		failurePolicy: spec.GetFailurePolicy(),
		scored:        vp.Annotations["policies.kyverno.io/scored"] != "false",
		category:      vp.Annotations["policies.kyverno.io/category"],
		severity:      vp.Annotations["policies.kyverno.io/severity"],
	}
	want := envoyResponseType
	switch spec.EvaluationMode() {
	case kyvernoapi.EvaluationModeEnvoy:
		p.Mode = admission.ShapeEnvoy
	case kyvernoapi.EvaluationModeHTTP:
		p.Mode, want = admission.ShapeHTTP, httpResponseType
	default:
		return nil, manifest.Errorf(o, "spec.evaluation.mode", "unsupported value %q: an authorization policy's mode is \"Envoy\" or \"HTTP\"", spec.EvaluationMode())
	}
	switch p.failurePolicy {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		return nil, manifest.Errorf(o, "spec.failurePolicy", "unsupported value %q: supported values: \"Fail\", \"Ignore\"", p.failurePolicy)
	}
	if n := len(spec.MatchConditions); n > 64 {
		return nil, manifest.Errorf(o, "spec.matchConditions", "too many: %d, must have at most 64 items", n)
	}
	penv, err := celenv.NewPolicyEnv(env.pair(p.Mode))
	if err != nil {
		return nil, manifest.Errorf(o, "spec", "%v", err)
	}
	p.scope = celeval.Scope{Policy: p.Key()}
	bounds := map[string]celeval.SizeBounds{}
	for i, mc := range spec.MatchConditions {
		field := fmt.Sprintf("spec.matchConditions[%d].expression", i)
		prg, ast, err := celeval.Compile(penv.Pair, mc.Expression, nil, bounds)
		if err != nil {
			return nil, manifest.Errorf(o, field, "%v", err)
		}
		if !ast.OutputType().IsExactType(types.BoolType) {
			return nil, manifest.Errorf(o, field, "matchCondition output is expected to be of type bool")
		}
		p.matchConditions = append(p.matchConditions, prg)
	}
	seen := map[string]bool{}
	for i, v := range spec.Variables {
		if v.Name == "" {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].name", i), "required")
		}
		if seen[v.Name] {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].name", i), "duplicate variable %q", v.Name)
		}
		seen[v.Name] = true
		prg, ast, err := celeval.Compile(penv.Pair, v.Expression, nil, bounds)
		if err != nil {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].expression", i), "%v", err)
		}
		penv.DeclareVariable(v.Name, ast.OutputType())
		bounds[v.Name] = celeval.VarBound(ast, bounds)
		p.scope.Variables = append(p.scope.Variables, celeval.Variable{Name: v.Name, Prog: prg})
	}
	for i, v := range spec.Validations {
		field := fmt.Sprintf("spec.validations[%d].expression", i)
		prg, ast, err := celeval.Compile(penv.Pair, v.Expression, nil, bounds)
		if err != nil {
			return nil, manifest.Errorf(o, field, "%v", err)
		}
		if out := ast.OutputType(); !out.IsExactType(want) && !out.IsExactType(types.NullType) {
			return nil, manifest.Errorf(o, field, "rule response output is expected to be of type %s", want.TypeName())
		}
		p.rules = append(p.rules, prg)
	}
	return p, nil
}

package vpol

import (
	"encoding/json"
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/autogen"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Policy is a compiled ValidatingPolicy or NamespacedValidatingPolicy. It
// is immutable.
type Policy struct {
	Kind      string
	Namespace string
	Name      string
	Source    string
	Spec      *ValidatingPolicySpec
	// Labels and Annotations of the policy.
	Labels      map[string]string
	Annotations map[string]string
	Actions     []admissionregistrationv1.ValidationAction
	actionNames []string

	deny, warn, audit bool
	scored            bool
	category          string
	severity          string
	failurePolicy     admissionregistrationv1.FailurePolicyType
	jsonMode          bool
	// variants are the policy itself, then its autogen configs (defaults,
	// cronjobs), in that order.
	variants []*variant
}

// Key returns the policy's report name: the name for cluster policies,
// namespace/name for namespaced ones.
func (p *Policy) Key() string {
	if p.Namespace != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Name
}

// Namespaced says whether this is a NamespacedValidatingPolicy.
func (p *Policy) Namespaced() bool { return p.Kind == kyvernoapi.KindNamespacedValidatingPolicy }

// HasAction says whether validationActions holds a.
func (p *Policy) HasAction(a admissionregistrationv1.ValidationAction) bool {
	switch a {
	case admissionregistrationv1.Deny:
		return p.deny
	case admissionregistrationv1.Warn:
		return p.warn
	case admissionregistrationv1.Audit:
		return p.audit
	}
	return false
}

// variant is the policy, or one autogen configuration of it, compiled.
type variant struct {
	policy *Policy
	// config is "" for the policy itself, else "defaults" or "cronjobs".
	config string
	// templatePath is the path of the pod template an autogen variant
	// evaluates (spec.template, spec.jobTemplate.spec.template).
	templatePath     string
	match            *admission.Matcher
	matchConditions  []*celeval.Program
	validations      []*validation
	auditAnnotations []*auditAnnotation
	// scope is what the variant's expressions are evaluated in (its variables).
	scope celeval.Scope
}

type validation struct {
	prog    *celeval.Program
	message string
	msgProg *celeval.Program
}

type auditAnnotation struct {
	key  string
	prog *celeval.Program
}

// Compile loads and compiles one ValidatingPolicy or
// NamespacedValidatingPolicy object.
func Compile(env *celenv.Env, o *manifest.Object) (*Policy, *manifest.LoadError) {
	if err := kyvernoapi.CheckVersion(o); err != nil {
		return nil, err
	}
	var vp ValidatingPolicy
	if err := manifest.DecodeStrict(o, &vp); err != nil {
		return nil, err
	}
	if vp.Name == "" {
		return nil, manifest.Errorf(o, "metadata.name", "required")
	}
	spec := &vp.Spec
	p := &Policy{
		Kind:          o.Kind,
		Namespace:     vp.Namespace,
		Name:          vp.Name,
		Source:        o.Source,
		Spec:          spec,
		Labels:        vp.Labels,
		Annotations:   vp.Annotations,
		Actions:       spec.Actions(),
		failurePolicy: spec.GetFailurePolicy(),
		jsonMode:      spec.EvaluationMode() == kyvernoapi.EvaluationModeJSON,
		scored:        vp.Annotations["policies.kyverno.io/scored"] != "false",
		category:      vp.Annotations["policies.kyverno.io/category"],
		severity:      vp.Annotations["policies.kyverno.io/severity"],
	}
	if p.Kind == kyvernoapi.KindValidatingPolicy {
		p.Namespace = ""
	}
	if p.Kind == kyvernoapi.KindNamespacedValidatingPolicy && p.Namespace == "" {
		p.Namespace = "default"
	}
	for i, a := range spec.ValidationActions {
		switch a {
		case admissionregistrationv1.Deny:
			p.deny = true
		case admissionregistrationv1.Warn:
			p.warn = true
		case admissionregistrationv1.Audit:
			p.audit = true
		default:
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.validationActions[%d]", i), "unsupported value %q: supported values: \"Audit\", \"Deny\", \"Warn\"", a)
		}
	}
	if len(spec.ValidationActions) == 0 {
		p.deny = true
	}
	for _, a := range p.Actions {
		p.actionNames = append(p.actionNames, string(a))
	}
	switch p.failurePolicy {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		return nil, manifest.Errorf(o, "spec.failurePolicy", "unsupported value %q: supported values: \"Fail\", \"Ignore\"", p.failurePolicy)
	}
	switch spec.EvaluationMode() {
	case kyvernoapi.EvaluationModeKubernetes:
		if spec.MatchConstraints == nil || len(spec.MatchConstraints.ResourceRules) == 0 {
			return nil, manifest.Errorf(o, "spec.matchConstraints", "a matchConstraints with at least one resource rule is required")
		}
	case kyvernoapi.EvaluationModeJSON:
	case kyvernoapi.EvaluationModeEnvoy, kyvernoapi.EvaluationModeHTTP:
		// A ValidatingPolicy in these modes is the authorization kind's (engine/authz).
		return nil, manifest.Errorf(o, "spec.evaluation.mode", "unsupported value %q for a %s: the Envoy and HTTP modes are for ValidatingPolicy (authorization policies are cluster-scoped)", spec.EvaluationMode(), o.Kind)
	default:
		return nil, manifest.Errorf(o, "spec.evaluation.mode", "unsupported value %q: supported values: \"Kubernetes\", \"JSON\", \"Envoy\", \"HTTP\"", spec.EvaluationMode())
	}
	if n := len(spec.MatchConditions); n > 64 {
		return nil, manifest.Errorf(o, "spec.matchConditions", "too many: %d, must have at most 64 items", n)
	}
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		return nil, manifest.Errorf(o, "spec.validations", "at least one validation or auditAnnotation is required")
	}
	base, lerr := compileVariant(env, o, p, "", "", spec)
	if lerr != nil {
		return nil, lerr
	}
	p.variants = append(p.variants, base)
	if !p.jsonMode {
		configs, specs, err := AutogenSpecs(spec)
		if err != nil {
			return nil, manifest.Errorf(o, "spec", "autogen: %v", err)
		}
		for i, cfg := range configs {
			v, lerr := compileVariant(env, o, p, cfg.Name, cfg.TemplatePath, specs[i])
			if lerr != nil {
				lerr.Detail = fmt.Sprintf("autogen %s: %s", cfg.Name, lerr.Detail)
				return nil, lerr
			}
			p.variants = append(p.variants, v)
		}
	}
	return p, nil
}

// AutogenSpecs returns the autogen variants of a policy spec (Kyverno's
// order) and their specs: the matchConstraints of the pod controllers,
// expressions rewritten to read the pod template.
func AutogenSpecs(spec *ValidatingPolicySpec) ([]autogen.Config, []*ValidatingPolicySpec, error) {
	var pc *kyvernoapi.PodControllers
	if spec.Autogen != nil {
		pc = spec.Autogen.PodControllers
	}
	configs := autogen.Configs(spec.MatchConstraints, pc)
	specs := make([]*ValidatingPolicySpec, len(configs))
	for i, cfg := range configs {
		clone := *spec
		clone.MatchConstraints = cfg.Match
		data, err := json.Marshal(&clone)
		if err != nil {
			return nil, nil, err
		}
		var s ValidatingPolicySpec
		if err := json.Unmarshal(cfg.Rewrite(data), &s); err != nil {
			return nil, nil, err
		}
		specs[i] = &s
	}
	return configs, specs, nil
}

func compileVariant(env *celenv.Env, o *manifest.Object, p *Policy, config, templatePath string, spec *ValidatingPolicySpec) (*variant, *manifest.LoadError) {
	v := &variant{policy: p, config: config, templatePath: templatePath}
	v.scope = celeval.Scope{Policy: p.Key(), Variant: config, Namespace: p.Namespace}
	if !p.jsonMode {
		m, field, err := admission.CompileMatch(spec.MatchConstraints, "spec.matchConstraints")
		if err != nil {
			return nil, manifest.Errorf(o, field, "%v", err)
		}
		v.match = m
	}
	penv, err := env.ForPolicy(p.Namespaced())
	if err != nil {
		return nil, manifest.Errorf(o, "spec", "%v", err)
	}
	bounds := map[string]celeval.SizeBounds{}
	compile := func(field, expr string, want *types.Type) (*celeval.Program, *cel.Ast, *manifest.LoadError) {
		prg, ast, err := celeval.Compile(penv.Pair, expr, want, bounds)
		if err != nil {
			return nil, nil, manifest.Errorf(o, field, "%v", err)
		}
		return prg, ast, nil
	}
	for i, mc := range spec.MatchConditions {
		prg, _, lerr := compile(fmt.Sprintf("spec.matchConditions[%d].expression", i), mc.Expression, types.BoolType)
		if lerr != nil {
			return nil, lerr
		}
		v.matchConditions = append(v.matchConditions, prg)
	}
	seen := map[string]bool{}
	for i, vr := range spec.Variables {
		if vr.Name == "" {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].name", i), "required")
		}
		if seen[vr.Name] {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].name", i), "duplicate variable %q", vr.Name)
		}
		seen[vr.Name] = true
		prg, ast, lerr := compile(fmt.Sprintf("spec.variables[%d].expression", i), vr.Expression, nil)
		if lerr != nil {
			return nil, lerr
		}
		penv.DeclareVariable(vr.Name, ast.OutputType())
		bounds[vr.Name] = celeval.VarBound(ast, bounds)
		v.scope.Variables = append(v.scope.Variables, celeval.Variable{Name: vr.Name, Prog: prg})
	}
	for i, val := range spec.Validations {
		field := fmt.Sprintf("spec.validations[%d]", i)
		prg, _, lerr := compile(field+".expression", val.Expression, types.BoolType)
		if lerr != nil {
			return nil, lerr
		}
		cv := &validation{prog: prg, message: val.Message}
		if val.MessageExpression != "" {
			cv.msgProg, _, lerr = compile(field+".messageExpression", val.MessageExpression, types.StringType)
			if lerr != nil {
				return nil, lerr
			}
		}
		v.validations = append(v.validations, cv)
	}
	if !p.jsonMode {
		for i, aa := range spec.AuditAnnotations {
			field := fmt.Sprintf("spec.auditAnnotations[%d].valueExpression", i)
			prg, ast, err := celeval.Compile(penv.Pair, aa.ValueExpression, nil, bounds)
			if err != nil {
				return nil, manifest.Errorf(o, field, "%v", err)
			}
			if t := ast.OutputType(); !t.IsExactType(types.StringType) && !t.IsExactType(types.NullType) {
				return nil, manifest.Errorf(o, field, "output is expected to be either of type string or null_type")
			}
			v.auditAnnotations = append(v.auditAnnotations, &auditAnnotation{key: aa.Key, prog: prg})
		}
	}
	return v, nil
}

// Resources returns the resources the policy's rules (and autogen
// variants) name, as group/version/resource (with * where the rule says so).
func (p *Policy) Resources() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range p.variants {
		if v.match != nil {
			out = v.match.Resources(seen, out)
		}
	}
	return out
}

// AutogenConfigs returns the autogen configurations the policy is also
// compiled for (defaults, cronjobs).
func (p *Policy) AutogenConfigs() []string {
	var out []string
	for _, v := range p.variants {
		if v.config != "" {
			out = append(out, v.config)
		}
	}
	return out
}

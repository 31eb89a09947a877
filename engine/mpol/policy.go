package mpol

import (
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

// Policy is a compiled MutatingPolicy or NamespacedMutatingPolicy. It is
// immutable.
type Policy struct {
	Kind      string
	Namespace string
	Name      string
	Source    string
	Spec      *MutatingPolicySpec
	// Labels and Annotations of the policy.
	Labels      map[string]string
	Annotations map[string]string

	failurePolicy admissionregistrationv1.FailurePolicyType
	allowAtomic   bool
	// variants are the policy itself, then its autogen configurations
	// (cronjobs, defaults), in that order.
	variants []*variant
	// target is the compiled targetMatchConstraints (nil: none).
	target *target
}

// target is what a mutate-existing policy mutates: the compiled
// targetMatchConstraints and targetMatchConditions.
type target struct {
	// match is targetMatchConstraints' resource rules with every
	// operation (nil: it has none, the variants' own matchConstraints
	// select targets).
	match *admission.Matcher
	// expr is targetMatchConstraints.expression (nil: none).
	expr *celeval.Program
	// conditions are the targetMatchConditions, evaluated on each target
	// instead of the matchConditions.
	conditions []*celeval.Program
}

// Key returns the policy's report name: the name for cluster policies,
// namespace/name for namespaced ones.
func (p *Policy) Key() string {
	if p.Namespace != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Name
}

// Namespaced says whether this is a NamespacedMutatingPolicy.
func (p *Policy) Namespaced() bool { return p.Kind == kyvernoapi.KindNamespacedMutatingPolicy }

// MutateExisting says whether the policy mutates existing resources
// (targetMatchConstraints, evaluation.mutateExisting).
func (p *Policy) MutateExisting() bool { return p.Spec.IsMutateExisting() }

// AppliesConfigurations says whether a mutation of the policy is an apply
// configuration (merged with the schema of the object's kind).
func (p *Policy) AppliesConfigurations() bool {
	for _, m := range p.Spec.Mutations {
		if m.PatchType != admissionregistrationv1.PatchTypeJSONPatch {
			return true
		}
	}
	return false
}

// variant is the policy, or one autogen configuration of it, compiled.
type variant struct {
	policy *Policy
	// config is "" for the policy itself, else "defaults" or "cronjobs".
	config       string
	templatePath string
	// constraints are the variant's matchConstraints (autogen's for an
	// autogen variant).
	constraints *admissionregistrationv1.MatchResources
	match       *admission.Matcher
	// targetMatch is constraints with every operation: what selects the
	// targets of a mutate-existing policy without targetMatchConstraints
	// resource rules or expression.
	targetMatch      *admission.Matcher
	matchConditions  []*celeval.Program
	mutations        []*mutationProg
	auditAnnotations []*auditAnnotation
	// scope is what the variant's expressions are evaluated in (its variables).
	scope celeval.Scope
}

// mutationProg is one compiled mutation.
type mutationProg struct {
	jsonPatch bool
	prog      *celeval.Program
}

type auditAnnotation struct {
	key  string
	prog *celeval.Program
}

var (
	objectType    = types.NewObjectType(celenv.ApplyConfigurationTypeName)
	jsonPatchList = types.NewListType(types.NewObjectType("JSONPatch"))
	// targetMapType is the type a targetMatchConstraints expression must
	// have, exactly (Kyverno's compiler): what resource.get and
	// resource.list return.
	targetMapType = types.NewMapType(types.StringType, types.AnyType)
)

// Compile loads and compiles one MutatingPolicy or NamespacedMutatingPolicy.
func Compile(env *celenv.Env, o *manifest.Object) (*Policy, *manifest.LoadError) {
	if err := kyvernoapi.CheckVersion(o); err != nil {
		return nil, err
	}
	var mp MutatingPolicy
	if err := manifest.DecodeStrict(o, &mp); err != nil {
		return nil, err
	}
	if mp.Name == "" {
		return nil, manifest.Errorf(o, "metadata.name", "required")
	}
	spec := &mp.Spec
	p := &Policy{
		Kind:          o.Kind,
		Namespace:     mp.Namespace,
		Name:          mp.Name,
		Source:        o.Source,
		Spec:          spec,
		Labels:        mp.Labels,
		Annotations:   mp.Annotations,
		failurePolicy: spec.GetFailurePolicy(),
		allowAtomic:   spec.UseServerSideApply(),
	}
	if p.Kind == kyvernoapi.KindMutatingPolicy {
		p.Namespace = ""
	} else if p.Namespace == "" {
		p.Namespace = "default"
	}
	switch p.failurePolicy {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		return nil, manifest.Errorf(o, "spec.failurePolicy", "unsupported value %q: supported values: \"Fail\", \"Ignore\"", p.failurePolicy)
	}
	switch spec.GetReinvocationPolicy() {
	case admissionregistrationv1.NeverReinvocationPolicy, admissionregistrationv1.IfNeededReinvocationPolicy:
	default:
		return nil, manifest.Errorf(o, "spec.reinvocationPolicy", "unsupported value %q: supported values: \"IfNeeded\", \"Never\"", spec.ReinvocationPolicy)
	}
	if m := spec.EvaluationMode(); m != kyvernoapi.EvaluationModeKubernetes {
		return nil, manifest.Errorf(o, "spec.evaluation.mode", "unsupported value %q: a MutatingPolicy mutates Kubernetes admission requests only (supported values: \"Kubernetes\")", m)
	}
	if spec.MatchConstraints == nil || len(spec.MatchConstraints.ResourceRules) == 0 {
		return nil, manifest.Errorf(o, "spec.matchConstraints", "a matchConstraints with at least one resource rule is required")
	}
	if !spec.AdmissionEnabled() && !spec.MutateExistingEnabled() {
		return nil, manifest.Errorf(o, "spec.evaluation", "disabling both admission and mutateExisting evaluation modes is not allowed")
	}
	if n := len(spec.MatchConditions); n > 64 {
		return nil, manifest.Errorf(o, "spec.matchConditions", "too many: %d, must have at most 64 items", n)
	}
	for i, m := range spec.Mutations {
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeApplyConfiguration, admissionregistrationv1.PatchTypeJSONPatch:
		default:
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.mutations[%d].patchType", i), "unsupported value %q: supported values: \"ApplyConfiguration\", \"JSONPatch\"", m.PatchType)
		}
	}
	base, lerr := compileVariant(env, o, p, autogen.Config{}, spec.MatchConstraints, spec.MatchConditions, spec.Mutations)
	if lerr != nil {
		return nil, lerr
	}
	p.variants = append(p.variants, base)
	for _, av := range AutogenVariants(spec) {
		v, lerr := compileVariant(env, o, p, av.Config, av.Config.Match, av.MatchConditions, av.Mutations)
		if lerr != nil {
			lerr.Detail = fmt.Sprintf("autogen %s: %s", av.Config.Name, lerr.Detail)
			return nil, lerr
		}
		p.variants = append(p.variants, v)
	}
	if t := spec.TargetMatchConstraints; t != nil || len(spec.TargetMatchConditions) > 0 {
		p.target = &target{}
		if t == nil {
			t = &TargetMatchConstraints{}
		}
		if len(t.ResourceRules) > 0 {
			m, field, err := admission.CompileMatch(anyOperation(&t.MatchResources), "spec.targetMatchConstraints")
			if err != nil {
				return nil, manifest.Errorf(o, field, "%v", err)
			}
			p.target.match = m
		}
		penv, err := env.ForMutatingPolicy(p.Namespaced())
		if err != nil {
			return nil, manifest.Errorf(o, "spec", "%v", err)
		}
		bounds := map[string]celeval.SizeBounds{}
		for i, vr := range spec.Variables {
			_, ast, err := celeval.Compile(penv.Pair, vr.Expression, nil, bounds)
			if err != nil {
				return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].expression", i), "%v", err)
			}
			penv.DeclareVariable(vr.Name, ast.OutputType())
		}
		if t.Expression != "" {
			prg, ast, err := celeval.Compile(penv.Pair, t.Expression, nil, bounds)
			if err != nil {
				return nil, manifest.Errorf(o, "spec.targetMatchConstraints.expression", "%v", err)
			}
			if !ast.OutputType().IsExactType(targetMapType) {
				return nil, manifest.Errorf(o, "spec.targetMatchConstraints.expression", "output type must be a map")
			}
			p.target.expr = prg
		}
		for i, mc := range spec.TargetMatchConditions {
			prg, _, err := celeval.Compile(penv.Pair, mc.Expression, types.BoolType, bounds)
			if err != nil {
				return nil, manifest.Errorf(o, fmt.Sprintf("spec.targetMatchConditions[%d].expression", i), "%v", err)
			}
			p.target.conditions = append(p.target.conditions, prg)
		}
	}
	return p, nil
}

// AutogenVariant is one autogen configuration of a policy (cronjobs,
// defaults) with the parts Kyverno rewrites for it: its matchConstraints
// (Config.Match), matchConditions and apply configurations.
type AutogenVariant struct {
	Config          autogen.Config
	MatchConditions []admissionregistrationv1.MatchCondition
	Mutations       []admissionregistrationv1.Mutation
}

// AutogenVariants returns the autogen configurations of a policy spec, in
// the order Kyverno evaluates them.
func AutogenVariants(spec *MutatingPolicySpec) []AutogenVariant {
	var pc *kyvernoapi.PodControllers
	if spec.Autogen != nil {
		pc = spec.Autogen.PodControllers
	}
	var out []AutogenVariant
	for _, cfg := range autogen.Configs(spec.MatchConstraints, pc) {
		// Kyverno rewrites matchConditions and apply configurations only.
		conds := make([]admissionregistrationv1.MatchCondition, len(spec.MatchConditions))
		for i, mc := range spec.MatchConditions {
			conds[i] = mc
			conds[i].Expression = cfg.RewriteMutation(mc.Expression)
		}
		muts := make([]admissionregistrationv1.Mutation, len(spec.Mutations))
		for i, m := range spec.Mutations {
			muts[i] = m
			if m.ApplyConfiguration != nil {
				ac := *m.ApplyConfiguration
				ac.Expression = cfg.RewriteMutation(ac.Expression)
				muts[i].ApplyConfiguration = &ac
			}
		}
		out = append(out, AutogenVariant{Config: cfg, MatchConditions: conds, Mutations: muts})
	}
	return out
}

func compileVariant(env *celenv.Env, o *manifest.Object, p *Policy, cfg autogen.Config,
	match *admissionregistrationv1.MatchResources, conds []admissionregistrationv1.MatchCondition, muts []admissionregistrationv1.Mutation) (*variant, *manifest.LoadError) {
	spec := p.Spec
	v := &variant{policy: p, config: cfg.Name, templatePath: cfg.TemplatePath, constraints: match}
	v.scope = celeval.Scope{Policy: p.Key(), Variant: cfg.Name, Namespace: p.Namespace}
	m, field, err := admission.CompileMatch(match, "spec.matchConstraints")
	if err != nil {
		return nil, manifest.Errorf(o, field, "%v", err)
	}
	v.match = m
	if v.targetMatch, _, err = admission.CompileMatch(anyOperation(match), "spec.matchConstraints"); err != nil {
		return nil, manifest.Errorf(o, field, "%v", err)
	}
	penv, err := env.ForMutatingPolicy(p.Namespaced())
	if err != nil {
		return nil, manifest.Errorf(o, "spec", "%v", err)
	}
	bounds := map[string]celeval.SizeBounds{}
	compile := func(field, expr string, want *types.Type, wantName string) (*celeval.Program, *cel.Ast, *manifest.LoadError) {
		prg, ast, err := celeval.Compile(penv.Pair, expr, nil, bounds)
		if err != nil {
			return nil, nil, manifest.Errorf(o, field, "%v", err)
		}
		if want != nil && !ast.OutputType().IsExactType(want) {
			return nil, nil, manifest.Errorf(o, field, "output is expected to be of type %s", wantName)
		}
		return prg, ast, nil
	}
	// Variables first: Kyverno lets matchConditions read them.
	seen := map[string]bool{}
	for i, vr := range spec.Variables {
		if vr.Name == "" {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].name", i), "required")
		}
		if seen[vr.Name] {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].name", i), "duplicate variable %q", vr.Name)
		}
		seen[vr.Name] = true
		prg, ast, lerr := compile(fmt.Sprintf("spec.variables[%d].expression", i), vr.Expression, nil, "")
		if lerr != nil {
			return nil, lerr
		}
		penv.DeclareVariable(vr.Name, ast.OutputType())
		bounds[vr.Name] = celeval.VarBound(ast, bounds)
		v.scope.Variables = append(v.scope.Variables, celeval.Variable{Name: vr.Name, Prog: prg})
	}
	for i, mc := range conds {
		prg, _, lerr := compile(fmt.Sprintf("spec.matchConditions[%d].expression", i), mc.Expression, types.BoolType, "bool")
		if lerr != nil {
			return nil, lerr
		}
		v.matchConditions = append(v.matchConditions, prg)
	}
	for i, m := range muts {
		switch {
		case m.PatchType == admissionregistrationv1.PatchTypeApplyConfiguration && m.ApplyConfiguration != nil:
			prg, _, lerr := compile(fmt.Sprintf("spec.mutations[%d].applyConfiguration.expression", i), m.ApplyConfiguration.Expression, objectType, "Object")
			if lerr != nil {
				return nil, lerr
			}
			v.mutations = append(v.mutations, &mutationProg{prog: prg})
		case m.PatchType == admissionregistrationv1.PatchTypeJSONPatch && m.JSONPatch != nil:
			prg, _, lerr := compile(fmt.Sprintf("spec.mutations[%d].jsonPatch.expression", i), m.JSONPatch.Expression, jsonPatchList, "list")
			if lerr != nil {
				return nil, lerr
			}
			v.mutations = append(v.mutations, &mutationProg{jsonPatch: true, prog: prg})
		}
		// A mutation without the field its patchType names is dropped, as
		// Kyverno's compiler drops it.
	}
	for i, aa := range spec.AuditAnnotations {
		field := fmt.Sprintf("spec.auditAnnotations[%d].valueExpression", i)
		prg, ast, lerr := compile(field, aa.ValueExpression, nil, "")
		if lerr != nil {
			return nil, lerr
		}
		if t := ast.OutputType(); !t.IsExactType(types.StringType) && !t.IsExactType(types.NullType) {
			return nil, manifest.Errorf(o, field, "output is expected to be either of type string or null_type")
		}
		v.auditAnnotations = append(v.auditAnnotations, &auditAnnotation{key: aa.Key, prog: prg})
	}
	return v, nil
}

// Resources returns the resources the policy's rules (and autogen
// variants) name, as group/version/resource.
func (p *Policy) Resources() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range p.variants {
		out = v.match.Resources(seen, out)
	}
	return out
}

// VariantConstraints returns the matchConstraints of the policy, then
// those of its autogen variants, in evaluation order.
func (p *Policy) VariantConstraints() []*admissionregistrationv1.MatchResources {
	out := make([]*admissionregistrationv1.MatchResources, len(p.variants))
	for i, v := range p.variants {
		out[i] = v.constraints
	}
	return out
}

// anyOperation returns match resources whose resource rules match every
// operation: how Kyverno selects the targets of a mutate-existing policy
// (operations are not considered; exclusions keep theirs).
func anyOperation(mr *admissionregistrationv1.MatchResources) *admissionregistrationv1.MatchResources {
	out := *mr
	out.ResourceRules = make([]admissionregistrationv1.NamedRuleWithOperations, len(mr.ResourceRules))
	for i, r := range mr.ResourceRules {
		out.ResourceRules[i] = r
		out.ResourceRules[i].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}
	}
	return &out
}

// AutogenConfigs returns the autogen configurations the policy is also
// compiled for (cronjobs, defaults).
func (p *Policy) AutogenConfigs() []string {
	var out []string
	for _, v := range p.variants {
		if v.config != "" {
			out = append(out, v.config)
		}
	}
	return out
}

package mapol

import (
	"strings"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
)

// API group, versions and kinds. The three versions kube-apiserver v1.37
// serves (v1; v1beta1, deprecated in 1.37; v1alpha1, deprecated in 1.35
// and removed in 1.38 — both beta and alpha off unless enabled) have the
// same schema; their defaults differ only in v1alpha1's paramRef, whose
// parameterNotFoundAction defaults to Deny.
const (
	Group       = "admissionregistration.k8s.io"
	Version     = "v1"
	APIVersion  = Group + "/" + Version
	KindPolicy  = "MutatingAdmissionPolicy"
	KindBinding = "MutatingAdmissionPolicyBinding"
)

// Versions are the versions of the group Arbiter reads.
var Versions = map[string]bool{"v1": true, "v1beta1": true, "v1alpha1": true}

// supportedMutatingOperations are the operations a MutatingAdmissionPolicy
// (and its bindings) may match: it cannot mutate a DELETE.
var supportedMutatingOperations = sets.New(string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Create),
	string(admissionregistrationv1.Update), string(admissionregistrationv1.Connect))

var (
	supportedReinvocationPolicies = sets.New(string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy))
	supportedPatchTypes           = sets.New(string(admissionregistrationv1.PatchTypeApplyConfiguration), string(admissionregistrationv1.PatchTypeJSONPatch))
	// The return types of the API server's patch accessors
	// (patch.ApplyConfigurationCondition, patch.JSONPatchCondition).
	objectReturn    = []*cel.Type{cel.ObjectType("Object")}
	jsonPatchReturn = []*cel.Type{cel.ListType(cel.ObjectType("JSONPatch"))}
)

// Policy is a compiled MutatingAdmissionPolicy. It is immutable.
type Policy struct {
	Name string
	// Spec is the policy's spec with the API server's defaults applied.
	Spec          admissionregistrationv1.MutatingAdmissionPolicySpec
	failurePolicy admissionregistrationv1.FailurePolicyType
	reinvoke      bool
	paramKind     *schema.GroupVersionKind
	match         *ap.Matcher

	matchConditions []plugincel.CompilationResult
	variables       []ap.Variable
	mutations       []mutation
}

// mutation is one compiled mutation.
type mutation struct {
	jsonPatch bool
	result    plugincel.CompilationResult
}

// ParamKind returns the group, version and kind of the policy's params, if any.
func (p *Policy) ParamKind() (schema.GroupVersionKind, bool) {
	if p.paramKind == nil {
		return schema.GroupVersionKind{}, false
	}
	return *p.paramKind, true
}

// FailurePolicy returns the policy's failurePolicy (defaulted).
func (p *Policy) FailurePolicy() admissionregistrationv1.FailurePolicyType { return p.failurePolicy }

// DefaultPolicy applies the API server's defaults (failurePolicy Fail,
// matchPolicy Equivalent, selectors {}, rule scope "*") to a copy of p.
func DefaultPolicy(p *admissionregistrationv1.MutatingAdmissionPolicy) *admissionregistrationv1.MutatingAdmissionPolicy {
	p = p.DeepCopy()
	ap.DefaultFailurePolicy(&p.Spec.FailurePolicy)
	if p.Spec.MatchConstraints != nil {
		ap.DefaultMatchResources(p.Spec.MatchConstraints)
	}
	return p
}

// DefaultBinding applies the API server's defaults to a copy of b.
func DefaultBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
	b = b.DeepCopy()
	if b.Spec.MatchResources != nil {
		ap.DefaultMatchResources(b.Spec.MatchResources)
	}
	return b
}

// CompilePolicy defaults, validates (as the API server validates a
// MutatingAdmissionPolicy on create) and compiles a policy. Every problem
// is returned, with its field path; an expression that does not compile is
// one.
func CompilePolicy(in *admissionregistrationv1.MutatingAdmissionPolicy) (*Policy, field.ErrorList) {
	p := DefaultPolicy(in)
	spec := &p.Spec
	fld := field.NewPath("spec")
	errs := ap.ValidateName(p.Name)
	out := &Policy{Name: p.Name, Spec: *spec, failurePolicy: *spec.FailurePolicy,
		reinvoke: spec.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy}

	errs = append(errs, ap.ValidateFailurePolicy(*spec.FailurePolicy, fld.Child("failurePolicy"))...)
	if spec.ParamKind != nil {
		gvk, kerrs := ap.ValidateParamKind(*spec.ParamKind, fld.Child("paramKind"))
		errs = append(errs, kerrs...)
		out.paramKind = gvk
	}
	if mc := spec.MatchConstraints; mc == nil {
		errs = append(errs, field.Required(fld.Child("matchConstraints"), ""))
	} else {
		f := fld.Child("matchConstraints")
		errs = append(errs, ap.ValidateMatchResources(mc, f)...)
		if len(mc.ResourceRules) == 0 {
			errs = append(errs, field.Required(f.Child("resourceRules"), ""))
		}
		errs = append(errs, ap.ValidateOperations(mc.ResourceRules, supportedMutatingOperations, f.Child("resourceRules", "operations"))...)
	}
	if len(errs) == 0 && spec.MatchConstraints != nil {
		out.match = ap.CompileMatch(spec.MatchConstraints)
	}

	opts := plugincel.OptionalVariableDeclarations{HasParams: spec.ParamKind != nil, HasAuthorizer: true}
	fc, err := ap.NewCompositedCompiler()
	if err != nil {
		return nil, append(errs, field.InternalError(fld, err))
	}
	errs = append(errs, ap.ValidateMatchConditions(spec.MatchConditions, opts, fld.Child("matchConditions"))...)
	vars, verrs := ap.CompileVariables(fc, spec.Variables, opts, fld.Child("variables"))
	errs = append(errs, verrs...)
	out.variables = vars
	out.matchConditions = ap.CompileMatchConditions(fc, spec.MatchConditions, opts)

	// Mutations are compiled with the patch types (Object, JSONPatch), as
	// only they may use them.
	popts := opts
	popts.HasPatchTypes = true
	if len(spec.Mutations) == 0 {
		errs = append(errs, field.Required(fld.Child("mutations"), "mutations must contain at least one item"))
	}
	for i, m := range spec.Mutations {
		f := fld.Child("mutations").Index(i)
		var mut mutation
		var ferrs field.ErrorList
		switch m.PatchType {
		case "":
			ferrs = field.ErrorList{field.Required(f.Child("patchType"), "")}
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch == nil {
				ferrs = append(ferrs, field.Required(f.Child("jsonPatch"), "must be specified when patchType is JSONPatch"))
			} else {
				mut = mutation{jsonPatch: true}
				mut.result, ferrs = compileMutation(fc, m.JSONPatch.Expression, jsonPatchReturn, popts, f.Child("jsonPatch", "expression"))
			}
			if m.ApplyConfiguration != nil {
				ferrs = append(ferrs, field.Invalid(f.Child("applyConfiguration"), "{applyConfiguration}", "must not be specified when patchType is JSONPatch"))
			}
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration == nil {
				ferrs = append(ferrs, field.Required(f.Child("applyConfiguration"), "must be specified when patchType is ApplyConfiguration"))
			} else {
				mut.result, ferrs = compileMutation(fc, m.ApplyConfiguration.Expression, objectReturn, popts, f.Child("applyConfiguration", "expression"))
			}
			if m.JSONPatch != nil {
				ferrs = append(ferrs, field.Invalid(f.Child("jsonPatch"), "{jsonPatch}", "must not be specified when patchType is ApplyConfiguration"))
			}
		default:
			ferrs = field.ErrorList{field.NotSupported(f.Child("patchType"), m.PatchType, sets.List(supportedPatchTypes))}
		}
		errs = append(errs, ferrs...)
		out.mutations = append(out.mutations, mut)
	}

	switch rp := spec.ReinvocationPolicy; {
	case rp == "":
		errs = append(errs, field.Required(fld.Child("reinvocationPolicy"), ""))
	case !supportedReinvocationPolicies.Has(string(rp)):
		errs = append(errs, field.NotSupported(fld.Child("reinvocationPolicy"), rp, sets.List(supportedReinvocationPolicies)))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// compileMutation compiles a mutation's expression as the plugin does (as
// written) and, when it does not compile, reports the error API
// validation gives (it compiles the trimmed expression).
func compileMutation(fc *plugincel.CompositedCompiler, expr string, returns []*cel.Type, opts plugincel.OptionalVariableDeclarations, f *field.Path) (plugincel.CompilationResult, field.ErrorList) {
	trimmed := strings.TrimSpace(expr)
	if trimmed == "" {
		return plugincel.CompilationResult{}, field.ErrorList{field.Required(f, "")}
	}
	r := fc.CompileCELExpression(&ap.Expression{Text: expr, Returns: returns}, opts, environment.StoredExpressions)
	if r.Error == nil {
		return r, nil
	}
	if trimmed != expr {
		if t := fc.CompileCELExpression(&ap.Expression{Text: trimmed, Returns: returns}, opts, environment.StoredExpressions); t.Error != nil {
			return r, field.ErrorList{ap.CELFieldError(f, trimmed, t.Error)}
		}
	}
	return r, field.ErrorList{ap.CELFieldError(f, trimmed, r.Error)}
}

// Binding is a compiled MutatingAdmissionPolicyBinding. It is immutable.
type Binding struct {
	Name          string
	PolicyName    string
	paramRef      *admissionregistrationv1.ParamRef
	paramSelector labels.Selector
	// match is nil when the binding has no matchResources.
	match *ap.Matcher
}

// ParamRef returns the binding's paramRef (nil if none).
func (b *Binding) ParamRef() *admissionregistrationv1.ParamRef { return b.paramRef }

// CompileBinding defaults, validates (as the API server does) and compiles a binding.
func CompileBinding(in *admissionregistrationv1.MutatingAdmissionPolicyBinding) (*Binding, field.ErrorList) {
	b := DefaultBinding(in)
	spec := &b.Spec
	fld := field.NewPath("spec")
	errs := ap.ValidateName(b.Name)
	errs = append(errs, ap.ValidatePolicyName(spec.PolicyName, fld.Child("policyName"))...)
	out := &Binding{Name: b.Name, PolicyName: spec.PolicyName, paramRef: spec.ParamRef}
	sel, perrs := ap.ValidateParamRef(spec.ParamRef, fld.Child("paramRef"))
	errs = append(errs, perrs...)
	out.paramSelector = sel
	if mr := spec.MatchResources; mr != nil {
		f := fld.Child("matchResources")
		merrs := ap.ValidateMatchResources(mr, f)
		merrs = append(merrs, ap.ValidateOperations(mr.ResourceRules, supportedMutatingOperations, f.Child("resourceRules", "operations"))...)
		errs = append(errs, merrs...)
		if len(merrs) == 0 {
			out.match = ap.CompileMatch(mr)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

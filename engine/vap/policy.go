package vap

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
)

// API group and kinds.
const (
	Group       = "admissionregistration.k8s.io"
	Version     = "v1"
	APIVersion  = Group + "/" + Version
	KindPolicy  = "ValidatingAdmissionPolicy"
	KindBinding = "ValidatingAdmissionPolicyBinding"
)

// Limits of the API (kube-apiserver validation and runtime).
const (
	maxAuditAnnotations                     = 20
	maxAuditAnnotationValueExpressionLength = 5 * 1024
	maxAuditAnnotationValueLength           = 10 * 1024
	maxValidationFailures                   = 50
)

// Policy is a compiled ValidatingAdmissionPolicy. It is immutable.
type Policy struct {
	Name string
	// Spec is the policy's spec with the API server's defaults applied.
	Spec          admissionregistrationv1.ValidatingAdmissionPolicySpec
	failurePolicy admissionregistrationv1.FailurePolicyType
	paramKind     *schema.GroupVersionKind
	match         *ap.Matcher

	matchConditions  []plugincel.CompilationResult
	variables        []ap.Variable
	validations      []validation
	auditAnnotations []auditAnnotation
}

type validation struct {
	expression string
	message    string
	reason     *metav1.StatusReason
	result     plugincel.CompilationResult
	// messageExpression is the compiled messageExpression (Program nil and
	// ExpressionAccessor nil when there is none).
	messageExpression plugincel.CompilationResult
}

type auditAnnotation struct {
	key    string
	result plugincel.CompilationResult
}

// ParamKind returns the group, version and kind of the policy's params, if any.
func (p *Policy) ParamKind() (schema.GroupVersionKind, bool) {
	if p.paramKind == nil {
		return schema.GroupVersionKind{}, false
	}
	return *p.paramKind, true
}

// NullableAuditAnnotations returns the keys of the audit annotations whose
// valueExpression may evaluate to null (its type is not string).
func (p *Policy) NullableAuditAnnotations() []string {
	var out []string
	for _, a := range p.auditAnnotations {
		if t := a.result.OutputType; t == nil || !t.IsExactType(cel.StringType) {
			out = append(out, a.key)
		}
	}
	return out
}

// FailurePolicy returns the policy's failurePolicy (defaulted).
func (p *Policy) FailurePolicy() admissionregistrationv1.FailurePolicyType { return p.failurePolicy }

var (
	boolReturn       = ap.BoolReturn
	stringReturn     = ap.StringReturn
	stringOrNull     = ap.StringOrNull
	supportedReasons = sets.New(string(metav1.StatusReasonUnauthorized), string(metav1.StatusReasonForbidden),
		string(metav1.StatusReasonInvalid), string(metav1.StatusReasonRequestEntityTooLarge))
	supportedActions = sets.New(string(admissionregistrationv1.Deny), string(admissionregistrationv1.Warn), string(admissionregistrationv1.Audit))
	newlineMatcher   = regexp.MustCompile(`[\n\r]+`)
)

// DefaultPolicy applies the API server's defaults (failurePolicy Fail,
// matchPolicy Equivalent, selectors {}, rule scope "*") to a copy of p.
func DefaultPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p = p.DeepCopy()
	if p.Spec.FailurePolicy == nil {
		fp := admissionregistrationv1.Fail
		p.Spec.FailurePolicy = &fp
	}
	if p.Spec.MatchConstraints != nil {
		ap.DefaultMatchResources(p.Spec.MatchConstraints)
	}
	return p
}

// DefaultBinding applies the API server's defaults to a copy of b.
func DefaultBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b = b.DeepCopy()
	if b.Spec.MatchResources != nil {
		ap.DefaultMatchResources(b.Spec.MatchResources)
	}
	return b
}

// CompilePolicy defaults, validates (as the API server validates a
// ValidatingAdmissionPolicy on create) and compiles a policy. Every problem
// is returned, with its field path; an expression that does not compile is
// one.
func CompilePolicy(in *admissionregistrationv1.ValidatingAdmissionPolicy) (*Policy, field.ErrorList) {
	p := DefaultPolicy(in)
	spec := &p.Spec
	fld := field.NewPath("spec")
	errs := ap.ValidateName(p.Name)
	out := &Policy{Name: p.Name, Spec: *spec, failurePolicy: *spec.FailurePolicy}

	errs = append(errs, ap.ValidateFailurePolicy(*spec.FailurePolicy, fld.Child("failurePolicy"))...)
	if spec.ParamKind != nil {
		gvk, kerrs := ap.ValidateParamKind(*spec.ParamKind, fld.Child("paramKind"))
		errs = append(errs, kerrs...)
		out.paramKind = gvk
	}
	if spec.MatchConstraints == nil {
		errs = append(errs, field.Required(fld.Child("matchConstraints"), ""))
	} else {
		errs = append(errs, ap.ValidateMatchResources(spec.MatchConstraints, fld.Child("matchConstraints"))...)
		if len(spec.MatchConstraints.ResourceRules) == 0 {
			errs = append(errs, field.Required(fld.Child("matchConstraints", "resourceRules"), ""))
		}
	}
	if len(errs) == 0 && spec.MatchConstraints != nil {
		out.match = ap.CompileMatch(spec.MatchConstraints)
	}

	hasParams := spec.ParamKind != nil
	withAuthz := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	noAuthz := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false}
	fc, err := ap.NewCompositedCompiler()
	if err != nil {
		return nil, append(errs, field.InternalError(fld, err))
	}

	// matchConditions: at most 64, unique qualified names, compiled without
	// variables for validation and with them at runtime (as kube-apiserver).
	errs = append(errs, ap.ValidateMatchConditions(spec.MatchConditions, withAuthz, fld.Child("matchConditions"))...)
	// variables, in order: each is added to `variables` once compiled.
	vars, verrs := ap.CompileVariables(fc, spec.Variables, withAuthz, fld.Child("variables"))
	errs = append(errs, verrs...)
	out.variables = vars
	out.matchConditions = ap.CompileMatchConditions(fc, spec.MatchConditions, withAuthz)

	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		errs = append(errs,
			field.Required(fld.Child("validations"), "validations or auditAnnotations must contain at least one item"),
			field.Required(fld.Child("auditAnnotations"), "validations or auditAnnotations must contain at least one item"))
	}
	for i, v := range spec.Validations {
		f := fld.Child("validations").Index(i)
		val := validation{expression: v.Expression, message: v.Message, reason: v.Reason}
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, field.Required(f.Child("expression"), "expression is not specified"))
		} else {
			val.result = fc.CompileCELExpression(&ap.Expression{Text: v.Expression, Returns: boolReturn}, withAuthz, environment.StoredExpressions)
			if val.result.Error != nil {
				errs = append(errs, ap.CELFieldError(f.Child("expression"), v.Expression, val.result.Error))
			}
		}
		trimmedMsgExpr := strings.TrimSpace(v.MessageExpression)
		if v.MessageExpression != "" && trimmedMsgExpr == "" {
			errs = append(errs, field.Invalid(f.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
		} else if trimmedMsgExpr != "" {
			val.messageExpression = fc.CompileCELExpression(&ap.Expression{Text: v.MessageExpression, Returns: stringReturn}, noAuthz, environment.StoredExpressions)
			if val.messageExpression.Error != nil {
				errs = append(errs, ap.CELFieldError(f.Child("messageExpression"), v.MessageExpression, val.messageExpression.Error))
			}
		}
		trimmedMsg := strings.TrimSpace(v.Message)
		if v.Message != "" && trimmedMsg == "" {
			errs = append(errs, field.Invalid(f.Child("message"), v.Message, "message must be non-empty if specified"))
		} else if newlineMatcher.MatchString(trimmedMsg) {
			errs = append(errs, field.Invalid(f.Child("message"), v.Message, "message must not contain line breaks"))
		}
		if v.Reason != nil && !supportedReasons.Has(string(*v.Reason)) {
			errs = append(errs, field.NotSupported(f.Child("reason"), *v.Reason, sets.List(supportedReasons)))
		}
		out.validations = append(out.validations, val)
	}

	aaFld := fld.Child("auditAnnotations")
	if len(spec.AuditAnnotations) > maxAuditAnnotations {
		errs = append(errs, field.Invalid(aaFld, len(spec.AuditAnnotations), fmt.Sprintf("must not have more than %d auditAnnotations", maxAuditAnnotations)))
	}
	keys := sets.New[string]()
	for i, a := range spec.AuditAnnotations {
		f := aaFld.Index(i)
		if p.Name != "" {
			for _, msg := range utilvalidation.IsQualifiedName(p.Name + "/" + a.Key) {
				errs = append(errs, field.Invalid(f.Child("key"), p.Name+"/"+a.Key, msg))
			}
		} else {
			errs = append(errs, field.Invalid(f.Child("key"), a.Key, "requires metadata.name be non-empty"))
		}
		if keys.Has(a.Key) {
			errs = append(errs, field.Duplicate(f.Child("key"), a.Key))
		}
		keys.Insert(a.Key)
		trimmed := strings.TrimSpace(a.ValueExpression)
		switch {
		case trimmed == "":
			errs = append(errs, field.Required(f.Child("valueExpression"), "valueExpression is not specified"))
		case len(trimmed) > maxAuditAnnotationValueExpressionLength:
			errs = append(errs, field.Required(f.Child("valueExpression"), fmt.Sprintf("must not exceed %d bytes in length", maxAuditAnnotationValueExpressionLength)))
		default:
			r := fc.CompileCELExpression(&ap.Expression{Text: a.ValueExpression, Returns: stringOrNull}, withAuthz, environment.StoredExpressions)
			if r.Error != nil {
				errs = append(errs, ap.CELFieldError(f.Child("valueExpression"), a.ValueExpression, r.Error))
			}
			out.auditAnnotations = append(out.auditAnnotations, auditAnnotation{key: a.Key, result: r})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// Binding is a compiled ValidatingAdmissionPolicyBinding. It is immutable.
type Binding struct {
	Name       string
	PolicyName string
	// Actions are the binding's validationActions.
	Actions           []admissionregistrationv1.ValidationAction
	deny, warn, audit bool
	paramRef          *admissionregistrationv1.ParamRef
	paramSelector     labels.Selector
	// match is nil when the binding has no matchResources.
	match *ap.Matcher
}

// ParamRef returns the binding's paramRef (nil if none).
func (b *Binding) ParamRef() *admissionregistrationv1.ParamRef { return b.paramRef }

// CompileBinding defaults, validates (as the API server does) and compiles a binding.
func CompileBinding(in *admissionregistrationv1.ValidatingAdmissionPolicyBinding) (*Binding, field.ErrorList) {
	b := DefaultBinding(in)
	spec := &b.Spec
	fld := field.NewPath("spec")
	errs := ap.ValidateName(b.Name)
	errs = append(errs, ap.ValidatePolicyName(spec.PolicyName, fld.Child("policyName"))...)
	out := &Binding{Name: b.Name, PolicyName: spec.PolicyName, Actions: spec.ValidationActions, paramRef: spec.ParamRef}
	sel, perrs := ap.ValidateParamRef(spec.ParamRef, fld.Child("paramRef"))
	errs = append(errs, perrs...)
	out.paramSelector = sel
	if spec.MatchResources != nil {
		merrs := ap.ValidateMatchResources(spec.MatchResources, fld.Child("matchResources"))
		errs = append(errs, merrs...)
		if len(merrs) == 0 {
			out.match = ap.CompileMatch(spec.MatchResources)
		}
	}
	af := fld.Child("validationActions")
	seen := sets.New[string]()
	for i, a := range spec.ValidationActions {
		if !supportedActions.Has(string(a)) {
			errs = append(errs, field.NotSupported(af.Index(i), a, sets.List(supportedActions)))
		}
		if seen.Has(string(a)) {
			errs = append(errs, field.Duplicate(af.Index(i), a))
		}
		seen.Insert(string(a))
		switch a {
		case admissionregistrationv1.Deny:
			out.deny = true
		case admissionregistrationv1.Warn:
			out.warn = true
		case admissionregistrationv1.Audit:
			out.audit = true
		}
	}
	if out.deny && out.warn {
		errs = append(errs, field.Invalid(af, spec.ValidationActions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	if seen.Len() == 0 {
		errs = append(errs, field.Required(af, "at least one validation action is required"))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

package vap

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	genericvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
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
	maxMatchConditions                      = 64
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
	match         *matcher

	matchConditions  []plugincel.CompilationResult
	variables        []namedResult
	validations      []validation
	auditAnnotations []auditAnnotation
}

type namedResult struct {
	name   string
	result plugincel.CompilationResult
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

// expression is a CEL expression with the types it must evaluate to.
type expression struct {
	text    string
	returns []*cel.Type
}

func (e *expression) GetExpression() string    { return e.text }
func (e *expression) ReturnTypes() []*cel.Type { return e.returns }

type namedExpression struct {
	expression
	name string
}

func (e *namedExpression) GetName() string { return e.name }

var (
	boolReturn     = []*cel.Type{cel.BoolType}
	stringReturn   = []*cel.Type{cel.StringType}
	stringOrNull   = []*cel.Type{cel.StringType, cel.NullType}
	anyReturn      = []*cel.Type{cel.AnyType, cel.DynType}
	supportedScope = sets.New(string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope), string(admissionregistrationv1.AllScopes))
	supportedOps   = sets.New(string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Create),
		string(admissionregistrationv1.Update), string(admissionregistrationv1.Delete), string(admissionregistrationv1.Connect))
	supportedFailurePolicies = sets.New(string(admissionregistrationv1.Ignore), string(admissionregistrationv1.Fail))
	supportedMatchPolicies   = sets.New(string(admissionregistrationv1.Exact), string(admissionregistrationv1.Equivalent))
	// supportedReasons are the reasons the API reference lists (kube-apiserver's
	// validation of older releases lacks Unauthorized; its runtime maps it to 401).
	supportedReasons = sets.New(string(metav1.StatusReasonUnauthorized), string(metav1.StatusReasonForbidden),
		string(metav1.StatusReasonInvalid), string(metav1.StatusReasonRequestEntityTooLarge))
	supportedActions = sets.New(string(admissionregistrationv1.Deny), string(admissionregistrationv1.Warn), string(admissionregistrationv1.Audit))
	celIdentRegex    = regexp.MustCompile("^[_a-zA-Z][_a-zA-Z0-9]*$")
	celReserved      = sets.New("true", "false", "null", "in", "as", "break", "const", "continue", "else",
		"for", "function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while")
	newlineMatcher = regexp.MustCompile(`[\n\r]+`)
)

var (
	baseOnce sync.Once
	baseEnv  *environment.EnvSet
	// stateless compiles matchConditions for validation: without the
	// `variables` of the policy, as the API server validates them.
	stateless plugincel.Compiler
)

func base() *environment.EnvSet {
	baseOnce.Do(func() {
		baseEnv = environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
		stateless = plugincel.NewCompiler(baseEnv)
	})
	return baseEnv
}

// DefaultPolicy applies the API server's defaults (failurePolicy Fail,
// matchPolicy Equivalent, selectors {}, rule scope "*") to a copy of p.
func DefaultPolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy) *admissionregistrationv1.ValidatingAdmissionPolicy {
	p = p.DeepCopy()
	if p.Spec.FailurePolicy == nil {
		fp := admissionregistrationv1.Fail
		p.Spec.FailurePolicy = &fp
	}
	if p.Spec.MatchConstraints != nil {
		defaultMatchResources(p.Spec.MatchConstraints)
	}
	return p
}

// DefaultBinding applies the API server's defaults to a copy of b.
func DefaultBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b = b.DeepCopy()
	if b.Spec.MatchResources != nil {
		defaultMatchResources(b.Spec.MatchResources)
	}
	return b
}

func defaultMatchResources(m *admissionregistrationv1.MatchResources) {
	if m.MatchPolicy == nil {
		mp := admissionregistrationv1.Equivalent
		m.MatchPolicy = &mp
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
	for _, rules := range [][]admissionregistrationv1.NamedRuleWithOperations{m.ResourceRules, m.ExcludeResourceRules} {
		for i := range rules {
			if rules[i].Scope == nil {
				s := admissionregistrationv1.AllScopes
				rules[i].Scope = &s
			}
		}
	}
}

// CompilePolicy defaults, validates (as the API server validates a
// ValidatingAdmissionPolicy on create) and compiles a policy. Every problem
// is returned, with its field path; an expression that does not compile is
// one.
func CompilePolicy(in *admissionregistrationv1.ValidatingAdmissionPolicy) (*Policy, field.ErrorList) {
	p := DefaultPolicy(in)
	spec := &p.Spec
	fld := field.NewPath("spec")
	errs := validateName(p.Name)
	out := &Policy{Name: p.Name, Spec: *spec, failurePolicy: *spec.FailurePolicy}

	if !supportedFailurePolicies.Has(string(*spec.FailurePolicy)) {
		errs = append(errs, field.NotSupported(fld.Child("failurePolicy"), *spec.FailurePolicy, sets.List(supportedFailurePolicies)))
	}
	if spec.ParamKind != nil {
		kerrs := validateParamKind(*spec.ParamKind, fld.Child("paramKind"))
		errs = append(errs, kerrs...)
		if len(kerrs) == 0 {
			gv, _ := schema.ParseGroupVersion(spec.ParamKind.APIVersion)
			gvk := gv.WithKind(spec.ParamKind.Kind)
			out.paramKind = &gvk
		}
	}
	if spec.MatchConstraints == nil {
		errs = append(errs, field.Required(fld.Child("matchConstraints"), ""))
	} else {
		errs = append(errs, validateMatchResources(spec.MatchConstraints, fld.Child("matchConstraints"))...)
		if len(spec.MatchConstraints.ResourceRules) == 0 {
			errs = append(errs, field.Required(fld.Child("matchConstraints", "resourceRules"), ""))
		}
	}
	if len(errs) == 0 && spec.MatchConstraints != nil {
		out.match = compileMatch(spec.MatchConstraints)
	}

	hasParams := spec.ParamKind != nil
	withAuthz := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true}
	noAuthz := plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: false}
	fc, err := plugincel.NewCompositedCompiler(base())
	if err != nil {
		return nil, append(errs, field.InternalError(fld, err))
	}

	// matchConditions: at most 64, unique qualified names, compiled without
	// variables for validation and with them at runtime (as kube-apiserver).
	mcFld := fld.Child("matchConditions")
	if len(spec.MatchConditions) > maxMatchConditions {
		errs = append(errs, field.TooMany(mcFld, len(spec.MatchConditions), maxMatchConditions))
	}
	names := sets.New[string]()
	for i, mc := range spec.MatchConditions {
		f := mcFld.Index(i)
		if strings.TrimSpace(mc.Expression) == "" {
			errs = append(errs, field.Required(f.Child("expression"), ""))
		} else if r := stateless.CompileCELExpression(&expression{strings.TrimSpace(mc.Expression), boolReturn}, withAuthz, environment.StoredExpressions); r.Error != nil {
			errs = append(errs, celFieldError(f.Child("expression"), mc.Expression, r.Error))
		}
		if mc.Name == "" {
			errs = append(errs, field.Required(f.Child("name"), ""))
		} else {
			for _, msg := range utilvalidation.IsQualifiedName(mc.Name) {
				errs = append(errs, field.Invalid(f.Child("name"), mc.Name, msg))
			}
			if names.Has(mc.Name) {
				errs = append(errs, field.Duplicate(f.Child("name"), mc.Name))
			}
			names.Insert(mc.Name)
		}
	}

	// variables, in order: each is added to `variables` once compiled.
	varNames := sets.New[string]()
	for i, v := range spec.Variables {
		f := fld.Child("variables").Index(i)
		if strings.TrimSpace(v.Name) == "" {
			errs = append(errs, field.Required(f.Child("name"), "name is not specified"))
		} else if !celIdentRegex.MatchString(v.Name) || celReserved.Has(v.Name) {
			errs = append(errs, field.Invalid(f.Child("name"), v.Name, "name is not a valid CEL identifier"))
		} else if varNames.Has(v.Name) {
			errs = append(errs, field.Duplicate(f.Child("name"), v.Name))
		}
		varNames.Insert(v.Name)
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, field.Required(f.Child("expression"), "expression is not specified"))
			continue
		}
		r := fc.CompileAndStoreVariable(&namedExpression{expression{v.Expression, anyReturn}, v.Name}, withAuthz, environment.StoredExpressions)
		if r.Error != nil {
			errs = append(errs, celFieldError(f.Child("expression"), v.Expression, r.Error))
		}
		out.variables = append(out.variables, namedResult{name: v.Name, result: r})
	}

	for i, mc := range spec.MatchConditions {
		out.matchConditions = append(out.matchConditions,
			fc.CompileCELExpression(&matchCondition{expression{mc.Expression, boolReturn}, mc.Name, i}, withAuthz, environment.StoredExpressions))
	}

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
			val.result = fc.CompileCELExpression(&expression{v.Expression, boolReturn}, withAuthz, environment.StoredExpressions)
			if val.result.Error != nil {
				errs = append(errs, celFieldError(f.Child("expression"), v.Expression, val.result.Error))
			}
		}
		trimmedMsgExpr := strings.TrimSpace(v.MessageExpression)
		if v.MessageExpression != "" && trimmedMsgExpr == "" {
			errs = append(errs, field.Invalid(f.Child("messageExpression"), v.MessageExpression, "must be non-empty if specified"))
		} else if trimmedMsgExpr != "" {
			val.messageExpression = fc.CompileCELExpression(&expression{v.MessageExpression, stringReturn}, noAuthz, environment.StoredExpressions)
			if val.messageExpression.Error != nil {
				errs = append(errs, celFieldError(f.Child("messageExpression"), v.MessageExpression, val.messageExpression.Error))
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
			r := fc.CompileCELExpression(&expression{a.ValueExpression, stringOrNull}, withAuthz, environment.StoredExpressions)
			if r.Error != nil {
				errs = append(errs, celFieldError(f.Child("valueExpression"), a.ValueExpression, r.Error))
			}
			out.auditAnnotations = append(out.auditAnnotations, auditAnnotation{key: a.Key, result: r})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// matchCondition is a matchCondition expression with its name.
type matchCondition struct {
	expression
	name  string
	index int
}

// celFieldError renders a compilation error as the API server's validation does.
func celFieldError(f *field.Path, expr string, err *apiservercel.Error) *field.Error {
	switch err.Type {
	case apiservercel.ErrorTypeRequired:
		return field.Required(f, err.Detail)
	case apiservercel.ErrorTypeInvalid:
		return field.Invalid(f, expr, err.Detail)
	}
	return field.InternalError(f, err)
}

func validateName(name string) field.ErrorList {
	f := field.NewPath("metadata", "name")
	if name == "" {
		return field.ErrorList{field.Required(f, "name or generateName is required")}
	}
	var errs field.ErrorList
	for _, msg := range genericvalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(f, name, msg))
	}
	return errs
}

func validateParamKind(k admissionregistrationv1.ParamKind, f *field.Path) field.ErrorList {
	var errs field.ErrorList
	if k.APIVersion == "" {
		errs = append(errs, field.Required(f.Child("apiVersion"), ""))
	} else if strings.Count(k.APIVersion, "/") > 1 {
		errs = append(errs, field.Invalid(f.Child("apiVersion"), k.APIVersion, fmt.Sprintf("unexpected GroupVersion string: %v", k.APIVersion)))
	} else {
		group, version, ok := strings.Cut(k.APIVersion, "/")
		if !ok {
			group, version = "", k.APIVersion
		}
		if group != "" {
			if e := utilvalidation.IsDNS1123Subdomain(group); len(e) > 0 {
				errs = append(errs, field.Invalid(f.Child("apiVersion"), group, strings.Join(e, ",")))
			}
		}
		if version == "" {
			errs = append(errs, field.Invalid(f.Child("apiVersion"), k.APIVersion, "version must be specified"))
		} else if e := utilvalidation.IsDNS1035Label(version); len(e) > 0 {
			errs = append(errs, field.Invalid(f.Child("apiVersion"), version, strings.Join(e, ",")))
		}
	}
	if k.Kind == "" {
		errs = append(errs, field.Required(f.Child("kind"), ""))
	} else if e := utilvalidation.IsDNS1035Label(strings.ToLower(k.Kind)); len(e) > 0 {
		errs = append(errs, field.Invalid(f.Child("kind"), k.Kind, "may have mixed case, but should otherwise match: "+strings.Join(e, ",")))
	}
	return errs
}

func validateMatchResources(m *admissionregistrationv1.MatchResources, f *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m == nil {
		return nil
	}
	if m.MatchPolicy == nil {
		errs = append(errs, field.Required(f.Child("matchPolicy"), ""))
	} else if !supportedMatchPolicies.Has(string(*m.MatchPolicy)) {
		errs = append(errs, field.NotSupported(f.Child("matchPolicy"), *m.MatchPolicy, sets.List(supportedMatchPolicies)))
	}
	if m.NamespaceSelector == nil {
		errs = append(errs, field.Required(f.Child("namespaceSelector"), ""))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(m.NamespaceSelector, metav1validation.LabelSelectorValidationOptions{}, f.Child("namespaceSelector"))...)
	}
	if m.ObjectSelector == nil {
		errs = append(errs, field.Required(f.Child("objectSelector"), ""))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(m.ObjectSelector, metav1validation.LabelSelectorValidationOptions{}, f.Child("objectSelector"))...)
	}
	for i := range m.ResourceRules {
		errs = append(errs, validateNamedRule(&m.ResourceRules[i], f.Child("resourceRules").Index(i))...)
	}
	for i := range m.ExcludeResourceRules {
		errs = append(errs, validateNamedRule(&m.ExcludeResourceRules[i], f.Child("excludeResourceRules").Index(i))...)
	}
	return errs
}

func hasWildcard(items []string) bool {
	for _, s := range items {
		if s == "*" {
			return true
		}
	}
	return false
}

func validateNamedRule(n *admissionregistrationv1.NamedRuleWithOperations, f *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, name := range n.ResourceNames {
		for _, msg := range path.ValidatePathSegmentName(name, false) {
			errs = append(errs, field.Invalid(f.Child("resourceNames").Index(i), name, msg))
		}
		if seen.Has(name) {
			errs = append(errs, field.Duplicate(f.Child("resourceNames").Index(i), name))
		}
		seen.Insert(name)
	}
	ops := n.Operations
	if len(ops) == 0 {
		errs = append(errs, field.Required(f.Child("operations"), ""))
	}
	hasAll := false
	for i, op := range ops {
		if op == admissionregistrationv1.OperationAll {
			hasAll = true
		}
		if !supportedOps.Has(string(op)) {
			errs = append(errs, field.NotSupported(f.Child("operations").Index(i), op, sets.List(supportedOps)))
		}
	}
	if len(ops) > 1 && hasAll {
		errs = append(errs, field.Invalid(f.Child("operations"), ops, "if '*' is present, must not specify other operations"))
	}
	r := n.Rule
	if len(r.APIGroups) == 0 {
		errs = append(errs, field.Required(f.Child("apiGroups"), ""))
	}
	if len(r.APIGroups) > 1 && hasWildcard(r.APIGroups) {
		errs = append(errs, field.Invalid(f.Child("apiGroups"), r.APIGroups, "if '*' is present, must not specify other API groups"))
	}
	if len(r.APIVersions) == 0 {
		errs = append(errs, field.Required(f.Child("apiVersions"), ""))
	}
	if len(r.APIVersions) > 1 && hasWildcard(r.APIVersions) {
		errs = append(errs, field.Invalid(f.Child("apiVersions"), r.APIVersions, "if '*' is present, must not specify other API versions"))
	}
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(f.Child("apiVersions").Index(i), ""))
		}
	}
	errs = append(errs, validateResources(r.Resources, f.Child("resources"))...)
	if r.Scope != nil && !supportedScope.Has(string(*r.Scope)) {
		errs = append(errs, field.NotSupported(f.Child("scope"), *r.Scope, sets.List(supportedScope)))
	}
	return errs
}

func validateResources(resources []string, f *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(resources) == 0 {
		errs = append(errs, field.Required(f, ""))
	}
	withWildcardSub := sets.New[string]()
	subWithWildcardRes := sets.New[string]()
	doubleWildcard, singleWildcard, withoutSub := false, false, false
	for i, resSub := range resources {
		if resSub == "" {
			errs = append(errs, field.Required(f.Index(i), ""))
			continue
		}
		if resSub == "*/*" {
			doubleWildcard = true
		}
		if resSub == "*" {
			singleWildcard = true
		}
		res, sub, ok := strings.Cut(resSub, "/")
		if !ok {
			withoutSub = resSub != "*"
			continue
		}
		if withWildcardSub.Has(res) {
			errs = append(errs, field.Invalid(f.Index(i), resSub, fmt.Sprintf("if '%s/*' is present, must not specify %s", res, resSub)))
		}
		if subWithWildcardRes.Has(sub) {
			errs = append(errs, field.Invalid(f.Index(i), resSub, fmt.Sprintf("if '*/%s' is present, must not specify %s", sub, resSub)))
		}
		if sub == "*" {
			withWildcardSub.Insert(res)
		}
		if res == "*" {
			subWithWildcardRes.Insert(sub)
		}
	}
	if len(resources) > 1 && doubleWildcard {
		errs = append(errs, field.Invalid(f, resources, "if '*/*' is present, must not specify other resources"))
	}
	if singleWildcard && withoutSub {
		errs = append(errs, field.Invalid(f, resources, "if '*' is present, must not specify other resources without subresources"))
	}
	return errs
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
	match *matcher
}

// ParamRef returns the binding's paramRef (nil if none).
func (b *Binding) ParamRef() *admissionregistrationv1.ParamRef { return b.paramRef }

// CompileBinding defaults, validates (as the API server does) and compiles a binding.
func CompileBinding(in *admissionregistrationv1.ValidatingAdmissionPolicyBinding) (*Binding, field.ErrorList) {
	b := DefaultBinding(in)
	spec := &b.Spec
	fld := field.NewPath("spec")
	errs := validateName(b.Name)
	if spec.PolicyName == "" {
		errs = append(errs, field.Required(fld.Child("policyName"), ""))
	} else {
		for _, msg := range genericvalidation.NameIsDNSSubdomain(spec.PolicyName, false) {
			errs = append(errs, field.Invalid(fld.Child("policyName"), spec.PolicyName, msg))
		}
	}
	out := &Binding{Name: b.Name, PolicyName: spec.PolicyName, Actions: spec.ValidationActions, paramRef: spec.ParamRef}
	if pr := spec.ParamRef; pr != nil {
		f := fld.Child("paramRef")
		if pr.Name != "" {
			for _, msg := range path.ValidatePathSegmentName(pr.Name, false) {
				errs = append(errs, field.Invalid(f.Child("name"), pr.Name, msg))
			}
			if pr.Selector != nil {
				errs = append(errs, field.Forbidden(f.Child("name"), "name and selector are mutually exclusive"))
			}
		}
		if pr.Selector != nil {
			serrs := metav1validation.ValidateLabelSelector(pr.Selector, metav1validation.LabelSelectorValidationOptions{}, f.Child("selector"))
			errs = append(errs, serrs...)
			if pr.Name != "" {
				errs = append(errs, field.Forbidden(f.Child("selector"), "name and selector are mutually exclusive"))
			}
			if len(serrs) == 0 {
				sel, err := metav1.LabelSelectorAsSelector(pr.Selector)
				if err != nil {
					errs = append(errs, field.Invalid(f.Child("selector"), pr.Selector, err.Error()))
				}
				out.paramSelector = sel
			}
		}
		if pr.Name == "" && pr.Selector == nil {
			errs = append(errs, field.Required(f, "one of name or selector must be specified"))
		}
		if pr.ParameterNotFoundAction == nil || *pr.ParameterNotFoundAction == "" {
			errs = append(errs, field.Required(f.Child("parameterNotFoundAction"), ""))
		} else if a := *pr.ParameterNotFoundAction; a != admissionregistrationv1.DenyAction && a != admissionregistrationv1.AllowAction {
			errs = append(errs, field.NotSupported(f.Child("parameterNotFoundAction"), a, []string{string(admissionregistrationv1.DenyAction), string(admissionregistrationv1.AllowAction)}))
		}
	}
	if spec.MatchResources != nil {
		merrs := validateMatchResources(spec.MatchResources, fld.Child("matchResources"))
		errs = append(errs, merrs...)
		if len(merrs) == 0 {
			out.match = compileMatch(spec.MatchResources)
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

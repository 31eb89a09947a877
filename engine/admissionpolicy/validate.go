package admissionpolicy

import (
	"fmt"
	"regexp"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	genericvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// MaxMatchConditions is the API's limit on a policy's matchConditions.
const MaxMatchConditions = 64

// Values the API accepts.
var (
	supportedScope = sets.New(string(admissionregistrationv1.ClusterScope), string(admissionregistrationv1.NamespacedScope), string(admissionregistrationv1.AllScopes))
	supportedOps   = sets.New(string(admissionregistrationv1.OperationAll), string(admissionregistrationv1.Create),
		string(admissionregistrationv1.Update), string(admissionregistrationv1.Delete), string(admissionregistrationv1.Connect))
	// SupportedFailurePolicies are failurePolicy's values.
	SupportedFailurePolicies = sets.New(string(admissionregistrationv1.Ignore), string(admissionregistrationv1.Fail))
	supportedMatchPolicies   = sets.New(string(admissionregistrationv1.Exact), string(admissionregistrationv1.Equivalent))
	celIdentRegex            = regexp.MustCompile("^[_a-zA-Z][_a-zA-Z0-9]*$")
	celReserved              = sets.New("true", "false", "null", "in", "as", "break", "const", "continue", "else",
		"for", "function", "if", "import", "let", "loop", "package", "namespace", "return", "var", "void", "while")
)

// DefaultFailurePolicy is the API server's default failurePolicy (Fail).
func DefaultFailurePolicy(fp **admissionregistrationv1.FailurePolicyType) {
	if *fp == nil {
		f := admissionregistrationv1.Fail
		*fp = &f
	}
}

// DefaultMatchResources applies the API server's defaults to match
// resources: matchPolicy Equivalent, selectors {}, rule scope "*".
func DefaultMatchResources(m *admissionregistrationv1.MatchResources) {
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

// ValidateName validates metadata.name (a DNS subdomain).
func ValidateName(name string) field.ErrorList {
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

// ValidateFailurePolicy validates a (defaulted) failurePolicy.
func ValidateFailurePolicy(fp admissionregistrationv1.FailurePolicyType, f *field.Path) field.ErrorList {
	if !SupportedFailurePolicies.Has(string(fp)) {
		return field.ErrorList{field.NotSupported(f, fp, sets.List(SupportedFailurePolicies))}
	}
	return nil
}

// ValidateParamKind validates a paramKind and returns its group, version
// and kind when it is valid.
func ValidateParamKind(k admissionregistrationv1.ParamKind, f *field.Path) (*schema.GroupVersionKind, field.ErrorList) {
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
	if len(errs) > 0 {
		return nil, errs
	}
	gv, _ := schema.ParseGroupVersion(k.APIVersion)
	gvk := gv.WithKind(k.Kind)
	return &gvk, nil
}

// ValidateMatchResources validates (defaulted) match resources.
func ValidateMatchResources(m *admissionregistrationv1.MatchResources, f *field.Path) field.ErrorList {
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

// ValidateOperations checks that the operations of rules are among ops
// (a MutatingAdmissionPolicy may not match DELETE): every operation that
// is not is an error at f (the API server's path has no index).
func ValidateOperations(rules []admissionregistrationv1.NamedRuleWithOperations, ops sets.Set[string], f *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, r := range rules {
		for _, op := range r.Operations {
			if !ops.Has(string(op)) {
				errs = append(errs, field.NotSupported(f, op, sets.List(ops)))
			}
		}
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
		for _, msg := range content.IsPathSegmentName(name) {
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

// ValidatePolicyName validates a binding's policyName.
func ValidatePolicyName(name string, f *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(f, "")}
	}
	var errs field.ErrorList
	for _, msg := range genericvalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(f, name, msg))
	}
	return errs
}

// ValidateParamRef validates a binding's paramRef and returns its compiled
// selector (nil when it has none, or it is invalid).
func ValidateParamRef(pr *admissionregistrationv1.ParamRef, f *field.Path) (labels.Selector, field.ErrorList) {
	if pr == nil {
		return nil, nil
	}
	var errs field.ErrorList
	var selector labels.Selector
	if pr.Name != "" {
		for _, msg := range content.IsPathSegmentName(pr.Name) {
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
			selector = sel
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
	return selector, errs
}

// ValidateMatchConditions validates matchConditions as the API server
// does: at most 64, unique qualified names, expressions that compile to
// bool without `variables` (opts: params, authorizer).
func ValidateMatchConditions(mcs []admissionregistrationv1.MatchCondition, opts plugincel.OptionalVariableDeclarations, f *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(mcs) > MaxMatchConditions {
		errs = append(errs, field.TooMany(f, len(mcs), MaxMatchConditions))
	}
	names := sets.New[string]()
	for i, mc := range mcs {
		fi := f.Index(i)
		if strings.TrimSpace(mc.Expression) == "" {
			errs = append(errs, field.Required(fi.Child("expression"), ""))
		} else if r := Stateless().CompileCELExpression(&Expression{strings.TrimSpace(mc.Expression), BoolReturn}, opts, environment.StoredExpressions); r.Error != nil {
			errs = append(errs, CELFieldError(fi.Child("expression"), mc.Expression, r.Error))
		}
		if mc.Name == "" {
			errs = append(errs, field.Required(fi.Child("name"), ""))
		} else {
			for _, msg := range utilvalidation.IsQualifiedName(mc.Name) {
				errs = append(errs, field.Invalid(fi.Child("name"), mc.Name, msg))
			}
			if names.Has(mc.Name) {
				errs = append(errs, field.Duplicate(fi.Child("name"), mc.Name))
			}
			names.Insert(mc.Name)
		}
	}
	return errs
}

// CompileMatchConditions compiles matchConditions for evaluation, with fc
// (as the plugins do: with the policy's variables declared).
func CompileMatchConditions(fc *plugincel.CompositedCompiler, mcs []admissionregistrationv1.MatchCondition, opts plugincel.OptionalVariableDeclarations) []plugincel.CompilationResult {
	out := make([]plugincel.CompilationResult, 0, len(mcs))
	for _, mc := range mcs {
		out = append(out, fc.CompileCELExpression(&NamedExpression{Expression{mc.Expression, BoolReturn}, mc.Name}, opts, environment.StoredExpressions))
	}
	return out
}

// Variable is a compiled variable of a policy.
type Variable struct {
	Name   string
	Result plugincel.CompilationResult
}

// CompileVariables validates and compiles variables in order, each added
// to `variables` of fc once compiled, as the API server does.
func CompileVariables(fc *plugincel.CompositedCompiler, vars []admissionregistrationv1.Variable, opts plugincel.OptionalVariableDeclarations, f *field.Path) ([]Variable, field.ErrorList) {
	var errs field.ErrorList
	var out []Variable
	names := sets.New[string]()
	for i, v := range vars {
		fi := f.Index(i)
		if strings.TrimSpace(v.Name) == "" {
			errs = append(errs, field.Required(fi.Child("name"), "name is not specified"))
		} else if !celIdentRegex.MatchString(v.Name) || celReserved.Has(v.Name) {
			errs = append(errs, field.Invalid(fi.Child("name"), v.Name, "name is not a valid CEL identifier"))
		} else if names.Has(v.Name) {
			errs = append(errs, field.Duplicate(fi.Child("name"), v.Name))
		}
		names.Insert(v.Name)
		if strings.TrimSpace(v.Expression) == "" {
			errs = append(errs, field.Required(fi.Child("expression"), "expression is not specified"))
			continue
		}
		r := fc.CompileAndStoreVariable(&NamedExpression{Expression{v.Expression, AnyReturn}, v.Name}, opts, environment.StoredExpressions)
		if r.Error != nil {
			errs = append(errs, CELFieldError(fi.Child("expression"), v.Expression, r.Error))
		}
		out = append(out, Variable{Name: v.Name, Result: r})
	}
	return out, errs
}

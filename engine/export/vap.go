// Package export expresses Kyverno policies as the Kubernetes admission
// policies that do the same, where they can (arbiter export).
package export

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/vap"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
)

// Labels and annotations of exported objects.
const (
	exportManagedBy = "app.kubernetes.io/managed-by"
	exportSource    = "arbiter.dev/source"
)

// VAP expresses each policy as ValidatingAdmissionPolicies
// with bindings, as Kyverno generates them: the ValidatingAdmissionPolicy
// vpol-NAME and its binding vpol-NAME-binding (validationActions of the
// policy), one more pair vpol-NAME-CONFIG for each autogen configuration;
// each PolicyException of the policy that is not expired at now is folded
// in: a full exemption as a negated matchCondition, image and value
// exemptions as the variables allowedImages and allowedValues (which
// replace exceptions.allowedImages and exceptions.allowedValues), each
// list guarded by its exception's matchConditions. A policy is refused,
// with the reason, when an exception defines compensating controls, when
// it cannot run at admission as a ValidatingAdmissionPolicy (JSON mode,
// admission disabled, Deny with Warn, a NamespacedValidatingPolicy), or
// when the result does not compile in the API server's environment (a
// Kyverno library function, `exceptions` beyond the replaced lists, ...).
func VAP(set *vpol.Set, now time.Time) []Export {
	var out []Export
	for _, p := range set.Policies() {
		x := Export{Policy: p.Name, Kind: p.Kind, Source: p.Source}
		objs, reason := exportPolicy(p, set.ExceptionsFor(p), now)
		if reason != "" {
			x.Refused = reason
		} else {
			x.Objects = objs
		}
		out = append(out, x)
	}
	return out
}

func exportPolicy(p *vpol.Policy, exceptions []*exception.Exception, now time.Time) ([]map[string]any, string) {
	spec := p.Spec
	switch {
	case p.Kind != kyvernoapi.KindValidatingPolicy:
		return nil, "a NamespacedValidatingPolicy applies in its own namespace only; only ValidatingPolicies are exported"
	case spec.EvaluationMode() == kyvernoapi.EvaluationModeJSON:
		return nil, "evaluation.mode is JSON: a ValidatingAdmissionPolicy evaluates Kubernetes admission requests only"
	case !spec.AdmissionEnabled():
		return nil, "evaluation.admission.enabled is false: a ValidatingAdmissionPolicy runs at admission only"
	case spec.MatchConstraints == nil:
		return nil, "spec.matchConstraints is required by a ValidatingAdmissionPolicy"
	}
	actions := spec.Actions()
	hasDeny, hasWarn := false, false
	for _, a := range actions {
		hasDeny = hasDeny || a == admissionregistrationv1.Deny
		hasWarn = hasWarn || a == admissionregistrationv1.Warn
	}
	if hasDeny && hasWarn {
		return nil, "validationActions has both Deny and Warn, which a ValidatingAdmissionPolicyBinding refuses"
	}
	live, reason := liveExceptions(exceptions, now, spec.GetFailurePolicy(), "ValidatingAdmissionPolicy")
	if reason != "" {
		return nil, reason
	}
	variants, variantSpecs, err := vpol.AutogenSpecs(spec)
	if err != nil {
		return nil, err.Error()
	}
	specs := append([]*vpol.ValidatingPolicySpec{spec}, variantSpecs...)
	configs := []string{""}
	for _, v := range variants {
		configs = append(configs, v.Name)
	}
	var objs []map[string]any
	for i, s := range specs {
		name := "vpol-" + p.Name
		if configs[i] != "" {
			name += "-" + configs[i]
		}
		vapSpec, reason := exportSpec(s, live)
		if reason != "" {
			return nil, reason
		}
		typed := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: *vapSpec}
		compiled, errs := vap.CompilePolicy(typed)
		if len(errs) > 0 {
			msgs := make([]string, len(errs))
			for i, e := range errs {
				msgs[i] = e.Error()
			}
			what := "it"
			if configs[i] != "" {
				what = "its autogen " + configs[i] + " variant"
			}
			return nil, fmt.Sprintf("%s does not load as a ValidatingAdmissionPolicy (it uses what the API server lacks): %s", what, strings.Join(msgs, "; "))
		}
		if keys := compiled.NullableAuditAnnotations(); len(keys) > 0 {
			return nil, fmt.Sprintf("auditAnnotations %s may be null: the policy reports an error then, a ValidatingAdmissionPolicy omits the annotation", strings.Join(keys, ", "))
		}
		source := p.Kind + "/" + p.Name
		objs = append(objs, map[string]any{
			"apiVersion": vap.APIVersion,
			"kind":       vap.KindPolicy,
			"metadata":   exportedMeta(name, source),
			"spec":       toJSONMap(vapSpec),
		})
		objs = append(objs, map[string]any{
			"apiVersion": vap.APIVersion,
			"kind":       vap.KindBinding,
			"metadata":   exportedMeta(name+"-binding", source),
			"spec": toJSONMap(&admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        name,
				ValidationActions: actions,
			}),
		})
	}
	return objs, ""
}

var exceptionReplacements = [][2]string{
	{"exceptions.allowedImages", "variables.allowedImages"},
	{"exceptions.allowedValues", "variables.allowedValues"},
}

func replaceExceptions(expr string) string {
	for _, r := range exceptionReplacements {
		expr = strings.ReplaceAll(expr, r[0], r[1])
	}
	return expr
}

// exportSpec builds the ValidatingAdmissionPolicy spec of one policy spec
// (the policy's or an autogen variant's) with its live exceptions.
func exportSpec(s *vpol.ValidatingPolicySpec, exceptions []*exception.Exception) (*admissionregistrationv1.ValidatingAdmissionPolicySpec, string) {
	fp := s.GetFailurePolicy()
	out := &admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fp}
	var exprs []*string
	out.Validations = append(out.Validations, s.Validations...)
	for i := range out.Validations {
		exprs = append(exprs, &out.Validations[i].Expression, &out.Validations[i].MessageExpression)
	}
	for _, a := range s.AuditAnnotations {
		out.AuditAnnotations = append(out.AuditAnnotations, admissionregistrationv1.AuditAnnotation{Key: a.Key, ValueExpression: a.ValueExpression})
	}
	for i := range out.AuditAnnotations {
		exprs = append(exprs, &out.AuditAnnotations[i].ValueExpression)
	}
	f, reason := fold(s.MatchConstraints, s.MatchConditions, s.Variables, exprs, exceptions)
	if reason != "" {
		return nil, reason
	}
	out.MatchConstraints, out.MatchConditions, out.Variables = f.match, f.conds, f.vars
	return out, ""
}

// folded is what the policies of both kinds share once their exceptions
// are folded in.
type folded struct {
	match *admissionregistrationv1.MatchResources
	conds []admissionregistrationv1.MatchCondition
	vars  []admissionregistrationv1.Variable
}

// fold prepares the match, matchConditions and variables of an exported
// admission policy: matchPolicy Exact (Kyverno's policies match exactly;
// the API server's default is Equivalent), resourceNames as a
// matchCondition, the live exceptions folded in (full exemptions as
// negated matchConditions, image and value exceptions as the
// allowedImages and allowedValues variables). exprs are the policy's
// other expressions, rewritten in place to read those variables.
func fold(match *admissionregistrationv1.MatchResources, conds []admissionregistrationv1.MatchCondition,
	vars []admissionregistrationv1.Variable, exprs []*string, exceptions []*exception.Exception) (folded, string) {
	out := folded{match: match.DeepCopy()}
	if out.match.MatchPolicy == nil {
		exact := admissionregistrationv1.Exact
		out.match.MatchPolicy = &exact
	}
	namesCond, reason := resourceNamesCondition(out.match)
	if reason != "" {
		return out, reason
	}
	if namesCond != "" {
		out.conds = append(out.conds, admissionregistrationv1.MatchCondition{Name: "resource-names", Expression: namesCond})
	}
	uses := map[string]bool{}
	note := func(expr string) string {
		for _, r := range exceptionReplacements {
			if strings.Contains(expr, r[0]) {
				uses[strings.TrimPrefix(r[1], "variables.")] = true
			}
		}
		return replaceExceptions(expr)
	}
	for _, mc := range conds {
		out.conds = append(out.conds, admissionregistrationv1.MatchCondition{Name: mc.Name, Expression: note(mc.Expression)})
	}
	for _, v := range vars {
		out.vars = append(out.vars, admissionregistrationv1.Variable{Name: v.Name, Expression: note(v.Expression)})
	}
	for _, e := range exprs {
		*e = note(*e)
	}
	names := map[string]bool{}
	for _, mc := range out.conds {
		names[mc.Name] = true
	}
	var images, values []string
	for _, ex := range exceptions {
		cond := conjunction(ex.Spec.MatchConditions)
		if ex.Full() {
			name, expr := "exception-"+ex.Name, "false"
			switch len(ex.Spec.MatchConditions) {
			case 0:
			case 1:
				name, expr = ex.Spec.MatchConditions[0].Name, "!("+ex.Spec.MatchConditions[0].Expression+")"
			default:
				expr = "!(" + cond + ")"
			}
			out.conds = append(out.conds, admissionregistrationv1.MatchCondition{Name: uniqueName(qualifiedName(name), names), Expression: expr})
			continue
		}
		if len(ex.Spec.Images) > 0 {
			images = append(images, guardedList(cond, ex.Spec.Images))
		}
		if len(ex.Spec.AllowedValues) > 0 {
			values = append(values, guardedList(cond, ex.Spec.AllowedValues))
		}
	}
	if len(out.conds) > 64 {
		return out, fmt.Sprintf("with its exceptions it has %d matchConditions; an admission policy has at most 64", len(out.conds))
	}
	for _, v := range []struct {
		name  string
		terms []string
	}{{"allowedImages", images}, {"allowedValues", values}} {
		if !uses[v.name] && len(v.terms) == 0 {
			continue
		}
		for _, existing := range out.vars {
			if existing.Name == v.name {
				return out, fmt.Sprintf("the policy has a variable %s, which would hold the exceptions' list", v.name)
			}
		}
		expr := "[]"
		if len(v.terms) > 0 {
			expr = strings.Join(v.terms, " + ")
		}
		out.vars = append(out.vars, admissionregistrationv1.Variable{Name: v.name, Expression: expr})
	}
	return out, ""
}

// resourceNamesCondition moves resourceNames out of the rules into a
// matchCondition that also matches a generateName with one of the names as
// prefix, as Kyverno's matcher does (the API server compares the name
// only). It refuses what a condition cannot express: names on one of
// several rules, or on exclusions.
func resourceNamesCondition(m *admissionregistrationv1.MatchResources) (string, string) {
	for _, r := range m.ExcludeResourceRules {
		if len(r.ResourceNames) > 0 {
			return "", "excludeResourceRules with resourceNames: Kyverno also matches generateName prefixes there, which a ValidatingAdmissionPolicy cannot express"
		}
	}
	withNames := 0
	for _, r := range m.ResourceRules {
		if len(r.ResourceNames) > 0 {
			withNames++
		}
	}
	if withNames == 0 {
		return "", ""
	}
	if len(m.ResourceRules) > 1 {
		return "", "resourceNames on one of several resourceRules: Kyverno also matches generateName prefixes, which a ValidatingAdmissionPolicy cannot express per rule"
	}
	names := m.ResourceRules[0].ResourceNames
	m.ResourceRules[0].ResourceNames = nil
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = celString(n)
	}
	list := "[" + strings.Join(quoted, ", ") + "]"
	return "request.?name.orValue('') in " + list + " || (request.?name.orValue('') == '' && object != null && " + list +
		".exists(n, object.?metadata.?generateName.orValue('').startsWith(n)))", ""
}

// conjunction is the CEL conjunction of matchConditions ("true" if none).
func conjunction(conds []admissionregistrationv1.MatchCondition) string {
	switch len(conds) {
	case 0:
		return "true"
	case 1:
		return conds[0].Expression
	}
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = "(" + c.Expression + ")"
	}
	return strings.Join(parts, " && ")
}

// guardedList is a CEL list of strings, empty unless cond holds.
func guardedList(cond string, items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = celString(s)
	}
	list := "[" + strings.Join(quoted, ", ") + "]"
	if cond == "true" {
		return list
	}
	return "((" + cond + ") ? " + list + " : [])"
}

// celString renders a CEL single-quoted string literal.
func celString(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for _, r := range s {
		switch r {
		case '\\', '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				b.WriteString(`\x` + strconv.FormatInt(int64(r)+0x100, 16)[1:])
				continue
			}
			b.WriteRune(r)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// qualifiedName makes name a valid matchCondition name (a qualified name
// of at most 63 characters).
func qualifiedName(name string) string {
	if len(utilvalidation.IsQualifiedName(name)) == 0 {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if r == '-' || r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-_.")
	if len(s) > 63 {
		s = strings.Trim(s[:63], "-_.")
	}
	if s == "" {
		s = "exception"
	}
	return s
}

func uniqueName(name string, taken map[string]bool) string {
	candidate := name
	for i := 2; taken[candidate]; i++ {
		suffix := "-" + strconv.Itoa(i)
		base := name
		if len(base)+len(suffix) > 63 {
			base = base[:63-len(suffix)]
		}
		candidate = base + suffix
	}
	taken[candidate] = true
	return candidate
}

func toJSONMap(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

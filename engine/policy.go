package engine

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
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
func (p *Policy) Namespaced() bool { return p.Kind == KindNamespacedValidatingPolicy }

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
	match            *matcher
	matchConditions  []*program
	variables        []*variable
	validations      []*validation
	auditAnnotations []*auditAnnotation
}

type variable struct {
	name string
	prog *program
}

type validation struct {
	prog    *program
	message string
	msgProg *program
}

type auditAnnotation struct {
	key  string
	prog *program
}

// autogen replacement sets, as Kyverno's (pkg/cel/autogen/data.go).
var autogenConfigs = []struct {
	name         string
	templatePath string
	from, to     [2]string
	targets      []autogenTarget
}{
	{
		name: "cronjobs", templatePath: "spec.jobTemplate.spec.template",
		from:    [2]string{"spec", "metadata"},
		to:      [2]string{"spec.jobTemplate.spec.template.spec", "spec.jobTemplate.spec.template.metadata"},
		targets: []autogenTarget{{"batch", "v1", "cronjobs", "CronJob"}},
	},
	{
		name: "defaults", templatePath: "spec.template",
		from: [2]string{"spec", "metadata"},
		to:   [2]string{"spec.template.spec", "spec.template.metadata"},
		targets: []autogenTarget{
			{"apps", "v1", "daemonsets", "DaemonSet"},
			{"apps", "v1", "deployments", "Deployment"},
			{"apps", "v1", "replicasets", "ReplicaSet"},
			{"apps", "v1", "statefulsets", "StatefulSet"},
			{"batch", "v1", "jobs", "Job"},
		},
	},
}

type autogenTarget struct{ group, version, resource, kind string }

// canAutogen is Kyverno's CanAutoGen: a single rule on core v1 pods, no
// object selector, no exclusions, no resource names.
func canAutogen(m *admissionregistrationv1.MatchResources) bool {
	if m == nil {
		return false
	}
	if m.ObjectSelector != nil && (len(m.ObjectSelector.MatchLabels) > 0 || len(m.ObjectSelector.MatchExpressions) > 0) {
		return false
	}
	if len(m.ExcludeResourceRules) != 0 || len(m.ResourceRules) != 1 {
		return false
	}
	r := m.ResourceRules[0]
	return len(r.ResourceNames) == 0 &&
		len(r.APIGroups) == 1 && r.APIGroups[0] == "" &&
		len(r.APIVersions) == 1 && r.APIVersions[0] == "v1" &&
		len(r.Resources) == 1 && r.Resources[0] == "pods"
}

// autogenSpecs returns the autogen variants of a policy spec, keyed by
// config name, in Kyverno's (sorted) order.
func autogenSpecs(spec *ValidatingPolicySpec) ([]string, []*ValidatingPolicySpec, error) {
	if !canAutogen(spec.MatchConstraints) {
		return nil, nil, nil
	}
	selected := map[string]bool{
		"daemonsets": true, "deployments": true, "replicasets": true,
		"statefulsets": true, "jobs": true, "cronjobs": true,
	}
	if spec.Autogen != nil && spec.Autogen.PodControllers != nil && spec.Autogen.PodControllers.Controllers != nil {
		selected = map[string]bool{}
		for _, c := range spec.Autogen.PodControllers.Controllers {
			selected[c] = true
		}
	}
	var names []string
	var specs []*ValidatingPolicySpec
	for _, cfg := range autogenConfigs {
		var targets []autogenTarget
		for _, t := range cfg.targets {
			if selected[t.resource] {
				targets = append(targets, t)
			}
		}
		if len(targets) == 0 {
			continue
		}
		ops := spec.MatchConstraints.ResourceRules[0].Operations
		if len(ops) == 0 {
			continue
		}
		clone := *spec
		clone.MatchConstraints = autogenMatch(targets, ops, spec.MatchConstraints)
		data, err := json.Marshal(&clone)
		if err != nil {
			return nil, nil, err
		}
		for i := range cfg.from {
			data = autogenReplace(data, "object."+cfg.from[i], "object."+cfg.to[i])
			data = autogenReplace(data, "oldObject."+cfg.from[i], "oldObject."+cfg.to[i])
		}
		var out ValidatingPolicySpec
		if err := json.Unmarshal(data, &out); err != nil {
			return nil, nil, err
		}
		names = append(names, cfg.name)
		specs = append(specs, &out)
	}
	return names, specs, nil
}

func autogenMatch(targets []autogenTarget, ops []admissionregistrationv1.OperationType, orig *admissionregistrationv1.MatchResources) *admissionregistrationv1.MatchResources {
	type gv struct{ g, v string }
	var order []gv
	byGV := map[gv][]string{}
	for _, t := range targets {
		k := gv{t.group, t.version}
		if _, ok := byGV[k]; !ok {
			order = append(order, k)
		}
		byGV[k] = append(byGV[k], t.resource)
	}
	m := &admissionregistrationv1.MatchResources{}
	for _, k := range order {
		m.ResourceRules = append(m.ResourceRules, admissionregistrationv1.NamedRuleWithOperations{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: ops,
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{k.g}, APIVersions: []string{k.v}, Resources: byGV[k],
				},
			},
		})
	}
	if orig.NamespaceSelector != nil {
		m.NamespaceSelector = orig.NamespaceSelector.DeepCopy()
	}
	return m
}

// autogenReplace is Kyverno's textual replacement: every occurrence of from
// becomes to, except where from is followed by ".namespace" (and not more
// identifier characters), so object.metadata.namespace stays.
func autogenReplace(data []byte, from, to string) []byte {
	s := string(data)
	var b strings.Builder
	for {
		i := strings.Index(s, from)
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		rest := s[i+len(from):]
		if protected(rest) {
			b.WriteString(from)
		} else {
			b.WriteString(to)
		}
		s = rest
	}
	return []byte(b.String())
}

func protected(rest string) bool {
	const suffix = ".namespace"
	if !strings.HasPrefix(rest, suffix) {
		return false
	}
	next := rest[len(suffix):]
	return next == "" || !isIdentByte(next[0])
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// compilePolicy loads and compiles one ValidatingPolicy object.
func compilePolicy(env *celenv.Env, o *Object) (*Policy, *LoadError) {
	if !kyvernoVersions[o.VersionOnly()] {
		return nil, loadErr(o, "apiVersion", "unsupported version %q of %s (supported: v1alpha1, v1beta1, v1)", o.APIVersion, o.Kind)
	}
	var vp ValidatingPolicy
	if err := decodeStrict(o, &vp); err != nil {
		return nil, err
	}
	if vp.Name == "" {
		return nil, loadErr(o, "metadata.name", "required")
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
		jsonMode:      spec.EvaluationMode() == EvaluationModeJSON,
		scored:        vp.Annotations["policies.kyverno.io/scored"] != "false",
		category:      vp.Annotations["policies.kyverno.io/category"],
		severity:      vp.Annotations["policies.kyverno.io/severity"],
	}
	if p.Kind == KindValidatingPolicy {
		p.Namespace = ""
	}
	if p.Kind == KindNamespacedValidatingPolicy && p.Namespace == "" {
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
			return nil, loadErr(o, fmt.Sprintf("spec.validationActions[%d]", i), "unsupported value %q: supported values: \"Audit\", \"Deny\", \"Warn\"", a)
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
		return nil, loadErr(o, "spec.failurePolicy", "unsupported value %q: supported values: \"Fail\", \"Ignore\"", p.failurePolicy)
	}
	switch spec.EvaluationMode() {
	case EvaluationModeKubernetes:
		if spec.MatchConstraints == nil || len(spec.MatchConstraints.ResourceRules) == 0 {
			return nil, loadErr(o, "spec.matchConstraints", "a matchConstraints with at least one resource rule is required")
		}
	case EvaluationModeJSON:
	default:
		return nil, loadErr(o, "spec.evaluation.mode", "unsupported value %q: supported values: \"Kubernetes\", \"JSON\"", spec.EvaluationMode())
	}
	if n := len(spec.MatchConditions); n > 64 {
		return nil, loadErr(o, "spec.matchConditions", "too many: %d, must have at most 64 items", n)
	}
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		return nil, loadErr(o, "spec.validations", "at least one validation or auditAnnotation is required")
	}
	base, lerr := compileVariant(env, o, p, "", "", spec)
	if lerr != nil {
		return nil, lerr
	}
	p.variants = append(p.variants, base)
	if !p.jsonMode {
		names, specs, err := autogenSpecs(spec)
		if err != nil {
			return nil, loadErr(o, "spec", "autogen: %v", err)
		}
		for i, s := range specs {
			path := ""
			for _, c := range autogenConfigs {
				if c.name == names[i] {
					path = c.templatePath
				}
			}
			v, lerr := compileVariant(env, o, p, names[i], path, s)
			if lerr != nil {
				lerr.Detail = fmt.Sprintf("autogen %s: %s", names[i], lerr.Detail)
				return nil, lerr
			}
			p.variants = append(p.variants, v)
		}
	}
	return p, nil
}

func compileVariant(env *celenv.Env, o *Object, p *Policy, config, templatePath string, spec *ValidatingPolicySpec) (*variant, *LoadError) {
	v := &variant{policy: p, config: config, templatePath: templatePath}
	if !p.jsonMode {
		m, field, err := compileMatch(spec.MatchConstraints, "spec.matchConstraints")
		if err != nil {
			return nil, loadErr(o, field, "%v", err)
		}
		v.match = m
	}
	penv, err := env.ForPolicy(p.Namespaced())
	if err != nil {
		return nil, loadErr(o, "spec", "%v", err)
	}
	bounds := map[string]sizeBounds{}
	compile := func(field, expr string, want *types.Type) (*program, *cel.Ast, *LoadError) {
		prg, ast, err := compileExpr(penv.Pair, expr, want, bounds)
		if err != nil {
			return nil, nil, loadErr(o, field, "%v", err)
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
			return nil, loadErr(o, fmt.Sprintf("spec.variables[%d].name", i), "required")
		}
		if seen[vr.Name] {
			return nil, loadErr(o, fmt.Sprintf("spec.variables[%d].name", i), "duplicate variable %q", vr.Name)
		}
		seen[vr.Name] = true
		prg, ast, lerr := compile(fmt.Sprintf("spec.variables[%d].expression", i), vr.Expression, nil)
		if lerr != nil {
			return nil, lerr
		}
		penv.DeclareVariable(vr.Name, ast.OutputType())
		bounds[vr.Name] = varBound(ast, bounds)
		v.variables = append(v.variables, &variable{name: vr.Name, prog: prg})
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
			prg, ast, err := compileExpr(penv.Pair, aa.ValueExpression, nil, bounds)
			if err != nil {
				return nil, loadErr(o, field, "%v", err)
			}
			if t := ast.OutputType(); !t.IsExactType(types.StringType) && !t.IsExactType(types.NullType) {
				return nil, loadErr(o, field, "output is expected to be either of type string or null_type")
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
		if v.match == nil {
			continue
		}
		for _, r := range v.match.rules {
			for _, g := range r.groups {
				for _, ver := range r.versions {
					for _, res := range r.resources {
						name := res[0]
						if res[1] != "" {
							name += "/" + res[1]
						}
						key := g + "/" + ver + "/" + name
						if g == "" {
							key = ver + "/" + name
						}
						if !seen[key] {
							seen[key] = true
							out = append(out, key)
						}
					}
				}
			}
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

package gpol

import (
	"fmt"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Policy is a compiled GeneratingPolicy or NamespacedGeneratingPolicy. It
// is immutable.
type Policy struct {
	Kind      string
	Namespace string
	Name      string
	Source    string
	Spec      *GeneratingPolicySpec
	// Labels and Annotations of the policy.
	Labels      map[string]string
	Annotations map[string]string

	match            *admission.Matcher
	matchConditions  []*celeval.Program
	generations      []generation
	auditAnnotations []auditAnnotation
	scope            celeval.Scope
	scored           bool
	category         string
	severity         string
}

// generation is a compiled generate entry: an expression or a template.
type generation struct {
	prog *celeval.Program
	tpl  *template
}

type auditAnnotation struct {
	key  string
	prog *celeval.Program
}

// Key returns the policy's report name: namespace/name for a namespaced
// policy, else its name.
func (p *Policy) Key() string {
	if p.Namespace != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Name
}

// Namespaced says whether this is a NamespacedGeneratingPolicy: it
// generates only in its own namespace.
func (p *Policy) Namespaced() bool { return p.Kind == KindNamespacedGeneratingPolicy }

// Resources returns the resources the policy's rules name, as
// group/version/resource (with * where the rule says so).
func (p *Policy) Resources() []string { return p.match.Resources(map[string]bool{}, nil) }

// Compile loads, validates and compiles one GeneratingPolicy or
// NamespacedGeneratingPolicy object, as Kyverno's validation does
// (pkg/cel/policies/gpol/validate.go and its compiler).
func Compile(env *celenv.Env, o *manifest.Object) (*Policy, *manifest.LoadError) {
	if err := kyvernoapi.CheckVersion(o); err != nil {
		return nil, err
	}
	if _, ok := o.Content["spec"].(map[string]any); !ok {
		return nil, manifest.Errorf(o, "spec", "Required value: spec must not be nil")
	}
	var gp GeneratingPolicy
	if err := manifest.DecodeStrict(o, &gp); err != nil {
		return nil, err
	}
	if gp.Name == "" {
		return nil, manifest.Errorf(o, "metadata.name", "required")
	}
	spec := &gp.Spec
	p := &Policy{
		Kind:        o.Kind,
		Namespace:   gp.Namespace,
		Name:        gp.Name,
		Source:      o.Source,
		Spec:        spec,
		Labels:      gp.Labels,
		Annotations: gp.Annotations,
		scored:      gp.Annotations["policies.kyverno.io/scored"] != "false",
		category:    gp.Annotations["policies.kyverno.io/category"],
		severity:    gp.Annotations["policies.kyverno.io/severity"],
	}
	if !p.Namespaced() {
		p.Namespace = ""
	} else if p.Namespace == "" {
		p.Namespace = "default"
	}
	if spec.MatchConstraints == nil || len(spec.MatchConstraints.ResourceRules) == 0 {
		return nil, manifest.Errorf(o, "spec.matchConstraints", "Required value: a matchConstraints with at least one resource rule is required")
	}
	m, field, err := admission.CompileMatch(spec.MatchConstraints, "spec.matchConstraints")
	if err != nil {
		return nil, manifest.Errorf(o, field, "%v", err)
	}
	p.match = m
	if lerr := compileExpressions(env, o, p); lerr != nil {
		return nil, lerr
	}
	if p.Namespaced() && kyvernocel.ExpressionsUseGlobalContext(p.expressions()...) {
		return nil, manifest.Errorf(o, "spec", "Forbidden: %s", kyvernocel.GlobalContextNotAllowedMessage)
	}
	return p, nil
}

// compileExpressions compiles matchConditions, variables, the generate
// expressions and auditAnnotations, in Kyverno's order.
func compileExpressions(env *celenv.Env, o *manifest.Object, p *Policy) *manifest.LoadError {
	spec := p.Spec
	base, err := baseEnv(env, p.Namespaced())
	if err != nil {
		return manifest.Errorf(o, "spec", "%v", err)
	}
	penv, err := celenv.NewPolicyEnv(base)
	if err != nil {
		return manifest.Errorf(o, "spec", "%v", err)
	}
	p.scope = celeval.Scope{Policy: p.Key(), Namespace: p.Namespace}
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
			return lerr
		}
		p.matchConditions = append(p.matchConditions, prg)
	}
	seen := map[string]bool{}
	for i, v := range spec.Variables {
		field := fmt.Sprintf("spec.variables[%d]", i)
		if v.Name == "" {
			return manifest.Errorf(o, field+".name", "Required value")
		}
		if seen[v.Name] {
			return manifest.Errorf(o, field+".name", "Duplicate value: %q", v.Name)
		}
		seen[v.Name] = true
		prg, ast, lerr := compile(field+".expression", v.Expression, nil)
		if lerr != nil {
			return lerr
		}
		penv.DeclareVariable(v.Name, ast.OutputType())
		bounds[v.Name] = celeval.VarBound(ast, bounds)
		p.scope.Variables = append(p.scope.Variables, celeval.Variable{Name: v.Name, Prog: prg})
	}
	for i, g := range spec.Generation {
		field := fmt.Sprintf("spec.generate[%d]", i)
		switch {
		case g.Template != nil && g.Expression != "":
			return manifest.Errorf(o, field, "Invalid value: only one of expression or template may be set")
		case g.Template != nil:
			switch g.Template.Interpolate {
			case "", interpolateNone, interpolateCEL:
			default:
				return manifest.Errorf(o, field+".template.interpolate", "Unsupported value: %q: supported values: %q, %q", g.Template.Interpolate, interpolateNone, interpolateCEL)
			}
			tpl, err := compileTemplate(g.Template, func(expr string) (*celeval.Program, error) {
				prg, _, err := celeval.Compile(penv.Pair, expr, nil, bounds)
				return prg, err
			})
			if err != nil {
				return manifest.Errorf(o, field+".template.value", "Invalid value: %v", err)
			}
			p.generations = append(p.generations, generation{tpl: tpl})
			continue
		case g.Expression == "":
			return manifest.Errorf(o, field, "Required value: one of expression or template must be set")
		}
		prg, _, lerr := compile(field+".expression", g.Expression, nil)
		if lerr != nil {
			return lerr
		}
		p.generations = append(p.generations, generation{prog: prg})
	}
	for i, aa := range spec.AuditAnnotations {
		field := fmt.Sprintf("spec.auditAnnotations[%d].valueExpression", i)
		prg, ast, lerr := compile(field, aa.ValueExpression, nil)
		if lerr != nil {
			return lerr
		}
		if t := ast.OutputType(); !t.IsExactType(types.StringType) && !t.IsExactType(types.NullType) {
			return manifest.Errorf(o, field, "output is expected to be either of type string or null_type")
		}
		p.auditAnnotations = append(p.auditAnnotations, auditAnnotation{key: aa.Key, prog: prg})
	}
	return nil
}

// expressions are those Kyverno's validation scans for globalContext and
// http in a namespaced policy.
func (p *Policy) expressions() []string {
	s := p.Spec
	out := make([]string, 0, len(s.Variables)+len(s.MatchConditions)+len(s.Generation)+len(s.AuditAnnotations))
	for _, v := range s.Variables {
		out = append(out, v.Expression)
	}
	for _, mc := range s.MatchConditions {
		out = append(out, mc.Expression)
	}
	for _, g := range s.Generation {
		if g.Expression != "" {
			out = append(out, g.Expression)
		}
		if g.Template != nil && g.Template.Interpolate == interpolateCEL {
			out = append(out, templateExpressions(g.Template.Value)...)
		}
	}
	for _, a := range s.AuditAnnotations {
		out = append(out, a.ValueExpression)
	}
	return out
}

// UsesHTTP says whether the policy's expressions use http.*.
func (p *Policy) UsesHTTP() bool { return kyvernocel.ExpressionsUseHTTP(p.expressions()...) }

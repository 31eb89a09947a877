package exception

import (
	"fmt"
	"strconv"
	"time"

	"github.com/google/cel-go/common/types"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Exception is a compiled policies.kyverno.io PolicyException. It is immutable.
type Exception struct {
	Namespace string
	Name      string
	Source    string
	Labels    map[string]string
	Spec      *PolicyExceptionSpec
	// ExpiresAt is spec.expiresAt (zero: never expires).
	ExpiresAt time.Time

	priority int
	full     bool
	// compiled matchConditions and controls, for cluster-scoped [0] and
	// namespaced [1] policies (only for the kinds the exception refers to).
	conds    [2][]*celeval.Program
	controls [2][]*control
	// guards[i] are the guards of spec.matchConditions[i].
	guards [][]guard
}

// refuted says whether a guard proves one of the exception's
// matchConditions false for object, so the exception does not match.
func (e *Exception) refuted(object map[string]any) bool {
	if object == nil {
		return false
	}
	for _, gs := range e.guards {
		for i := range gs {
			if gs[i].refutes(object) {
				return true
			}
		}
	}
	return false
}

type control struct {
	prog    *celeval.Program
	message string
	msgProg *celeval.Program
}

// Key returns namespace/name.
func (e *Exception) Key() string {
	if e.Namespace == "" {
		return e.Name
	}
	return e.Namespace + "/" + e.Name
}

// Expired says whether the exception has expired at t.
func (e *Exception) Expired(t time.Time) bool {
	return !e.ExpiresAt.IsZero() && t.After(e.ExpiresAt)
}

// Priority is the polex.kyverno.io/priority label (0 when absent or not
// a positive integer): among granted exceptions, the one with the highest
// decides the reported result.
func (e *Exception) Priority() int { return e.priority }

// HasControls says whether the exception defines compensating controls.
func (e *Exception) HasControls() bool { return len(e.Spec.Validations) > 0 }

// Full says whether a granted exception exempts the resource outright (it
// has neither images nor allowedValues).
func (e *Exception) Full() bool { return e.full }

// References says whether the exception refers to the policy.
func (e *Exception) References(kind, name string) bool {
	for _, r := range e.Spec.PolicyRefs {
		if r.Name == name && r.Kind == kind {
			return true
		}
	}
	return false
}

// Compile loads and compiles a PolicyException. Its conditions and
// controls are compiled in the environment of each flavour of policy its
// policyRefs name (cluster-wide or namespaced kinds).
func Compile(env *celenv.Env, o *manifest.Object) (*Exception, *manifest.LoadError) {
	if err := kyvernoapi.CheckVersion(o); err != nil {
		return nil, err
	}
	var pe PolicyException
	if err := manifest.DecodeStrict(o, &pe); err != nil {
		return nil, err
	}
	if pe.Name == "" {
		return nil, manifest.Errorf(o, "metadata.name", "required")
	}
	spec := &pe.Spec
	if len(spec.PolicyRefs) == 0 {
		return nil, manifest.Errorf(o, "spec.policyRefs", "must specify at least one policy ref")
	}
	kinds := [2]bool{}
	for i, r := range spec.PolicyRefs {
		if r.Name == "" {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.policyRefs[%d].name", i), "must specify policy name")
		}
		if r.Kind == "" {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.policyRefs[%d].kind", i), "must specify policy kind")
		}
		if kyvernoapi.IsNamespacedKind(r.Kind) {
			kinds[1] = true
		} else {
			kinds[0] = true
		}
	}
	switch spec.ReportResult {
	case "", "skip", "pass":
	default:
		return nil, manifest.Errorf(o, "spec.reportResult", "unsupported value %q: supported values: \"skip\", \"pass\"", spec.ReportResult)
	}
	e := &Exception{
		Namespace: pe.Namespace,
		Name:      pe.Name,
		Source:    o.Source,
		Labels:    pe.Labels,
		Spec:      spec,
		full:      len(spec.Images) == 0 && len(spec.AllowedValues) == 0,
	}
	if spec.ExpiresAt != nil {
		e.ExpiresAt = spec.ExpiresAt.Time
	}
	if v, ok := pe.Labels[LabelExceptionPriority]; ok {
		if p, err := strconv.Atoi(v); err == nil && p > 0 {
			e.priority = p
		}
	}
	for flavour, used := range kinds {
		if !used {
			continue
		}
		cenv := env.Exception(flavour == 1)
		for i, mc := range spec.MatchConditions {
			prg, ast, err := celeval.Compile(cenv, mc.Expression, types.BoolType, nil)
			if err != nil {
				return nil, manifest.Errorf(o, fmt.Sprintf("spec.matchConditions[%d].expression", i), "%v", err)
			}
			e.conds[flavour] = append(e.conds[flavour], prg)
			if len(e.guards) < len(spec.MatchConditions) {
				e.guards = append(e.guards, guards(ast))
			}
		}
		for i, v := range spec.Validations {
			field := fmt.Sprintf("spec.validations[%d]", i)
			prg, _, err := celeval.Compile(cenv, v.Expression, types.BoolType, nil)
			if err != nil {
				return nil, manifest.Errorf(o, field+".expression", "%v", err)
			}
			c := &control{prog: prg, message: v.Message}
			if v.MessageExpression != "" {
				c.msgProg, _, err = celeval.Compile(cenv, v.MessageExpression, types.StringType, nil)
				if err != nil {
					return nil, manifest.Errorf(o, field+".messageExpression", "%v", err)
				}
			}
			e.controls[flavour] = append(e.controls[flavour], c)
		}
	}
	return e, nil
}

// flavour is the index of the compiled conditions and controls for
// policies of a namespaced kind or not.
func flavour(namespaced bool) int {
	if namespaced {
		return 1
	}
	return 0
}

package kyvernocel

import (
	"fmt"

	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
)

// What a policy reads with the resource library: the resource.Get and
// resource.List calls of its expressions, with the apiVersion and resource
// they name when those are constants. A server that keeps the cluster's
// objects as revisioned data (Arbiter's Kubernetes source) watches the
// kinds found here; a call whose arguments are not constants reads kinds
// only an operator can name.

// ResourceCall is one resource.Get or resource.List call (either spelling:
// Get, get, List, list) of an expression.
type ResourceCall struct {
	// Function is "resource.Get" or "resource.List" (whatever the
	// spelling in the expression).
	Function string
	// APIVersion is the apiVersion argument, or the apiVersion of the
	// resource.ToGVR(apiVersion, kind) argument ("" when not a constant).
	APIVersion string
	// Resource is the resource argument, as written ("configmaps",
	// "pods/status"); "" when not a constant or when the call names a kind
	// through resource.ToGVR.
	Resource string
	// Kind is the kind of a resource.ToGVR(apiVersion, kind) argument ("":
	// none, or not a constant).
	Kind string
	// Constant says that APIVersion and one of Resource and Kind are
	// constants: the call reads objects of that kind only.
	Constant bool
}

// String renders the call for messages: resource.List("v1", "configmaps")
// or resource.Get(?, ?) for arguments that are not constants.
func (c ResourceCall) String() string {
	q := func(s string) string {
		if s == "" {
			return "?"
		}
		return fmt.Sprintf("%q", s)
	}
	if c.Kind != "" {
		return fmt.Sprintf("%s(resource.ToGVR(%s, %s))", c.Function, q(c.APIVersion), q(c.Kind))
	}
	return fmt.Sprintf("%s(%s, %s)", c.Function, q(c.APIVersion), q(c.Resource))
}

// Constants are the values of the variables (variables.NAME) of a policy
// that are constants, as ConstantValue finds them: a string, or the
// {apiVersion, kind} of a resource.ToGVR call with constant arguments.
type Constants map[string]Constant

// Constant is the value of a constant expression.
type Constant struct {
	// String is the value of a string constant.
	String string
	// GVR is set for resource.ToGVR(apiVersion, kind): {apiVersion, kind}.
	GVR *[2]string
}

// ConstantValue says whether expr is a constant the analysis understands:
// a string literal, a concatenation of constants with +, a variable whose
// value is a constant (consts), or resource.ToGVR of constants. An
// expression that does not parse is not a constant.
func ConstantValue(expr string, consts Constants) (Constant, bool) {
	env := parseEnv()
	if env == nil || expr == "" {
		return Constant{}, false
	}
	a, iss := env.Parse(expr)
	if iss != nil && iss.Err() != nil {
		return Constant{}, false
	}
	return constantOf(a.NativeRep().Expr(), consts)
}

// ResourceCalls returns the resource.Get and resource.List calls of expr,
// in the order they appear, reading the arguments of a namespaced policy's
// library (without the namespace argument) when namespaced is set. An
// expression that does not parse has none (the compiler refuses it).
func ResourceCalls(expr string, consts Constants, namespaced bool) []ResourceCall {
	env := parseEnv()
	if env == nil || expr == "" {
		return nil
	}
	a, iss := env.Parse(expr)
	if iss != nil && iss.Err() != nil {
		return nil
	}
	nav := ast.NavigateAST(a.NativeRep())
	found := ast.MatchDescendants(nav, func(e ast.NavigableExpr) bool {
		if e.Kind() != ast.CallKind {
			return false
		}
		c := e.AsCall()
		if !c.IsMemberFunction() || c.Target().Kind() != ast.IdentKind || c.Target().AsIdent() != ResourceVar {
			return false
		}
		switch c.FunctionName() {
		case "Get", "get", "List", "list":
			return true
		}
		return false
	})
	out := make([]ResourceCall, 0, len(found))
	for _, e := range found {
		out = append(out, resourceCallOf(e.AsCall(), consts, namespaced))
	}
	return out
}

// resourceCallOf reads one call's arguments. The overloads (resource.go):
// a first argument that is a resource.ToGVR value takes the place of
// apiVersion and resource.
func resourceCallOf(c ast.CallExpr, consts Constants, namespaced bool) ResourceCall {
	rc := ResourceCall{Function: "resource.Get"}
	if c.FunctionName() == "List" || c.FunctionName() == "list" {
		rc.Function = "resource.List"
	}
	args := c.Args()
	if len(args) == 0 {
		return rc
	}
	first, ok := constantOf(args[0], consts)
	switch {
	case ok && first.GVR != nil:
		rc.APIVersion, rc.Kind = first.GVR[0], first.GVR[1]
		rc.Constant = true
	case ok:
		rc.APIVersion = first.String
		// (apiVersion, resource, ...): the string overloads take at least
		// two arguments before the namespace (or the name, or the labels).
		if len(args) >= 2 {
			if second, ok := constantOf(args[1], consts); ok && second.GVR == nil {
				rc.Resource = second.String
				rc.Constant = rc.APIVersion != "" && rc.Resource != ""
			}
		}
	default:
		// A resource.ToGVR call with arguments that are not constants
		// still says it names a kind.
		if args[0].Kind() == ast.CallKind && isToGVR(args[0].AsCall()) {
			ca := args[0].AsCall().Args()
			if len(ca) == 2 {
				if v, ok := constantOf(ca[0], consts); ok && v.GVR == nil {
					rc.APIVersion = v.String
				}
				if v, ok := constantOf(ca[1], consts); ok && v.GVR == nil {
					rc.Kind = v.String
				}
			}
			return rc
		}
		if len(args) >= 2 {
			if second, ok := constantOf(args[1], consts); ok && second.GVR == nil && stringOverload(len(args), namespaced) {
				rc.Resource = second.String
			}
		}
	}
	return rc
}

// stringOverload says whether a call with n arguments whose first is not
// known can only be an (apiVersion, resource, ...) overload: cluster
// resource.Get(av, res, ns, name) and resource.List(av, res, ns, labels)
// (4 arguments; the gvr overloads take at most 3), namespaced
// resource.Get(av, res, name) and resource.List(av, res, labels) (3; the
// gvr overloads at most 2).
func stringOverload(n int, namespaced bool) bool {
	if namespaced {
		return n == 3
	}
	return n == 4
}

func isToGVR(c ast.CallExpr) bool {
	return c.IsMemberFunction() && (c.FunctionName() == "ToGVR" || c.FunctionName() == "toGVR") &&
		c.Target().Kind() == ast.IdentKind && c.Target().AsIdent() == ResourceVar
}

// constantOf evaluates a constant expression.
func constantOf(e ast.Expr, consts Constants) (Constant, bool) {
	switch e.Kind() {
	case ast.LiteralKind:
		if s, ok := e.AsLiteral().(types.String); ok {
			return Constant{String: string(s)}, true
		}
	case ast.SelectKind:
		s := e.AsSelect()
		if !s.IsTestOnly() && s.Operand().Kind() == ast.IdentKind && s.Operand().AsIdent() == "variables" {
			v, ok := consts[s.FieldName()]
			return v, ok
		}
	case ast.CallKind:
		c := e.AsCall()
		switch {
		case c.FunctionName() == operators.Add && !c.IsMemberFunction() && len(c.Args()) == 2:
			a, okA := constantOf(c.Args()[0], consts)
			b, okB := constantOf(c.Args()[1], consts)
			if okA && okB && a.GVR == nil && b.GVR == nil {
				return Constant{String: a.String + b.String}, true
			}
		case isToGVR(c) && len(c.Args()) == 2:
			av, okA := constantOf(c.Args()[0], consts)
			kind, okK := constantOf(c.Args()[1], consts)
			if okA && okK && av.GVR == nil && kind.GVR == nil {
				return Constant{GVR: &[2]string{av.String, kind.String}}, true
			}
		}
	}
	return Constant{}, false
}

package celeval

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
)

// Program is one compiled CEL expression.
type Program struct {
	// tracked tracks cost and enforces the per-call limit; it is planned on
	// first use (most evaluations run fast).
	tracked     cel.Program
	trackedErr  error
	trackedOnce sync.Once
	env         *cel.Env
	ast         *cel.Ast
	// fast is the same expression planned without cost tracking (nil if
	// it cannot be), run when est at the request's size level is below
	// fastCostLimit.
	fast cel.Program
	est  [len(sizeLevels)]uint64
	expr string
	// memoKey is set when the result depends only on the request (object,
	// oldObject, request, namespaceObject) and pure functions, so it can be
	// shared by every policy evaluated for the same request.
	memoKey string
	// constant is the value of an expression that references nothing
	// (a literal list, say), computed once at compile time.
	constant ref.Val
}

// trackedProgram returns the cost-tracking program, planning it on first use.
func (p *Program) trackedProgram() (cel.Program, error) {
	p.trackedOnce.Do(func() {
		p.tracked, p.trackedErr = p.env.Program(p.ast, cel.InterruptCheckFrequency(interruptEvery))
	})
	return p.tracked, p.trackedErr
}

// requestInputs are the variables whose values are fixed for a request.
var requestInputs = map[string]bool{
	celenv.ObjectVar:          true,
	celenv.OldObjectVar:       true,
	celenv.RequestVar:         true,
	celenv.NamespaceObjectVar: true,
}

// impureOverloads are substrings of overload ids whose result may differ
// between two calls with the same arguments.
var impureOverloads = []string{"random", "now"}

// Compile compiles expr in the environment pair. want, when not nil, is
// the exact output type required; its error text is Kyverno's. vars are the
// size bounds of the policy's variables declared so far.
func Compile(pair celenv.Pair, expr string, want *types.Type, vars map[string]SizeBounds) (*Program, *cel.Ast, error) {
	env := pair.Tracked
	ast, issues := env.Compile(expr)
	if err := issues.Err(); err != nil {
		return nil, nil, err
	}
	if want != nil && !ast.OutputType().IsExactType(want) {
		return nil, nil, fmt.Errorf("output is expected to be of type %s", want.TypeName())
	}
	p := &Program{expr: expr, env: env, ast: ast}
	if fast, err := pair.Fast.Program(ast, append(jsonPatchConstructors(ast), cel.EvalOptions(cel.OptOptimize))...); err == nil {
		p.fast = fast
		p.est = estimate(env, ast, vars)
	} else if _, err := p.trackedProgram(); err != nil {
		return nil, nil, err
	}
	if pure, refs := isRequestPure(ast); pure {
		p.memoKey = canonicalKey(ast, expr)
		if !refs {
			prg := p.fast
			if prg == nil {
				prg, _ = p.trackedProgram()
			}
			if prg != nil {
				if v, _, err := prg.Eval(interpreter.EmptyActivation()); err == nil && !types.IsUnknownOrError(v) {
					p.constant = v
				}
			}
		}
	}
	return p, ast, nil
}

// isRequestPure says whether an expression depends only on the request
// inputs and pure functions, and whether it references any variable at all.
func isRequestPure(ast *cel.Ast) (pure, refs bool) {
	native := ast.NativeRep()
	locals := map[string]bool{}
	celast.PreOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.ComprehensionKind {
			c := e.AsComprehension()
			locals[c.IterVar()] = true
			locals[c.AccuVar()] = true
			if c.HasIterVar2() {
				locals[c.IterVar2()] = true
			}
		}
	}))
	for _, r := range native.ReferenceMap() {
		if r.Name != "" && len(r.OverloadIDs) == 0 && r.Value == nil {
			refs = true
			if !requestInputs[r.Name] && !locals[r.Name] {
				return false, true
			}
		}
		for _, id := range r.OverloadIDs {
			for _, bad := range impureOverloads {
				if strings.Contains(strings.ToLower(id), bad) {
					return false, refs
				}
			}
		}
	}
	return true, refs
}

// canonicalKey identifies an expression up to formatting: the unparsed
// checked AST.
func canonicalKey(ast *cel.Ast, fallback string) string {
	if s, err := cel.AstToString(ast); err == nil {
		return s
	}
	return fallback
}

// AsBool converts the value of a program expected to produce a bool.
func AsBool(v ref.Val) (bool, error) {
	switch b := v.(type) {
	case types.Bool:
		return bool(b), nil
	case *types.Err:
		return false, b
	}
	native, err := v.ConvertToNative(boolType)
	if err != nil {
		return false, err
	}
	b, ok := native.(bool)
	if !ok {
		return false, fmt.Errorf("type conversion error from '%s' to 'bool'", v.Type().TypeName())
	}
	return b, nil
}

// AsString converts the value of a program expected to produce a string.
func AsString(v ref.Val) (string, error) {
	switch s := v.(type) {
	case types.String:
		return string(s), nil
	case *types.Err:
		return "", s
	}
	native, err := v.ConvertToNative(stringType)
	if err != nil {
		return "", err
	}
	s, ok := native.(string)
	if !ok {
		return "", fmt.Errorf("type conversion error from '%s' to 'string'", v.Type().TypeName())
	}
	return s, nil
}

// Expr returns the expression's text.
func (p *Program) Expr() string { return p.expr }

// MemoKey returns the canonical form of a request-pure expression, under
// which a request memoizes its result when it occurs in more than one
// place; "" for other expressions.
func (p *Program) MemoKey() string { return p.memoKey }

var (
	boolType   = reflect.TypeFor[bool]()
	stringType = reflect.TypeFor[string]()
)

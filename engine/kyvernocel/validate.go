package kyvernocel

import (
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
)

// Kyverno refuses a NamespacedValidatingPolicy whose expressions use
// globalContext (always) or http (unless --allowHTTPInNamespacedPolicies),
// when the policy is admitted (pkg/cel/policies/vpol/validate.go), with
// GlobalContextNotAllowedMessage / HTTPNotAllowedValidationMessage as
// field.Forbidden errors on "spec". These helpers make the same check: they
// parse (without type-checking) every expression of the policy — variables,
// matchConditions, validations (expression and messageExpression),
// auditAnnotations — skip the ones that do not parse, and look for the
// identifier.

// ExpressionsUseHTTP reports whether any expression references "http".
func ExpressionsUseHTTP(expressions ...string) bool {
	return expressionsUseIdent(HTTPVar, expressions...)
}

// ExpressionsUseGlobalContext reports whether any expression references
// "globalContext".
func ExpressionsUseGlobalContext(expressions ...string) bool {
	return expressionsUseIdent(GlobalContextVar, expressions...)
}

var parseEnv = sync.OnceValue(func() *cel.Env {
	// Optional syntax (x.?y, m[?k]) parses: policies use it.
	env, err := cel.NewEnv(cel.OptionalTypes())
	if err != nil {
		return nil
	}
	return env
})

func expressionsUseIdent(ident string, expressions ...string) bool {
	env := parseEnv()
	if env == nil {
		return false
	}
	for _, expr := range expressions {
		if expr == "" {
			continue
		}
		ast, iss := env.Parse(expr)
		if iss != nil && iss.Err() != nil {
			continue
		}
		nav := celast.NavigateAST(ast.NativeRep())
		if len(celast.MatchDescendants(nav, func(e celast.NavigableExpr) bool {
			return e.Kind() == celast.IdentKind && e.AsIdent() == ident
		})) > 0 {
			return true
		}
	}
	return false
}

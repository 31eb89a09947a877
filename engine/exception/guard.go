package exception

import (
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
)

// guard is a conjunct of a condition of the form `object.a.b == 'lit'` or
// `object.a.b in ['x', 'y']`, checked in Go before the condition's CEL
// program: when the field holds a string that is not one of the values,
// the conjunct — and so the whole condition — is false, whatever the other
// conjuncts do (CEL's && is false when either side is false, even if the
// other errs). Exceptions usually name the resources they cover this way,
// so a request skips the CEL evaluation of every exception that does not
// name it. When the field is absent or not a string, the program decides.
type guard struct {
	path   []string
	values []string
}

// guards extracts the guards of a checked boolean expression.
func guards(ast *cel.Ast) []guard {
	var out []guard
	var conj func(e celast.Expr)
	conj = func(e celast.Expr) {
		if e.Kind() != celast.CallKind {
			return
		}
		call := e.AsCall()
		args := call.Args()
		switch call.FunctionName() {
		case "_&&_":
			for _, a := range args {
				conj(a)
			}
		case "_==_":
			if len(args) != 2 {
				return
			}
			for i := 0; i < 2; i++ {
				path, ok := objectPath(args[i])
				lit, isLit := stringLiteral(args[1-i])
				if ok && isLit {
					out = append(out, guard{path: path, values: []string{lit}})
					return
				}
			}
		case "@in":
			if len(args) != 2 {
				return
			}
			path, ok := objectPath(args[0])
			if !ok || args[1].Kind() != celast.ListKind {
				return
			}
			var values []string
			for _, el := range args[1].AsList().Elements() {
				lit, isLit := stringLiteral(el)
				if !isLit {
					return
				}
				values = append(values, lit)
			}
			out = append(out, guard{path: path, values: values})
		}
	}
	conj(ast.NativeRep().Expr())
	return out
}

// objectPath matches a chain of field selections rooted at `object`.
func objectPath(e celast.Expr) ([]string, bool) {
	var rev []string
	for e.Kind() == celast.SelectKind {
		sel := e.AsSelect()
		if sel.IsTestOnly() {
			return nil, false
		}
		rev = append(rev, sel.FieldName())
		e = sel.Operand()
	}
	if e.Kind() != celast.IdentKind || e.AsIdent() != celenv.ObjectVar || len(rev) == 0 {
		return nil, false
	}
	path := make([]string, len(rev))
	for i := range rev {
		path[i] = rev[len(rev)-1-i]
	}
	return path, true
}

func stringLiteral(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// refutes says whether the guard proves its condition false for object.
func (g *guard) refutes(object map[string]any) bool {
	var cur any = object
	for _, f := range g.path {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[f]; !ok {
			return false
		}
	}
	s, ok := cur.(string)
	if !ok {
		return false
	}
	for _, v := range g.values {
		if s == v {
			return false
		}
	}
	return true
}

// Index finds, for a request, the exceptions of a policy that are
// not refuted by a guard, without visiting the others: each guarded
// exception is filed under its first guard's path and values.
type Index struct {
	unguarded []int
	paths     [][]string
	byValue   []map[string][]int
	// anyValue[i] are the exceptions filed under paths[i], for objects
	// whose value there is not a string (the guard cannot refute them).
	anyValue [][]int
}

// NewIndex indexes exceptions by their first guard.
func NewIndex(excs []*Exception) *Index {
	ix := &Index{}
	pathIndex := map[string]int{}
	for i, ex := range excs {
		var g *guard
		for _, gs := range ex.guards {
			if len(gs) > 0 {
				g = &gs[0]
				break
			}
		}
		if g == nil {
			ix.unguarded = append(ix.unguarded, i)
			continue
		}
		key := strings.Join(g.path, "\x00")
		p, ok := pathIndex[key]
		if !ok {
			p = len(ix.paths)
			pathIndex[key] = p
			ix.paths = append(ix.paths, g.path)
			ix.byValue = append(ix.byValue, map[string][]int{})
			ix.anyValue = append(ix.anyValue, nil)
		}
		for _, v := range g.values {
			ix.byValue[p][v] = append(ix.byValue[p][v], i)
		}
		ix.anyValue[p] = append(ix.anyValue[p], i)
	}
	return ix
}

// Candidates returns, in order, the indexes of the exceptions that may
// match object; buf is reused.
func (ix *Index) Candidates(object map[string]any, buf []int) []int {
	out := append(buf[:0], ix.unguarded...)
	for p, path := range ix.paths {
		if object == nil {
			out = append(out, ix.anyValue[p]...)
			continue
		}
		v, ok := lookupPath(object, path)
		s, isString := v.(string)
		if !ok || !isString {
			out = append(out, ix.anyValue[p]...)
			continue
		}
		out = append(out, ix.byValue[p][s]...)
	}
	if len(ix.paths) > 0 && len(out) > 1 {
		slices.Sort(out)
		out = slices.Compact(out)
	}
	return out
}

func lookupPath(object map[string]any, path []string) (any, bool) {
	var cur any = object
	for _, f := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[f]; !ok {
			return nil, false
		}
	}
	return cur, true
}

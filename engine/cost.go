package engine

import (
	"math"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
)

// Cost limits are the API server's: every expression is stopped at
// PerCallLimit, and the expressions of one policy evaluation share
// RuntimeCELCostBudget. Tracking the cost of every evaluation step is what
// makes that exact, and it roughly doubles the price of an evaluation. So
// each program is also planned without tracking, and its cost is estimated
// statically (cel-go's estimator with the Kubernetes library costs) for
// inputs whose every string, list and map is at most S long, for a few S.
// A request whose inputs are all within S runs the untracked program when
// that estimate is below fastCostLimit — a sixteenth of the per-call limit,
// a margin for the estimator's approximations — and is charged the
// estimate against the policy's budget. Anything else runs tracked.

// sizeLevels are the S an estimate is made for.
var sizeLevels = [...]uint64{64, 512, 4096}

// fastCostLimit is the largest estimate that runs untracked.
const fastCostLimit = celconfig.PerCallLimit / 16

// bound is an upper bound on the size of a value, and of every value
// nested in it, as c + k*S for inputs bounded by S.
type bound struct {
	c, k  uint64
	known bool
}

func (b bound) at(s uint64) uint64 {
	if !b.known {
		return math.MaxUint64
	}
	if b.k > 0 && s > (math.MaxUint64-b.c)/b.k {
		return math.MaxUint64
	}
	return b.c + b.k*s
}

func (b bound) plus(o bound) bound {
	return bound{c: b.c + o.c, k: b.k + o.k, known: b.known && o.known}
}

func (b bound) max(o bound) bound {
	return bound{c: max(b.c, o.c), k: max(b.k, o.k), known: b.known && o.known}
}

var (
	unknownBound = bound{}
	inputBound   = bound{k: 1, known: true}
	scalarBound  = bound{c: 1, known: true}
)

// sizer tells cel-go's estimator how big the values an expression reads
// can be: request inputs at most S, variables at most their bound.
type sizer struct {
	s    uint64
	vars map[string]bound
}

// EstimateSize implements checker.CostEstimator.
func (z *sizer) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	p := n.Path()
	if len(p) == 0 {
		return nil
	}
	switch p[0] {
	case celenv.ObjectVar, celenv.OldObjectVar, celenv.RequestVar, celenv.NamespaceObjectVar, celenv.ExceptionsVar:
		return &checker.SizeEstimate{Min: 0, Max: z.s}
	case celenv.VariablesVar:
		if len(p) >= 2 {
			if b, ok := z.vars[p[1]]; ok && b.known {
				return &checker.SizeEstimate{Min: 0, Max: b.at(z.s)}
			}
		}
	}
	return nil
}

// EstimateCallCost implements checker.CostEstimator (the Kubernetes
// library estimator wrapping this one prices the library calls).
func (z *sizer) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// nodeSize is the size bound of a node: computed by the checker, else from
// its path.
func (z *sizer) nodeSize(n checker.AstNode) *checker.SizeEstimate {
	if sz := n.ComputedSize(); sz != nil {
		return sz
	}
	return z.EstimateSize(n)
}

// estimator is the Kubernetes library estimator, taught the sizes of the
// optional selections and orValue calls Kyverno policies are full of: a
// field selected from a value is bounded by that value's bound (bounds
// cover nested values), and orValue returns one of its operands.
type estimator struct {
	kube *library.CostEstimator
	z    *sizer
}

func (e *estimator) EstimateSize(n checker.AstNode) *checker.SizeEstimate { return e.z.EstimateSize(n) }

func (e *estimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	switch function {
	case "_?._", "_[?_]":
		if len(args) >= 1 {
			if sz := e.z.nodeSize(args[0]); sz != nil {
				return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}, ResultSize: sz}
			}
		}
	case "__orValueCompat__":
		if len(args) == 2 {
			a, b := e.z.nodeSize(args[0]), e.z.nodeSize(args[1])
			if a != nil && b != nil {
				sz := a.Union(*b)
				return &checker.CallEstimate{CostEstimate: checker.CostEstimate{Min: 1, Max: 1}, ResultSize: &sz}
			}
		}
	}
	return e.kube.EstimateCallCost(function, overloadID, target, args)
}

// estimate computes the program's cost estimate at every size level. An
// expression without comprehensions costs at most linearly in S, so its
// estimate at the largest level serves for all (estimates grow with S).
func estimate(env *cel.Env, ast *cel.Ast, vars map[string]bound) [len(sizeLevels)]uint64 {
	var out [len(sizeLevels)]uint64
	if !hasComprehension(ast) {
		z := &sizer{s: sizeLevels[len(sizeLevels)-1], vars: vars}
		est, err := env.EstimateCost(ast, &estimator{kube: &library.CostEstimator{SizeEstimator: z}, z: z})
		for i := range out {
			out[i] = est.Max
			if err != nil {
				out[i] = math.MaxUint64
			}
		}
		return out
	}
	for i, s := range sizeLevels {
		z := &sizer{s: s, vars: vars}
		est, err := env.EstimateCost(ast, &estimator{kube: &library.CostEstimator{SizeEstimator: z}, z: z})
		if err != nil {
			out[i] = math.MaxUint64
			continue
		}
		out[i] = est.Max
	}
	return out
}

// varBound bounds the size of a variable's value (and of every value nested
// in it) from its expression, for the shapes variables usually take:
// selections from the request, concatenations, orValue defaults, literals,
// filters. Anything else is unknown, and expressions reading it always run
// tracked.
func varBound(ast *cel.Ast, vars map[string]bound) bound {
	native := ast.NativeRep()
	var walk func(e celast.Expr) bound
	walk = func(e celast.Expr) bound {
		if t := native.GetType(e.ID()); t != nil {
			switch t.Kind() {
			case types.BoolKind, types.IntKind, types.UintKind, types.DoubleKind, types.NullTypeKind:
				return scalarBound
			}
		}
		switch e.Kind() {
		case celast.LiteralKind:
			switch v := e.AsLiteral().(type) {
			case types.String:
				return bound{c: uint64(len(v)), known: true}
			case types.Bytes:
				return bound{c: uint64(len(v)), known: true}
			}
			return scalarBound
		case celast.IdentKind:
			if requestInputs[e.AsIdent()] || e.AsIdent() == celenv.ExceptionsVar {
				return inputBound
			}
			return unknownBound
		case celast.SelectKind:
			sel := e.AsSelect()
			op := sel.Operand()
			if op.Kind() == celast.IdentKind && op.AsIdent() == celenv.VariablesVar {
				if b, ok := vars[sel.FieldName()]; ok {
					return b
				}
				return unknownBound
			}
			return walk(op)
		case celast.ListKind:
			l := e.AsList()
			b := bound{c: uint64(l.Size()), known: true}
			for _, el := range l.Elements() {
				b = b.plus(walk(el))
			}
			return b
		case celast.MapKind:
			m := e.AsMap()
			b := bound{c: uint64(m.Size()), known: true}
			for _, en := range m.Entries() {
				me := en.AsMapEntry()
				b = b.plus(walk(me.Key())).plus(walk(me.Value()))
			}
			return b
		case celast.CallKind:
			call := e.AsCall()
			args := call.Args()
			switch call.FunctionName() {
			case "_+_":
				if len(args) == 2 {
					return walk(args[0]).plus(walk(args[1]))
				}
			case "__orValueCompat__", "or", "orValue":
				b := scalarBound
				if call.IsMemberFunction() {
					b = walk(call.Target())
				}
				for _, a := range args {
					b = b.max(walk(a))
				}
				return b
			case "_?_:_":
				if len(args) == 3 {
					return walk(args[1]).max(walk(args[2]))
				}
			case "_?._", "_[_]", "_[?_]":
				if len(args) >= 1 {
					return walk(args[0])
				}
			}
			return unknownBound
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			// filter keeps elements of its range; all/exists are scalars (above).
			if c.Result().Kind() == celast.IdentKind && c.Result().AsIdent() == c.AccuVar() &&
				c.LoopStep().Kind() == celast.CallKind && c.LoopStep().AsCall().FunctionName() == "_?_:_" {
				step := c.LoopStep().AsCall().Args()
				if len(step) == 3 && isAppendOfIterVar(step[1], c.AccuVar(), c.IterVar()) {
					return walk(c.IterRange())
				}
			}
			return unknownBound
		}
		return unknownBound
	}
	return walk(native.Expr())
}

// isAppendOfIterVar matches `accu + [iterVar]`, the step of filter().
func isAppendOfIterVar(e celast.Expr, accu, iter string) bool {
	if e.Kind() != celast.CallKind || e.AsCall().FunctionName() != "_+_" {
		return false
	}
	a := e.AsCall().Args()
	if len(a) != 2 || a[0].Kind() != celast.IdentKind || a[0].AsIdent() != accu || a[1].Kind() != celast.ListKind {
		return false
	}
	el := a[1].AsList().Elements()
	return len(el) == 1 && el[0].Kind() == celast.IdentKind && el[0].AsIdent() == iter
}

// sizeLevel returns the index of the smallest size level that bounds the
// request's inputs, or -1.
func sizeLevel(s uint64) int {
	for i, l := range sizeLevels {
		if s <= l {
			return i
		}
	}
	return -1
}

// maxSize returns the largest string, list or map size in JSON-shaped data.
func maxSize(v any) uint64 {
	switch t := v.(type) {
	case string:
		return uint64(len(t))
	case map[string]any:
		m := uint64(len(t))
		for k, e := range t {
			m = max(m, uint64(len(k)), maxSize(e))
		}
		return m
	case []any:
		m := uint64(len(t))
		for _, e := range t {
			m = max(m, maxSize(e))
		}
		return m
	}
	return 0
}

func hasComprehension(ast *cel.Ast) bool {
	found := false
	celast.PreOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.ComprehensionKind {
			found = true
		}
	}))
	return found
}

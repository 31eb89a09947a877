package celeval

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
// inputs within a size level: every list and map has at most C entries,
// and every string, list and map is at most S long. A request whose inputs
// are within a level runs the untracked program when that level's estimate
// is below fastCostLimit — a sixteenth of the per-call limit, a margin for
// the estimator's approximations — and is charged the estimate against the
// policy's budget. Anything else runs tracked.
//
// C matters because Kubernetes objects are typed dyn: the estimator cannot
// tell a string from a list, so every value read from the inputs is bounded
// by S. But a value a comprehension iterates over is a list or a map (or
// the iteration fails at once), so its size — the iteration count, what
// nested comprehensions multiply — is bounded by C. Objects have few
// entries per list and map and longer strings, so estimates at a small C
// are orders of magnitude tighter.

// sizeLevel is a pair of input bounds an estimate is made for (c ≤ s).
type sizeLevel struct{ c, s uint64 }

// sizeLevels are the levels estimates are made for, in the order a request
// looks for the first that bounds its inputs.
var sizeLevels = [...]sizeLevel{{8, 64}, {16, 512}, {64, 512}, {512, 512}, {16, 4096}, {64, 4096}, {4096, 4096}}

// fastCostLimit is the largest estimate that runs untracked.
const fastCostLimit = celconfig.PerCallLimit / 16

// bound is an upper bound on the size of a value, and of every value
// nested in it, as c + k*X for inputs bounded by X.
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

// vbound bounds a value's own size (top) and the size of every value
// nested in it, at any depth (inner).
type vbound struct{ top, inner bound }

// cover bounds the value and everything nested in it.
func (v vbound) cover() bound { return v.top.max(v.inner) }

func (v vbound) max(o vbound) vbound { return vbound{v.top.max(o.top), v.inner.max(o.inner)} }

// nested is the bound of a value nested in v.
func (v vbound) nested() vbound { return vbound{v.inner, v.inner} }

var (
	unknownVBound = vbound{unknownBound, unknownBound}
	inputVBound   = vbound{inputBound, inputBound}
	scalarVBound  = vbound{scalarBound, scalarBound}
)

// SizeBounds bound a variable: gen its length as a string, list or map in
// terms of S; coll its entries as a list or map in terms of C.
type SizeBounds struct{ gen, coll vbound }

// sizer tells cel-go's estimator how big the values an expression reads
// can be: request inputs at most S, variables at most their bound, and
// the ranges of comprehensions at most their bound in entries.
type sizer struct {
	s, c uint64
	vars map[string]SizeBounds
	// ranges are the entry bounds of comprehension ranges, by node id.
	ranges map[int64]bound
	// calls are the call nodes, by the id of their target (member calls)
	// or first argument.
	calls map[int64]int64
}

// EstimateSize implements checker.CostEstimator.
func (z *sizer) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	sz := z.pathSize(n)
	if e := n.Expr(); e != nil && len(z.ranges) > 0 {
		return z.rangeSize(e.ID(), sz)
	}
	return sz
}

// pathSize bounds a value from its path.
func (z *sizer) pathSize(n checker.AstNode) *checker.SizeEstimate {
	p := n.Path()
	if len(p) == 0 {
		return nil
	}
	switch p[0] {
	case celenv.ObjectVar, celenv.OldObjectVar, celenv.RequestVar, celenv.NamespaceObjectVar, celenv.ExceptionsVar:
		return &checker.SizeEstimate{Min: 0, Max: z.s}
	case celenv.VariablesVar:
		if len(p) >= 2 {
			if b, ok := z.vars[p[1]]; ok {
				g := b.gen.top
				if len(p) > 2 {
					g = b.gen.inner
				}
				if g.known {
					return &checker.SizeEstimate{Min: 0, Max: g.at(z.s)}
				}
			}
		}
	}
	return nil
}

// rangeSize tightens the size of node id, if it is a comprehension range,
// to its entry bound.
func (z *sizer) rangeSize(id int64, sz *checker.SizeEstimate) *checker.SizeEstimate {
	b, ok := z.ranges[id]
	if !ok || !b.known {
		return sz
	}
	if c := b.at(z.c); sz == nil || c < sz.Max {
		return &checker.SizeEstimate{Min: 0, Max: c}
	}
	return sz
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
	ce := e.callCost(function, overloadID, target, args)
	if ce == nil || len(e.z.ranges) == 0 {
		return ce
	}
	// A call whose result a comprehension iterates over: its size is
	// also bounded by the range's entry bound.
	var key checker.AstNode
	switch {
	case target != nil && *target != nil:
		key = *target
	case len(args) > 0:
		key = args[0]
	default:
		return ce
	}
	if key.Expr() == nil {
		return ce
	}
	call, ok := e.z.calls[key.Expr().ID()]
	if !ok {
		return ce
	}
	if sz := e.z.rangeSize(call, ce.ResultSize); sz != ce.ResultSize {
		out := *ce
		out.ResultSize = sz
		return &out
	}
	return ce
}

func (e *estimator) callCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
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
func estimate(env *cel.Env, ast *cel.Ast, vars map[string]SizeBounds) [len(sizeLevels)]uint64 {
	var out [len(sizeLevels)]uint64
	run := func(z *sizer) uint64 {
		est, err := env.EstimateCost(ast, &estimator{kube: &library.CostEstimator{SizeEstimator: z}, z: z})
		if err != nil {
			return math.MaxUint64
		}
		return est.Max
	}
	if !hasComprehension(ast) {
		top := sizeLevels[len(sizeLevels)-1]
		est := run(&sizer{s: top.s, c: top.c, vars: vars})
		for i := range out {
			out[i] = est
		}
		return out
	}
	native := ast.NativeRep()
	w := &boundWalker{native: native, vars: vars, coll: true, scope: map[string]vbound{}}
	ranges := map[int64]bound{}
	w.ranges(native.Expr(), ranges)
	calls := map[int64]int64{}
	celast.PreOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.CallKind {
			return
		}
		call := e.AsCall()
		switch {
		case call.IsMemberFunction():
			calls[call.Target().ID()] = e.ID()
		case len(call.Args()) > 0:
			calls[call.Args()[0].ID()] = e.ID()
		}
	}))
	for i, l := range sizeLevels {
		out[i] = run(&sizer{s: l.s, c: l.c, vars: vars, ranges: ranges, calls: calls})
	}
	return out
}

// VarBound bounds the size of a variable's value (and of every value nested
// in it) from its expression, for the shapes variables usually take:
// selections from the request, concatenations, orValue defaults, literals,
// filters. Anything else is unknown, and expressions reading it always run
// tracked.
func VarBound(ast *cel.Ast, vars map[string]SizeBounds) SizeBounds {
	native := ast.NativeRep()
	return SizeBounds{
		gen:  (&boundWalker{native: native, vars: vars, scope: map[string]vbound{}}).walk(native.Expr()),
		coll: (&boundWalker{native: native, vars: vars, coll: true, scope: map[string]vbound{}}).walk(native.Expr()),
	}
}

// boundWalker computes bounds of expressions: lengths in terms of S, or
// (coll) entries in terms of C.
type boundWalker struct {
	native *celast.AST
	vars   map[string]SizeBounds
	coll   bool
	// scope holds the bounds of the comprehension variables in scope.
	scope map[string]vbound
}

func (w *boundWalker) walk(e celast.Expr) vbound {
	if t := w.native.GetType(e.ID()); t != nil {
		switch t.Kind() {
		case types.BoolKind, types.IntKind, types.UintKind, types.DoubleKind, types.NullTypeKind:
			return scalarVBound
		case types.StringKind, types.BytesKind:
			if w.coll {
				// Not a list or a map: nothing to iterate.
				return scalarVBound
			}
		}
	}
	switch e.Kind() {
	case celast.LiteralKind:
		if w.coll {
			return scalarVBound
		}
		switch v := e.AsLiteral().(type) {
		case types.String:
			return vbound{bound{c: uint64(len(v)), known: true}, scalarBound}
		case types.Bytes:
			return vbound{bound{c: uint64(len(v)), known: true}, scalarBound}
		}
		return scalarVBound
	case celast.IdentKind:
		name := e.AsIdent()
		if b, ok := w.scope[name]; ok {
			return b
		}
		if requestInputs[name] || name == celenv.ExceptionsVar {
			return inputVBound
		}
		return unknownVBound
	case celast.SelectKind:
		sel := e.AsSelect()
		op := sel.Operand()
		if op.Kind() == celast.IdentKind && op.AsIdent() == celenv.VariablesVar {
			if _, local := w.scope[celenv.VariablesVar]; !local {
				if b, ok := w.vars[sel.FieldName()]; ok {
					if w.coll {
						return b.coll
					}
					return b.gen
				}
				return unknownVBound
			}
		}
		return w.walk(op).nested()
	case celast.ListKind:
		l := e.AsList()
		b := vbound{bound{c: uint64(l.Size()), known: true}, scalarBound}
		for _, el := range l.Elements() {
			b.inner = b.inner.max(w.walk(el).cover())
		}
		return b
	case celast.MapKind:
		m := e.AsMap()
		b := vbound{bound{c: uint64(m.Size()), known: true}, scalarBound}
		for _, en := range m.Entries() {
			me := en.AsMapEntry()
			b.inner = b.inner.max(w.walk(me.Key()).cover()).max(w.walk(me.Value()).cover())
		}
		return b
	case celast.CallKind:
		call := e.AsCall()
		args := call.Args()
		switch call.FunctionName() {
		case "_+_":
			if len(args) == 2 {
				a, b := w.walk(args[0]), w.walk(args[1])
				return vbound{a.top.plus(b.top), a.inner.max(b.inner)}
			}
		case "__orValueCompat__", "or", "orValue":
			b := scalarVBound
			if call.IsMemberFunction() {
				b = w.walk(call.Target())
			}
			for _, a := range args {
				b = b.max(w.walk(a))
			}
			return b
		case "_?_:_":
			if len(args) == 3 {
				return w.walk(args[1]).max(w.walk(args[2]))
			}
		case "_?._", "_[_]", "_[?_]":
			if len(args) >= 1 {
				return w.walk(args[0]).nested()
			}
		}
		return unknownVBound
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		// filter keeps elements of its range; all/exists are scalars (above).
		if c.Result().Kind() == celast.IdentKind && c.Result().AsIdent() == c.AccuVar() &&
			c.LoopStep().Kind() == celast.CallKind && c.LoopStep().AsCall().FunctionName() == "_?_:_" {
			step := c.LoopStep().AsCall().Args()
			if len(step) == 3 && isAppendOfIterVar(step[1], c.AccuVar(), c.IterVar()) {
				return w.walk(c.IterRange())
			}
		}
		return unknownVBound
	}
	return unknownVBound
}

// ranges records the bound of every comprehension range under e (in
// entries, for a coll walker), with the comprehension variables in scope
// bounded by their range's bound (which covers the nested values).
func (w *boundWalker) ranges(e celast.Expr, out map[int64]bound) {
	switch e.Kind() {
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		w.ranges(c.IterRange(), out)
		w.ranges(c.AccuInit(), out)
		rb := w.walk(c.IterRange())
		out[c.IterRange().ID()] = rb.top
		names := []string{c.IterVar(), c.AccuVar()}
		if c.HasIterVar2() {
			names = append(names, c.IterVar2())
		}
		saved := make(map[string]vbound, len(names))
		had := make(map[string]bool, len(names))
		for _, n := range names {
			saved[n], had[n] = w.scope[n]
		}
		w.scope[c.IterVar()] = rb.nested()
		if c.HasIterVar2() {
			w.scope[c.IterVar2()] = rb.nested()
		}
		w.scope[c.AccuVar()] = unknownVBound
		w.ranges(c.LoopCondition(), out)
		w.ranges(c.LoopStep(), out)
		w.ranges(c.Result(), out)
		for _, n := range names {
			if had[n] {
				w.scope[n] = saved[n]
			} else {
				delete(w.scope, n)
			}
		}
	case celast.CallKind:
		call := e.AsCall()
		if call.IsMemberFunction() {
			w.ranges(call.Target(), out)
		}
		for _, a := range call.Args() {
			w.ranges(a, out)
		}
	case celast.SelectKind:
		w.ranges(e.AsSelect().Operand(), out)
	case celast.ListKind:
		for _, el := range e.AsList().Elements() {
			w.ranges(el, out)
		}
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			w.ranges(me.Key(), out)
			w.ranges(me.Value(), out)
		}
	}
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

// levelFor returns the index of the first size level that bounds inputs
// with at most c entries per list and map and s long, or -1.
func levelFor(c, s uint64) int {
	s = max(s, c)
	for i, l := range sizeLevels {
		if c <= l.c && s <= l.s {
			return i
		}
	}
	return -1
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

package celeval

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/jsonval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// State is the evaluation of one policy for one request: the activation
// its expressions read (the request's inputs, the policy's variables, the
// exceptions' allowed values, the context libraries), the cost charged,
// and what is being evaluated (for traces). It implements
// interpreter.Activation.
type State struct {
	rq         *Request
	scope      *Scope
	vars       *varsValue
	varsStore  varsValue
	varsArray  [8]ref.Val
	exceptions *celenv.Exception
	// resolver resolves a kind's own variables first (nil: none).
	resolver Resolver
	cost     uint64
	libs     map[string]any
	// exact runs every program with cost tracking.
	exact bool
	// inexact is set when charged estimates exceeded the budget.
	inexact bool
	// lbl says what is being evaluated (for traces: set only when traced).
	lbl      traceLabel
	isTraced bool
}

func (st *State) reset(rq *Request, scope *Scope, exact bool) {
	// Field by field: the variables' array is cleared only as far as used.
	st.rq, st.scope, st.exact, st.exceptions = rq, scope, exact, &noExceptions
	st.resolver = nil
	st.cost, st.libs, st.inexact = 0, nil, false
	st.lbl, st.isTraced = traceLabel{}, rq.cfg.Trace != nil
	st.varsStore = varsValue{st: st}
	if n := len(scope.Variables); n <= len(st.varsArray) {
		clear(st.varsArray[:n])
		st.varsStore.values = st.varsArray[:n]
	} else {
		st.varsStore.values = make([]ref.Val, n)
	}
	st.vars = &st.varsStore
}

// Request returns the request being evaluated.
func (st *State) Request() *Request { return st.rq }

// Scope returns the policy being evaluated.
func (st *State) Scope() *Scope { return st.scope }

// SetExceptions sets the `exceptions` value: the images and values that
// granted exceptions allow.
func (st *State) SetExceptions(allowedImages, allowedValues []string) {
	if len(allowedImages) == 0 && len(allowedValues) == 0 {
		st.exceptions = &noExceptions
		return
	}
	st.exceptions = &celenv.Exception{AllowedImages: allowedImages, AllowedValues: allowedValues}
}

// Resolver resolves names of a kind's own (ImageValidatingPolicy's
// images, attestors, ...), or overrides the request's inputs.
type Resolver interface {
	ResolveName(name string) (any, bool)
}

// SetResolver makes r resolve names before the request's inputs, the
// policy's variables and the context libraries, for the rest of this
// policy's evaluation.
func (st *State) SetResolver(r Resolver) { st.resolver = r }

// noExceptions is the `exceptions` value when no image- or value-based
// exception applies (read-only).
var noExceptions = celenv.Exception{AllowedImages: []string{}, AllowedValues: []string{}}

var (
	errBudget = errors.New("validation failed due to running out of cost budget, no further validation rules will be run")
	// errInexact aborts an evaluation whose charged estimates exceeded the
	// budget, so it is redone with exact cost tracking.
	errInexact = errors.New("cost estimates exceeded the budget")
)

// interruptEvery is how many comprehension iterations a tracked program
// runs between checks of the request's context.
const interruptEvery = 100

// estimateCheck, when set (by tests), is called after every untracked
// evaluation, to check the estimate charged bounds the exact cost.
var estimateCheck func(st *State, p *Program, level int)

// Eval evaluates a program in this policy's activation, sharing the
// results of request-pure expressions across policies. It stops when the
// request's context is done: at once, or within interruptEvery iterations
// of a comprehension of an expensive (tracked) program.
func (st *State) Eval(p *Program) (ref.Val, error) {
	if p.constant != nil {
		return p.constant, nil
	}
	memo := p.memoKey != "" && st.rq.cfg.Shared[p.memoKey]
	if memo {
		if v, ok := st.rq.memo[p.memoKey]; ok {
			return v, nil
		}
	}
	select {
	case <-st.rq.done:
		err := fmt.Errorf("evaluation stopped: %w", context.Cause(st.rq.ctx))
		st.traced(p, nil, err)
		return nil, err
	default:
	}
	var out ref.Val
	var err error
	if lvl := st.rq.level(); p.fast != nil && lvl >= 0 && p.est[lvl] <= fastCostLimit && !st.exact {
		// Proven cheap for inputs of this size: run untracked, charge the estimate.
		st.cost += p.est[lvl]
		if st.cost > celconfig.RuntimeCELCostBudget {
			// The estimates overcharge; the policy is redone exactly.
			st.inexact = true
			return nil, errInexact
		}
		out, _, err = p.fast.Eval(st)
		if estimateCheck != nil {
			estimateCheck(st, p, lvl)
		}
	} else {
		prg, perr := p.trackedProgram()
		if perr != nil {
			return nil, perr
		}
		var det *cel.EvalDetails
		out, det, err = prg.ContextEval(st.rq.ctx, st)
		if det != nil {
			if c := det.ActualCost(); c != nil {
				st.cost += *c
				if st.cost > celconfig.RuntimeCELCostBudget {
					return nil, errBudget
				}
			}
		}
	}
	st.traced(p, out, err)
	if err != nil {
		return nil, err
	}
	if memo {
		if st.rq.memo == nil {
			st.rq.memo = map[string]ref.Val{}
		}
		st.rq.memo[p.memoKey] = out
	}
	return out, nil
}

// Match evaluates conditions as Kyverno does: any false is no match;
// errors without a false follow failurePolicy (Ignore: no match; Fail:
// error).
func (st *State) Match(conds []*Program, fp admissionregistrationv1.FailurePolicyType) (bool, error) {
	var errs []string
	for i, c := range conds {
		if st.isTraced {
			st.lbl.name = Index(i)
		}
		out, err := st.Eval(c)
		var ok bool
		if err == nil {
			ok, err = AsBool(out)
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if !ok {
			return false, nil
		}
	}
	if len(errs) == 0 {
		return true, nil
	}
	if fp == admissionregistrationv1.Ignore {
		return false, nil
	}
	return false, errors.New(strings.Join(errs, "; "))
}

// ResolveName implements interpreter.Activation.
func (st *State) ResolveName(name string) (any, bool) {
	if st.resolver != nil {
		if v, ok := st.resolver.ResolveName(name); ok {
			return v, true
		}
	}
	switch name {
	case celenv.ObjectVar:
		return st.rq.object, true
	case celenv.OldObjectVar:
		return st.rq.oldObject, true
	case celenv.RequestVar:
		if st.rq.request == nil {
			r := st.rq.req
			if st.rq.cfg.Request != nil {
				r = st.rq.cfg.Request
			}
			st.rq.request = jsonval.Of(r.Value())
		}
		return st.rq.request, true
	case celenv.NamespaceObjectVar:
		return st.rq.namespaceVal, true
	case celenv.VariablesVar:
		if st.vars == nil {
			return nil, false
		}
		return st.vars, true
	case celenv.ExceptionsVar:
		if st.exceptions == nil {
			return nil, false
		}
		return st.exceptions, true
	}
	if st.libs == nil {
		st.libs = kyvernocel.BindContext(st.rq.ctx, st.rq.libCtx, st.scope.Namespace)
	}
	v, ok := st.libs[name]
	return v, ok
}

// Parent implements interpreter.Activation.
func (st *State) Parent() interpreter.Activation { return nil }

// traceLabel says what the expression being evaluated is.
type traceLabel struct {
	phase, name, exception string
}

// Label labels the next evaluations (for traces).
func (st *State) Label(phase, name, exception string) {
	if st.isTraced {
		st.lbl = traceLabel{phase: phase, name: name, exception: exception}
	}
}

// Index names the i-th item of a list in traces.
func Index(i int) string { return strconv.Itoa(i) }

// traced records an evaluation when the request is traced.
func (st *State) traced(p *Program, out ref.Val, err error) {
	t := st.rq.cfg.Trace
	if t == nil {
		return
	}
	s := outcome.TraceStep{
		Policy: st.scope.Policy, Variant: st.scope.Variant, Phase: st.lbl.phase, Name: st.lbl.name,
		Exception: st.lbl.exception, Expression: p.expr,
	}
	if err != nil {
		s.Error = err.Error()
	} else {
		s.Value = outcome.RenderVal(out)
	}
	t.Add(s)
}

// Note records a note about the policy when the request is traced.
func (st *State) Note(phase, exception, note string) {
	st.rq.Note(st.scope.Policy, st.scope.Variant, phase, exception, note)
}

// varsValue is the lazily evaluated `variables` object of a policy: a
// variable is computed on first use, in the policy's activation.
type varsValue struct {
	st     *State
	values []ref.Val
}

// An object type (an indexer and a field tester) that is also iterable.
var varsTypeValue = types.NewObjectType(celenv.VariablesTypeName, traits.IterableType)

func (m *varsValue) index(name string) int {
	for i, v := range m.st.scope.Variables {
		if v.Name == name {
			return i
		}
	}
	return -1
}

func (m *varsValue) resolve(i int) ref.Val {
	if v := m.values[i]; v != nil {
		return v
	}
	prev := m.st.lbl
	if m.st.isTraced {
		m.st.lbl = traceLabel{phase: outcome.PhaseVariable, name: m.st.scope.Variables[i].Name}
	}
	out, err := m.st.Eval(m.st.scope.Variables[i].Prog)
	m.st.lbl = prev
	if err != nil {
		out = types.WrapErr(err)
	}
	m.values[i] = out
	return out
}

// Find implements traits.Mapper.
func (m *varsValue) Find(key ref.Val) (ref.Val, bool) {
	n, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key), true
	}
	i := m.index(string(n))
	if i < 0 {
		return nil, false
	}
	return m.resolve(i), true
}

// Get implements traits.Indexer.
func (m *varsValue) Get(key ref.Val) ref.Val {
	if v, found := m.Find(key); found {
		return v
	}
	return types.ValOrErr(key, "no such key: %v", key)
}

// Contains implements traits.Container.
func (m *varsValue) Contains(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if v != nil && types.IsUnknownOrError(v) {
		return v
	}
	return types.Bool(found)
}

// IsSet implements traits.FieldTester.
func (m *varsValue) IsSet(field ref.Val) ref.Val { return m.Contains(field) }

// Size implements traits.Sizer.
func (m *varsValue) Size() ref.Val { return types.Int(len(m.values)) }

// Iterator implements traits.Iterable.
func (m *varsValue) Iterator() traits.Iterator {
	names := make([]string, len(m.st.scope.Variables))
	for i, v := range m.st.scope.Variables {
		names[i] = v.Name
	}
	return types.NewStringList(types.DefaultTypeAdapter, names).Iterator()
}

// ConvertToNative implements ref.Val.
func (m *varsValue) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion from %q to %q", celenv.VariablesTypeName, typeDesc.Name())
}

// ConvertToType implements ref.Val.
func (m *varsValue) ConvertToType(typeVal ref.Type) ref.Val {
	switch typeVal {
	case varsTypeValue:
		return m
	case types.TypeType:
		return varsTypeValue
	}
	return types.NewErr("disallowed conversion from %q to %q", celenv.VariablesTypeName, typeVal.TypeName())
}

// Equal implements ref.Val.
func (m *varsValue) Equal(other ref.Val) ref.Val {
	o, ok := other.(*varsValue)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(m == o)
}

// Type implements ref.Val.
func (m *varsValue) Type() ref.Type { return varsTypeValue }

// Value implements ref.Val.
func (m *varsValue) Value() any { return types.NoSuchOverloadErr() }

package celeval

import (
	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/mutation"
)

// jsonPatchConstructors returns a decorator that plans each JSONPatch{…}
// literal of ast (without optional fields) as a jsonPatchNode: the same
// value as cel-go's object construction (a map of the fields handed to
// mutation.JSONPatchType.Val), built without the map; nil when ast has
// none. Used for the programs that run without cost tracking only, so
// exact costs are cel-go's own.
func jsonPatchConstructors(ast *cel.Ast) []cel.ProgramOption {
	fields := map[int64][]string{}
	celast.PreOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.StructKind || e.AsStruct().TypeName() != mutation.JSONPatchTypeName {
			return
		}
		names := make([]string, 0, len(e.AsStruct().Fields()))
		for _, f := range e.AsStruct().Fields() {
			sf := f.AsStructField()
			if sf.IsOptional() {
				return
			}
			names = append(names, sf.Name())
		}
		fields[e.ID()] = names
	}))
	if len(fields) == 0 {
		return nil
	}
	return []cel.ProgramOption{cel.CustomDecoratorV2(func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		c, ok := i.(interpreter.InterpretableConstructor)
		if !ok {
			return i, nil
		}
		names, ok := fields[i.ID()]
		if !ok || len(names) != len(c.InitVals()) || c.Type().TypeName() != mutation.JSONPatchTypeName {
			return i, nil
		}
		return &jsonPatchNode{id: i.ID(), fields: names, vals: c.InitVals(), orig: c}, nil
	})}
}

// jsonPatchNode constructs a *mutation.JSONPatchVal from its fields, in
// the order written.
type jsonPatchNode struct {
	id     int64
	fields []string
	vals   []interpreter.InterpretableV2
	orig   interpreter.InterpretableConstructor
}

var _ interpreter.InterpretableConstructor = (*jsonPatchNode)(nil)

func (n *jsonPatchNode) ID() int64                               { return n.id }
func (n *jsonPatchNode) InitVals() []interpreter.InterpretableV2 { return n.vals }
func (n *jsonPatchNode) Type() ref.Type                          { return n.orig.Type() }

func (n *jsonPatchNode) Eval(a interpreter.Activation) ref.Val {
	return n.Exec(interpreter.AsFrame(a))
}

func (n *jsonPatchNode) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	out := &mutation.JSONPatchVal{}
	for i, field := range n.fields {
		val := n.vals[i].Exec(frame)
		if types.IsUnknownOrError(val) {
			// Errors as cel-go returns them; unknowns (not made here:
			// no partial evaluation) by the original node.
			if types.IsUnknown(val) {
				return n.orig.Exec(frame)
			}
			return val
		}
		if field == "value" {
			out.Val = val
			continue
		}
		s, ok := val.(types.String)
		if !ok {
			str, isString := val.Value().(string)
			if !isString {
				// The library's own error texts (a dyn value of another type).
				return types.LabelErrNode(n.id, (&mutation.JSONPatchType{}).Val(map[string]ref.Val{field: val}))
			}
			s = types.String(str)
		}
		switch field {
		case "op":
			out.Op = string(s)
		case "path":
			out.Path = string(s)
		case "from":
			out.From = string(s)
		default:
			return types.LabelErrNode(n.id, (&mutation.JSONPatchType{}).Val(map[string]ref.Val{field: val}))
		}
	}
	return out
}

package engine

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"sync"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Trace records how a decision was reached: every expression evaluated
// (matchConditions, exception conditions and controls, variables,
// validations, message expressions, audit annotations) with its value or
// error, in order, and the notes that explain the rest (what matched, what
// an exception did, why a result is what it is). Set Request.Trace to
// record one; tracing does not change the decision.
type Trace struct {
	mu    sync.Mutex
	Steps []TraceStep
}

// Trace step phases.
const (
	PhaseMatch                   = "matchConstraints"
	PhaseExceptionCondition      = "exception.matchCondition"
	PhaseExceptionControl        = "exception.control"
	PhaseExceptionControlMessage = "exception.control.message"
	PhaseMatchCondition          = "matchCondition"
	PhaseVariable                = "variable"
	PhaseValidation              = "validation"
	PhaseMessageExpression       = "messageExpression"
	PhaseAuditAnnotation         = "auditAnnotation"
	PhaseResult                  = "result"
)

// TraceStep is one expression evaluated, or one note.
type TraceStep struct {
	// Policy is the policy's report name; Variant is "" or the autogen
	// configuration (defaults, cronjobs) that matched.
	Policy  string
	Variant string
	Phase   string
	// Name is the index or name of the condition, variable, validation or
	// annotation ("0", "allContainers").
	Name string
	// Exception is the namespace/name of the exception the step belongs to.
	Exception  string
	Expression string
	// Value is the result rendered as JSON; Error the evaluation error.
	Value string
	Error string
	// Note explains a step that is not an evaluation.
	Note string
}

func (t *Trace) add(s TraceStep) {
	t.mu.Lock()
	t.Steps = append(t.Steps, s)
	t.mu.Unlock()
}

// traceLabel says what the expression being evaluated is.
type traceLabel struct {
	phase, name, exception string
}

// traced records an evaluation when the request is traced.
func (st *policyState) traced(p *program, out ref.Val, err error) {
	t := st.rq.req.Trace
	if t == nil {
		return
	}
	s := TraceStep{
		Policy: st.v.policy.Key(), Variant: st.v.config, Phase: st.lbl.phase, Name: st.lbl.name,
		Exception: st.lbl.exception, Expression: p.expr,
	}
	if err != nil {
		s.Error = err.Error()
	} else {
		s.Value = renderVal(out)
	}
	t.add(s)
}

// note records a note when the request is traced.
func (rq *evalRequest) note(p *Policy, variant, phase, exception, note string) {
	if rq.req.Trace == nil {
		return
	}
	rq.req.Trace.add(TraceStep{Policy: p.Key(), Variant: variant, Phase: phase, Exception: exception, Note: note})
}

// at sets the label of the next evaluations; it returns the previous one.
func (st *policyState) at(phase, name, exception string) traceLabel {
	prev := st.lbl
	st.lbl = traceLabel{phase: phase, name: name, exception: exception}
	return prev
}

func index(i int) string { return strconv.Itoa(i) }

// renderVal renders a CEL value as JSON where it can.
func renderVal(v ref.Val) string {
	switch t := v.(type) {
	case nil:
		return "null"
	case types.String:
		b, _ := json.Marshal(string(t))
		return string(b)
	case types.Bool, types.Int, types.Uint, types.Double:
		return fmt.Sprint(t.Value())
	}
	if v == types.NullValue {
		return "null"
	}
	if native, err := v.ConvertToNative(reflect.TypeFor[any]()); err == nil {
		if b, err := json.Marshal(native); err == nil {
			return string(b)
		}
	}
	if native, err := v.ConvertToNative(reflect.TypeFor[*structpb.Value]()); err == nil {
		if b, err := protojson.Marshal(native.(*structpb.Value)); err == nil {
			var compact any
			if json.Unmarshal(b, &compact) == nil {
				b, _ = json.Marshal(compact)
			}
			return string(b)
		}
	}
	if o, ok := v.(*types.Optional); ok {
		if o.HasValue() {
			return "optional.of(" + renderVal(o.GetValue()) + ")"
		}
		return "optional.none()"
	}
	return fmt.Sprint(v.Value())
}

func refusalText(r refusal) string {
	if r.err != nil {
		return r.err.Error()
	}
	return r.message
}

// explainResult says why a result is what it is.
func explainResult(r *Result) string {
	switch {
	case r.Rule == "exception":
		return r.Result + ": a granted exception exempts the resource (" + r.Message + ")"
	case r.Rule == "evaluation":
		return r.Result + ": the policy could not be evaluated: " + r.Message
	case r.Rule == "match":
		return r.Result + ": matching failed: " + r.Message
	case r.MatchConditionsSkip:
		return "skip: a matchCondition of the policy is false"
	case r.Result == ResultPass:
		return "pass: every validation holds"
	case r.Result == ResultFail || r.Result == ResultWarn:
		why := "validation " + r.Properties[PropValidationIndex] + " is false"
		if len(r.Exceptions) > 0 {
			why += "; the matching exception " + r.Exceptions[0] + " was refused by its compensating controls, whose message is shown"
		}
		return r.Result + ": " + why + ": " + r.Message
	case r.Result == ResultError:
		return "error: " + r.Message
	}
	return r.Result + ": " + r.Message
}

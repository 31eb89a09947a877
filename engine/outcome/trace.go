package outcome

import (
	"encoding/json"
	"fmt"
	"reflect"
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
// an exception did, why a result is what it is). Set the evaluation's Trace to
// record one; tracing does not change the decision.
type Trace struct {
	mu    sync.Mutex
	Steps []TraceStep
}

// Trace step phases.
const (
	PhaseMatch                   = "matchConstraints"
	PhaseBindingMatch            = "binding.matchResources"
	PhaseExceptionCondition      = "exception.matchCondition"
	PhaseExceptionControl        = "exception.control"
	PhaseExceptionControlMessage = "exception.control.message"
	PhaseMatchCondition          = "matchCondition"
	PhaseVariable                = "variable"
	PhaseValidation              = "validation"
	PhaseMessageExpression       = "messageExpression"
	PhaseAuditAnnotation         = "auditAnnotation"
	PhaseMutation                = "mutation"
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

// Add records a step.
func (t *Trace) Add(s TraceStep) {
	t.mu.Lock()
	t.Steps = append(t.Steps, s)
	t.mu.Unlock()
}

// RenderVal renders a CEL value as JSON where it can.
func RenderVal(v ref.Val) string {
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
			return "optional.of(" + RenderVal(o.GetValue()) + ")"
		}
		return "optional.none()"
	}
	return fmt.Sprint(v.Value())
}

package admissionpolicy

import (
	"strconv"

	"github.com/google/cel-go/common/types/ref"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
)

// Step is one expression evaluated (Value or Err) or one note, for the
// trace of a decision (its Phase is one of outcome's Phase words).
type Step struct {
	Policy, Binding, Param string
	Phase, Name            string
	Expression             string
	Value                  ref.Val
	Err                    string
	Note                   string
}

// Traced says whether the request is traced.
func (rq *Request) Traced() bool { return rq.trace != nil }

// TraceScope names the policy, binding and param being evaluated, for the
// steps recorded next.
func (rq *Request) TraceScope(policy, binding, param string) {
	rq.tracePolicy, rq.traceBinding, rq.traceParam = policy, binding, param
}

// Note records a step for the policy, binding and param being evaluated.
func (rq *Request) Note(s Step) {
	if rq.trace == nil {
		return
	}
	s.Policy, s.Binding, s.Param = rq.tracePolicy, rq.traceBinding, rq.traceParam
	rq.trace(s)
}

// TraceResults records the evaluations of one pass (placeholders left out).
func (rq *Request) TraceResults(phase string, names func(i int) string, results []plugincel.CompilationResult, evals []EvalResult) {
	if !rq.Traced() {
		return
	}
	for i, ev := range evals {
		if !ev.Compiled {
			continue
		}
		s := Step{Phase: phase, Name: names(i), Value: ev.Value}
		if results[i].ExpressionAccessor != nil {
			s.Expression = results[i].ExpressionAccessor.GetExpression()
		}
		if ev.Err != nil {
			s.Err, s.Value = ev.Err.Error(), nil
		}
		rq.Note(s)
	}
}

// IndexName names the i-th expression of a list by its index.
func IndexName(i int) string { return strconv.Itoa(i) }

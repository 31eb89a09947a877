package vap

import (
	"strconv"

	"github.com/google/cel-go/common/types/ref"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
)

// Step is one expression evaluated (Value or Err) or one note, for the
// trace of Decide (its Phase is one of outcome's Phase words).
type Step struct {
	Policy, Binding, Param string
	Phase, Name            string
	Expression             string
	Value                  ref.Val
	Err                    string
	Note                   string
}

// traceOn says whether the request is traced.
func (rq *evalRequest) traceOn() bool { return rq.trace != nil }

// note records a step for the policy, binding and param being evaluated.
func (rq *evalRequest) note(s Step) {
	if rq.trace == nil {
		return
	}
	s.Policy, s.Binding, s.Param = rq.tracePolicy, rq.traceBinding, rq.traceParam
	rq.trace(s)
}

// traceResults records the evaluations of one pass (placeholders left out).
func (rq *evalRequest) traceResults(phase string, names func(i int) string, results []plugincel.CompilationResult, evals []evalResult) {
	if !rq.traceOn() {
		return
	}
	for i, ev := range evals {
		if !ev.compiled {
			continue
		}
		s := Step{Phase: phase, Name: names(i), Value: ev.value}
		if results[i].ExpressionAccessor != nil {
			s.Expression = results[i].ExpressionAccessor.GetExpression()
		}
		if ev.err != nil {
			s.Err, s.Value = ev.err.Error(), nil
		}
		rq.note(s)
	}
}

func indexName(i int) string { return strconv.Itoa(i) }

// matchConditionName is the name of the policy's i-th matchCondition.
func (p *Policy) matchConditionName(i int) string {
	if i < len(p.Spec.MatchConditions) {
		return p.Spec.MatchConditions[i].Name
	}
	return indexName(i)
}

package mapol

import (
	"github.com/arbiter-pdp/arbiter/engine/admission"
	ap "github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// PropReinvoked is the result property of an invocation that ran again in
// the reinvocation pass ("true").
const PropReinvoked = "reinvoked"

// Reinvocation is what the first pass of a request leaves for the
// reinvocation pass, which runs after the mutating kinds that follow
// (kube-apiserver runs MutatingAdmissionPolicies, then the mutating
// webhooks — Kyverno's among them —, then the plugins that ask for it
// again). Nil when there is nothing to reinvoke.
type Reinvocation struct {
	d *dispatch
	// first is the index in out.Results of the first pass's first result;
	// known is how many it wrote.
	first, known int
	out          *outcome.Outcome
}

// Mutate applies the set's policies to the request's object as mutated so
// far (rq.Object(), which it updates, except in background scans), as
// kube-apiserver's MutatingAdmissionPolicy plugin does on its first pass,
// and adds a result per invocation to out, with a denial for each error of
// a policy whose failurePolicy is Fail. The caller runs the other mutating
// kinds, then Reinvoke. In background scans the stored object is not
// changed: an invocation that would change it fails ("mutation is not
// applied"), and the reinvocation is part of Mutate.
func (s *Set) Mutate(rq *celeval.Request, out *outcome.Outcome) *Reinvocation {
	req := rq.Attributes()
	d := s.start(rq.Context(), req, rq.Object(), traceTo(rq.Trace()))
	if d == nil {
		return nil
	}
	first := len(out.Results)
	denied := d.pass()
	if d.background {
		if !denied && d.dirty {
			d.reinvoke()
		}
		d.report(out, first, 0)
		return nil
	}
	d.report(out, first, 0)
	rq.SetObject(d.object)
	if denied {
		return nil
	}
	return &Reinvocation{d: d, first: first, known: len(d.verdict.Results), out: out}
}

// Reinvoke runs the reinvocation pass when kube-apiserver would: when a
// mutation of the first pass succeeded, or the kinds that ran since
// changed the object; then only the invocations of the first pass whose
// policy's reinvocationPolicy is IfNeeded run again (every invocation's
// matchConditions are evaluated again, and errors still deny). Nothing
// runs when the request was denied since. r may be nil.
func (r *Reinvocation) Reinvoke(rq *celeval.Request) {
	if r == nil || r.out.Denied() {
		return
	}
	d := r.d
	obj := rq.Object()
	changed := !sameMap(obj, d.lastOutput) && !equalJSON(obj, d.lastOutput)
	if !d.dirty && !changed {
		return
	}
	d.object = obj
	d.reinvoke()
	d.report(r.out, r.first, r.known)
	rq.SetObject(d.object)
}

// report writes the results (those before known are updated in place, at
// out.Results[first:]) and the denials not yet written into out.
func (d *dispatch) report(out *outcome.Outcome, first, known int) {
	proc := outcome.Process(d.req.Mode == admission.ModeAdmission)
	for i := range d.verdict.Results {
		r := &d.verdict.Results[i]
		res := outcome.Result{
			Policy:     r.Policy,
			PolicyName: r.Policy,
			PolicyKind: KindPolicy,
			Rule:       r.Binding,
			Result:     r.Result,
			Message:    r.Message,
			Properties: map[string]string{outcome.PropProcess: proc},
			Source:     outcome.SourceMutatingAdmissionPolicy,
			Scored:     true,
		}
		if r.Binding != "" {
			res.Properties[outcome.PropBinding] = r.Binding
		}
		if r.Param != "" {
			res.Properties[outcome.PropParams] = r.Param
		}
		if r.Reinvoked {
			res.Properties[PropReinvoked] = "true"
		}
		switch {
		case r.Result == ResultSkip && r.Message == MessageMatchConditions:
			res.Cause = outcome.CauseMatchConditions
		case d.background && r.Result == ResultPass && r.changed:
			res.Result, res.Message = ResultFail, MessageNotApplied
		}
		if i < known {
			out.Results[first+i] = res
		} else {
			out.Results = append(out.Results, res)
		}
	}
	for _, dn := range d.verdict.Denials {
		out.Deny(dn.Code, string(dn.Reason), dn.Text())
	}
}

// traceTo adapts a trace for the set's steps.
func traceTo(trace *outcome.Trace) func(ap.Step) {
	if trace == nil {
		return nil
	}
	return func(st ap.Step) {
		ts := outcome.TraceStep{Policy: st.Policy, Variant: traceVariant(st.Binding, st.Param), Phase: st.Phase, Name: st.Name, Expression: st.Expression, Error: st.Err, Note: st.Note}
		if st.Value != nil {
			ts.Value = outcome.RenderVal(st.Value)
		}
		trace.Add(ts)
	}
}

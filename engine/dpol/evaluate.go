package dpol

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Candidate is an object a run considers deleting.
type Candidate struct {
	// Object is the object as listed.
	Object map[string]any
	// Resource is the resource it was listed as (zero: derived from its
	// kind).
	Resource schema.GroupVersionResource
	// Namespace is the object's Namespace (nil: not known, or a
	// cluster-scoped object). A Namespace candidate is its own: leave it
	// nil.
	Namespace map[string]any
}

// Options tune an evaluation.
type Options struct {
	// Context is what the conditions' context libraries (resource.*,
	// globalContext, http.*, image data) read; nil: no cluster access.
	Context kyvernocel.Context
	// Now is the time exceptions' expiresAt is compared with (zero: time.Now()).
	Now time.Time
	// Trace, when set, records the evaluation.
	Trace *outcome.Trace
}

// Verdict is what a policy decides for a candidate.
type Verdict int

const (
	// NotMatched: matchConstraints do not select the candidate.
	NotMatched Verdict = iota
	// ConditionFalse: a condition is false (Decision.Condition names it).
	ConditionFalse
	// Excepted: a PolicyException exempts the candidate.
	Excepted
	// Delete: the policy deletes the candidate.
	Delete
	// Failed: matching or evaluating failed (Decision.Err); the candidate
	// is not deleted.
	Failed
)

var verdictNames = [...]string{"not matched", "condition false", "excepted", "delete", "error"}

func (v Verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Decision is a policy's decision on a candidate, with its reason.
type Decision struct {
	Verdict Verdict
	// Condition is the name of the condition that was false.
	Condition string
	// Exceptions are the exceptions (namespace/name) that exempt the candidate.
	Exceptions []string
	// Err is why matching or evaluating failed.
	Err error
}

// Deletes says whether the candidate is to be deleted.
func (d Decision) Deletes() bool { return d.Verdict == Delete }

// Reason says why, for logs.
func (d Decision) Reason() string {
	switch d.Verdict {
	case NotMatched:
		return "the policy's matchConstraints do not select it"
	case ConditionFalse:
		return fmt.Sprintf("condition %q is false", d.Condition)
	case Excepted:
		return "exempted by policy exception " + strings.Join(d.Exceptions, ", ")
	case Delete:
		return "every condition is true"
	}
	if d.Err != nil {
		return d.Err.Error()
	}
	return d.Verdict.String()
}

// Bound is a policy with the exceptions that name it.
type Bound struct {
	Policy     *Policy
	Exceptions *exception.Bound
}

// Evaluate decides whether the policy deletes a candidate, as Kyverno's
// cleanup engine does (pkg/cel/policies/dpol/engine and compiler): the
// candidate is matched as a CREATE of the object (operations do not
// count) against matchConstraints — resourceRules, excludeResourceRules,
// namespaceSelector, objectSelector; then a PolicyException that names
// the policy and whose matchConditions hold exempts it (expired ones are
// ignored; an error evaluating one is an error); then every condition
// must be true: the first false one stops, errors without a false one
// are an error. The conditions see `object`, `namespaceObject` (the
// Namespace; a Namespace candidate's own object), `variables` and
// Kyverno's libraries.
func (b Bound) Evaluate(ctx context.Context, c Candidate, opts Options) Decision {
	p := b.Policy
	req := &admission.Request{Operation: admission.OpCreate, Object: c.Object, Resource: c.Resource, Mode: admission.ModeBackground}
	req.Fill()
	ns := c.Namespace
	if req.IsNamespace() {
		ns = c.Object
	}
	if p.Namespaced() && req.Namespace != p.Namespace {
		return Decision{Verdict: NotMatched}
	}
	ok, err := p.match.Matches(req, ns)
	if err != nil {
		return Decision{Verdict: Failed, Err: fmt.Errorf("failed to match: %w", err)}
	}
	if !ok {
		return Decision{Verdict: NotMatched}
	}
	rq := celeval.NewRequest(ctx, req, celeval.Config{
		Namespace: ns, NamespaceAlways: true, Context: opts.Context, Now: opts.Now, Trace: opts.Trace, ExactCost: true,
	})
	return celeval.Run(rq, &p.scope, func(st *celeval.State) Decision {
		return b.evaluate(st)
	})
}

func (b Bound) evaluate(st *celeval.State) Decision {
	p := b.Policy
	if b.Exceptions != nil {
		ver := b.Exceptions.Evaluate(st, p.Namespaced(), admissionregistrationv1.Fail, exception.ErrorStops)
		if len(ver.Granted) > 0 {
			keys := make([]string, len(ver.Granted))
			for i, ex := range ver.Granted {
				keys[i] = ex.Key()
			}
			return Decision{Verdict: Excepted, Exceptions: keys}
		}
		if ver.Err != nil {
			return Decision{Verdict: Failed, Err: fmt.Errorf("failed to evaluate the policy exceptions: %w", ver.Err)}
		}
	}
	var errs []error
	for i, c := range p.conditions {
		st.Label(outcome.PhaseMatchCondition, p.names[i], "")
		out, err := st.Eval(c)
		var ok bool
		if err == nil {
			ok, err = celeval.AsBool(out)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("condition %q: %w", p.names[i], err))
			continue
		}
		if !ok {
			return Decision{Verdict: ConditionFalse, Condition: p.names[i]}
		}
	}
	if len(errs) > 0 {
		return Decision{Verdict: Failed, Err: errors.Join(errs...)}
	}
	return Decision{Verdict: Delete}
}

package exception

import (
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Bound are the exceptions bound to one policy (or Pod Security level), in
// evaluation order, indexed by their guards. It is immutable.
type Bound struct {
	Exceptions []*Exception
	index      *Index
	// expiring are the exceptions with an expiresAt.
	expiring []*Exception
}

// Bind binds exceptions to a policy; index, when not nil, is an index of
// the same exceptions to reuse.
func Bind(excs []*Exception, index *Index) *Bound {
	if index == nil {
		index = NewIndex(excs)
	}
	b := &Bound{Exceptions: excs, index: index}
	for _, ex := range excs {
		if !ex.ExpiresAt.IsZero() {
			b.expiring = append(b.expiring, ex)
		}
	}
	return b
}

// Index returns the index of the bound exceptions.
func (b *Bound) Index() *Index { return b.index }

// Expired returns the namespace/name of the bound exceptions expired at now.
func (b *Bound) Expired(now time.Time) []string {
	if b == nil {
		return nil
	}
	var out []string
	for _, ex := range b.expiring {
		if ex.Expired(now) {
			out = append(out, ex.Key())
		}
	}
	return out
}

// OnError says what an error evaluating an exception's matchConditions does.
type OnError int

const (
	// ErrorStops: the policy's result is an error (unless a full exemption
	// was already granted), as Kyverno evaluates a policy's exceptions.
	ErrorStops OnError = iota
	// ErrorRefuses: the exception is refused with the error, reported only
	// if the policy fails (Pod Security levels: a compliant resource is
	// never denied because of an exception).
	ErrorRefuses
)

// Verdict is what a policy's exceptions say about a request.
type Verdict struct {
	// Granted are the granted exceptions, in order.
	Granted []*Exception
	// Refused are the matched exceptions refused by their compensating
	// controls (or, with ErrorRefuses, by an error).
	Refused []Refusal
	// Full says a granted exception exempts the resource outright.
	Full bool
	// AllowedImages and AllowedValues are what the granted partial
	// exceptions allow (when none is full).
	AllowedImages, AllowedValues []string
	// Err is the error of an exception's matchConditions (ErrorStops).
	Err error
}

// Refusal is a matched exception refused by its compensating controls.
type Refusal struct {
	Exception *Exception
	// Message is the controls' message; Err a runtime error instead.
	Message string
	Err     error
}

// Text is the refusal's message or error.
func (r Refusal) Text() string {
	if r.Err != nil {
		return r.Err.Error()
	}
	return r.Message
}

// Evaluate evaluates the bound exceptions of a policy for the request of
// st: expired ones are ignored, guards skip those that cannot match, the
// matchConditions of the others are evaluated under failurePolicy fp,
// then their compensating controls. namespaced says the policy's kind is
// namespaced (the exceptions' expressions compiled for it are used).
func (b *Bound) Evaluate(st *celeval.State, namespaced bool, fp admissionregistrationv1.FailurePolicyType, onErr OnError) Verdict {
	var out Verdict
	if b == nil || len(b.Exceptions) == 0 {
		return out
	}
	fl := flavour(namespaced)
	object := st.Request().Attributes().Object
	now := st.Request().Now()
	var buf [8]int
	for _, i := range b.index.Candidates(object, buf[:0]) {
		ex := b.Exceptions[i]
		if ex.Expired(now) {
			st.Note(outcome.PhaseExceptionCondition, ex.Key(), "expired at "+ex.ExpiresAt.Format(time.RFC3339)+": ignored")
			continue
		}
		if ex.refuted(object) {
			st.Note(outcome.PhaseExceptionCondition, ex.Key(), "does not match: a matchCondition compares a field of the object with other values")
			continue
		}
		st.Label(outcome.PhaseExceptionCondition, "", ex.Key())
		matched, err := st.Match(ex.conds[fl], fp)
		if err != nil {
			if onErr == ErrorRefuses {
				st.Note(outcome.PhaseExceptionCondition, ex.Key(), "refused: its matchConditions failed: "+err.Error())
				out.Refused = append(out.Refused, Refusal{Exception: ex, Err: fmt.Errorf("policy exception %s: failed to evaluate matchConditions: %v", ex.Key(), err)})
				continue
			}
			if out.Full {
				continue
			}
			out.Err = err
			return out
		}
		if !matched {
			continue
		}
		if controls := ex.controls[fl]; len(controls) > 0 {
			if r, ok := ex.evalControls(st, controls); !ok {
				st.Note(outcome.PhaseExceptionControl, ex.Key(), "refused: "+r.Text())
				out.Refused = append(out.Refused, r)
				continue
			}
		}
		st.Note(outcome.PhaseExceptionCondition, ex.Key(), "granted")
		out.Granted = append(out.Granted, ex)
		if ex.full {
			out.Full = true
		} else if !out.Full {
			out.AllowedImages = append(out.AllowedImages, ex.Spec.Images...)
			out.AllowedValues = append(out.AllowedValues, ex.Spec.AllowedValues...)
		}
	}
	return out
}

// evalControls evaluates an exception's compensating controls in order;
// the exception is granted only if every one is true.
func (e *Exception) evalControls(st *celeval.State, controls []*control) (Refusal, bool) {
	for i, c := range controls {
		st.Label(outcome.PhaseExceptionControl, celeval.Index(i), e.Key())
		out, err := st.Eval(c.prog)
		var ok bool
		if err == nil {
			ok, err = celeval.AsBool(out)
		}
		if err != nil {
			return Refusal{Exception: e, Err: fmt.Errorf("compensating control at index %d of policy exception %s: %v", i, e.Key(), err)}, false
		}
		if ok {
			continue
		}
		msg := c.message
		if c.msgProg != nil {
			st.Label(outcome.PhaseExceptionControlMessage, celeval.Index(i), e.Key())
			if out, err := st.Eval(c.msgProg); err == nil {
				if s, err := celeval.AsString(out); err == nil {
					msg = s
				}
			}
		}
		if strings.TrimSpace(msg) == "" {
			msg = fmt.Sprintf("compensating control at index %d failed for policy exception %s", i, e.Key())
		}
		return Refusal{Exception: e, Message: strings.TrimSpace(msg)}, false
	}
	return Refusal{}, true
}

// FirstRefusal returns the refusal that a failing result reports: the first
// by namespace, then name.
func FirstRefusal(refused []Refusal) Refusal {
	first := refused[0]
	for _, r := range refused[1:] {
		a, b := r.Exception, first.Exception
		if a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name {
			first = r
		}
	}
	return first
}

// Exemption is the result of granted exceptions that exempt a resource:
// skip, or pass when the selected exception (highest priority label, else
// the first) says reportResult: pass. It returns the result word, the
// message, the report properties and the exceptions' namespace/name.
func Exemption(granted []*Exception) (result, message string, props map[string]string, keys []string) {
	selected, best := granted[0], 0
	keys = make([]string, len(granted))
	names := make([]string, len(granted))
	for i, ex := range granted {
		keys[i], names[i] = ex.Key(), ex.Name
		if ex.priority > best {
			best, selected = ex.priority, ex
		}
	}
	verb, result := "skipped", outcome.Skip
	if selected.Spec.ReportResult == outcome.Pass {
		verb, result = "passed", outcome.Pass
	}
	message = fmt.Sprintf("rule is %s due to policy exception: %s", verb, strings.Join(keys, ", "))
	return result, message, map[string]string{outcome.PropExceptions: strings.Join(names, ",")}, keys
}

// SizeBound bounds the size of exceptions.allowedImages and allowedValues
// (and of their strings) over exceptions, for cost estimates.
func SizeBound(excs []*Exception) uint64 {
	var size, images, values uint64
	for _, ex := range excs {
		images += uint64(len(ex.Spec.Images))
		values += uint64(len(ex.Spec.AllowedValues))
		for _, s := range ex.Spec.Images {
			size = max(size, uint64(len(s)))
		}
		for _, s := range ex.Spec.AllowedValues {
			size = max(size, uint64(len(s)))
		}
	}
	return max(size, images, values)
}

// ByRef groups exceptions by the policies they name (each exception once
// per policy, in the order given).
func ByRef(excs []*Exception) map[PolicyRef][]*Exception {
	out := map[PolicyRef][]*Exception{}
	for _, ex := range excs {
		for i, r := range ex.Spec.PolicyRefs {
			if !slices.Contains(ex.Spec.PolicyRefs[:i], r) {
				out[r] = append(out[r], ex)
			}
		}
	}
	return out
}

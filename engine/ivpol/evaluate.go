package ivpol

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Kyverno's words (pkg/cel/policies/ivpol/engine, pkg/image/verification).
const (
	messageSuccess   = "success"
	evaluationFailed = "failed to evaluate policy: "
	compileFailed    = "failed to compile policy: "
)

// applies says whether a policy applies in the request's mode: its
// evaluation gates (admission, background) and, for a namespaced policy,
// the request's namespace. The CLI evaluates every policy.
func applies(p *Policy, req *admission.Request) bool {
	switch req.Mode {
	case admission.ModeAdmission:
		return p.Spec.AdmissionEnabled() && (!p.Namespaced() || req.Namespace == p.Namespace)
	case admission.ModeBackground:
		return p.Spec.BackgroundEnabled() && (!p.Namespaced() || req.Namespace == p.Namespace)
	}
	return true
}

// match returns the variant of the policy that matches the request, nil
// when none does.
func (p *Policy) match(rq *celeval.Request) (*variant, error) {
	if p.jsonMode {
		return p.variants[0], nil
	}
	for _, v := range p.variants {
		ok, err := v.match.Matches(rq.Attributes(), rq.Namespace())
		if err != nil {
			return nil, err
		}
		if ok {
			return v, nil
		}
	}
	return nil, nil
}

// reqState is what the ImageValidatingPolicies evaluated for one request
// share: the images fetched (each once per request, as Kyverno's
// ImageContext), what was verified (the evidence of `required`, across
// policies) and the payloads of verified attestations.
type reqState struct {
	ctx      context.Context
	verifier kyvernocel.ImageVerifier
	images   map[string]imageEntry
	// verified is, by image string as passed to a verification function,
	// whether some attestor verified it (present: attempted).
	verified map[string]bool
	// payloads are the verified attestations' payloads by image, then
	// kind ("intoto", "referrer") and type.
	payloads map[string][]byte
	trace    *celeval.Request
}

type imageEntry struct {
	img *kyvernocel.VerifierImage
	err error
}

func newReqState(rq *celeval.Request) *reqState {
	return &reqState{ctx: rq.Context(), verifier: rq.ImageVerifier(), trace: rq}
}

// image fetches an image once per request.
func (rs *reqState) image(image string, opts kyvernocel.ImageOptions) (*kyvernocel.VerifierImage, error) {
	if e, ok := rs.images[image]; ok {
		return e.img, e.err
	}
	var e imageEntry
	if rs.verifier == nil {
		e.err = kyvernocel.ErrNoImageVerifier
	} else {
		e.img, e.err = rs.verifier.Image(rs.ctx, image, opts)
	}
	if rs.images == nil {
		rs.images = map[string]imageEntry{}
	}
	rs.images[image] = e
	return e.img, e.err
}

func (rs *reqState) record(image string, ok bool) {
	if rs.verified == nil {
		rs.verified = map[string]bool{}
	}
	rs.verified[image] = rs.verified[image] || ok
}

func payloadKey(image, kind, t string) string { return image + "\x00" + kind + "\x00" + t }

// addPayload keeps a verified attestation's payload: an in-toto statement
// under its predicate type (as cosign stores it), a referrer under its
// artifact type.
func (rs *reqState) addPayload(image string, att *kyvernoapi.Attestation, v kyvernocel.Verdict) {
	if rs.payloads == nil {
		rs.payloads = map[string][]byte{}
	}
	switch {
	case att.InToto != nil:
		t := v.PredicateType
		if t == "" {
			t = att.InToto.Type
		}
		rs.payloads[payloadKey(image, "intoto", t)] = v.Payload
	case att.Referrer != nil:
		if _, ok := rs.payloads[payloadKey(image, "referrer", att.Referrer.Type)]; !ok {
			rs.payloads[payloadKey(image, "referrer", att.Referrer.Type)] = v.Payload
		}
	}
}

func (rs *reqState) payload(image, kind, t string) ([]byte, bool) {
	b, ok := rs.payloads[payloadKey(image, kind, t)]
	return b, ok
}

// evalCtx is the evaluation of one policy variant: the activation of its
// own variables and the state of its verification functions.
type evalCtx struct {
	ctx context.Context
	req *reqState
	v   *variant
	st  *celeval.State
	// self is the value of the hidden context variable.
	self ctxVal
	// images, once extracted and filtered; nil before.
	images    ref.Val
	attestors *attestorsMap
	// object and oldObject are null when absent (Kyverno's ivpol passes
	// nil objects; Arbiter's other kinds an empty map).
	object, oldObject ref.Val
}

// ResolveName implements celeval.Resolver.
func (e *evalCtx) ResolveName(name string) (any, bool) {
	switch name {
	case contextVar:
		return &e.self, true
	case ImagesVar:
		if e.images == nil {
			return nil, false
		}
		return e.images, true
	case AttestorsVar:
		if e.attestors == nil {
			return nil, false
		}
		return e.attestors, true
	case AttestationsVar:
		return e.v.policy.attestationsVal, true
	case celenv.ObjectVar:
		if e.object != nil {
			return e.object, true
		}
	case celenv.OldObjectVar:
		if e.oldObject != nil {
			return e.oldObject, true
		}
	}
	return nil, false
}

func (e *evalCtx) verifier() kyvernocel.ImageVerifier { return e.req.verifier }

func (e *evalCtx) image(image string) (*kyvernocel.VerifierImage, error) {
	return e.req.image(image, e.v.policy.opts)
}

// note records a verification in the trace.
func (e *evalCtx) note(image, what, attestor string, v kyvernocel.Verdict) {
	if !e.req.trace.Traced() {
		return
	}
	msg := fmt.Sprintf("%s of %s by attestor %s: verified", what, image, attestor)
	if !v.Verified {
		msg = fmt.Sprintf("%s of %s by attestor %s: not verified: %s", what, image, attestor, v.Reason)
	}
	e.st.Note(outcome.PhaseValidation, "", msg)
}

func newEvalCtx(rs *reqState, v *variant, st *celeval.State) *evalCtx {
	e := &evalCtx{ctx: rs.ctx, req: rs, v: v, st: st}
	e.self.e = e
	req := st.Request().Attributes()
	if req.Object == nil {
		e.object = types.NullValue
	}
	if req.OldObject == nil {
		e.oldObject = types.NullValue
	}
	st.SetResolver(e)
	return e
}

// outcomeInfo is what the evaluation knows of a result beyond what it
// reports.
type outcomeInfo struct {
	policy *Policy
	status string
	// message is the engine's message (denials and warnings use it).
	message string
	// images are the matched images of a passing policy, for `required`;
	// allowed those granted partial exceptions allow.
	images  []string
	allowed []string
	// pending says the result awaits the `required` check.
	pending bool
}

// Evaluate evaluates the policies that apply to the request and adds their
// results, denials and warnings to out. It never fails: problems become
// error results. After every policy, `required` is checked against what
// any policy of the request verified.
func (s *Set) Evaluate(rq *celeval.Request, out *outcome.Outcome) {
	req := rq.Attributes()
	cands := s.candidates(req.Resource.Resource)
	if len(cands) == 0 {
		return
	}
	out.Reserve(len(cands))
	rs := newReqState(rq)
	first := len(out.Results)
	var infos []outcomeInfo
	for _, e := range cands {
		p := e.policy
		if !applies(p, req) {
			continue
		}
		v, err := p.match(rq)
		if err == nil && v == nil {
			continue
		}
		var r outcome.Result
		var info outcomeInfo
		if err != nil {
			r, info = result(rq, p, outcome.RuleMatch, outcome.Error, "failed to execute matching: "+err.Error(), nil)
			r.Cause = outcome.CauseMatch
		} else {
			if rq.Traced() {
				what := "matched the policy's resource rules"
				if v.config != "" {
					what = "matched the resource rules of the autogen " + v.config + " variant (pod template at " + v.templatePath + ")"
				}
				rq.Note(p.Key(), v.config, outcome.PhaseMatch, "", what)
			}
			var ok bool
			r, info, ok = evalVariant(rq, rs, e, v)
			if !ok {
				// matchConditions do not match: no result (Kyverno's ivpol
				// engine gives no response).
				continue
			}
		}
		r.Expired = e.bound.Expired(rq.Now())
		out.Results = append(out.Results, r)
		infos = append(infos, info)
	}
	results := out.Results[first:]
	for i := range infos {
		in := &infos[i]
		if in.pending {
			enforceRequired(rs, &results[i], in)
		}
		if rq.Traced() {
			r := &results[i]
			rq.Note(in.policy.Key(), "", outcome.PhaseResult, strings.Join(r.Exceptions(), ", "), r.Result+": "+r.Message)
		}
	}
	applyActions(out, infos)
}

// enforceRequired fails a passing policy one of whose matched images no
// policy of the request verified (validationConfigurations.required):
// the first such image in extraction order names the failure.
func enforceRequired(rs *reqState, r *outcome.Result, in *outcomeInfo) {
	for _, image := range in.images {
		if allowedImage(in.allowed, image) {
			continue
		}
		verified, attempted := rs.verified[image]
		if verified {
			continue
		}
		msg := fmt.Sprintf("image %s is not verified: no policy performed a signature or attestation check on it", image)
		if attempted {
			msg = fmt.Sprintf("image %s failed signature or attestation verification", image)
		}
		r.Result, r.Message = outcome.Fail, msg
		if !in.policy.scored {
			r.Result = outcome.Warn
		}
		in.status, in.message = outcome.Fail, msg
		return
	}
}

// allowedImage says whether a granted exception's images allow image
// (exact, or a glob as matchImageReferences' globs).
func allowedImage(allowed []string, image string) bool {
	for _, a := range allowed {
		if a == image || globMatch(a, image) {
			return true
		}
	}
	return false
}

// applyActions adds the denials and warnings of the results' policies'
// validationActions: a fail or an error denies under Deny and warns under
// Warn (the policy's failurePolicy does not change that, as in Kyverno's
// webhook).
func applyActions(out *outcome.Outcome, infos []outcomeInfo) {
	for i := range infos {
		in := &infos[i]
		if in.status != outcome.Fail && in.status != outcome.Error {
			continue
		}
		verb := "failed"
		if in.status == outcome.Error {
			verb = "error"
		}
		if in.policy.deny {
			out.Deny(400, "", "Policy ", in.policy.Name, " ", verb, ": ", in.message)
		}
		if in.policy.warn {
			out.Warnings = append(out.Warnings, "Policy "+in.policy.Name+" "+verb+": "+in.message)
		}
	}
}

func result(rq *celeval.Request, p *Policy, rule, res, message string, props map[string]string) (outcome.Result, outcomeInfo) {
	r := outcome.Result{
		Policy:          p.Key(),
		PolicyName:      p.Name,
		PolicyNamespace: p.Namespace,
		PolicyKind:      p.Kind,
		Rule:            rule,
		Result:          res,
		Message:         message,
		Source:          outcome.SourceImageValidatingPolicy,
		Scored:          p.scored,
		Category:        p.category,
		Severity:        p.severity,
		Actions:         p.actionNames,
	}
	proc := process(rq.Attributes().Mode, p)
	if props == nil {
		props = map[string]string{}
	}
	if proc != "" {
		props[outcome.PropProcess] = proc
	}
	r.Properties = props
	if res == outcome.Fail && !p.scored {
		r.Result = outcome.Warn
	}
	return r, outcomeInfo{policy: p, status: res, message: message}
}

func process(mode admission.Mode, p *Policy) string {
	switch mode {
	case admission.ModeAdmission:
		return "admission review"
	case admission.ModeBackground:
		return "background scan"
	}
	if p.Spec.BackgroundEnabled() {
		return "background scan"
	}
	if p.Spec.AdmissionEnabled() {
		return "admission review"
	}
	return ""
}

// evalVariant evaluates a matched policy variant. ok is false when its
// matchConditions do not match (no result).
func evalVariant(rq *celeval.Request, rs *reqState, e *entry, v *variant) (outcome.Result, outcomeInfo, bool) {
	p := v.policy
	if err := rq.Stopped(); err != nil {
		r, info := result(rq, p, outcome.RuleEvaluation, outcome.Error, err.Error()+"; the policy was not evaluated", nil)
		r.Cause = outcome.CauseEvaluation
		return r, info, true
	}
	if rq.BudgetSpent() {
		r, info := result(rq, p, outcome.RuleEvaluation, outcome.Error, fmt.Sprintf("decision cost budget of %d exceeded (the policies before this one cost %d); the policy was not evaluated", rq.Budget(), rq.Cost()), nil)
		r.Cause = outcome.CauseEvaluation
		return r, info, true
	}
	type ret struct {
		r    outcome.Result
		info outcomeInfo
		ok   bool
	}
	o := celeval.Run(rq, &v.scope, func(st *celeval.State) ret {
		// A rerun with exact costs repeats the verifications: they are
		// memoized for the request and their record is monotonic.
		r, info, ok := evalVariantOnce(rq, rs, e, v, st)
		return ret{r, info, ok}
	})
	return o.r, o.info, o.ok
}

func errorResult(rq *celeval.Request, p *Policy, msg string) (outcome.Result, outcomeInfo, bool) {
	r, info := result(rq, p, outcome.RuleEvaluation, outcome.Error, msg, nil)
	r.Cause = outcome.CauseEvaluation
	return r, info, true
}

func evalVariantOnce(rq *celeval.Request, rs *reqState, e *entry, v *variant, st *celeval.State) (outcome.Result, outcomeInfo, bool) {
	p := v.policy
	ec := newEvalCtx(rs, v, st)
	// matchConditions first (Kyverno's ivpol evaluates them before the
	// exceptions): false gives no result; errors follow failurePolicy.
	st.Label(outcome.PhaseMatchCondition, "", "")
	matched, err := st.Match(v.matchConditions, p.failurePolicy)
	if err != nil {
		return errorResult(rq, p, evaluationFailed+err.Error())
	}
	if !matched {
		return outcome.Result{}, outcomeInfo{}, false
	}
	ver := e.bound.Evaluate(st, p.Namespaced(), p.failurePolicy, exception.ErrorStops)
	if ver.Err != nil {
		return errorResult(rq, p, evaluationFailed+ver.Err.Error())
	}
	if ver.Full {
		// Always skip: ivpol ignores reportResult.
		var keys, names []string
		for _, ex := range ver.Granted {
			if ex.Full() {
				keys = append(keys, ex.Key())
				names = append(names, ex.Name)
			}
		}
		r, info := result(rq, p, outcome.RuleException, outcome.Skip, "rule is skipped due to policy exception: "+strings.Join(keys, ", "), map[string]string{outcome.PropExceptions: strings.Join(names, ",")})
		r.Cause, r.Granted = outcome.CauseException, keys
		return r, info, true
	}
	// Granted partial exceptions (images, allowedValues) do not exempt the
	// resource, as in Kyverno; Arbiter shows what they allow as
	// `exceptions` and exempts their images from `required`.
	st.SetExceptions(ver.AllowedImages, ver.AllowedValues)

	// Images: the built-in extractors of the requested resource, then the
	// policy's own (which replace a built-in of the same name), filtered
	// by matchImageReferences.
	byName, order, err := extractImages(st, v, rq.Attributes())
	if err != nil {
		return errorResult(rq, p, evaluationFailed+err.Error())
	}
	filtered := make(map[string][]string, len(byName))
	var list []string
	for _, name := range order {
		imgs := byName[name]
		kept := []string{}
		for _, img := range imgs {
			ok, err := p.matchImage(img)
			if err != nil {
				return errorResult(rq, p, evaluationFailed+err.Error())
			}
			if ok {
				kept = append(kept, img)
				list = append(list, img)
			}
		}
		filtered[name] = kept
	}
	// verifyDigest: before any registry access.
	if p.verifyDigest {
		for _, img := range list {
			ref, err := kyvernocel.ParseImageReference(img)
			if err != nil {
				return errorResult(rq, p, evaluationFailed+fmt.Sprintf("failed to parse image reference %s: %v", img, unwrapParse(err)))
			}
			if !ref.IsDigest() {
				r, info := result(rq, p, p.Name, outcome.Fail, fmt.Sprintf("image %s does not have a digest", img), nil)
				return r, info, true
			}
		}
	}
	// Prefetch every matched image: one that cannot be read is an error,
	// whether or not an expression reads it.
	for _, img := range list {
		if _, err := rs.image(img, p.opts); err != nil {
			return errorResult(rq, p, evaluationFailed+err.Error())
		}
	}
	ec.images = types.DefaultTypeAdapter.NativeToValue(filtered)
	ec.attestors = &attestorsMap{e: ec, values: make([]ref.Val, len(v.attestors))}

	for i, val := range v.validations {
		st.Label(outcome.PhaseValidation, celeval.Index(i), "")
		out, err := st.Eval(val.prog)
		var ok bool
		if err == nil {
			ok, err = celeval.AsBool(out)
		}
		if err != nil {
			return errorResult(rq, p, evaluationFailed+err.Error())
		}
		if ok {
			continue
		}
		message := val.message
		if val.msgProg != nil {
			st.Label(outcome.PhaseMessageExpression, celeval.Index(i), "")
			out, err := st.Eval(val.msgProg)
			if err != nil {
				message = "failed to evaluate message expression: " + err.Error()
			} else if s, err := celeval.AsString(out); err != nil {
				message = "failed to convert message expression to string: " + err.Error()
			} else {
				message = s
			}
		}
		if message == "" {
			message = fmt.Sprintf("CEL expression validation failed at index %d", i)
		}
		annotations, err := auditAnnotations(st, v)
		if err != nil {
			return errorResult(rq, p, evaluationFailed+err.Error())
		}
		r, info := result(rq, p, p.Name, outcome.Fail, message, annotations)
		return r, info, true
	}
	annotations, err := auditAnnotations(st, v)
	if err != nil {
		return errorResult(rq, p, evaluationFailed+err.Error())
	}
	r, info := result(rq, p, p.Name, outcome.Pass, messageSuccess, annotations)
	if p.required {
		info.pending, info.images, info.allowed = true, list, ver.AllowedImages
	}
	return r, info, true
}

// unwrapParse returns go-containerregistry's parse error where
// ParseImageReference wraps it.
func unwrapParse(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

func auditAnnotations(st *celeval.State, v *variant) (map[string]string, error) {
	if len(v.auditAnnotations) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(v.auditAnnotations))
	for _, a := range v.auditAnnotations {
		st.Label(outcome.PhaseAuditAnnotation, a.key, "")
		val, err := st.Eval(a.prog)
		if err != nil {
			return nil, fmt.Errorf("failed to evaluate auditAnnotation '%s': %w", a.key, err)
		}
		if val == types.NullValue {
			continue
		}
		s, err := celeval.AsString(val)
		if err != nil {
			return nil, fmt.Errorf("failed to convert auditAnnotation '%s' expression: %w", a.key, err)
		}
		if s != "" {
			out[a.key] = s
		}
	}
	return out, nil
}

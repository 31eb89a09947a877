package engine

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiv1 "k8s.io/pod-security-admission/admission/api/v1"
	"k8s.io/pod-security-admission/api"

	"github.com/arbiter-pdp/arbiter/engine/psa"
)

// Pod Security Admission: classification and loading of the
// PodSecurityConfiguration, binding of PolicyExceptions of kind
// PodSecurity, and evaluation (package engine/psa does the work; this file
// wires it in).

// Pod Security names.
const (
	// KindPodSecurity is the policy kind of Pod Security results and the
	// kind a PolicyException's policyRefs use to name a level.
	KindPodSecurity = "PodSecurity"
	// SourcePodSecurity is the PolicyReport source of Pod Security results.
	SourcePodSecurity = "PodSecurity"
	// KindPodSecurityConfiguration is the kind of the configuration
	// (pod-security.admission.config.k8s.io v1, v1beta1, v1alpha1).
	KindPodSecurityConfiguration = psa.KindConfig
	// PodSecurityConfigurationName is the name of a PodSecurityConfiguration
	// without metadata.name (the upstream format has no metadata), under
	// which it is stored.
	PodSecurityConfigurationName = "default"
)

// Properties of Pod Security results.
const (
	PropPSAVersion   = "version"
	PropPSAModes     = "modes"
	PropPSAExemption = "exemption"
)

// classifyPSA returns the class of pod-security.admission.config.k8s.io objects.
func classifyPSA(o *Object) (Class, bool) {
	if o.Group() != psa.Group {
		return 0, false
	}
	if o.Kind == psa.KindConfig {
		return ClassPodSecurityConfiguration, true
	}
	return ClassUnsupported, true
}

// defaultPSAName names a PodSecurityConfiguration without metadata.name.
func defaultPSAName(o *Object) {
	if o.Name == "" && o.Kind == psa.KindConfig && o.Group() == psa.Group {
		o.Name = PodSecurityConfigurationName
	}
}

// psaLevels are the levels a PolicyException may name.
var psaLevels = []api.Level{api.LevelBaseline, api.LevelRestricted}

func isPSALevel(name string) bool {
	for _, l := range psaLevels {
		if string(l) == name {
			return true
		}
	}
	return false
}

// psaPolicies are the policies that stand for the Pod Security levels when
// their exceptions are evaluated (results, traces, the CEL activation).
var psaPolicies = func() map[api.Level]*variant {
	out := map[api.Level]*variant{}
	for _, l := range psaLevels {
		p := &Policy{Kind: KindPodSecurity, Name: string(l), Spec: &ValidatingPolicySpec{},
			failurePolicy: admissionregistrationv1.Fail, scored: true, deny: true}
		v := &variant{policy: p}
		p.variants = []*variant{v}
		out[l] = v
	}
	return out
}()

// psaState is the Pod Security part of a PolicySet.
type psaState struct {
	config *psa.Config
	// object is the PodSecurityConfiguration (nil: none, the defaults
	// apply and Pod Security only acts in labelled namespaces).
	object *Object
	levels map[api.Level]*psaLevel
	// infos are the levels as policies (PodSecurityInfos), computed once.
	infosOnce sync.Once
	infos     []PodSecurityInfo
}

// psaLevel is a level with the exceptions bound to it.
type psaLevel struct {
	v          *variant
	exceptions []*Exception
	index      *exceptionIndex
}

// podSecurityConfigurationDoc is the upstream type with an optional
// metadata (an Arbiter addition: the store names objects).
type podSecurityConfigurationDoc struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        *metav1.ObjectMeta          `json:"metadata,omitempty"`
	Defaults        apiv1.PodSecurityDefaults   `json:"defaults"`
	Exemptions      apiv1.PodSecurityExemptions `json:"exemptions"`
}

// compilePSA loads the PodSecurityConfiguration (at most one).
func compilePSA(configs []*Object) (*psaState, LoadErrors) {
	st := &psaState{config: defaultPSAConfig}
	var errs LoadErrors
	for i, o := range configs {
		if i > 0 {
			errs = append(errs, loadErr(o, "kind", "a second PodSecurityConfiguration (%s is already loaded from %s): a set holds at most one", configs[0].Ref(), configs[0].Source))
			continue
		}
		if !psa.Versions[o.VersionOnly()] {
			errs = append(errs, loadErr(o, "apiVersion", "unsupported version %q of PodSecurityConfiguration (supported: v1, v1beta1, v1alpha1)", o.APIVersion))
			continue
		}
		var doc podSecurityConfigurationDoc
		if err := decodeStrict(o, &doc); err != nil {
			errs = append(errs, err)
			continue
		}
		cfg, ferrs := psa.Compile(&apiv1.PodSecurityConfiguration{TypeMeta: doc.TypeMeta, Defaults: doc.Defaults, Exemptions: doc.Exemptions})
		if len(ferrs) > 0 {
			errs = append(errs, fieldErrors(o, ferrs)...)
			continue
		}
		st.config, st.object = cfg, o
	}
	return st, errs
}

// bind binds the exceptions (in evaluation order) that name a Pod Security level.
func (st *psaState) bind(excs []*Exception) {
	for _, l := range psaLevels {
		var bound []*Exception
		for _, ex := range excs {
			if ex.References(KindPodSecurity, string(l)) {
				bound = append(bound, ex)
			}
		}
		if len(bound) > 0 {
			if st.levels == nil {
				st.levels = map[api.Level]*psaLevel{}
			}
			st.levels[l] = &psaLevel{v: psaPolicies[l], exceptions: bound, index: newExceptionIndex(bound)}
		}
	}
}

var defaultPSAConfig = psa.DefaultConfig()

// checkPSARef validates a policyRef of kind PodSecurity: the name is a
// level that has checks, and the exception exempts outright (no Pod
// Security check reads exceptions.allowedImages or allowedValues).
func checkPSARef(o *Object, i int, r PolicyRef, spec *PolicyExceptionSpec) *LoadError {
	if r.Kind != KindPodSecurity {
		return nil
	}
	if !isPSALevel(r.Name) {
		return loadErr(o, fmt.Sprintf("spec.policyRefs[%d].name", i), "unsupported Pod Security level %q: an exception of kind PodSecurity names the level it exempts from, baseline or restricted", r.Name)
	}
	if len(spec.Images) > 0 {
		return loadErr(o, "spec.images", "an exception of kind PodSecurity exempts outright: no Pod Security check reads exceptions.allowedImages")
	}
	if len(spec.AllowedValues) > 0 {
		return loadErr(o, "spec.allowedValues", "an exception of kind PodSecurity exempts outright: no Pod Security check reads exceptions.allowedValues")
	}
	return nil
}

// PodSecurityConfiguration returns the set's PodSecurityConfiguration
// object (nil when it has none and the defaults apply).
func (ps *PolicySet) PodSecurityConfiguration() *Object {
	if ps.psa == nil {
		return nil
	}
	return ps.psa.object
}

// PodSecurityWarnings are the warnings about the set's Pod Security
// configuration: exempted controller service accounts, which exempt every
// user who can create the workloads they manage.
func (ps *PolicySet) PodSecurityWarnings() []string {
	if ps.psa == nil || ps.psa.object == nil {
		return nil
	}
	return ps.psa.config.Warnings()
}

// psaRequest builds the Pod Security request, or nil when Pod Security has
// nothing to say: a resource it does not handle, or neither a
// PodSecurityConfiguration nor a Pod Security label (on the request's
// Namespace, or on the Namespace being admitted) — kube-apiserver's
// defaults are privileged everywhere, which admits everything.
func (ps *PolicySet) psaRequest(rq *evalRequest) *psa.Request {
	req := rq.req
	gr := req.Resource.GroupResource()
	if ps.psa == nil || !psa.Handles(gr) || req.Operation != OpCreate && req.Operation != OpUpdate {
		return nil
	}
	var labels map[string]string
	if rq.namespaceObject != nil && req.Namespace != "" {
		labels = stringMap(rq.namespaceObject, "labels")
	}
	if ps.psa.object == nil {
		if gr.Group == "" && gr.Resource == "namespaces" {
			if !psa.HasLabels(stringMap(req.Object, "labels")) && !psa.HasLabels(stringMap(req.OldObject, "labels")) {
				return nil
			}
		} else if !psa.HasLabels(labels) {
			return nil
		}
	}
	namespace := req.Namespace
	if namespace == "" && gr.Group == "" && gr.Resource == "namespaces" {
		// kube-apiserver admits a Namespace with the request's namespace
		// set to its name; a caller without one (arbiter decide -f ns.yaml)
		// gets the same exemption check and warnings.
		namespace = req.Name
	}
	return &psa.Request{
		Operation:       req.Operation,
		Resource:        gr,
		Kind:            req.Kind.GroupKind(),
		SubResource:     req.SubResource,
		Name:            req.Name,
		Namespace:       namespace,
		Username:        req.UserInfo.Username,
		Object:          req.Object,
		OldObject:       req.OldObject,
		NamespaceLabels: labels,
	}
}

// evaluatePSA adds Pod Security's verdict to a decision: its results,
// denial, warnings and audit annotations.
func (ps *PolicySet) evaluatePSA(rq *evalRequest, d *Decision) {
	preq := ps.psaRequest(rq)
	if preq == nil {
		return
	}
	granted := map[api.Level][]*Exception{}
	refused := map[string]*Exception{}
	if len(ps.psa.levels) > 0 {
		preq.Exceptions = func(level api.Level) psa.ExceptionOutcome {
			l := ps.psa.levels[level]
			if l == nil {
				return psa.ExceptionOutcome{}
			}
			out, g, r := rq.psaExceptions(l)
			granted[level] = g
			if r != nil {
				refused[r.Key()] = r
			}
			return out
		}
	}
	resp := ps.psa.config.Evaluate(preq)
	if !resp.Handled {
		return
	}
	proc := "background scan"
	if rq.req.Mode == ModeAdmission {
		proc = "admission review"
	}
	for _, r := range resp.Results {
		res := Result{
			Policy: r.Level, PolicyName: r.Level, PolicyKind: KindPodSecurity,
			Result: r.Outcome, Message: r.Message, Exceptions: r.Exceptions,
			Source: SourcePodSecurity, Scored: true, Actions: psaActions(r.Modes),
			status: r.Outcome, ruleMessage: r.Message,
		}
		props := map[string]string{PropProcess: proc}
		if r.Level == "" {
			res.Policy, res.PolicyName, res.Rule = KindPodSecurity, KindPodSecurity, "namespace-labels"
		} else {
			res.policy = psaPolicies[api.Level(r.Level)].policy
			props[PropPSAVersion] = r.Version
			props[PropPSAModes] = strings.Join(r.Modes, ",")
		}
		switch {
		case r.Skip == psa.SkipException:
			res = withPSAExemption(res, granted[api.Level(r.Level)])
		case r.Skip == psa.SkipExemption:
			props[PropPSAExemption] = r.Exemption
		case len(r.Exceptions) > 0:
			if ex := refused[r.Exceptions[0]]; ex != nil {
				props[PropExceptions] = ex.Name
			}
		}
		for k, v := range res.Properties {
			props[k] = v
		}
		res.Properties = props
		if rq.req.Trace != nil && res.policy != nil {
			rq.note(res.policy, "", PhaseResult, strings.Join(res.Exceptions, ", "), "Pod Security "+r.LevelVersion()+" ("+strings.Join(r.Modes, ", ")+"): "+res.Result+": "+res.Message)
		}
		d.Results = append(d.Results, res)
	}
	d.Warnings = append(d.Warnings, resp.Warnings...)
	if len(resp.AuditAnnotations) > 0 {
		if d.AuditAnnotations == nil {
			d.AuditAnnotations = make(map[string]string, len(resp.AuditAnnotations))
		}
		for k, v := range resp.AuditAnnotations {
			d.AuditAnnotations[k] = v
		}
	}
	if !resp.Allowed {
		if len(d.Denials) == 0 {
			d.Code, d.Reason = resp.Code, resp.Reason
		}
		d.Denials = append(d.Denials, resp.Message)
		d.Allowed = false
		d.Message = strings.Join(d.Denials, "; ")
	}
}

// withPSAExemption makes a result the exemption by granted exceptions:
// skip, or pass when the selected exception (highest priority label, else
// the first) says reportResult: pass — as for any policy.
func withPSAExemption(r Result, granted []*Exception) Result {
	if len(granted) == 0 {
		return r
	}
	selected, best := granted[0], 0
	keys := make([]string, len(granted))
	names := make([]string, len(granted))
	for i, ex := range granted {
		keys[i], names[i] = ex.Key(), ex.Name
		if ex.priority > best {
			best, selected = ex.priority, ex
		}
	}
	verb, result := "skipped", ResultSkip
	if selected.Spec.ReportResult == ResultPass {
		verb, result = "passed", ResultPass
	}
	r.Rule = "exception"
	r.Result, r.status = result, result
	r.Message = fmt.Sprintf("rule is %s due to policy exception: %s", verb, strings.Join(keys, ", "))
	r.ruleMessage = r.Message
	r.Exceptions = keys
	r.Properties = map[string]string{PropExceptions: strings.Join(names, ",")}
	return r
}

// psaActions names the modes of a result with validationActions words.
func psaActions(modes []string) []string {
	if len(modes) == 0 {
		return []string{string(admissionregistrationv1.Deny)}
	}
	out := make([]string, len(modes))
	for i, m := range modes {
		switch m {
		case psa.ModeEnforce:
			out[i] = string(admissionregistrationv1.Deny)
		case psa.ModeAudit:
			out[i] = string(admissionregistrationv1.Audit)
		case psa.ModeWarn:
			out[i] = string(admissionregistrationv1.Warn)
		}
	}
	return out
}

// psaExceptions evaluates the exceptions bound to a Pod Security level, as
// the exceptions of any policy are evaluated (expiry, matchConditions with
// failurePolicy Fail, compensating controls), charging their cost to the
// decision. It returns the outcome, the granted exceptions and the first
// refused one (by namespace, then name) when none is granted. An exception
// whose matchConditions fail to evaluate is refused with the error: it is
// reported only if the level fails (a compliant resource is never denied
// because of an exception). When the decision's cost budget is already
// spent, no exception is evaluated.
func (rq *evalRequest) psaExceptions(l *psaLevel) (psa.ExceptionOutcome, []*Exception, *Exception) {
	p := l.v.policy
	if b := rq.req.CostBudget; b > 0 && rq.cost > b {
		rq.note(p, "", PhaseExceptionCondition, "", fmt.Sprintf("decision cost budget of %d exceeded: the exceptions were not evaluated", b))
		return psa.ExceptionOutcome{}, nil, nil
	}
	st := &policyState{rq: rq, v: l.v}
	granted, refused := rq.psaExceptionsOnce(l, st)
	if st.inexact {
		st = &policyState{rq: rq, v: l.v, exact: true}
		granted, refused = rq.psaExceptionsOnce(l, st)
	}
	rq.cost += st.cost
	if len(granted) > 0 {
		keys := make([]string, len(granted))
		for i, ex := range granted {
			keys[i] = ex.Key()
		}
		return psa.ExceptionOutcome{Granted: keys}, granted, nil
	}
	if len(refused) == 0 {
		return psa.ExceptionOutcome{}, nil, nil
	}
	sort.SliceStable(refused, func(i, j int) bool {
		a, b := refused[i].exception, refused[j].exception
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	first := refused[0]
	out := psa.ExceptionOutcome{Refused: first.exception.Key(), Message: first.message}
	if first.err != nil {
		out.Message, out.Error = first.err.Error(), true
	}
	return out, nil, first.exception
}

func (rq *evalRequest) psaExceptionsOnce(l *psaLevel, st *policyState) (granted []*Exception, refused []refusal) {
	p := l.v.policy
	var buf [8]int
	for _, i := range l.index.candidates(rq.req.Object, buf[:0]) {
		ex := l.exceptions[i]
		if ex.Expired(rq.now) {
			rq.note(p, "", PhaseExceptionCondition, ex.Key(), "expired at "+ex.ExpiresAt.Format(time.RFC3339)+": ignored")
			continue
		}
		if ex.refuted(rq.req.Object) {
			rq.note(p, "", PhaseExceptionCondition, ex.Key(), "does not match: a matchCondition compares a field of the object with other values")
			continue
		}
		st.at(PhaseExceptionCondition, "", ex.Key())
		matched, err := st.match(ex.conds[0], admissionregistrationv1.Fail)
		if err != nil {
			rq.note(p, "", PhaseExceptionCondition, ex.Key(), "refused: its matchConditions failed: "+err.Error())
			refused = append(refused, refusal{exception: ex, err: fmt.Errorf("policy exception %s: failed to evaluate matchConditions: %v", ex.Key(), err)})
			continue
		}
		if !matched {
			continue
		}
		if controls := ex.controls[0]; len(controls) > 0 {
			if r, ok := st.controls(ex, controls); !ok {
				rq.note(p, "", PhaseExceptionControl, ex.Key(), "refused: "+refusalText(r))
				refused = append(refused, r)
				continue
			}
		}
		rq.note(p, "", PhaseExceptionCondition, ex.Key(), "granted")
		granted = append(granted, ex)
	}
	return granted, refused
}

package psa

import (
	"fmt"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiv1 "k8s.io/pod-security-admission/admission/api/v1"
	"k8s.io/pod-security-admission/api"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
)

// Pod Security Admission as a policy kind of the engine: the
// PodSecurityConfiguration loaded and compiled (load → compile), the
// PolicyExceptions that name a level bound to it, and the evaluation of a
// request into results, a denial, warnings and audit annotations
// (evaluate → outcome).

// KindPodSecurity is the policy kind of Pod Security results and the kind
// a PolicyException's policyRefs use to name a level.
const KindPodSecurity = "PodSecurity"

// Levels are the levels a PolicyException may name, in order.
var Levels = []api.Level{api.LevelBaseline, api.LevelRestricted}

// IsLevel says whether name is a level a PolicyException may name.
func IsLevel(name string) bool {
	for _, l := range Levels {
		if string(l) == name {
			return true
		}
	}
	return false
}

// Set is the Pod Security part of a policy set: the configuration, the
// exceptions bound to its levels and the Namespaces it consults. It is
// immutable once bound.
type Set struct {
	config *Config
	// object is the PodSecurityConfiguration (nil: none, the defaults
	// apply and Pod Security only acts in labelled namespaces).
	object     *manifest.Object
	levels     map[api.Level]*level
	namespaces map[string]map[string]any
	// infos are the levels as policies (Infos), computed once.
	infosOnce sync.Once
	infos     []Info
}

// level is a level with the exceptions bound to it.
type level struct {
	scope celeval.Scope
	bound *exception.Bound
}

// configDoc is the upstream type with an optional metadata (an Arbiter
// addition: the store names objects).
type configDoc struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        *metav1.ObjectMeta          `json:"metadata,omitempty"`
	Defaults        apiv1.PodSecurityDefaults   `json:"defaults"`
	Exemptions      apiv1.PodSecurityExemptions `json:"exemptions"`
}

var defaultConfig = DefaultConfig()

// Compile loads the PodSecurityConfiguration (at most one among configs).
func Compile(configs []*manifest.Object) (*Set, manifest.LoadErrors) {
	s := &Set{config: defaultConfig}
	var errs manifest.LoadErrors
	for i, o := range configs {
		if i > 0 {
			errs = append(errs, manifest.Errorf(o, "kind", "a second PodSecurityConfiguration (%s is already loaded from %s): a set holds at most one", configs[0].Ref(), configs[0].Source))
			continue
		}
		if !Versions[o.VersionOnly()] {
			errs = append(errs, manifest.Errorf(o, "apiVersion", "unsupported version %q of PodSecurityConfiguration (supported: v1, v1beta1, v1alpha1)", o.APIVersion))
			continue
		}
		var doc configDoc
		if err := manifest.DecodeStrict(o, &doc); err != nil {
			errs = append(errs, err)
			continue
		}
		cfg, ferrs := CompileConfig(&apiv1.PodSecurityConfiguration{TypeMeta: doc.TypeMeta, Defaults: doc.Defaults, Exemptions: doc.Exemptions})
		if len(ferrs) > 0 {
			errs = append(errs, manifest.FieldErrors(o, ferrs)...)
			continue
		}
		s.config, s.object = cfg, o
	}
	return s, errs
}

// Bind binds the exceptions (in evaluation order) that name a level, and
// the Namespaces of the set.
func (s *Set) Bind(excs []*exception.Exception, namespaces map[string]map[string]any) {
	s.namespaces = namespaces
	for _, l := range Levels {
		var bound []*exception.Exception
		for _, ex := range excs {
			if ex.References(KindPodSecurity, string(l)) {
				bound = append(bound, ex)
			}
		}
		if len(bound) > 0 {
			if s.levels == nil {
				s.levels = map[api.Level]*level{}
			}
			s.levels[l] = &level{scope: celeval.Scope{Policy: string(l)}, bound: exception.Bind(bound, nil)}
		}
	}
}

// CheckExceptionRef validates policyRef i of exception o when it is of
// kind PodSecurity: the name is a level that has checks, and the
// exception exempts outright (no Pod Security check reads
// exceptions.allowedImages or allowedValues).
func CheckExceptionRef(o *manifest.Object, i int, kind, name string, images, allowedValues []string) *manifest.LoadError {
	if kind != KindPodSecurity {
		return nil
	}
	if !IsLevel(name) {
		return manifest.Errorf(o, fmt.Sprintf("spec.policyRefs[%d].name", i), "unsupported Pod Security level %q: an exception of kind PodSecurity names the level it exempts from, baseline or restricted", name)
	}
	if len(images) > 0 {
		return manifest.Errorf(o, "spec.images", "an exception of kind PodSecurity exempts outright: no Pod Security check reads exceptions.allowedImages")
	}
	if len(allowedValues) > 0 {
		return manifest.Errorf(o, "spec.allowedValues", "an exception of kind PodSecurity exempts outright: no Pod Security check reads exceptions.allowedValues")
	}
	return nil
}

// Configuration returns the PodSecurityConfiguration object (nil when
// there is none and the defaults apply).
func (s *Set) Configuration() *manifest.Object { return s.object }

// Warnings are the warnings about the configuration: exempted controller
// service accounts, which exempt every user who can create the workloads
// they manage.
func (s *Set) Warnings() []string {
	if s.object == nil {
		return nil
	}
	return s.config.Warnings()
}

// Exceptions returns the PolicyExceptions that name a level, in order.
func (s *Set) Exceptions(lvl string) []*exception.Exception {
	if l := s.levels[api.Level(lvl)]; l != nil {
		return l.bound.Exceptions
	}
	return nil
}

// newInput builds Pod Security's view of a request, or nil when Pod
// Security has nothing to say: a resource it does not handle, or neither a
// PodSecurityConfiguration nor a Pod Security label (on the request's
// Namespace, or on the Namespace being admitted) — kube-apiserver's
// defaults are privileged everywhere, which admits everything.
func (s *Set) newInput(req *admission.Request, ns map[string]any) *input {
	gr := req.Resource.GroupResource()
	if !Handles(gr) || req.Operation != admission.OpCreate && req.Operation != admission.OpUpdate {
		return nil
	}
	var labels map[string]string
	if ns != nil && req.Namespace != "" {
		labels = manifest.MetadataStrings(ns, "labels")
	}
	if s.object == nil {
		if gr == namespacesResource {
			if !HasLabels(manifest.MetadataStrings(req.Object, "labels")) && !HasLabels(manifest.MetadataStrings(req.OldObject, "labels")) {
				return nil
			}
		} else if !HasLabels(labels) {
			return nil
		}
	}
	namespace := req.Namespace
	if namespace == "" && gr == namespacesResource {
		// kube-apiserver admits a Namespace with the request's namespace
		// set to its name; a caller without one (arbiter decide -f ns.yaml)
		// gets the same exemption check and warnings.
		namespace = req.Name
	}
	return &input{Request: req, gr: gr, gk: req.Kind.GroupKind(), namespace: namespace, nsLabels: labels}
}

// Evaluate adds Pod Security's verdict on the request to out: its
// results, denial, warnings and audit annotations.
func (s *Set) Evaluate(rq *celeval.Request, out *outcome.Outcome) {
	in := s.newInput(rq.Attributes(), rq.Namespace())
	if in == nil {
		return
	}
	granted := map[api.Level][]*exception.Exception{}
	refused := map[string]*exception.Exception{}
	if len(s.levels) > 0 {
		in.exceptions = func(lvl api.Level) ExceptionOutcome {
			l := s.levels[lvl]
			if l == nil {
				return ExceptionOutcome{}
			}
			eo, g, r := l.evaluate(rq)
			granted[lvl] = g
			if r != nil {
				refused[r.Key()] = r
			}
			return eo
		}
	}
	resp := s.config.evaluate(in)
	if !resp.Handled {
		return
	}
	proc := outcome.Process(rq.Attributes().Mode == admission.ModeAdmission)
	for _, r := range resp.Results {
		res := outcome.Result{
			Policy: r.Level, PolicyName: r.Level, PolicyKind: KindPodSecurity,
			Result: r.Outcome, Message: r.Message,
			Source: outcome.SourcePodSecurity, Scored: true, Actions: Actions(r.Modes),
		}
		props := map[string]string{outcome.PropProcess: proc}
		if r.Level == "" {
			res.Policy, res.PolicyName, res.Rule = KindPodSecurity, KindPodSecurity, "namespace-labels"
		} else {
			props[outcome.PropPSAVersion] = r.Version
			props[outcome.PropPSAModes] = strings.Join(r.Modes, ",")
		}
		switch {
		case r.Skip == SkipException:
			res.Granted = r.Exceptions
			if g := granted[api.Level(r.Level)]; len(g) > 0 {
				result, msg, eprops, keys := exception.Exemption(g)
				res.Rule, res.Result, res.Message, res.Cause, res.Granted = outcome.RuleException, result, msg, outcome.CauseException, keys
				for k, v := range eprops {
					props[k] = v
				}
			}
		case r.Skip == SkipExemption:
			props[outcome.PropPSAExemption] = r.Exemption
		case len(r.Exceptions) > 0:
			res.Refused = r.Exceptions[0]
			if ex := refused[r.Exceptions[0]]; ex != nil {
				props[outcome.PropExceptions] = ex.Name
			}
		}
		res.Properties = props
		if l := s.levels[api.Level(r.Level)]; l != nil && (res.Result != outcome.Skip || res.Cause == outcome.CauseException) {
			res.Expired = l.bound.Expired(rq.Now())
		}
		if rq.Traced() && r.Level != "" {
			rq.Note(r.Level, "", outcome.PhaseResult, strings.Join(res.Exceptions(), ", "), "Pod Security "+r.LevelVersion()+" ("+strings.Join(r.Modes, ", ")+"): "+res.Result+": "+res.Message)
		}
		out.Results = append(out.Results, res)
	}
	out.Warnings = append(out.Warnings, resp.Warnings...)
	out.Annotate(resp.AuditAnnotations)
	if !resp.Allowed {
		out.Deny(resp.Code, resp.Reason, resp.Message)
	}
}

// Actions names the modes of a result with validationActions words.
func Actions(modes []string) []string {
	if len(modes) == 0 {
		return []string{string(admissionregistrationv1.Deny)}
	}
	out := make([]string, len(modes))
	for i, m := range modes {
		switch m {
		case ModeEnforce:
			out[i] = string(admissionregistrationv1.Deny)
		case ModeAudit:
			out[i] = string(admissionregistrationv1.Audit)
		case ModeWarn:
			out[i] = string(admissionregistrationv1.Warn)
		}
	}
	return out
}

// evaluate evaluates the exceptions bound to a level, as the exceptions
// of any policy are evaluated (expiry, matchConditions with failurePolicy
// Fail, compensating controls), charging their cost to the request. It
// returns the outcome, the granted exceptions and the first refused one
// (by namespace, then name) when none is granted. An exception whose
// matchConditions fail to evaluate is refused with the error: it is
// reported only if the level fails (a compliant resource is never denied
// because of an exception). When the request's cost budget is already
// spent, no exception is evaluated.
func (l *level) evaluate(rq *celeval.Request) (ExceptionOutcome, []*exception.Exception, *exception.Exception) {
	if rq.BudgetSpent() {
		rq.Note(l.scope.Policy, "", outcome.PhaseExceptionCondition, "", fmt.Sprintf("decision cost budget of %d exceeded: the exceptions were not evaluated", rq.Budget()))
		return ExceptionOutcome{}, nil, nil
	}
	ver := celeval.Run(rq, &l.scope, func(st *celeval.State) exception.Verdict {
		return l.bound.Evaluate(st, false, admissionregistrationv1.Fail, exception.ErrorRefuses)
	})
	if len(ver.Granted) > 0 {
		keys := make([]string, len(ver.Granted))
		for i, ex := range ver.Granted {
			keys[i] = ex.Key()
		}
		return ExceptionOutcome{Granted: keys}, ver.Granted, nil
	}
	if len(ver.Refused) == 0 {
		return ExceptionOutcome{}, nil, nil
	}
	first := exception.FirstRefusal(ver.Refused)
	eo := ExceptionOutcome{Refused: first.Exception.Key(), Message: first.Message}
	if first.Err != nil {
		eo.Message, eo.Error = first.Err.Error(), true
	}
	return eo, nil, first.Exception
}

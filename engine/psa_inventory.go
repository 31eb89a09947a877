package engine

import (
	"sort"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/pod-security-admission/api"

	"github.com/arbiter-pdp/arbiter/engine/psa"
)

// Pod Security levels as policies of the inventory (QueryService
// ListPolicies, GetPolicy, Status) and of Applicable.

// PodSecurityInfo describes a Pod Security level as a policy of kind
// PodSecurity, for inventories.
type PodSecurityInfo struct {
	// Level is baseline or restricted.
	Level string
	// Uses are where the level is in effect: one per mode and version, in
	// mode order (enforce, audit, warn), then by version (latest first).
	Uses []PodSecurityUse
	// Actions are the modes of Uses as validationActions, in mode order:
	// enforce → Deny, audit → Audit, warn → Warn.
	Actions []string
	// Resources are what the level checks in those modes, as
	// group/version/resource: v1/pods, and the workload resources that
	// embed a pod template when it audits or warns (enforce is for Pods
	// only).
	Resources []string
	// Exceptions are the PolicyExceptions naming the level, in order.
	Exceptions []*Exception
}

// PodSecurityUse is a mode and version in which a level is in effect.
type PodSecurityUse struct {
	// Mode is enforce, audit or warn.
	Mode string
	// Version is the Pod Security Standards version checked: latest, v1.30.
	Version string
	// Namespaces are the Namespaces of the set whose policy — their
	// pod-security.kubernetes.io/ labels, and the configuration's defaults
	// for what they do not set — has the level in this mode and version,
	// by name; exempt namespaces are left out. In Applicable, the
	// request's namespace.
	Namespaces []string
	// Defaults says the PodSecurityConfiguration's defaults have the level
	// in this mode and version, so it is also in effect in the namespaces
	// the set does not hold (that are not exempt), unless a request
	// carries its Namespace with other labels.
	Defaults bool
}

// psaWorkloadResources are the workload resources whose pod template Pod
// Security audits and warns about, as group/version/resource.
var psaWorkloadResources = []string{
	"v1/replicationcontrollers", "v1/podtemplates",
	"apps/v1/deployments", "apps/v1/replicasets", "apps/v1/statefulsets", "apps/v1/daemonsets",
	"batch/v1/jobs", "batch/v1/cronjobs",
}

var psaModeRank = map[string]int{psa.ModeEnforce: 0, psa.ModeAudit: 1, psa.ModeWarn: 2}

// finish sorts the uses and derives the actions and resources from them.
func (in *PodSecurityInfo) finish() {
	sort.SliceStable(in.Uses, func(i, j int) bool {
		a, b := in.Uses[i], in.Uses[j]
		if a.Mode != b.Mode {
			return psaModeRank[a.Mode] < psaModeRank[b.Mode]
		}
		va, _ := api.ParseVersion(a.Version)
		vb, _ := api.ParseVersion(b.Version)
		return vb.Older(va)
	})
	has := map[string]bool{}
	for _, u := range in.Uses {
		has[u.Mode] = true
	}
	var modes []string
	for _, m := range []string{psa.ModeEnforce, psa.ModeAudit, psa.ModeWarn} {
		if has[m] {
			modes = append(modes, m)
		}
	}
	in.Actions = nil
	if len(modes) > 0 {
		in.Actions = psaActions(modes)
	}
	in.Resources = nil
	if len(modes) > 0 {
		in.Resources = append(in.Resources, "v1/pods")
	}
	if has[psa.ModeAudit] || has[psa.ModeWarn] {
		in.Resources = append(in.Resources, psaWorkloadResources...)
	}
}

// PodSecurityInfos describes the Pod Security levels of the set as
// policies of kind PodSecurity, baseline before restricted: a level is
// listed when it is in effect somewhere — in the defaults of the set's
// PodSecurityConfiguration, or in the policy of one of its Namespaces (a
// Namespace with pod-security.kubernetes.io/ labels, or any Namespace when
// the set has a configuration; exempt namespaces left out) — or when
// PolicyExceptions name it (a level in effect nowhere has no uses, actions
// or resources: it checks nothing at this revision).
//
// The set computes them once; callers must not modify them.
func (ps *PolicySet) PodSecurityInfos() []PodSecurityInfo {
	if ps.psa == nil {
		return nil
	}
	st := ps.psa
	st.infosOnce.Do(func() { st.infos = ps.podSecurityInfos() })
	return st.infos
}

func (ps *PolicySet) podSecurityInfos() []PodSecurityInfo {
	st := ps.psa
	type key struct {
		level         api.Level
		mode, version string
	}
	uses := map[key]*PodSecurityUse{}
	add := func(u psa.Use, namespace string, defaults bool) {
		for _, m := range u.Modes {
			k := key{u.Level, m, u.Version.String()}
			use := uses[k]
			if use == nil {
				use = &PodSecurityUse{Mode: m, Version: k.version}
				uses[k] = use
			}
			if defaults {
				use.Defaults = true
			} else {
				use.Namespaces = append(use.Namespaces, namespace)
			}
		}
	}
	if st.object != nil {
		for _, u := range st.config.DefaultUses() {
			add(u, "", true)
		}
	}
	names := make([]string, 0, len(ps.namespaces))
	for name := range ps.namespaces {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		labels := stringMap(ps.namespaces[name], "labels")
		if st.object == nil && !psa.HasLabels(labels) {
			continue
		}
		for _, u := range st.config.NamespaceUses(name, labels) {
			add(u, name, false)
		}
	}
	var out []PodSecurityInfo
	for _, l := range psaLevels {
		info := PodSecurityInfo{Level: string(l)}
		for k, u := range uses {
			if k.level == l {
				info.Uses = append(info.Uses, *u)
			}
		}
		if lv := st.levels[l]; lv != nil {
			info.Exceptions = lv.exceptions
		}
		if len(info.Uses) == 0 && len(info.Exceptions) == 0 {
			continue
		}
		info.finish()
		out = append(out, info)
	}
	return out
}

// PodSecurityLevels are the Pod Security levels that are policies (that
// PolicyExceptions may name): baseline, restricted.
func PodSecurityLevels() []string {
	out := make([]string, len(psaLevels))
	for i, l := range psaLevels {
		out[i] = string(l)
	}
	return out
}

// PodSecurityExceptions returns the PolicyExceptions that name a Pod
// Security level (baseline, restricted), in order.
func (ps *PolicySet) PodSecurityExceptions(level string) []*Exception {
	if ps.psa == nil {
		return nil
	}
	if l := ps.psa.levels[api.Level(level)]; l != nil {
		return l.exceptions
	}
	return nil
}

var namespacesResource = schema.GroupResource{Resource: "namespaces"}

// applicablePSA returns the Pod Security levels that apply to a request
// (psa.Config.Applies), each with the modes and versions of the request's
// namespace and the exceptions naming it, whose matchConditions are
// evaluated as Pod Security evaluates them (object is the Pod or the
// workload resource; failurePolicy Fail). For a Namespace, the levels are
// those its labels put in effect for the Pods and workloads created in it,
// and the exceptions are not evaluated (Pod Security evaluates them on
// those, never on the Namespace).
func (ps *PolicySet) applicablePSA(rq *evalRequest, evaluate bool) []Applicable {
	preq := ps.psaRequest(rq)
	if preq == nil {
		return nil
	}
	isNamespace := preq.Resource == namespacesResource
	if isNamespace && preq.Namespace == "" {
		preq.Namespace = preq.Name
	}
	var out []Applicable
	at := map[api.Level]int{}
	for _, u := range ps.psa.config.Applies(preq) {
		i, ok := at[u.Level]
		if !ok {
			i = len(out)
			at[u.Level] = i
			out = append(out, Applicable{Policy: psaPolicies[u.Level].policy, PodSecurity: &PodSecurityInfo{Level: string(u.Level)}})
		}
		info := out[i].PodSecurity
		for _, m := range u.Modes {
			use := PodSecurityUse{Mode: m, Version: u.Version.String()}
			if preq.Namespace != "" {
				use.Namespaces = []string{preq.Namespace}
			}
			info.Uses = append(info.Uses, use)
		}
	}
	for i := range out {
		a := &out[i]
		a.PodSecurity.finish()
		l := ps.psa.levels[api.Level(a.PodSecurity.Level)]
		if l == nil {
			continue
		}
		a.PodSecurity.Exceptions = l.exceptions
		for _, ex := range l.exceptions {
			ae := ApplicableException{Exception: ex, HasControls: len(ex.controls[0]) > 0, Match: "not evaluated"}
			switch {
			case ex.Expired(rq.now):
				ae.Match = "expired"
			case !evaluate || isNamespace:
			case ex.refuted(rq.req.Object):
				ae.Match = "does not match"
			default:
				st := &policyState{rq: rq, v: l.v}
				ok, err := st.match(ex.conds[0], l.v.policy.failurePolicy)
				switch {
				case err != nil:
					ae.Match = "error: " + err.Error()
				case ok:
					ae.Match = "matches"
				default:
					ae.Match = "does not match"
				}
			}
			a.Exceptions = append(a.Exceptions, ae)
		}
	}
	return out
}

package psa

import (
	"sort"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"k8s.io/pod-security-admission/api"

	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/exception"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// Pod Security levels as policies of the inventory (QueryService
// ListPolicies, GetPolicy, Status) and of Applicable.

// Info describes a Pod Security level as a policy of kind
// PodSecurity, for inventories.
type Info struct {
	// Level is baseline or restricted.
	Level string
	// Uses are where the level is in effect: one per mode and version, in
	// mode order (enforce, audit, warn), then by version (latest first).
	Uses []LevelUse
	// Actions are the modes of Uses as validationActions, in mode order:
	// enforce → Deny, audit → Audit, warn → Warn.
	Actions []string
	// Resources are what the level checks in those modes, as
	// group/version/resource: v1/pods, and the workload resources that
	// embed a pod template when it audits or warns (enforce is for Pods
	// only).
	Resources []string
	// Exceptions are the PolicyExceptions naming the level, in order.
	Exceptions []*exception.Exception
}

// LevelUse is a mode and version in which a level is in effect.
type LevelUse struct {
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

var psaModeRank = map[string]int{ModeEnforce: 0, ModeAudit: 1, ModeWarn: 2}

// finish sorts the uses and derives the actions and resources from them.
func (in *Info) finish() {
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
	for _, m := range []string{ModeEnforce, ModeAudit, ModeWarn} {
		if has[m] {
			modes = append(modes, m)
		}
	}
	in.Actions = nil
	if len(modes) > 0 {
		in.Actions = Actions(modes)
	}
	in.Resources = nil
	if len(modes) > 0 {
		in.Resources = append(in.Resources, "v1/pods")
	}
	if has[ModeAudit] || has[ModeWarn] {
		in.Resources = append(in.Resources, psaWorkloadResources...)
	}
}

// Infos describes the Pod Security levels of the set as
// policies of kind PodSecurity, baseline before restricted: a level is
// listed when it is in effect somewhere — in the defaults of the set's
// PodSecurityConfiguration, or in the policy of one of its Namespaces (a
// Namespace with pod-security.kubernetes.io/ labels, or any Namespace when
// the set has a configuration; exempt namespaces left out) — or when
// PolicyExceptions name it (a level in effect nowhere has no uses, actions
// or resources: it checks nothing at this revision).
//
// The set computes them once; callers must not modify them.
func (s *Set) Infos() []Info {
	s.infosOnce.Do(func() { s.infos = s.computeInfos() })
	return s.infos
}

func (s *Set) computeInfos() []Info {
	st := s
	type key struct {
		level         api.Level
		mode, version string
	}
	uses := map[key]*LevelUse{}
	add := func(u Use, namespace string, defaults bool) {
		for _, m := range u.Modes {
			k := key{u.Level, m, u.Version.String()}
			use := uses[k]
			if use == nil {
				use = &LevelUse{Mode: m, Version: k.version}
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
	names := make([]string, 0, len(s.namespaces))
	for name := range s.namespaces {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		labels := manifest.MetadataStrings(s.namespaces[name], "labels")
		if st.object == nil && !HasLabels(labels) {
			continue
		}
		for _, u := range st.config.NamespaceUses(name, labels) {
			add(u, name, false)
		}
	}
	var out []Info
	for _, l := range Levels {
		info := Info{Level: string(l)}
		for k, u := range uses {
			if k.level == l {
				info.Uses = append(info.Uses, *u)
			}
		}
		if lv := st.levels[l]; lv != nil {
			info.Exceptions = lv.bound.Exceptions
		}
		if len(info.Uses) == 0 && len(info.Exceptions) == 0 {
			continue
		}
		info.finish()
		out = append(out, info)
	}
	return out
}

// Applicable is a Pod Security level that applies to a request: the
// modes and versions of the request's namespace, their actions and
// resources, and the exceptions naming it.
type Applicable struct {
	Info       Info
	Exceptions []exception.Applicability
}

// Applicable returns the Pod Security levels that apply to a request
// (Config.applies), each with the modes and versions of the request's
// namespace and the exceptions naming it, whose matchConditions are
// evaluated as Pod Security evaluates them (object is the Pod or the
// workload resource; failurePolicy Fail). For a Namespace, the levels are
// those its labels put in effect for the Pods and workloads created in it,
// and the exceptions are not evaluated (Pod Security evaluates them on
// those, never on the Namespace).
func (s *Set) Applicable(rq *celeval.Request, evaluate bool) []Applicable {
	in := s.newInput(rq.Attributes(), rq.Namespace())
	if in == nil {
		return nil
	}
	isNamespace := in.gr == namespacesResource
	var out []Applicable
	at := map[api.Level]int{}
	for _, u := range s.config.applies(in) {
		i, ok := at[u.Level]
		if !ok {
			i = len(out)
			at[u.Level] = i
			out = append(out, Applicable{Info: Info{Level: string(u.Level)}})
		}
		info := &out[i].Info
		for _, m := range u.Modes {
			use := LevelUse{Mode: m, Version: u.Version.String()}
			if in.namespace != "" {
				use.Namespaces = []string{in.namespace}
			}
			info.Uses = append(info.Uses, use)
		}
	}
	for i := range out {
		a := &out[i]
		a.Info.finish()
		l := s.levels[api.Level(a.Info.Level)]
		if l == nil {
			continue
		}
		a.Info.Exceptions = l.bound.Exceptions
		a.Exceptions = celeval.Run(rq, &l.scope, func(st *celeval.State) []exception.Applicability {
			return l.bound.Applicable(st, false, admissionregistrationv1.Fail, evaluate && !isNamespace)
		})
	}
	return out
}

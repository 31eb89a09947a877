// Package psa evaluates Kubernetes Pod Security Admission for Arbiter: the
// Pod Security Standards checks and level/version logic of
// k8s.io/pod-security-admission (packages api and policy), the
// PodSecurityConfiguration of its admission/api package, and a replica of
// its admission flow (package admission, which links client-go and so
// cannot be linked into Arbiter's binary): exemptions, namespace labels,
// pods and pod templates of workload resources, the messages, warnings and
// audit annotations kube-apiserver produces. It knows nothing of the rest
// of the engine; PolicyExceptions reach it through Request.Exceptions.
package psa

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	admissionapi "k8s.io/pod-security-admission/admission/api"
	"k8s.io/pod-security-admission/admission/api/scheme"
	apiv1 "k8s.io/pod-security-admission/admission/api/v1"
	"k8s.io/pod-security-admission/admission/api/validation"
	"k8s.io/pod-security-admission/api"
)

// Group and kind of the upstream configuration type.
const (
	Group      = apiv1.GroupName
	KindConfig = "PodSecurityConfiguration"
)

// Versions are the served versions of the configuration (one schema).
var Versions = map[string]bool{"v1alpha1": true, "v1beta1": true, "v1": true}

// Config is a compiled PodSecurityConfiguration: the default policy of
// namespaces without labels and the exemptions. It is immutable.
type Config struct {
	defaults       api.Policy
	usernames      []string
	namespaces     []string
	runtimeClasses []string
	warnings       []string
}

// DefaultConfig is the configuration kube-apiserver uses without a
// configuration file: privileged:latest for enforce, audit and warn, no
// exemptions.
func DefaultConfig() *Config {
	c, errs := CompileConfig(&apiv1.PodSecurityConfiguration{})
	if len(errs) > 0 {
		panic(errs.ToAggregate())
	}
	return c
}

// CompileConfig defaults, converts and validates a configuration as
// kube-apiserver does when it loads one (scheme defaults, then
// validation.ValidatePodSecurityConfiguration, then api.ToPolicy for the
// defaults). The errors are field errors (defaults.enforce,
// exemptions.usernames[0], ...).
func CompileConfig(external *apiv1.PodSecurityConfiguration) (*Config, field.ErrorList) {
	external = external.DeepCopy()
	scheme.Scheme.Default(external)
	var internal admissionapi.PodSecurityConfiguration
	if err := scheme.Scheme.Convert(external, &internal, nil); err != nil {
		return nil, field.ErrorList{field.InternalError(nil, err)}
	}
	if errs := validation.ValidatePodSecurityConfiguration(&internal); len(errs) > 0 {
		return nil, errs
	}
	p, err := admissionapi.ToPolicy(internal.Defaults)
	if err != nil {
		return nil, field.ErrorList{field.Invalid(field.NewPath("defaults"), internal.Defaults, err.Error())}
	}
	c := &Config{
		defaults:       p,
		usernames:      internal.Exemptions.Usernames,
		namespaces:     internal.Exemptions.Namespaces,
		runtimeClasses: internal.Exemptions.RuntimeClasses,
	}
	c.warnings = controllerWarnings(c.usernames)
	return c, nil
}

// Defaults returns the policy of namespaces without Pod Security labels.
func (c *Config) Defaults() api.Policy { return c.defaults }

// Exemptions returns the exempt usernames, namespaces and runtime class names.
func (c *Config) Exemptions() (usernames, namespaces, runtimeClasses []string) {
	return c.usernames, c.namespaces, c.runtimeClasses
}

// Warnings are problems of the configuration that do not make it invalid:
// exempted controller service accounts.
func (c *Config) Warnings() []string { return c.warnings }

// controllerSAPrefix and controllerSASuffix delimit the service accounts of
// kube-controller-manager's controllers (replicaset-controller,
// daemon-set-controller, job-controller, ...).
const (
	controllerSAPrefix = "system:serviceaccount:kube-system:"
	controllerSASuffix = "-controller"
)

// IsControllerServiceAccount says whether a username is the service account
// of a kube-system controller (system:serviceaccount:kube-system:*-controller).
func IsControllerServiceAccount(username string) bool {
	name, ok := strings.CutPrefix(username, controllerSAPrefix)
	return ok && strings.HasSuffix(name, controllerSASuffix) && len(name) > len(controllerSASuffix)
}

// controllerWarnings warns about every exempted controller service
// account: the controller creates Pods on behalf of whoever created the
// workload, so exempting it exempts every user who can create one.
func controllerWarnings(usernames []string) []string {
	var out []string
	for _, u := range usernames {
		if IsControllerServiceAccount(u) {
			out = append(out, fmt.Sprintf("PodSecurityConfiguration exempts the controller service account %q: "+
				"the Pods that controller creates skip Pod Security, so every user who can create the workload resources it manages is implicitly exempt "+
				"(exempt the users, namespaces or runtime classes that need it, or record a PolicyException of kind PodSecurity)", u))
		}
	}
	sort.Strings(out)
	return out
}

func contains(needle string, haystack []string) bool {
	for _, s := range haystack {
		if s == needle {
			return true
		}
	}
	return false
}

func (c *Config) exemptNamespace(ns string) bool {
	return ns != "" && contains(ns, c.namespaces)
}

func (c *Config) exemptUser(u string) bool {
	return u != "" && contains(u, c.usernames)
}

func (c *Config) exemptRuntimeClass(rc *string) bool {
	return rc != nil && *rc != "" && contains(*rc, c.runtimeClasses)
}

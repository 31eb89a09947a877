package kubesource

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/arbiter-pdp/arbiter/engine/admissionpolicy"
	"github.com/arbiter-pdp/arbiter/engine/autogen"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
)

// WebhookConfig configures the webhook configurations the primary manages
// from the policies it serves (Config.Webhooks): a
// ValidatingWebhookConfiguration for the ValidatingPolicies,
// NamespacedValidatingPolicies and ImageValidatingPolicies (both kinds) and
// a MutatingWebhookConfiguration for the MutatingPolicies,
// NamespacedMutatingPolicies and the ImageValidatingPolicies that pin
// digests, both named Name, whose
// webhooks Kyverno's webhook controller would make from those policies
// (pkg/controllers/webhook), calling Arbiter's webhook shim at /validate
// and /mutate.
type WebhookConfig struct {
	// Name names both configurations (default DefaultWebhookConfigName).
	Name string
	// Service is the shim's Service (namespace, name, port; port default
	// 443). URL, when set, is used instead: the shim's base URL
	// (https://host[:port][/prefix]), to which /validate and /mutate are
	// appended.
	Service ServiceRef
	URL     string
	// CAFile is a PEM file of the CA bundle the API server verifies the
	// shim's certificate with, read at every update (so a rotated CA
	// reaches the configurations). CABundle is used when CAFile is empty.
	// With neither, the caBundle found on the existing configurations is
	// kept (a CA injector, such as cert-manager's, writes it; give it its
	// annotation with Annotations).
	CAFile   string
	CABundle []byte
	// NamespaceSelector and ObjectSelector are merged into every webhook's
	// selectors, as Kyverno merges its configuration's
	// webhooks.namespaceSelector and objectSelector. The default namespace
	// selector excludes kube-system (DefaultNamespaceSelector).
	NamespaceSelector *metav1.LabelSelector
	ObjectSelector    *metav1.LabelSelector
	// Labels and Annotations are added to both configurations.
	Labels, Annotations map[string]string
	// Resync is how often the configurations are compared with what the
	// primary wants even when no revision changed, so a hand edit is
	// undone and a rotated CAFile reaches them (default 30 s).
	Resync time.Duration
}

func (c *WebhookConfig) resync() time.Duration {
	if c == nil || c.Resync <= 0 {
		return 30 * time.Second
	}
	return c.Resync
}

// ServiceRef names the shim's Service.
type ServiceRef struct {
	Namespace, Name string
	Port            int32
}

// DefaultWebhookConfigName is the default name of the managed
// configurations.
const DefaultWebhookConfigName = "arbiter-managed"

// ManagedByLabel marks the managed configurations.
const ManagedByLabel = "webhook.arbiter.dev/managed-by"

// Webhook names (the base of every webhook's name, as Kyverno's
// vpol.validate.kyverno.svc) and the shim's paths.
const (
	vpolWebhookName  = "vpol.validate.arbiter.dev"
	nvpolWebhookName = "nvpol.validate.arbiter.dev"
	mpolWebhookName  = "mpol.mutate.arbiter.dev"
	nmpolWebhookName = "nmpol.mutate.arbiter.dev"
	// ImageValidatingPolicies are in both configurations (the mutating
	// one pins digests). Kyverno names the namespaced kind's webhooks as
	// the cluster kind's (ivpol.validate.kyverno.svc), so the two can
	// collide; Arbiter gives them their own base.
	ivpolWebhookName        = "ivpol.validate.arbiter.dev"
	nivpolWebhookName       = "nivpol.validate.arbiter.dev"
	ivpolMutateWebhookName  = "ivpol.mutate.arbiter.dev"
	nivpolMutateWebhookName = "nivpol.mutate.arbiter.dev"
	validatePath            = "/validate"
	mutatePath              = "/mutate"
)

// DefaultNamespaceSelector is the namespace selector merged into every
// webhook when none is configured: every namespace but excluded, one
// NotIn expression each, as Kyverno's Helm chart excludes kube-system and
// Kyverno's own namespace.
func DefaultNamespaceSelector(excluded ...string) *metav1.LabelSelector {
	sel := &metav1.LabelSelector{}
	for _, ns := range excluded {
		if ns == "" {
			continue
		}
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: namespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{ns},
		})
	}
	if len(sel.MatchExpressions) == 0 {
		return nil
	}
	return sel
}

func (c *WebhookConfig) name() string {
	if c.Name == "" {
		return DefaultWebhookConfigName
	}
	return c.Name
}

// clientConfig is the webhooks' clientConfig for path.
func (c *WebhookConfig) clientConfig(path string, caBundle []byte) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: caBundle}
	if c.URL != "" {
		u := strings.TrimRight(c.URL, "/") + path
		cc.URL = &u
		return cc
	}
	port := c.Service.Port
	if port == 0 {
		port = 443
	}
	cc.Service = &admissionregistrationv1.ServiceReference{Namespace: c.Service.Namespace, Name: c.Service.Name, Path: &path, Port: &port}
	return cc
}

// desiredWebhooks are the managed configurations' webhooks for a set of
// policies, and the policies they include (configured), by store key.
type desiredWebhooks struct {
	validating []admissionregistrationv1.ValidatingWebhook
	mutating   []admissionregistrationv1.MutatingWebhook
	// policies maps each webhook's name to the policies it carries.
	policies map[string][]*policyInfo
	// included are the policies selected for the webhooks (rules or not).
	included []*policyInfo
}

// buildWebhooks makes the webhooks of the policies (any order) as Kyverno's
// webhook controller does, with API defaults filled in, so that the result
// compares equal to what the API server stores.
func buildWebhooks(cfg *WebhookConfig, caBundle []byte, policies []*policyInfo) *desiredWebhooks {
	byBase := map[string][]*policyInfo{}
	out := &desiredWebhooks{policies: map[string][]*policyInfo{}}
	for _, p := range policies {
		if !p.inWebhook() {
			continue
		}
		out.included = append(out.included, p)
		byBase[baseName(p.kind)] = append(byBase[baseName(p.kind)], p)
		if p.digest {
			byBase[mutateBaseName(p.kind)] = append(byBase[mutateBaseName(p.kind)], p)
		}
	}
	for _, base := range []string{vpolWebhookName, nvpolWebhookName, ivpolWebhookName, nivpolWebhookName} {
		for _, w := range buildGroup(cfg, caBundle, base, validatePath, byBase[base], out.policies) {
			out.validating = append(out.validating, w.ValidatingWebhook)
		}
	}
	for _, base := range []string{mpolWebhookName, nmpolWebhookName, ivpolMutateWebhookName, nivpolMutateWebhookName} {
		for _, w := range buildGroup(cfg, caBundle, base, mutatePath, byBase[base], out.policies) {
			out.mutating = append(out.mutating, admissionregistrationv1.MutatingWebhook{
				Name: w.Name, ClientConfig: w.ClientConfig, Rules: w.Rules, FailurePolicy: w.FailurePolicy,
				MatchPolicy: w.MatchPolicy, NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector,
				SideEffects: w.SideEffects, TimeoutSeconds: w.TimeoutSeconds, AdmissionReviewVersions: w.AdmissionReviewVersions,
				ReinvocationPolicy: &w.reinvocation, MatchConditions: w.MatchConditions,
			})
		}
	}
	slices.SortFunc(out.validating, func(a, b admissionregistrationv1.ValidatingWebhook) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(out.mutating, func(a, b admissionregistrationv1.MutatingWebhook) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func baseName(kind string) string {
	switch kind {
	case kyvernoapi.KindNamespacedValidatingPolicy:
		return nvpolWebhookName
	case kyvernoapi.KindMutatingPolicy:
		return mpolWebhookName
	case kyvernoapi.KindNamespacedMutatingPolicy:
		return nmpolWebhookName
	case kyvernoapi.KindImageValidatingPolicy:
		return ivpolWebhookName
	case kyvernoapi.KindNamespacedImageValidatingPolicy:
		return nivpolWebhookName
	}
	return vpolWebhookName
}

// mutateBaseName is the base of an ImageValidatingPolicy's webhooks in the
// MutatingWebhookConfiguration (digest pinning).
func mutateBaseName(kind string) string {
	if kind == kyvernoapi.KindNamespacedImageValidatingPolicy {
		return nivpolMutateWebhookName
	}
	return ivpolMutateWebhookName
}

// webhook is a ValidatingWebhook with the mutating webhook's reinvocation
// policy (the two kinds are built alike).
type webhook struct {
	admissionregistrationv1.ValidatingWebhook
	reinvocation admissionregistrationv1.ReinvocationPolicyType
}

var noneOnDryRun = admissionregistrationv1.SideEffectClassNoneOnDryRun

// buildGroup is Kyverno's buildWebhookRules
// (pkg/controllers/webhook/validating.go) for the policies of one kind:
// one webhook per fine-grained policy (its matchConditions all compile
// in the API server's environment, or matchPolicy Exact, or
// webhookConfiguration.timeoutSeconds) — Fail ones, then Ignore ones — and
// a Fail and an Ignore webhook per group of the other (basic) policies
// that resolve to the same selectors. Every webhook calls path. Rules are
// deduplicated and sorted.
func buildGroup(cfg *WebhookConfig, caBundle []byte, base, path string, policies []*policyInfo, carries map[string][]*policyInfo) []webhook {
	var fine, basic []*policyInfo
	for _, p := range policies {
		switch {
		case validConditions(p.conditions) != nil,
			p.match != nil && p.match.MatchPolicy != nil && *p.match.MatchPolicy == admissionregistrationv1.Exact,
			p.timeout != nil:
			fine = append(fine, p)
		default:
			basic = append(basic, p)
		}
	}
	slices.SortFunc(fine, func(a, b *policyInfo) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	var failList, ignoreList, out []webhook
	for _, p := range fine {
		w := newWebhook(cfg, caBundle, path)
		conds := webhookMatchConditions(validConditions(p.conditions))
		if autogenable(p.match) {
			w.MatchConditions = append(w.MatchConditions, autogenMatchConditions("", []autogen.Target{{Group: "", Version: "v1", Resource: "pods", Kind: "Pod"}}, conds)...)
		} else {
			w.MatchConditions = append(w.MatchConditions, conds...)
		}
		w.Rules = append(w.Rules, ownRules(p)...)
		for _, v := range p.variants {
			w.MatchConditions = append(w.MatchConditions, autogenMatchConditions(v.name, v.targets, webhookMatchConditions(validConditions(v.conditions)))...)
			w.Rules = append(w.Rules, matchRules(v.match)...)
		}
		if p.match != nil && p.match.MatchPolicy != nil && *p.match.MatchPolicy == admissionregistrationv1.Exact {
			w.MatchPolicy = p.match.MatchPolicy
		}
		if p.timeout != nil {
			t := min(max(*p.timeout, 1), 30) // the API server's bounds
			w.TimeoutSeconds = &t
		}
		w.NamespaceSelector = resolveNamespaceSelector(p, cfg)
		w.ObjectSelector = mergeLabelSelectors(objectSelector(p), cfg.ObjectSelector)
		w.reinvocation = reinvocationOf(p)
		suffix := "-finegrained-" + p.name
		if p.namespace != "" {
			suffix = "-finegrained-" + p.namespace + "-" + p.name
		}
		if p.failure == admissionregistrationv1.Ignore {
			w.FailurePolicy = ptrTo(admissionregistrationv1.Ignore)
			w.Name = base + "-ignore" + suffix
			ignoreList = append(ignoreList, w)
		} else {
			w.FailurePolicy = ptrTo(admissionregistrationv1.Fail)
			w.Name = base + "-fail" + suffix
			failList = append(failList, w)
		}
		carries[w.Name] = append(carries[w.Name], p)
	}
	out = append(out, failList...)
	out = append(out, ignoreList...)
	for _, g := range groupBySelectors(basic, cfg) {
		fail, ignore := newWebhook(cfg, caBundle, path), newWebhook(cfg, caBundle, path)
		fail.Name, ignore.Name = base+"-fail"+g.suffix, base+"-ignore"+g.suffix
		fail.FailurePolicy, ignore.FailurePolicy = ptrTo(admissionregistrationv1.Fail), ptrTo(admissionregistrationv1.Ignore)
		for _, w := range []*webhook{&fail, &ignore} {
			w.NamespaceSelector, w.ObjectSelector = g.namespaceSelector, g.objectSelector
			w.reinvocation = admissionregistrationv1.NeverReinvocationPolicy
		}
		var failPols, ignorePols []*policyInfo
		for _, p := range g.policies {
			var rules []admissionregistrationv1.RuleWithOperations
			for _, v := range p.variants {
				rules = append(rules, matchRules(v.match)...)
			}
			rules = append(rules, ownRules(p)...)
			w := &fail
			if p.failure == admissionregistrationv1.Ignore {
				w = &ignore
				ignorePols = append(ignorePols, p)
			} else {
				failPols = append(failPols, p)
			}
			w.Rules = append(w.Rules, rules...)
			if reinvocationOf(p) == admissionregistrationv1.IfNeededReinvocationPolicy {
				w.reinvocation = admissionregistrationv1.IfNeededReinvocationPolicy
			}
		}
		if fail.Rules != nil {
			out = append(out, fail)
			carries[fail.Name] = append(carries[fail.Name], failPols...)
		}
		if ignore.Rules != nil {
			out = append(out, ignore)
			carries[ignore.Name] = append(carries[ignore.Name], ignorePols...)
		}
	}
	for i := range out {
		out[i].Rules = withRuleDefaults(sortedRules(deDuplicatedRules(out[i].Rules)))
		if out[i].NamespaceSelector == nil {
			out[i].NamespaceSelector = &metav1.LabelSelector{}
		}
		if out[i].ObjectSelector == nil {
			out[i].ObjectSelector = &metav1.LabelSelector{}
		}
	}
	return out
}

// reinvocationOf is a MutatingPolicy's spec.reinvocationPolicy (default
// Never). Kyverno 1.19 leaves every webhook at Never; Arbiter honours the
// field (a basic webhook reinvokes when one of its policies asks to).
func reinvocationOf(p *policyInfo) admissionregistrationv1.ReinvocationPolicyType {
	if p.reinvocation == admissionregistrationv1.IfNeededReinvocationPolicy {
		return admissionregistrationv1.IfNeededReinvocationPolicy
	}
	return admissionregistrationv1.NeverReinvocationPolicy
}

func newWebhook(cfg *WebhookConfig, caBundle []byte, path string) webhook {
	return webhook{ValidatingWebhook: admissionregistrationv1.ValidatingWebhook{
		ClientConfig:            cfg.clientConfig(path, caBundle),
		SideEffects:             &noneOnDryRun,
		AdmissionReviewVersions: []string{"v1"},
		MatchPolicy:             ptrTo(admissionregistrationv1.Equivalent),
		TimeoutSeconds:          ptrTo(int32(10)),
	}}
}

func ptrTo[T any](v T) *T { return &v }

// ownRules are the policy's matchConstraints.resourceRules, copied
// (resourceNames dropped: the engine enforces them).
func ownRules(p *policyInfo) []admissionregistrationv1.RuleWithOperations {
	return matchRules(p.match)
}

func matchRules(m *admissionregistrationv1.MatchResources) []admissionregistrationv1.RuleWithOperations {
	if m == nil {
		return nil
	}
	out := make([]admissionregistrationv1.RuleWithOperations, 0, len(m.ResourceRules))
	for _, r := range m.ResourceRules {
		rule := r.RuleWithOperations
		rule.APIGroups = slices.Clone(rule.APIGroups)
		rule.APIVersions = slices.Clone(rule.APIVersions)
		rule.Resources = slices.Clone(rule.Resources)
		rule.Operations = slices.Clone(rule.Operations)
		out = append(out, rule)
	}
	return out
}

func objectSelector(p *policyInfo) *metav1.LabelSelector {
	if p.match == nil {
		return nil
	}
	return p.match.ObjectSelector
}

// autogenable is Kyverno's CanAutoGen (the engine's autogen package
// decides it: a policy has variants exactly when it can be autogenerated
// and controllers are selected; the Pod precondition is added whenever it
// can).
func autogenable(m *admissionregistrationv1.MatchResources) bool {
	return len(autogen.Configs(m, nil)) > 0
}

// autogenMatchConditions is Kyverno's autogen.CreateMatchConditions: each
// condition only constrains the targets' kinds.
func autogenMatchConditions(config string, targets []autogen.Target, conds []admissionregistrationv1.MatchCondition) []admissionregistrationv1.MatchCondition {
	if len(targets) == 0 || len(conds) == 0 {
		return nil
	}
	set := map[string]bool{}
	for _, t := range targets {
		av := t.Version
		if t.Group != "" {
			av = t.Group + "/" + t.Version
		}
		set[fmt.Sprintf(`(object.apiVersion == '%s' && object.kind =='%s')`, av, t.Kind)] = true
	}
	pre := make([]string, 0, len(set))
	for s := range set {
		pre = append(pre, s)
	}
	sort.Strings(pre)
	precondition := strings.Join(pre, " || ")
	prefix := "autogen"
	if config != "" {
		prefix = "autogen-" + config
	}
	out := make([]admissionregistrationv1.MatchCondition, 0, len(conds))
	for _, c := range conds {
		out = append(out, admissionregistrationv1.MatchCondition{
			Name:       prefix + "-" + c.Name,
			Expression: fmt.Sprintf(`!(%s) || (%s)`, precondition, c.Expression),
		})
	}
	return out
}

// validConditions returns conds when every one compiles in the API
// server's webhook matchConditions environment (Kyverno's validConditions:
// then the API server can evaluate them), else nil. Unlike Kyverno, every
// expression is checked as a new expression (Kyverno checks an expression
// it saw before with the more permissive stored-expressions environment,
// so its answer depends on the order it met them), and an empty list is
// no match condition at all.
func validConditions(conds []admissionregistrationv1.MatchCondition) []admissionregistrationv1.MatchCondition {
	if len(conds) == 0 || len(conds) > 64 {
		return nil
	}
	names := map[string]bool{}
	for _, c := range conds {
		if c.Name == "" || names[c.Name] || len(validation.IsQualifiedName(c.Name)) > 0 || !compilesInKubernetes(c.Expression) {
			return nil
		}
		names[c.Name] = true
	}
	return conds
}

var kubeCompiled sync.Map // expression → bool

func compilesInKubernetes(expr string) bool {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return false
	}
	if ok, found := kubeCompiled.Load(expr); found {
		return ok.(bool)
	}
	res := admissionpolicy.Stateless().CompileCELExpression(&matchconditions.MatchCondition{Expression: expr},
		plugincel.OptionalVariableDeclarations{HasParams: false, HasAuthorizer: true}, environment.NewExpressions)
	ok := res.Error == nil
	kubeCompiled.Store(expr, ok)
	return ok
}

// webhookMatchConditions drops the conditions that read namespaceObject,
// which the API server binds to null for webhooks (Kyverno's
// webhookMatchConditions; the engine evaluates them all again).
func webhookMatchConditions(conds []admissionregistrationv1.MatchCondition) []admissionregistrationv1.MatchCondition {
	var out []admissionregistrationv1.MatchCondition
	for _, c := range conds {
		if !referencesNamespaceObject(c.Expression) {
			out = append(out, c)
		}
	}
	return out
}

var parseEnv = sync.OnceValues(func() (*cel.Env, error) { return cel.NewEnv(cel.OptionalTypes()) })

func referencesNamespaceObject(expr string) bool {
	env, err := parseEnv()
	if err != nil {
		return true
	}
	parsed, iss := env.Parse(expr)
	if iss != nil && iss.Err() != nil {
		return true
	}
	found := false
	celast.PreOrderVisit(parsed.NativeRep().Expr(), celast.NewExprVisitor(func(n celast.Expr) {
		if !found && n != nil && n.Kind() == celast.IdentKind && n.AsIdent() == plugincel.NamespaceVarName {
			found = true
		}
	}))
	return found
}

// selectorGroup is Kyverno's: basic policies resolving to the same
// selectors share a pair of webhooks.
type selectorGroup struct {
	namespaceSelector, objectSelector *metav1.LabelSelector
	policies                          []*policyInfo
	suffix                            string
}

func groupBySelectors(policies []*policyInfo, cfg *WebhookConfig) []*selectorGroup {
	groups := map[string]*selectorGroup{}
	var keys []string
	for _, p := range policies {
		ns := resolveNamespaceSelector(p, cfg)
		obj := mergeLabelSelectors(objectSelector(p), cfg.ObjectSelector)
		key := selectorKey(ns, obj)
		g, ok := groups[key]
		if !ok {
			g = &selectorGroup{namespaceSelector: ns, objectSelector: obj}
			groups[key] = g
			keys = append(keys, key)
		}
		g.policies = append(g.policies, p)
	}
	sort.Strings(keys)
	out := make([]*selectorGroup, 0, len(keys))
	for _, k := range keys {
		g := groups[k]
		if len(keys) > 1 {
			g.suffix = "-" + k[:8]
		}
		out = append(out, g)
	}
	return out
}

// selectorKey is the sha256 of the selectors' JSON, as Kyverno's (nil
// selectors included: the API defaults are filled in afterwards).
func selectorKey(ns, obj *metav1.LabelSelector) string {
	b, err := json.Marshal([]*metav1.LabelSelector{ns, obj})
	if err != nil {
		b = fmt.Appendf(nil, "%v%v", ns, obj)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// resolveNamespaceSelector: a namespaced policy's webhook is pinned to its
// namespace; a cluster policy's takes its matchConstraints.namespaceSelector;
// both merged with the configured selector.
func resolveNamespaceSelector(p *policyInfo, cfg *WebhookConfig) *metav1.LabelSelector {
	if p.namespace != "" {
		return mergeLabelSelectors(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: namespaceNameLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{p.namespace},
		}}}, cfg.NamespaceSelector)
	}
	var own *metav1.LabelSelector
	if p.match != nil {
		own = p.match.NamespaceSelector
	}
	return mergeLabelSelectors(own, cfg.NamespaceSelector)
}

// mergeLabelSelectors is Kyverno's: labels of both (b's win), a's
// expressions then b's.
func mergeLabelSelectors(a, b *metav1.LabelSelector) *metav1.LabelSelector {
	if a == nil {
		return b.DeepCopy()
	}
	if b == nil {
		return a.DeepCopy()
	}
	m := &metav1.LabelSelector{}
	for _, s := range []*metav1.LabelSelector{a, b} {
		for k, v := range s.MatchLabels {
			if m.MatchLabels == nil {
				m.MatchLabels = map[string]string{}
			}
			m.MatchLabels[k] = v
		}
		for _, e := range s.MatchExpressions {
			m.MatchExpressions = append(m.MatchExpressions, *e.DeepCopy())
		}
	}
	return m
}

// deDuplicatedRules and sortedRules are Kyverno's (webhook/utils.go):
// rules equal as sets are kept once; rules are sorted by groups,
// versions, resources, operations (each list sorted, lists compared by
// length first), then scope.
func deDuplicatedRules(rules []admissionregistrationv1.RuleWithOperations) []admissionregistrationv1.RuleWithOperations {
	seen := map[string]bool{}
	out := make([]admissionregistrationv1.RuleWithOperations, 0, len(rules))
	for _, r := range rules {
		k := ruleKey(r)
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	return out
}

func ruleKey(r admissionregistrationv1.RuleWithOperations) string {
	var sb strings.Builder
	add := func(in []string) {
		c := slices.Clone(in)
		sort.Strings(c)
		sb.WriteString(strings.Join(c, ","))
		sb.WriteString("|")
	}
	add(r.APIGroups)
	add(r.APIVersions)
	add(r.Resources)
	ops := make([]string, len(r.Operations))
	for i, o := range r.Operations {
		ops[i] = string(o)
	}
	add(ops)
	sb.WriteString("s:")
	if r.Scope != nil {
		sb.WriteString(string(*r.Scope))
	}
	return sb.String()
}

func lessByLength[T cmp.Ordered](a, b []T) int {
	if x := cmp.Compare(len(a), len(b)); x != 0 {
		return x
	}
	for i := range a {
		if x := cmp.Compare(a[i], b[i]); x != 0 {
			return x
		}
	}
	return 0
}

func sortedRules(rules []admissionregistrationv1.RuleWithOperations) []admissionregistrationv1.RuleWithOperations {
	out := slices.Clone(rules)
	for _, r := range out {
		slices.Sort(r.APIGroups)
		slices.Sort(r.APIVersions)
		slices.Sort(r.Resources)
		slices.Sort(r.Operations)
	}
	scope := func(r admissionregistrationv1.RuleWithOperations) string {
		if r.Scope == nil {
			return ""
		}
		return string(*r.Scope)
	}
	slices.SortStableFunc(out, func(a, b admissionregistrationv1.RuleWithOperations) int {
		return cmp.Or(lessByLength(a.APIGroups, b.APIGroups), lessByLength(a.APIVersions, b.APIVersions),
			lessByLength(a.Resources, b.Resources), lessByLength(a.Operations, b.Operations), cmp.Compare(scope(a), scope(b)))
	})
	return out
}

// withRuleDefaults fills in the scope the API server defaults ("*").
func withRuleDefaults(rules []admissionregistrationv1.RuleWithOperations) []admissionregistrationv1.RuleWithOperations {
	for i := range rules {
		if rules[i].Scope == nil {
			rules[i].Scope = ptrTo(admissionregistrationv1.AllScopes)
		}
	}
	return rules
}

// namespaceNameLabel is the label the API server sets on every Namespace
// to its name.
const namespaceNameLabel = "kubernetes.io/metadata.name"

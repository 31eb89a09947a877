// Package ivpol is the kind of Kyverno's ImageValidatingPolicy and
// NamespacedImageValidatingPolicy (policies.kyverno.io): load, compile (CEL
// with the image verification functions, matchImageReferences, image
// extractors, attestors, autogen variants), evaluate (matching, exceptions,
// matchConditions, image extraction, verifyDigest, prefetch, validations,
// audit annotations, required) and mutate (digest pinning), as Kyverno
// 1.19.1 does (pkg/cel/policies/ivpol, pkg/image/verification,
// pkg/cel/libs/imageverify).
//
// The engine does no registry I/O: every registry read and signature
// verification goes through kyvernocel.ImageVerifier, which the imageverify
// package implements.
package ivpol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/gobwas/glob"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/autogen"
	"github.com/arbiter-pdp/arbiter/engine/celenv"
	"github.com/arbiter-pdp/arbiter/engine/celeval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// The API types.
type (
	ImageValidatingPolicy     = kyvernoapi.ImageValidatingPolicy
	ImageValidatingPolicySpec = kyvernoapi.ImageValidatingPolicySpec
)

// Policy is a compiled ImageValidatingPolicy or
// NamespacedImageValidatingPolicy. It is immutable.
type Policy struct {
	Kind      string
	Namespace string
	Name      string
	Source    string
	Spec      *ImageValidatingPolicySpec
	// Labels and Annotations of the policy.
	Labels      map[string]string
	Annotations map[string]string
	Actions     []admissionregistrationv1.ValidationAction
	actionNames []string

	deny, warn, audit bool
	scored            bool
	category          string
	severity          string
	failurePolicy     admissionregistrationv1.FailurePolicyType
	jsonMode          bool
	mutateDigest      bool
	verifyDigest      bool
	required          bool
	// imageRefs are the compiled matchImageReferences (empty: every image).
	imageRefs []imageRef
	// attestations by name.
	attestations    map[string]*kyvernoapi.Attestation
	attestationsVal ref.Val
	opts            kyvernocel.ImageOptions
	// variants are the policy itself, then its autogen configurations.
	variants []*variant
}

// Key returns the policy's report name: the name for cluster policies,
// namespace/name for namespaced ones.
func (p *Policy) Key() string {
	if p.Namespace != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.Name
}

// Namespaced says whether this is a NamespacedImageValidatingPolicy.
func (p *Policy) Namespaced() bool {
	return p.Kind == kyvernoapi.KindNamespacedImageValidatingPolicy
}

// HasAction says whether validationActions holds a.
func (p *Policy) HasAction(a admissionregistrationv1.ValidationAction) bool {
	switch a {
	case admissionregistrationv1.Deny:
		return p.deny
	case admissionregistrationv1.Warn:
		return p.warn
	case admissionregistrationv1.Audit:
		return p.audit
	}
	return false
}

// MutatesDigests says whether the policy pins image tags to digests at
// admission (validationConfigurations.mutateDigest, default true).
func (p *Policy) MutatesDigests() bool { return p.mutateDigest && !p.jsonMode }

type variant struct {
	policy *Policy
	// config is "" for the policy itself, else "defaults" or "cronjobs".
	config       string
	templatePath string
	match        *admission.Matcher
	// matchConditions, extractors (the policy's own images), attestors,
	// validations and audit annotations as this variant reads them
	// (autogen rewrites every expression of the spec).
	matchConditions  []*celeval.Program
	extractors       []extractor
	attestors        []*compiledAttestor
	validations      []*validation
	auditAnnotations []*auditAnnotation
	scope            celeval.Scope
	// builtins are the built-in image extractors of the environment.
	builtins *builtinExtractors
}

type validation struct {
	prog    *celeval.Program
	message string
	msgProg *celeval.Program
}

type auditAnnotation struct {
	key  string
	prog *celeval.Program
}

type extractor struct {
	name string
	prog *celeval.Program
}

// imageRef is a compiled matchImageReference.
type imageRef struct {
	glob glob.Glob
	prog cel.Program
}

// compiledAttestor is an attestor with its CEL inputs compiled.
type compiledAttestor struct {
	name string
	spec *kyvernoapi.Attestor
	// static is the attestor value when it has no CEL inputs.
	static *attestorVal
	exprs  []attestorExpr
}

type attestorExpr struct {
	// what names the input in errors (key, cert, cert chain, notary cert,
	// notary tsa cert, trustedRoot).
	what string
	prog *celeval.Program
	set  func(a *kyvernoapi.Attestor, v string)
}

// Compile loads and compiles one ImageValidatingPolicy or
// NamespacedImageValidatingPolicy object.
func Compile(env *celenv.Env, o *manifest.Object) (*Policy, *manifest.LoadError) {
	if err := kyvernoapi.CheckVersion(o); err != nil {
		return nil, err
	}
	var ip ImageValidatingPolicy
	if err := manifest.DecodeStrict(o, &ip); err != nil {
		return nil, err
	}
	if ip.Name == "" {
		return nil, manifest.Errorf(o, "metadata.name", "required")
	}
	spec := &ip.Spec
	p := &Policy{
		Kind:          o.Kind,
		Namespace:     ip.Namespace,
		Name:          ip.Name,
		Source:        o.Source,
		Spec:          spec,
		Labels:        ip.Labels,
		Annotations:   ip.Annotations,
		Actions:       spec.Actions(),
		failurePolicy: spec.GetFailurePolicy(),
		jsonMode:      spec.EvaluationMode() == kyvernoapi.EvaluationModeJSON,
		scored:        ip.Annotations["policies.kyverno.io/scored"] != "false",
		category:      ip.Annotations["policies.kyverno.io/category"],
		severity:      ip.Annotations["policies.kyverno.io/severity"],
		mutateDigest:  spec.MutateDigest(),
		verifyDigest:  spec.VerifyDigest(),
		required:      spec.Required(),
		attestations:  map[string]*kyvernoapi.Attestation{},
	}
	if p.Kind == kyvernoapi.KindImageValidatingPolicy {
		p.Namespace = ""
	} else if p.Namespace == "" {
		p.Namespace = "default"
	}
	p.opts = kyvernocel.ImageOptions{Credentials: spec.Credentials, Namespace: p.Namespace}
	for i, a := range spec.ValidationActions {
		switch a {
		case admissionregistrationv1.Deny:
			p.deny = true
		case admissionregistrationv1.Warn:
			p.warn = true
		case admissionregistrationv1.Audit:
			p.audit = true
		default:
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.validationActions[%d]", i), "unsupported value %q: supported values: \"Audit\", \"Deny\", \"Warn\"", a)
		}
	}
	if len(spec.ValidationActions) == 0 {
		p.deny = true
	}
	for _, a := range p.Actions {
		p.actionNames = append(p.actionNames, string(a))
	}
	switch p.failurePolicy {
	case admissionregistrationv1.Fail, admissionregistrationv1.Ignore:
	default:
		return nil, manifest.Errorf(o, "spec.failurePolicy", "unsupported value %q: supported values: \"Fail\", \"Ignore\"", p.failurePolicy)
	}
	switch spec.EvaluationMode() {
	case kyvernoapi.EvaluationModeKubernetes, kyvernoapi.EvaluationModeJSON:
	default:
		return nil, manifest.Errorf(o, "spec.evaluation.mode", "unsupported value %q: supported values: \"Kubernetes\", \"JSON\"", spec.EvaluationMode())
	}
	if spec.Attestors == nil {
		return nil, manifest.Errorf(o, "spec.attestors", "Required value")
	}
	if spec.Validations == nil {
		return nil, manifest.Errorf(o, "spec.validations", "Required value")
	}
	for i, a := range spec.Attestors {
		field := fmt.Sprintf("spec.attestors[%d]", i)
		if a.Name == "" {
			return nil, manifest.Errorf(o, field+".name", "Required value")
		}
		if (a.Cosign == nil) == (a.Notary == nil) {
			return nil, manifest.Errorf(o, field, "exactly one of cosign or notary must be set")
		}
	}
	for i := range spec.Attestations {
		a := &spec.Attestations[i]
		if a.Name == "" {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.attestations[%d].name", i), "Required value")
		}
		p.attestations[a.Name] = a
	}
	names := map[string]any{}
	for name := range p.attestations {
		names[name] = name
	}
	p.attestationsVal = types.DefaultTypeAdapter.NativeToValue(names)
	for i, e := range spec.ImageExtractors {
		if e.Name == "" {
			return nil, manifest.Errorf(o, fmt.Sprintf("spec.images[%d].name", i), "Required value")
		}
	}
	if n := len(spec.MatchConditions); n > 64 {
		return nil, manifest.Errorf(o, "spec.matchConditions", "too many: %d, must have at most 64 items", n)
	}
	base, lerr := compileVariant(env, o, p, "", "", spec, true)
	if lerr != nil {
		return nil, lerr
	}
	p.variants = append(p.variants, base)
	if !p.jsonMode {
		configs, specs, err := AutogenSpecs(spec)
		if err != nil {
			return nil, manifest.Errorf(o, "spec", "autogen: %v", err)
		}
		for i, cfg := range configs {
			v, lerr := compileVariant(env, o, p, cfg.Name, cfg.TemplatePath, specs[i], false)
			if lerr != nil {
				lerr.Detail = fmt.Sprintf("autogen %s: %s", cfg.Name, lerr.Detail)
				return nil, lerr
			}
			p.variants = append(p.variants, v)
		}
	}
	return p, nil
}

// AutogenSpecs returns the autogen variants of a policy spec and their
// specs (Kyverno rewrites the whole spec, attestor and image expressions
// included).
func AutogenSpecs(spec *ImageValidatingPolicySpec) ([]autogen.Config, []*ImageValidatingPolicySpec, error) {
	var pc *kyvernoapi.PodControllers
	if spec.Autogen != nil {
		pc = spec.Autogen.PodControllers
	}
	configs := autogen.Configs(spec.MatchConstraints, pc)
	specs := make([]*ImageValidatingPolicySpec, len(configs))
	for i, cfg := range configs {
		clone := *spec
		clone.MatchConstraints = cfg.Match
		data, err := json.Marshal(&clone)
		if err != nil {
			return nil, nil, err
		}
		var s ImageValidatingPolicySpec
		if err := json.Unmarshal(cfg.Rewrite(data), &s); err != nil {
			return nil, nil, err
		}
		specs[i] = &s
	}
	return configs, specs, nil
}

// compileVariant compiles one variant; base says it is the policy itself
// (the matchImageReferences are compiled with it).
func compileVariant(env *celenv.Env, o *manifest.Object, p *Policy, config, templatePath string, spec *ImageValidatingPolicySpec, base bool) (*variant, *manifest.LoadError) {
	v := &variant{policy: p, config: config, templatePath: templatePath}
	v.scope = celeval.Scope{Policy: p.Key(), Variant: config, Namespace: p.Namespace}
	if !p.jsonMode {
		mr := spec.MatchConstraints
		if mr == nil {
			// No matchConstraints match every resource (Kyverno's matcher).
			mr = &admissionregistrationv1.MatchResources{}
		}
		m, field, err := admission.CompileMatch(mr, "spec.matchConstraints")
		if err != nil {
			return nil, manifest.Errorf(o, field, "%v", err)
		}
		v.match = m
	}
	penv, err := env.ForImagePolicy(p.Namespaced(), p.jsonMode, library)
	if err != nil {
		return nil, manifest.Errorf(o, "spec", "%v", err)
	}
	v.builtins, err = builtinsFor(env, p.Namespaced(), p.jsonMode)
	if err != nil {
		return nil, manifest.Errorf(o, "spec", "%v", err)
	}
	bounds := map[string]celeval.SizeBounds{}
	compile := func(field, expr string, want *types.Type) (*celeval.Program, *cel.Ast, *manifest.LoadError) {
		prg, ast, err := celeval.Compile(penv.Pair, expr, want, bounds)
		if err != nil {
			return nil, nil, manifest.Errorf(o, field, "%v", err)
		}
		return prg, ast, nil
	}
	// Kyverno's order: matchConditions, matchImageReferences, images,
	// variables, attestors, validations, auditAnnotations.
	for i, mc := range spec.MatchConditions {
		prg, _, lerr := compile(fmt.Sprintf("spec.matchConditions[%d].expression", i), mc.Expression, types.BoolType)
		if lerr != nil {
			return nil, lerr
		}
		v.matchConditions = append(v.matchConditions, prg)
	}
	if base {
		for i, m := range spec.MatchImageReferences {
			r, lerr := compileImageRef(o, i, m)
			if lerr != nil {
				return nil, lerr
			}
			p.imageRefs = append(p.imageRefs, r)
		}
	}
	builtinCount := 0
	if !p.jsonMode {
		builtinCount = len(builtinNames)
	}
	for i, e := range spec.ImageExtractors {
		field := fmt.Sprintf("spec.images[%d].expression", i+builtinCount)
		prg, ast, err := celeval.Compile(penv.Pair, e.Expression, nil, bounds)
		if err != nil {
			return nil, manifest.Errorf(o, field, "%v", err)
		}
		if t := ast.OutputType(); !t.IsExactType(types.NewListType(types.StringType)) && !t.IsExactType(types.DynType) && !t.IsExactType(types.NewListType(types.DynType)) {
			return nil, manifest.Errorf(o, field, "output is expected to be of type list(string)")
		}
		v.extractors = append(v.extractors, extractor{name: e.Name, prog: prg})
	}
	seen := map[string]bool{}
	if !p.jsonMode {
		for i, vr := range spec.Variables {
			if vr.Name == "" {
				return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].name", i), "required")
			}
			if seen[vr.Name] {
				return nil, manifest.Errorf(o, fmt.Sprintf("spec.variables[%d].name", i), "duplicate variable %q", vr.Name)
			}
			seen[vr.Name] = true
			prg, ast, lerr := compile(fmt.Sprintf("spec.variables[%d].expression", i), vr.Expression, nil)
			if lerr != nil {
				return nil, lerr
			}
			penv.DeclareVariable(vr.Name, ast.OutputType())
			bounds[vr.Name] = celeval.VarBound(ast, bounds)
			v.scope.Variables = append(v.scope.Variables, celeval.Variable{Name: vr.Name, Prog: prg})
		}
	} else if len(spec.Variables) > 0 {
		// Kyverno declares `variables` in the Kubernetes mode only.
		return nil, manifest.Errorf(o, "spec.variables[0].expression", "variables are not available in the JSON evaluation mode")
	}
	for i := range spec.Attestors {
		a, lerr := compileAttestor(o, i, &spec.Attestors[i], penv.Pair, bounds)
		if lerr != nil {
			return nil, lerr
		}
		v.attestors = append(v.attestors, a)
	}
	for i, val := range spec.Validations {
		field := fmt.Sprintf("spec.validations[%d]", i)
		prg, _, lerr := compile(field+".expression", val.Expression, types.BoolType)
		if lerr != nil {
			return nil, lerr
		}
		cv := &validation{prog: prg, message: val.Message}
		if val.MessageExpression != "" {
			cv.msgProg, _, lerr = compile(field+".messageExpression", val.MessageExpression, types.StringType)
			if lerr != nil {
				return nil, lerr
			}
		}
		v.validations = append(v.validations, cv)
	}
	for i, aa := range spec.AuditAnnotations {
		field := fmt.Sprintf("spec.auditAnnotations[%d].valueExpression", i)
		prg, ast, err := celeval.Compile(penv.Pair, aa.ValueExpression, nil, bounds)
		if err != nil {
			return nil, manifest.Errorf(o, field, "%v", err)
		}
		if t := ast.OutputType(); !t.IsExactType(types.StringType) && !t.IsExactType(types.NullType) {
			return nil, manifest.Errorf(o, field, "output is expected to be either of type string or null_type")
		}
		v.auditAnnotations = append(v.auditAnnotations, &auditAnnotation{key: aa.Key, prog: prg})
	}
	return v, nil
}

// matchEnv is the environment of matchImageReferences expressions: the
// default environment, `ref` and the image reference functions (Kyverno's
// NewMatchImageEnv).
var matchEnv = sync.OnceValues(func() (*cel.Env, error) {
	opts := append(celenv.CompatOptions()[:0:0], celenv.CompatOptions()...)
	opts = append(opts, cel.Variable("ref", cel.StringType))
	opts = append(opts, kyvernocel.ImageReferenceLibrary()...)
	return cel.NewEnv(opts...)
})

func compileImageRef(o *manifest.Object, i int, m kyvernoapi.MatchImageReference) (imageRef, *manifest.LoadError) {
	field := fmt.Sprintf("spec.matchImageReferences[%d]", i)
	switch {
	case m.Glob != "":
		g, err := glob.Compile(m.Glob)
		if err != nil {
			return imageRef{}, manifest.Errorf(o, field+".glob", "%v", err)
		}
		return imageRef{glob: g}, nil
	case m.Expression != "":
		env, err := matchEnv()
		if err != nil {
			return imageRef{}, manifest.Errorf(o, field+".expression", "%v", err)
		}
		ast, iss := env.Compile(m.Expression)
		if err := iss.Err(); err != nil {
			return imageRef{}, manifest.Errorf(o, field+".expression", "%v", err)
		}
		if !ast.OutputType().IsExactType(types.BoolType) {
			return imageRef{}, manifest.Errorf(o, field+".expression", "output is expected to be of type bool")
		}
		prg, err := env.Program(ast)
		if err != nil {
			return imageRef{}, manifest.Errorf(o, field+".expression", "%v", err)
		}
		return imageRef{prog: prg}, nil
	}
	return imageRef{}, manifest.Errorf(o, field, "either glob or expression must be set")
}

// matchImage says whether an image reference matches the policy's
// matchImageReferences (any of them; all images when there are none).
func (p *Policy) matchImage(image string) (bool, error) {
	if len(p.imageRefs) == 0 {
		return true, nil
	}
	for _, r := range p.imageRefs {
		if r.glob != nil {
			if r.glob.Match(image) {
				return true, nil
			}
			continue
		}
		out, _, err := r.prog.Eval(map[string]any{"ref": image})
		if err != nil {
			return false, err
		}
		if b, ok := out.(types.Bool); ok && bool(b) {
			return true, nil
		}
	}
	return false, nil
}

func compileAttestor(o *manifest.Object, i int, a *kyvernoapi.Attestor, pair celenv.Pair, bounds map[string]celeval.SizeBounds) (*compiledAttestor, *manifest.LoadError) {
	field := fmt.Sprintf("spec.attestors[%d]", i)
	ca := &compiledAttestor{name: a.Name, spec: a}
	add := func(sub, what, expr string, set func(*kyvernoapi.Attestor, string)) *manifest.LoadError {
		if expr == "" {
			return nil
		}
		prg, _, err := celeval.Compile(pair, expr, nil, bounds)
		if err != nil {
			return manifest.Errorf(o, field+"."+sub, "%v", err)
		}
		ca.exprs = append(ca.exprs, attestorExpr{what: what, prog: prg, set: set})
		return nil
	}
	var lerr *manifest.LoadError
	if c := a.Cosign; c != nil {
		// Every expression is compiled (Kyverno skips the certificate's
		// when the key has one).
		if c.Key != nil {
			lerr = firstErr(lerr, add("cosign.key.expression", "key", c.Key.Expression, func(a *kyvernoapi.Attestor, v string) { a.Cosign.Key.Data = v }))
		}
		if c.Certificate != nil {
			if c.Certificate.Certificate != nil {
				lerr = firstErr(lerr, add("cosign.certificate.cert.expression", "cert", c.Certificate.Certificate.Expression, func(a *kyvernoapi.Attestor, v string) { a.Cosign.Certificate.Certificate.Value = v }))
			}
			if c.Certificate.CertificateChain != nil {
				lerr = firstErr(lerr, add("cosign.certificate.certChain.expression", "cert chain", c.Certificate.CertificateChain.Expression, func(a *kyvernoapi.Attestor, v string) { a.Cosign.Certificate.CertificateChain.Value = v }))
			}
		}
		if c.TrustedRoot != nil {
			lerr = firstErr(lerr, add("cosign.trustedRoot.expression", "trustedRoot", c.TrustedRoot.Expression, func(a *kyvernoapi.Attestor, v string) { a.Cosign.TrustedRoot.Value = v }))
		}
	}
	if n := a.Notary; n != nil {
		if n.Certs != nil {
			lerr = firstErr(lerr, add("notary.certs.expression", "notary cert", n.Certs.Expression, func(a *kyvernoapi.Attestor, v string) { a.Notary.Certs.Value = v }))
		}
		if n.TSACerts != nil {
			lerr = firstErr(lerr, add("notary.tsaCerts.expression", "notary tsa cert", n.TSACerts.Expression, func(a *kyvernoapi.Attestor, v string) { a.Notary.TSACerts.Value = v }))
		}
	}
	if lerr != nil {
		return nil, lerr
	}
	if len(ca.exprs) == 0 {
		ca.static = &attestorVal{spec: a, key: attestorKey(a)}
	}
	return ca, nil
}

func firstErr(a, b *manifest.LoadError) *manifest.LoadError {
	if a != nil {
		return a
	}
	return b
}

// attestorKey identifies an attestor's content (its name included: the
// same trust under two names is two cache entries, which is harmless).
func attestorKey(a *kyvernoapi.Attestor) string {
	b, _ := json.Marshal(a)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// cloneAttestor is a deep copy of an attestor (its CEL inputs are written
// into the copy, never into the policy).
func cloneAttestor(a *kyvernoapi.Attestor) *kyvernoapi.Attestor {
	b, _ := json.Marshal(a)
	var out kyvernoapi.Attestor
	_ = json.Unmarshal(b, &out)
	return &out
}

// evaluate returns the attestor with its CEL inputs evaluated in the
// evaluation's activation, or an error value.
func (a *compiledAttestor) evaluate(e *evalCtx) ref.Val {
	if a.static != nil {
		return a.static
	}
	out := cloneAttestor(a.spec)
	for _, x := range a.exprs {
		val, err := e.st.Eval(x.prog)
		if err != nil {
			return types.NewErr("failed to convert %s in compiled attestor: %s, error: failed to evaluate compiled attestor: %s, error: %v", x.what, a.name, a.name, err)
		}
		s, err := celeval.AsString(val)
		if err != nil {
			return types.NewErr("failed to convert %s in compiled attestor: %s, error: failed to convert expression in compiled attestor: %s, error: %v", x.what, a.name, a.name, err)
		}
		x.set(out, s)
	}
	return &attestorVal{spec: out, key: attestorKey(out)}
}

// Resources returns the resources the policy's rules (and autogen
// variants) name, as group/version/resource.
func (p *Policy) Resources() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range p.variants {
		if v.match != nil {
			out = v.match.Resources(seen, out)
		}
	}
	return out
}

// AutogenConfigs returns the autogen configurations the policy is also
// compiled for (defaults, cronjobs).
func (p *Policy) AutogenConfigs() []string {
	var out []string
	for _, v := range p.variants {
		if v.config != "" {
			out = append(out, v.config)
		}
	}
	return out
}

// Expressions returns every CEL expression of the policy (for the
// namespaced-policy checks on http.* and globalContext.*).
func (p *Policy) Expressions() []string {
	s := p.Spec
	var out []string
	for _, v := range s.Variables {
		out = append(out, v.Expression)
	}
	for _, m := range s.MatchConditions {
		out = append(out, m.Expression)
	}
	for _, v := range s.Validations {
		out = append(out, v.Expression, v.MessageExpression)
	}
	for _, a := range s.AuditAnnotations {
		out = append(out, a.ValueExpression)
	}
	for _, e := range s.ImageExtractors {
		out = append(out, e.Expression)
	}
	for _, m := range s.MatchImageReferences {
		out = append(out, m.Expression)
	}
	for _, a := range s.Attestors {
		if c := a.Cosign; c != nil {
			if c.Key != nil {
				out = append(out, c.Key.Expression)
			}
			if c.Certificate != nil && c.Certificate.Certificate != nil {
				out = append(out, c.Certificate.Certificate.Expression)
			}
			if c.Certificate != nil && c.Certificate.CertificateChain != nil {
				out = append(out, c.Certificate.CertificateChain.Expression)
			}
			if c.TrustedRoot != nil {
				out = append(out, c.TrustedRoot.Expression)
			}
		}
		if n := a.Notary; n != nil {
			if n.Certs != nil {
				out = append(out, n.Certs.Expression)
			}
			if n.TSACerts != nil {
				out = append(out, n.TSACerts.Expression)
			}
		}
	}
	return out
}

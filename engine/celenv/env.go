// Package celenv builds the CEL environment Arbiter compiles policies in: the
// Kubernetes environment (every library of k8s.io/apiserver/pkg/cel, in its
// "stored expressions" form, with the API server's per-call cost limit), the
// cel-go extensions and orValue compatibility Kyverno adds, the variables
// object, oldObject, request, namespaceObject, variables and exceptions, and
// Kyverno's function libraries.
//
// The environment is built once per process (Default); each policy gets a
// cheap extension of it whose `variables` object is typed by the policy's own
// variables, as Kyverno types them.
package celenv

import (
	"fmt"
	"reflect"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/mutation"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// Names of the CEL variables.
const (
	ObjectVar          = "object"
	OldObjectVar       = "oldObject"
	RequestVar         = "request"
	NamespaceObjectVar = "namespaceObject"
	VariablesVar       = "variables"
	ExceptionsVar      = "exceptions"
	ParamsVar          = "params"
)

// Exception is the value of the `exceptions` variable: what matching
// image- and value-based PolicyExceptions allow.
type Exception struct {
	AllowedImages []string `cel:"allowedImages"`
	AllowedValues []string `cel:"allowedValues"`
}

// VariablesTypeName is the CEL type name of the `variables` object.
const VariablesTypeName = "kyverno.variables"

var (
	// RequestType is the declared type of `request`: the Kubernetes
	// AdmissionRequest type, with object and oldObject as dyn (as Kyverno).
	RequestType = buildRequestType()
	// NamespaceType is the declared type of `namespaceObject`.
	NamespaceType = plugincel.BuildNamespaceType()
	// VariablesType is the declared type of `variables`.
	VariablesType = types.NewObjectType(VariablesTypeName)
)

func buildRequestType() *apiservercel.DeclType {
	t := plugincel.BuildRequestType()
	t.Fields[ObjectVar] = apiservercel.NewDeclField(ObjectVar, apiservercel.DynType, false, nil, nil)
	t.Fields[OldObjectVar] = apiservercel.NewDeclField(OldObjectVar, apiservercel.DynType, false, nil, nil)
	return t
}

// Env holds the process-wide base environments: for cluster-scoped and
// namespaced policies, each with and without the policy-only variables
// (`variables`, `exceptions`), each as a pair (see Pair).
type Env struct {
	cluster, namespaced                   Pair
	clusterException, namespacedException Pair
	// mutating are the environments of mutating policies (cluster,
	// namespaced), built on first use.
	mutatingOnce [2]sync.Once
	mutating     [2]Pair
	mutatingErr  [2]error
	// image are the environments of ImageValidatingPolicies (cluster,
	// namespaced × Kubernetes, JSON mode), built on first use.
	imageOnce [2][2]sync.Once
	image     [2][2]Pair
	imageErr  [2][2]error
}

// declConfig says what an environment declares.
type declConfig struct {
	namespaced bool
	// forPolicy declares the policy-only variables `variables` and
	// `exceptions`.
	forPolicy bool
	// image, when set, makes an ImageValidatingPolicy environment.
	image *imageDecl
}

// imageDecl is what an ImageValidatingPolicy environment declares beyond
// the others.
type imageDecl struct {
	// json is the JSON evaluation mode: only `object` (and the kind's own
	// variables) among the request's inputs.
	json bool
	// lib declares the kind's variables and functions.
	lib []cel.EnvOption
}

// Pair is one environment in two builds with identical declarations and
// function bindings: Tracked is the Kubernetes environment, whose programs
// track their cost and stop at the API server's per-call limit; Fast plans
// programs without cost tracking, for expressions whose static cost
// estimate proves they stay far below the limit on the request at hand.
type Pair struct {
	Tracked *cel.Env
	Fast    *cel.Env
}

var (
	defaultOnce sync.Once
	defaultEnv  *Env
	defaultErr  error
)

// Default returns the process-wide environment, building it on first use.
func Default() (*Env, error) {
	defaultOnce.Do(func() { defaultEnv, defaultErr = New() })
	return defaultEnv, defaultErr
}

// New builds the base environments. It is expensive (tens of milliseconds);
// use Default.
func New() (*Env, error) {
	var e Env
	for _, c := range []struct {
		dst                   *Pair
		namespaced, forPolicy bool
	}{
		{&e.cluster, false, true},
		{&e.namespaced, true, true},
		{&e.clusterException, false, false},
		{&e.namespacedException, true, false},
	} {
		cfg := declConfig{namespaced: c.namespaced, forPolicy: c.forPolicy}
		tracked, err := newBase(cfg)
		if err != nil {
			return nil, err
		}
		fast, err := newFast(cfg)
		if err != nil {
			return nil, fmt.Errorf("building the untracked environment: %w", err)
		}
		*c.dst = Pair{Tracked: tracked, Fast: fast}
	}
	return &e, nil
}

// compilerVersion is the environment version Kyverno compiles ValidatingPolicies with.
var compilerVersion = version.MajorMinor(1, 0)

func newBase(cfg declConfig) (*cel.Env, error) {
	base := environment.MustBaseEnvSet(compilerVersion)
	stored, err := base.Env(environment.StoredExpressions)
	if err != nil {
		return nil, err
	}
	opts, libs, err := declarations(stored, cfg)
	if err != nil {
		return nil, err
	}
	extended, err := base.Extend(
		environment.VersionedOptions{IntroducedVersion: compilerVersion, EnvOptions: opts},
		environment.VersionedOptions{IntroducedVersion: compilerVersion, EnvOptions: libs},
	)
	if err != nil {
		return nil, err
	}
	return extended.Env(environment.StoredExpressions)
}

// newFast builds the untracked twin of newBase: the same options as the
// Kubernetes base environment's stored-expressions set
// (k8s.io/apiserver/pkg/cel/environment/base.go at v0.37.2) without its
// cost-tracking program options, then the same declarations.
func newFast(cfg declConfig) (*cel.Env, error) {
	base, err := cel.NewEnv(kubernetesStoredOptions()...)
	if err != nil {
		return nil, err
	}
	opts, libs, err := declarations(base, cfg)
	if err != nil {
		return nil, err
	}
	env, err := base.Extend(opts...)
	if err != nil {
		return nil, err
	}
	return env.Extend(libs...)
}

// kubernetesStoredOptions are the environment options of the Kubernetes
// base environment in its stored-expressions form (every library, the
// removed list library version left out).
func kubernetesStoredOptions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		library.URLs(),
		library.Regex(),
		cel.CostEstimatorOptions(checker.PresenceTestHasCost(false)),
		library.Authz(),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		library.Quantity(),
		cel.ASTValidators(
			cel.ValidateDurationLiterals(),
			cel.ValidateTimestampLiterals(),
			cel.ValidateRegexLiterals(),
			cel.ValidateHomogeneousAggregateLiterals(),
		),
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
		library.IP(),
		library.CIDR(),
		library.Format(),
		library.AuthzSelectors(),
		ext.TwoVarComprehensions(),
		library.SemverLib(library.SemverVersion(1)),
		ext.Lists(ext.ListsVersion(3)),
		library.Lists(library.ListsVersion(1)),
	}
}

// declarations returns the options that declare Arbiter's variables and
// types on top of base, then the libraries.
func declarations(base *cel.Env, cfg declConfig) (opts, libs []cel.EnvOption, err error) {
	declProvider := apiservercel.NewDeclTypeProvider(NamespaceType, RequestType)
	declOptions, err := declProvider.EnvOptions(base.CELTypeProvider())
	if err != nil {
		return nil, nil, err
	}
	jsonMode := cfg.image != nil && cfg.image.json
	// ImageValidatingPolicies are compiled without the orValue
	// compatibility (Kyverno's ivpol compiler uses DefaultEnvOptions, not
	// DefaultEnvOptionsWithCompat).
	opts = compatOptions(cfg.image == nil)
	opts = append(opts, cel.Variable(ObjectVar, cel.DynType))
	if !jsonMode {
		opts = append(opts,
			cel.Variable(NamespaceObjectVar, NamespaceType.CelType()),
			cel.Variable(OldObjectVar, cel.DynType),
			cel.Variable(RequestVar, RequestType.CelType()),
		)
	}
	opts = append(opts,
		cel.Types(NamespaceType.CelType()),
		cel.Types(RequestType.CelType()),
	)
	if cfg.forPolicy && !jsonMode {
		opts = append(opts, cel.Variable(VariablesVar, VariablesType))
	}
	opts = append(opts, declOptions...)
	// Native types are registered after the declaration provider, which
	// they wrap.
	libs = []cel.EnvOption{
		ext.NativeTypes(reflect.TypeFor[Exception](), ext.ParseStructTags(true)),
	}
	if cfg.forPolicy {
		libs = append(libs, cel.Variable(ExceptionsVar, types.NewObjectType("celenv.Exception")))
	}
	libs = append(libs, kyvernocel.Libraries(kyvernocel.Options{Namespaced: cfg.namespaced, NoX509: cfg.image != nil})...)
	if cfg.image != nil {
		libs = append(libs, cfg.image.lib...)
	}
	return opts, libs, nil
}

// CompatOptions are the cel-go extensions Kyverno adds to the Kubernetes
// environment, and its orValue compatibility: `x.orValue(y)` on a value that
// is not optional returns x (cel-go ≤ 0.27 behaviour), and on an error returns y.
func CompatOptions() []cel.EnvOption { return compatOptions(true) }

// compatOptions are CompatOptions, with or without the orValue
// compatibility.
func compatOptions(orValue bool) []cel.EnvOption {
	opts := []cel.EnvOption{
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Bindings(),
		ext.Encoders(),
		ext.Lists(ext.ListsVersion(3)),
		ext.Math(),
		ext.Protos(),
		ext.Sets(),
		ext.Strings(ext.StringsVersion(2)),
		ext.Regex(ext.RegexVersion(1)),
		library.CIDR(),
		library.Format(),
		library.IP(),
		library.Lists(),
		library.Regex(),
		library.URLs(),
		library.Quantity(),
		library.SemverLib(library.SemverVersion(1)),
	}
	if !orValue {
		return opts
	}
	return append(opts,
		cel.Macros(cel.ReceiverMacro("orValue", 1, orValueMacro)),
		cel.Function(orValueFunc,
			cel.Overload(orValueFunc+"_dyn_dyn",
				[]*cel.Type{cel.DynType, cel.DynType},
				cel.DynType,
				cel.BinaryBinding(orValueCompat),
			),
		),
	)
}

const orValueFunc = "__orValueCompat__"

func orValueMacro(eh cel.MacroExprFactory, target celast.Expr, args []celast.Expr) (celast.Expr, *cel.Error) {
	return eh.NewCall(orValueFunc, target, args[0]), nil
}

func orValueCompat(lhs, rhs ref.Val) ref.Val {
	switch v := lhs.(type) {
	case *types.Optional:
		if v.HasValue() {
			return v.GetValue()
		}
		return rhs
	case *types.Err:
		return rhs
	default:
		return lhs
	}
}

// Base returns the base environment for cluster-scoped (namespaced=false) or
// namespaced policies.
func (e *Env) Base(namespaced bool) Pair {
	if namespaced {
		return e.namespaced
	}
	return e.cluster
}

// Exception returns the environment of PolicyException matchConditions and
// compensating controls: the base environment without `variables` and
// `exceptions`, which an exception, written apart from its policies, cannot see.
func (e *Env) Exception(namespaced bool) Pair {
	if namespaced {
		return e.namespacedException
	}
	return e.clusterException
}

// Mutating returns the base environment of mutating policies: the policy
// environment with the mutation types — `Object` and its typed
// constructors (`Object{spec: Object.spec{...}}`), `JSONPatch{op, path,
// from, value}` — and jsonpatch.escapeKey, as Kyverno's MutatingPolicy
// compiler declares them (in every expression of the policy).
func (e *Env) Mutating(namespaced bool) (Pair, error) {
	i := 0
	if namespaced {
		i = 1
	}
	e.mutatingOnce[i].Do(func() {
		base := e.Base(namespaced)
		extend := func(env *cel.Env) (*cel.Env, error) {
			return env.Extend(
				cel.Types(types.NewObjectType(ApplyConfigurationTypeName), types.NewObjectType(mutation.JSONPatchTypeName)),
				common.ResolverEnvOption(&mutation.DynamicTypeResolver{}),
				library.JSONPatch(),
			)
		}
		var p Pair
		if p.Tracked, e.mutatingErr[i] = extend(base.Tracked); e.mutatingErr[i] != nil {
			return
		}
		if p.Fast, e.mutatingErr[i] = extend(base.Fast); e.mutatingErr[i] != nil {
			return
		}
		e.mutating[i] = p
	})
	return e.mutating[i], e.mutatingErr[i]
}

// Image returns the base environment of ImageValidatingPolicies
// (namespaced or not, in the Kubernetes or JSON evaluation mode): Kyverno's
// ivpol environment — the request's inputs (only `object` in JSON mode),
// `variables` (Kubernetes mode), the context libraries without x509 and
// without the orValue compatibility — with lib, the kind's own variables
// and functions, and `exceptions` (an Arbiter addition: what granted
// image-based exceptions allow). lib must be the same on every call: the
// environments are built once.
func (e *Env) Image(namespaced, jsonMode bool, lib []cel.EnvOption) (Pair, error) {
	i, j := 0, 0
	if namespaced {
		i = 1
	}
	if jsonMode {
		j = 1
	}
	e.imageOnce[i][j].Do(func() {
		cfg := declConfig{namespaced: namespaced, forPolicy: true, image: &imageDecl{json: jsonMode, lib: lib}}
		var p Pair
		if p.Tracked, e.imageErr[i][j] = newBase(cfg); e.imageErr[i][j] != nil {
			return
		}
		if p.Fast, e.imageErr[i][j] = newFast(cfg); e.imageErr[i][j] != nil {
			e.imageErr[i][j] = fmt.Errorf("building the untracked environment: %w", e.imageErr[i][j])
			return
		}
		e.image[i][j] = p
	})
	return e.image[i][j], e.imageErr[i][j]
}

// ForImagePolicy returns a fresh ImageValidatingPolicy environment.
func (e *Env) ForImagePolicy(namespaced, jsonMode bool, lib []cel.EnvOption) (*PolicyEnv, error) {
	base, err := e.Image(namespaced, jsonMode, lib)
	if err != nil {
		return nil, fmt.Errorf("building the image validating policy environment: %w", err)
	}
	return NewPolicyEnv(base)
}

// ApplyConfigurationTypeName is the CEL type of an apply configuration.
const ApplyConfigurationTypeName = "Object"

// PolicyEnv is the environment of one policy: the base environment pair
// whose `variables` object has a field for each variable declared so far.
type PolicyEnv struct {
	Pair
	fields *variableFields
}

// ForPolicy returns a fresh policy environment.
func (e *Env) ForPolicy(namespaced bool) (*PolicyEnv, error) {
	return NewPolicyEnv(e.Base(namespaced))
}

// ForMutatingPolicy returns a fresh mutating policy environment.
func (e *Env) ForMutatingPolicy(namespaced bool) (*PolicyEnv, error) {
	base, err := e.Mutating(namespaced)
	if err != nil {
		return nil, fmt.Errorf("building the mutating policy environment: %w", err)
	}
	return NewPolicyEnv(base)
}

// NewPolicyEnv returns a fresh policy environment on base, an environment
// pair that declares `variables` (the admission environments, Authz's).
func NewPolicyEnv(base Pair) (*PolicyEnv, error) {
	fields := &variableFields{m: map[string]*types.Type{}}
	extend := func(env *cel.Env) (*cel.Env, error) {
		vp := &variablesProvider{inner: env.CELTypeProvider(), adapter: env.CELTypeAdapter(), fields: fields}
		return env.Extend(cel.CustomTypeProvider(vp), cel.CustomTypeAdapter(vp))
	}
	tracked, err := extend(base.Tracked)
	if err != nil {
		return nil, fmt.Errorf("extending CEL environment: %w", err)
	}
	fast, err := extend(base.Fast)
	if err != nil {
		return nil, fmt.Errorf("extending CEL environment: %w", err)
	}
	return &PolicyEnv{Pair: Pair{Tracked: tracked, Fast: fast}, fields: fields}, nil
}

// DeclareVariable adds a field to the `variables` object. Expressions
// compiled afterwards may use it; earlier ones may not, as in Kyverno.
func (p *PolicyEnv) DeclareVariable(name string, t *types.Type) {
	p.fields.register(name, t)
}

// variableFields are the declared fields of a policy's `variables` object.
type variableFields struct {
	mu    sync.RWMutex
	m     map[string]*types.Type
	names []string
}

func (f *variableFields) register(name string, t *types.Type) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[name]; !ok {
		f.names = append(f.names, name)
	}
	f.m[name] = t
}

// variablesProvider resolves the fields of the `variables` object and
// delegates everything else to the base environment's provider.
type variablesProvider struct {
	inner   types.Provider
	adapter types.Adapter
	fields  *variableFields
}

var variablesTypeType = types.NewTypeTypeWithParam(VariablesType)

func (p *variablesProvider) EnumValue(enumName string) ref.Val { return p.inner.EnumValue(enumName) }

func (p *variablesProvider) FindIdent(identName string) (ref.Val, bool) {
	return p.inner.FindIdent(identName)
}

func (p *variablesProvider) FindStructType(structType string) (*types.Type, bool) {
	if structType == VariablesTypeName {
		return variablesTypeType, true
	}
	return p.inner.FindStructType(structType)
}

func (p *variablesProvider) FindStructFieldNames(structType string) ([]string, bool) {
	if structType == VariablesTypeName {
		p.fields.mu.RLock()
		defer p.fields.mu.RUnlock()
		return append([]string(nil), p.fields.names...), true
	}
	return p.inner.FindStructFieldNames(structType)
}

func (p *variablesProvider) FindStructFieldType(structType, fieldName string) (*types.FieldType, bool) {
	if structType == VariablesTypeName {
		p.fields.mu.RLock()
		t, ok := p.fields.m[fieldName]
		p.fields.mu.RUnlock()
		if ok {
			return &types.FieldType{Type: t}, true
		}
		return nil, false
	}
	return p.inner.FindStructFieldType(structType, fieldName)
}

func (p *variablesProvider) NewValue(structType string, fields map[string]ref.Val) ref.Val {
	return p.inner.NewValue(structType, fields)
}

func (p *variablesProvider) NativeToValue(value any) ref.Val { return p.adapter.NativeToValue(value) }

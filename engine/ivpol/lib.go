package ivpol

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"

	"github.com/arbiter-pdp/arbiter/engine/jsonval"
	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// Names of the variables of the ImageValidatingPolicy environment.
const (
	ImagesVar       = "images"
	AttestorsVar    = "attestors"
	AttestationsVar = "attestations"
	// contextVar is the hidden variable the verification functions are
	// called on: Kyverno binds them to each compiled policy, Arbiter
	// compiles policies once and binds the state of each evaluation here
	// (the global calls are macros for member calls on it).
	contextVar = "__ivpol__"
)

var (
	// ContextType is the type of the hidden verification context.
	ContextType = types.NewOpaqueType("ivpol.Context")
	// AttestorType is the type of attestors.<name>, as Kyverno names it.
	AttestorType = types.NewObjectType("imageverify.attestor")
	imagesType   = cel.MapType(cel.StringType, cel.ListType(cel.StringType))
)

// The verification functions: the name, its arity, and Kyverno's overload
// id of the global form.
var functions = []struct {
	name     string
	args     []*cel.Type
	result   *cel.Type
	overload string
}{
	{"verifyImageSignatures", []*cel.Type{cel.StringType, cel.ListType(cel.DynType)}, cel.IntType, "verify_image_signature_string_stringarray"},
	{"verifyAttestationSignatures", []*cel.Type{cel.StringType, cel.StringType, cel.ListType(cel.DynType)}, cel.IntType, "verify_image_attestations_string_string_stringarray"},
	{"extractPayload", []*cel.Type{cel.StringType, cel.StringType}, cel.DynType, "payload_string_string"},
	{"getImageData", []*cel.Type{cel.StringType}, cel.DynType, "get_image_data_string"},
}

// library declares the ImageValidatingPolicy variables and functions.
var library = buildLibrary()

func buildLibrary() []cel.EnvOption {
	opts := []cel.EnvOption{
		cel.Variable(ImagesVar, imagesType),
		cel.Variable(AttestorsVar, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(AttestationsVar, cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable(contextVar, ContextType),
	}
	var macros []cel.Macro
	for _, f := range functions {
		name := f.name
		macros = append(macros, cel.GlobalMacro(name, len(f.args), func(eh cel.MacroExprFactory, _ celast.Expr, args []celast.Expr) (celast.Expr, *cel.Error) {
			return eh.NewMemberCall(name, eh.NewIdent(contextVar), args...), nil
		}))
		member := append([]*cel.Type{ContextType}, f.args...)
		impl := memberImpl(name)
		opts = append(opts, cel.Function(name,
			// The global form is what the type checker reports on (a call
			// with the wrong number of arguments is not a macro).
			cel.Overload(f.overload, f.args, f.result, cel.FunctionBinding(func(...ref.Val) ref.Val {
				return types.NewErr("%s: no verification context", name)
			})),
			cel.MemberOverload("ivpol_"+f.overload, member, f.result, cel.FunctionBinding(impl)),
		))
	}
	return append(opts, cel.Macros(macros...))
}

func memberImpl(name string) func(args ...ref.Val) ref.Val {
	return func(args ...ref.Val) ref.Val {
		c, ok := args[0].(*ctxVal)
		if !ok {
			return types.NewErr("%s: no verification context", name)
		}
		e := c.e
		switch name {
		case "verifyImageSignatures":
			return e.verifyImageSignatures(args[1], args[2])
		case "verifyAttestationSignatures":
			return e.verifyAttestationSignatures(args[1], args[2], args[3])
		case "extractPayload":
			return e.extractPayload(args[1], args[2])
		default:
			return e.getImageData(args[1])
		}
	}
}

// ---- values ----

// ctxVal is the value of the hidden context variable.
type ctxVal struct{ e *evalCtx }

func (v *ctxVal) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from '%s' to '%v'", ContextType, t)
}

func (v *ctxVal) ConvertToType(t ref.Type) ref.Val {
	if t == ContextType || t.TypeName() == ContextType.TypeName() {
		return v
	}
	if t == types.TypeType {
		return ContextType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", ContextType, t)
}

func (v *ctxVal) Equal(o ref.Val) ref.Val {
	c, ok := o.(*ctxVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(o)
	}
	return types.Bool(c == v)
}

func (v *ctxVal) Type() ref.Type { return ContextType }
func (v *ctxVal) Value() any     { return v.e }

// attestorVal is attestors.<name>: an attestor with its CEL inputs
// evaluated. It is immutable.
type attestorVal struct {
	spec *kyvernoapi.Attestor
	key  string
}

func (v *attestorVal) ConvertToNative(t reflect.Type) (any, error) {
	if reflect.TypeOf(v).AssignableTo(t) {
		return v, nil
	}
	if reflect.TypeFor[kyvernoapi.Attestor]().AssignableTo(t) {
		return *v.spec, nil
	}
	return nil, fmt.Errorf("type conversion error from 'Image' to '%v'", t)
}

func (v *attestorVal) ConvertToType(t ref.Type) ref.Val {
	switch {
	case t.TypeName() == AttestorType.TypeName():
		return v
	case t == types.TypeType:
		return AttestorType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", AttestorType, t)
}

func (v *attestorVal) Equal(o ref.Val) ref.Val {
	a, ok := o.(*attestorVal)
	if !ok {
		return types.MaybeNoSuchOverloadErr(o)
	}
	return types.Bool(a == v || a.key == v.key)
}

func (v *attestorVal) Type() ref.Type { return AttestorType }
func (v *attestorVal) Value() any     { return *v.spec }

// attestorsMap is the `attestors` variable: attestors by name, each with
// its CEL inputs evaluated on first use (an attestor's errors surface only
// where it is used, as in Kyverno).
type attestorsMap struct {
	e      *evalCtx
	values []ref.Val
}

var attestorsMapType = types.NewMapType(types.StringType, types.DynType)

func (m *attestorsMap) index(name string) int {
	for i, a := range m.e.v.attestors {
		if a.name == name {
			return i
		}
	}
	return -1
}

func (m *attestorsMap) resolve(i int) ref.Val {
	if v := m.values[i]; v != nil {
		return v
	}
	v := m.e.v.attestors[i].evaluate(m.e)
	m.values[i] = v
	return v
}

// Find implements traits.Mapper.
func (m *attestorsMap) Find(key ref.Val) (ref.Val, bool) {
	n, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key), true
	}
	i := m.index(string(n))
	if i < 0 {
		return nil, false
	}
	return m.resolve(i), true
}

// Get implements traits.Indexer.
func (m *attestorsMap) Get(key ref.Val) ref.Val {
	if v, found := m.Find(key); found {
		return v
	}
	return types.ValOrErr(key, "no such key: %v", key)
}

// Contains implements traits.Container.
func (m *attestorsMap) Contains(key ref.Val) ref.Val {
	n, ok := key.(types.String)
	if !ok {
		return types.MaybeNoSuchOverloadErr(key)
	}
	return types.Bool(m.index(string(n)) >= 0)
}

// Size implements traits.Sizer.
func (m *attestorsMap) Size() ref.Val { return types.Int(len(m.values)) }

// Iterator implements traits.Iterable.
func (m *attestorsMap) Iterator() traits.Iterator {
	names := make([]string, len(m.e.v.attestors))
	for i, a := range m.e.v.attestors {
		names[i] = a.name
	}
	return types.NewStringList(types.DefaultTypeAdapter, names).Iterator()
}

func (m *attestorsMap) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from map to '%v'", t)
}

func (m *attestorsMap) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return m
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from map to '%s'", t)
}

func (m *attestorsMap) Equal(o ref.Val) ref.Val { return types.Bool(o == m) }
func (m *attestorsMap) Type() ref.Type          { return attestorsMapType }
func (m *attestorsMap) Value() any              { return m }

// ---- the functions ----

func toString(v ref.Val) (string, error) {
	switch s := v.(type) {
	case types.String:
		return string(s), nil
	case *types.Err:
		return "", s
	}
	return "", fmt.Errorf("type conversion error from '%s' to 'string'", v.Type().TypeName())
}

// toAttestors converts a list of attestors.<name> values.
func toAttestors(v ref.Val) ([]*attestorVal, error) {
	l, ok := v.(traits.Lister)
	if !ok {
		return nil, fmt.Errorf("type conversion error from '%s' to '[]v1beta1.Attestor'", v.Type().TypeName())
	}
	n, _ := l.Size().(types.Int)
	out := make([]*attestorVal, 0, int(n))
	for i := types.Int(0); i < n; i++ {
		el := l.Get(i)
		if e, ok := el.(*types.Err); ok {
			return nil, e
		}
		a, ok := el.(*attestorVal)
		if !ok {
			return nil, fmt.Errorf("type conversion error from '%s' to 'v1beta1.Attestor'", el.Type().TypeName())
		}
		out = append(out, a)
	}
	return out, nil
}

func (e *evalCtx) verifyImageSignatures(imageArg, attestorsArg ref.Val) ref.Val {
	image, err := toString(imageArg)
	if err != nil {
		return types.WrapErr(err)
	}
	attestors, err := toAttestors(attestorsArg)
	if err != nil {
		return types.WrapErr(err)
	}
	if match, err := e.v.policy.matchImage(image); err != nil {
		return types.WrapErr(err)
	} else if !match {
		return types.Int(0)
	}
	img, err := e.image(image)
	if err != nil {
		return types.NewErr("failed to get imagedata: %v", err)
	}
	count := 0
	for _, a := range attestors {
		verdict, err := e.verifier().VerifySignatures(e.ctx, img, kyvernocel.ImageAttestor{Spec: a.spec, Key: a.key}, e.v.policy.opts)
		if err != nil {
			return types.NewErr("failed to verify the signatures of %s with attestor %s: %v", image, a.spec.Name, err)
		}
		e.note(image, "signature", a.spec.Name, verdict)
		if verdict.Verified {
			count++
		}
	}
	if len(attestors) > 0 {
		e.req.record(image, count > 0)
	}
	return types.Int(count)
}

func (e *evalCtx) verifyAttestationSignatures(imageArg, attArg, attestorsArg ref.Val) ref.Val {
	image, err := toString(imageArg)
	if err != nil {
		return types.WrapErr(err)
	}
	name, err := toString(attArg)
	if err != nil {
		return types.WrapErr(err)
	}
	attestors, err := toAttestors(attestorsArg)
	if err != nil {
		return types.WrapErr(err)
	}
	if match, err := e.v.policy.matchImage(image); err != nil {
		return types.WrapErr(err)
	} else if !match {
		return types.Int(0)
	}
	att, ok := e.v.policy.attestations[name]
	if !ok {
		return types.NewErr("attestation not found in policy: %s", name)
	}
	img, err := e.image(image)
	if err != nil {
		return types.NewErr("failed to get imagedata: %v", err)
	}
	count := 0
	for _, a := range attestors {
		var verdict kyvernocel.Verdict
		switch {
		case a.spec.Notary != nil && att.Referrer == nil:
			return types.NewErr("notary verifier only supports oci 1.1 referrers as attestations")
		case a.spec.Cosign != nil && att.InToto == nil:
			// Kyverno's message, typo included: a failed verification.
			verdict = kyvernocel.Verdict{Reason: "cosgin verifier only supports intoto referrers as attestations"}
		default:
			verdict, err = e.verifier().VerifyAttestation(e.ctx, img, att, kyvernocel.ImageAttestor{Spec: a.spec, Key: a.key}, e.v.policy.opts)
			if err != nil {
				return types.NewErr("failed to verify the attestation %s of %s with attestor %s: %v", name, image, a.spec.Name, err)
			}
		}
		e.note(image, "attestation "+name, a.spec.Name, verdict)
		if verdict.Verified {
			count++
			e.req.addPayload(image, att, verdict)
		}
	}
	if len(attestors) > 0 {
		e.req.record(image, count > 0)
	}
	return types.Int(count)
}

func (e *evalCtx) extractPayload(imageArg, attArg ref.Val) ref.Val {
	image, err := toString(imageArg)
	if err != nil {
		return types.WrapErr(err)
	}
	name, err := toString(attArg)
	if err != nil {
		return types.WrapErr(err)
	}
	att, ok := e.v.policy.attestations[name]
	if !ok {
		return types.NewErr("attestation not found in policy: %s", name)
	}
	img, err := e.image(image)
	if err != nil {
		return types.NewErr("failed to get imagedata: %v", err)
	}
	var b []byte
	switch {
	case att.InToto != nil:
		b, ok = e.req.payload(image, "intoto", att.InToto.Type)
		if !ok {
			return types.NewErr("failed to get payload: intoto attestation payload cannot be fetch before verifying intoto attestation")
		}
	case att.Referrer != nil:
		b, _ = e.req.payload(image, "referrer", att.Referrer.Type)
		if len(b) == 0 {
			b, err = e.verifier().ReferrerPayload(e.ctx, img, att.Referrer.Type, e.v.policy.opts)
			if err != nil {
				return types.NewErr("failed to get payload: %v", err)
			}
		}
	}
	if len(b) == 0 {
		return types.NewErr("failed to get payload: could not find attestation %s", att.Name)
	}
	var payload any
	if err := json.Unmarshal(b, &payload); err != nil {
		return types.NewErr("failed to get payload: failed to unmarshal json for attestation %s", att.Name)
	}
	return jsonval.Of(payload)
}

func (e *evalCtx) getImageData(imageArg ref.Val) ref.Val {
	image, err := toString(imageArg)
	if err != nil {
		return types.WrapErr(err)
	}
	img, err := e.image(image)
	if err != nil {
		return types.NewErr("failed to get imagedata: %v", err)
	}
	return jsonval.Of(img.Data)
}

package kyvernotest

// Authorization policies: a ValidatingPolicy with spec.evaluation.mode Envoy
// or HTTP is not an admission policy but an authorization policy of the
// Kyverno Authz Server. `kyverno test` evaluates those on a test's
// envoyPayloads (Envoy external-authorization CheckRequests) and
// httpPayloads (the Authz Server's HTTP CheckRequest), with the
// kyverno-authz CEL environment. Arbiter's engine has no such mode, so the
// test runner carries a small evaluator of its own, enough for those
// suites: the Kubernetes CEL libraries, the envoy.* and http.* response
// builders, jwt.Decode with an HMAC secret, matchConditions, lazy
// variables and validations evaluated in order until one returns a
// response (null means "no opinion").
//
// Differences from kyverno-authz: `object` is the payload's JSON (with the
// common fields defaulted), not the protobuf message, so fields are read by
// their JSON names; jwt.Decode accepts HMAC secrets only (HS256/384/512);
// the resource, image data and http.Get/Post libraries are not available.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math"
	"net/textproto"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/ext"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apiserver/pkg/cel/library"
	sigsjson "sigs.k8s.io/json"

	"github.com/arbiter-pdp/arbiter/engine/kyvernoapi"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/engine/outcome"
	"github.com/arbiter-pdp/arbiter/engine/vpol"
)

type authzMode int

const (
	authzHTTP authzMode = iota
	authzEnvoy
)

func (m authzMode) String() string {
	if m == authzEnvoy {
		return "Envoy"
	}
	return "HTTP"
}

// CEL types of the authorization libraries (kyverno-authz's names).
var (
	envoyOkType       = types.NewObjectType("envoy.service.auth.v3.OkHttpResponse")
	envoyDeniedType   = types.NewObjectType("envoy.service.auth.v3.DeniedHttpResponse")
	envoyResponseType = types.NewObjectType("envoy.service.auth.v3.CheckResponse")
	envoyHeaderType   = types.NewObjectType("envoy.config.core.v3.HeaderValueOption")
	envoyQueryType    = types.NewObjectType("envoy.config.core.v3.QueryParameter")
	httpOkType        = types.NewObjectType("http.CheckResponseOk")
	httpDeniedType    = types.NewObjectType("http.CheckResponseDenied")
	httpResponseType  = types.NewObjectType("http.CheckResponse")
	jwtTokenType      = types.NewObjectType("jwt.Token")
)

// authzVal is a value of one of the authorization types.
type authzVal struct {
	t *types.Type
	v any
}

func (a authzVal) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from %s to %v", a.t.TypeName(), t)
}

func (a authzVal) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.TypeType:
		return a.t
	}
	if t.TypeName() == a.t.TypeName() {
		return a
	}
	return types.NewErr("type conversion error from %s to %s", a.t.TypeName(), t.TypeName())
}

func (a authzVal) Equal(o ref.Val) ref.Val {
	b, ok := o.(authzVal)
	return types.Bool(ok && a.t == b.t && reflect.DeepEqual(a.v, b.v))
}

func (a authzVal) Type() ref.Type { return a.t }
func (a authzVal) Value() any     { return a.v }

type header struct {
	key, value string
	keepEmpty  bool
}

type envoyOk struct {
	headers, responseHeaders []header
	removeHeaders            []string
	queryParams              []header
	removeQueryParams        []string
}

type envoyDenied struct {
	status  int64
	body    string
	headers []header
}

type envoyResponse struct {
	ok      *envoyOk
	denied  *envoyDenied
	message string
	meta    any
}

type httpResponse struct {
	ok     bool
	denied *string
}

// jwtToken is jwt.Token: fields Claims (a map) and Valid.
type jwtToken struct {
	claims map[string]any
	valid  bool
}

// Get and the field tester make Claims and Valid selectable.
func (t *jwtToken) field(name string) (ref.Val, bool) {
	switch name {
	case "Claims":
		if t.claims == nil {
			return types.NullValue, true
		}
		return types.DefaultTypeAdapter.NativeToValue(t.claims), true
	case "Valid":
		return types.Bool(t.valid), true
	}
	return nil, false
}

// tokenVal is the CEL value of a jwt.Token (a struct with two fields).
type tokenVal struct{ t *jwtToken }

func (v tokenVal) ConvertToNative(t reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion error from jwt.Token to %v", t)
}
func (v tokenVal) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return jwtTokenType
	}
	return types.NewErr("type conversion error from jwt.Token to %s", t.TypeName())
}
func (v tokenVal) Equal(o ref.Val) ref.Val {
	b, ok := o.(tokenVal)
	return types.Bool(ok && reflect.DeepEqual(v.t, b.t))
}
func (v tokenVal) Type() ref.Type { return jwtTokenType }
func (v tokenVal) Value() any     { return v.t }

// Get implements traits.Indexer (field selection).
func (v tokenVal) Get(key ref.Val) ref.Val {
	if s, ok := key.(types.String); ok {
		if out, ok := v.t.field(string(s)); ok {
			return out
		}
	}
	return types.NewErr("no such field: %v", key)
}

// IsSet implements traits.FieldTester.
func (v tokenVal) IsSet(key ref.Val) ref.Val {
	if s, ok := key.(types.String); ok {
		if _, ok := v.t.field(string(s)); ok {
			return types.True
		}
	}
	return types.False
}

var _ traits.FieldTester = tokenVal{}

// tokenProvider makes jwt.Token's fields known to the type checker.
type tokenProvider struct {
	types.Provider
}

func (p tokenProvider) FindStructType(name string) (*types.Type, bool) {
	if name == jwtTokenType.TypeName() {
		return types.NewTypeTypeWithParam(jwtTokenType), true
	}
	return p.Provider.FindStructType(name)
}

func (p tokenProvider) FindStructFieldNames(name string) ([]string, bool) {
	if name == jwtTokenType.TypeName() {
		return []string{"Claims", "Valid"}, true
	}
	return p.Provider.FindStructFieldNames(name)
}

func (p tokenProvider) FindStructFieldType(structType, fieldName string) (*types.FieldType, bool) {
	if structType == jwtTokenType.TypeName() {
		var t *types.Type
		switch fieldName {
		case "Claims":
			t = types.NewMapType(types.StringType, types.DynType)
		case "Valid":
			t = types.BoolType
		default:
			return nil, false
		}
		return &types.FieldType{
			Type: t,
			IsSet: func(target any) bool {
				return true
			},
			GetFrom: func(target any) (any, error) {
				tok, ok := target.(*jwtToken)
				if !ok {
					return nil, errors.New("not a jwt.Token")
				}
				v, _ := tok.field(fieldName)
				return v, nil
			},
		}, true
	}
	return p.Provider.FindStructFieldType(structType, fieldName)
}

func wrapErr(err error) ref.Val { return types.WrapErr(err) }

func str(v ref.Val) (string, error) {
	s, ok := v.(types.String)
	if !ok {
		return "", fmt.Errorf("expected a string, got %s", v.Type().TypeName())
	}
	return string(s), nil
}

func envoyFunctions() []cel.EnvOption {
	ok := func(v ref.Val) (*envoyOk, bool) {
		a, isA := v.(authzVal)
		if !isA {
			return nil, false
		}
		o, isO := a.v.(*envoyOk)
		return o, isO
	}
	denied := func(v ref.Val) (*envoyDenied, bool) {
		a, isA := v.(authzVal)
		if !isA {
			return nil, false
		}
		d, isD := a.v.(*envoyDenied)
		return d, isD
	}
	hdr := func(v ref.Val) (header, bool) {
		a, isA := v.(authzVal)
		if !isA {
			return header{}, false
		}
		h, isH := a.v.(header)
		return h, isH
	}
	okVal := func(o *envoyOk) ref.Val { return authzVal{envoyOkType, o} }
	deniedVal := func(d *envoyDenied) ref.Val { return authzVal{envoyDeniedType, d} }
	copyOk := func(o *envoyOk) *envoyOk {
		c := *o
		c.headers = append([]header(nil), o.headers...)
		c.responseHeaders = append([]header(nil), o.responseHeaders...)
		c.removeHeaders = append([]string(nil), o.removeHeaders...)
		c.queryParams = append([]header(nil), o.queryParams...)
		c.removeQueryParams = append([]string(nil), o.removeQueryParams...)
		return &c
	}
	bad := func() ref.Val { return types.NewErr("no such overload") }
	twoStrings := func(args []ref.Val) (header, error) {
		if len(args) != 3 {
			return header{}, errors.New("expected two strings")
		}
		k, err := str(args[1])
		if err != nil {
			return header{}, err
		}
		v, err := str(args[2])
		if err != nil {
			return header{}, err
		}
		return header{key: k, value: v}, nil
	}
	return []cel.EnvOption{
		cel.Function("envoy.Allowed",
			cel.Overload("allowed", nil, envoyOkType,
				cel.FunctionBinding(func(...ref.Val) ref.Val { return okVal(&envoyOk{}) }))),
		cel.Function("envoy.Denied",
			cel.Overload("denied", []*cel.Type{cel.IntType}, envoyDeniedType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					code, isInt := v.(types.Int)
					if !isInt {
						return bad()
					}
					return deniedVal(&envoyDenied{status: int64(code)})
				}))),
		cel.Function("envoy.Header",
			cel.Overload("header_key_value", []*cel.Type{cel.StringType, cel.StringType}, envoyHeaderType,
				cel.BinaryBinding(func(k, v ref.Val) ref.Val {
					ks, err := str(k)
					if err != nil {
						return wrapErr(err)
					}
					vs, err := str(v)
					if err != nil {
						return wrapErr(err)
					}
					return authzVal{envoyHeaderType, header{key: ks, value: vs}}
				}))),
		cel.Function("envoy.QueryParam",
			cel.Overload("queryparam_key_value", []*cel.Type{cel.StringType, cel.StringType}, envoyQueryType,
				cel.BinaryBinding(func(k, v ref.Val) ref.Val {
					ks, err := str(k)
					if err != nil {
						return wrapErr(err)
					}
					vs, err := str(v)
					if err != nil {
						return wrapErr(err)
					}
					return authzVal{envoyQueryType, header{key: ks, value: vs}}
				}))),
		cel.Function("WithBody",
			cel.MemberOverload("denied_with_body", []*cel.Type{envoyDeniedType, cel.StringType}, envoyDeniedType,
				cel.BinaryBinding(func(d, b ref.Val) ref.Val {
					dv, isD := denied(d)
					body, err := str(b)
					if !isD || err != nil {
						return bad()
					}
					c := *dv
					c.body = body
					return deniedVal(&c)
				}))),
		cel.Function("WithHeader",
			cel.MemberOverload("ok_with_header_header", []*cel.Type{envoyOkType, envoyHeaderType}, envoyOkType,
				cel.BinaryBinding(func(o, h ref.Val) ref.Val {
					ov, isO := ok(o)
					hv, isH := hdr(h)
					if !isO || !isH {
						return bad()
					}
					c := copyOk(ov)
					c.headers = append(c.headers, hv)
					return okVal(c)
				})),
			cel.MemberOverload("ok_with_header_string_string", []*cel.Type{envoyOkType, cel.StringType, cel.StringType}, envoyOkType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					ov, isO := ok(args[0])
					h, err := twoStrings(args)
					if !isO || err != nil {
						return bad()
					}
					c := copyOk(ov)
					c.headers = append(c.headers, h)
					return okVal(c)
				})),
			cel.MemberOverload("denied_with_header_header", []*cel.Type{envoyDeniedType, envoyHeaderType}, envoyDeniedType,
				cel.BinaryBinding(func(d, h ref.Val) ref.Val {
					dv, isD := denied(d)
					hv, isH := hdr(h)
					if !isD || !isH {
						return bad()
					}
					c := *dv
					c.headers = append(append([]header(nil), dv.headers...), hv)
					return deniedVal(&c)
				})),
			cel.MemberOverload("denied_with_header_string_string", []*cel.Type{envoyDeniedType, cel.StringType, cel.StringType}, envoyDeniedType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					dv, isD := denied(args[0])
					h, err := twoStrings(args)
					if !isD || err != nil {
						return bad()
					}
					c := *dv
					c.headers = append(append([]header(nil), dv.headers...), h)
					return deniedVal(&c)
				}))),
		cel.Function("WithoutHeader",
			cel.MemberOverload("ok_without_header", []*cel.Type{envoyOkType, cel.StringType}, envoyOkType,
				cel.BinaryBinding(func(o, k ref.Val) ref.Val {
					ov, isO := ok(o)
					key, err := str(k)
					if !isO || err != nil {
						return bad()
					}
					c := copyOk(ov)
					c.removeHeaders = append(c.removeHeaders, key)
					return okVal(c)
				}))),
		cel.Function("WithResponseHeader",
			cel.MemberOverload("ok_with_response_header_header", []*cel.Type{envoyOkType, envoyHeaderType}, envoyOkType,
				cel.BinaryBinding(func(o, h ref.Val) ref.Val {
					ov, isO := ok(o)
					hv, isH := hdr(h)
					if !isO || !isH {
						return bad()
					}
					c := copyOk(ov)
					c.responseHeaders = append(c.responseHeaders, hv)
					return okVal(c)
				})),
			cel.MemberOverload("ok_with_response_header_string_string", []*cel.Type{envoyOkType, cel.StringType, cel.StringType}, envoyOkType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					ov, isO := ok(args[0])
					h, err := twoStrings(args)
					if !isO || err != nil {
						return bad()
					}
					c := copyOk(ov)
					c.responseHeaders = append(c.responseHeaders, h)
					return okVal(c)
				}))),
		cel.Function("WithQueryParam",
			cel.MemberOverload("ok_with_queryparam_param", []*cel.Type{envoyOkType, envoyQueryType}, envoyOkType,
				cel.BinaryBinding(func(o, h ref.Val) ref.Val {
					ov, isO := ok(o)
					a, isA := h.(authzVal)
					if !isO || !isA {
						return bad()
					}
					q, isQ := a.v.(header)
					if !isQ {
						return bad()
					}
					c := copyOk(ov)
					c.queryParams = append(c.queryParams, q)
					return okVal(c)
				})),
			cel.MemberOverload("ok_with_queryparam_string_string", []*cel.Type{envoyOkType, cel.StringType, cel.StringType}, envoyOkType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					ov, isO := ok(args[0])
					q, err := twoStrings(args)
					if !isO || err != nil {
						return bad()
					}
					c := copyOk(ov)
					c.queryParams = append(c.queryParams, q)
					return okVal(c)
				}))),
		cel.Function("WithoutQueryParam",
			cel.MemberOverload("ok_without_queryparam_string", []*cel.Type{envoyOkType, cel.StringType}, envoyOkType,
				cel.BinaryBinding(func(o, k ref.Val) ref.Val {
					ov, isO := ok(o)
					key, err := str(k)
					if !isO || err != nil {
						return bad()
					}
					c := copyOk(ov)
					c.removeQueryParams = append(c.removeQueryParams, key)
					return okVal(c)
				}))),
		cel.Function("KeepEmptyValue",
			cel.MemberOverload("header_keep_empty_value", []*cel.Type{envoyHeaderType}, envoyHeaderType,
				cel.UnaryBinding(func(h ref.Val) ref.Val {
					hv, isH := hdr(h)
					if !isH {
						return bad()
					}
					hv.keepEmpty = true
					return authzVal{envoyHeaderType, hv}
				})),
			cel.MemberOverload("header_keep_empty_value_bool", []*cel.Type{envoyHeaderType, cel.BoolType}, envoyHeaderType,
				cel.BinaryBinding(func(h, b ref.Val) ref.Val {
					hv, isH := hdr(h)
					keep, isB := b.(types.Bool)
					if !isH || !isB {
						return bad()
					}
					hv.keepEmpty = bool(keep)
					return authzVal{envoyHeaderType, hv}
				}))),
		cel.Function("Response",
			cel.MemberOverload("ok_response", []*cel.Type{envoyOkType}, envoyResponseType,
				cel.UnaryBinding(func(o ref.Val) ref.Val {
					ov, isO := ok(o)
					if !isO {
						return bad()
					}
					return authzVal{envoyResponseType, &envoyResponse{ok: ov}}
				})),
			cel.MemberOverload("denied_response", []*cel.Type{envoyDeniedType}, envoyResponseType,
				cel.UnaryBinding(func(d ref.Val) ref.Val {
					dv, isD := denied(d)
					if !isD {
						return bad()
					}
					return authzVal{envoyResponseType, &envoyResponse{denied: dv}}
				}))),
		cel.Function("WithMessage",
			cel.MemberOverload("response_ok_with_message", []*cel.Type{envoyResponseType, cel.StringType}, envoyResponseType,
				cel.BinaryBinding(func(r, m ref.Val) ref.Val {
					a, isA := r.(authzVal)
					msg, err := str(m)
					if !isA || err != nil {
						return bad()
					}
					rv, isR := a.v.(*envoyResponse)
					if !isR {
						return bad()
					}
					c := *rv
					c.message = msg
					return authzVal{envoyResponseType, &c}
				}))),
		cel.Function("WithMetadata",
			cel.MemberOverload("response_ok_with_metadata", []*cel.Type{envoyResponseType, cel.MapType(cel.StringType, cel.DynType)}, envoyResponseType,
				cel.BinaryBinding(func(r, m ref.Val) ref.Val {
					a, isA := r.(authzVal)
					if !isA {
						return bad()
					}
					rv, isR := a.v.(*envoyResponse)
					if !isR {
						return bad()
					}
					c := *rv
					c.meta = m.Value()
					return authzVal{envoyResponseType, &c}
				}))),
	}
}

func httpFunctions() []cel.EnvOption {
	bad := func() ref.Val { return types.NewErr("no such overload") }
	// attribute reads a multi-valued attribute (header, query) of the
	// request attributes object.
	attribute := func(field string, canonical bool) func(ref.Val, ref.Val) ref.Val {
		return func(attrs, key ref.Val) ref.Val {
			k, err := str(key)
			if err != nil {
				return wrapErr(err)
			}
			m, err := attrs.ConvertToNative(reflect.TypeFor[map[string]any]())
			if err != nil {
				return wrapErr(err)
			}
			values, _ := m.(map[string]any)[field].(map[string]any)
			if canonical {
				k = textproto.CanonicalMIMEHeaderKey(k)
			}
			out := []string{}
			for name, v := range values {
				if canonical {
					name = textproto.CanonicalMIMEHeaderKey(name)
				}
				if name != k {
					continue
				}
				switch t := v.(type) {
				case []any:
					for _, e := range t {
						if s, isS := e.(string); isS {
							out = append(out, s)
						}
					}
				case string:
					out = append(out, t)
				}
			}
			return types.DefaultTypeAdapter.NativeToValue(out)
		}
	}
	return []cel.EnvOption{
		cel.Function("http.Allowed",
			cel.Overload("http_allowed", nil, httpOkType,
				cel.FunctionBinding(func(...ref.Val) ref.Val { return authzVal{httpOkType, true} }))),
		cel.Function("http.Denied",
			cel.Overload("http_denied_string", []*cel.Type{cel.StringType}, httpDeniedType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					reason, err := str(v)
					if err != nil {
						return wrapErr(err)
					}
					return authzVal{httpDeniedType, reason}
				}))),
		cel.Function("Header",
			cel.MemberOverload("http_get_header_string", []*cel.Type{cel.DynType, cel.StringType}, cel.ListType(cel.StringType),
				cel.BinaryBinding(attribute("header", true)))),
		cel.Function("QueryParam",
			cel.MemberOverload("http_get_queryparam_string", []*cel.Type{cel.DynType, cel.StringType}, cel.ListType(cel.StringType),
				cel.BinaryBinding(attribute("query", false)))),
		cel.Function("Response",
			cel.MemberOverload("http_response_ok", []*cel.Type{httpOkType}, httpResponseType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					if a, isA := v.(authzVal); !isA || a.t != httpOkType {
						return bad()
					}
					return authzVal{httpResponseType, &httpResponse{ok: true}}
				})),
			cel.MemberOverload("http_response_denied", []*cel.Type{httpDeniedType}, httpResponseType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					a, isA := v.(authzVal)
					if !isA || a.t != httpDeniedType {
						return bad()
					}
					reason, _ := a.v.(string)
					return authzVal{httpResponseType, &httpResponse{denied: &reason}}
				}))),
	}
}

func jwtFunctions() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("jwt.Decode",
			cel.Overload("jwt_decode_string_string", []*cel.Type{cel.StringType, cel.StringType}, jwtTokenType,
				cel.BinaryBinding(func(tok, key ref.Val) ref.Val {
					t, err := str(tok)
					if err != nil {
						return wrapErr(err)
					}
					k, err := str(key)
					if err != nil {
						return wrapErr(err)
					}
					token, err := decodeJWT(t, []byte(k), time.Now())
					if err != nil {
						return wrapErr(err)
					}
					return tokenVal{token}
				}))),
	}
}

// decodeJWT verifies a compact JWS signed with an HMAC secret (HS256, HS384,
// HS512) and returns its claims; Valid says whether exp, nbf and iat hold
// at now. Numeric dates are whole seconds, an "aud" string is a list, and
// numbers are float64 (as in the protobuf Struct kyverno-authz builds).
func decodeJWT(token string, secret []byte, now time.Time) (*jwtToken, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("failed to parse token: invalid compact serialization format")
	}
	rawHeader, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, fmt.Errorf("failed to parse token: invalid header: %w", err)
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	if err := json.Unmarshal(rawHeader, &hdr); err != nil {
		return nil, fmt.Errorf("failed to parse token: invalid header: %w", err)
	}
	var h func() hash.Hash
	switch hdr.Alg {
	case "HS256":
		h = sha256.New
	case "HS384":
		h = sha512.New384
	case "HS512":
		h = sha512.New
	default:
		return nil, fmt.Errorf("failed to parse token: could not verify message using any of the signatures or keys (algorithm %q needs a key other than a secret)", hdr.Alg)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return nil, fmt.Errorf("failed to parse token: invalid signature: %w", err)
	}
	mac := hmac.New(h, secret)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	if !hmac.Equal(mac.Sum(nil), sig) {
		return nil, errors.New("failed to parse token: could not verify message using any of the signatures or keys")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("failed to parse token: invalid payload: %w", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		return nil, fmt.Errorf("failed to parse token: invalid payload: %w", err)
	}
	valid := true
	for _, name := range []string{"exp", "nbf", "iat"} {
		v, ok := claims[name]
		if !ok {
			continue
		}
		f, isNum := v.(float64)
		if !isNum {
			return nil, fmt.Errorf("failed to parse token: invalid %s claim", name)
		}
		sec := math.Trunc(f)
		claims[name] = sec
		t := time.Unix(int64(sec), 0)
		switch name {
		case "exp":
			valid = valid && now.Before(t)
		case "nbf", "iat":
			valid = valid && !now.Before(t)
		}
	}
	if aud, ok := claims["aud"].(string); ok {
		claims["aud"] = []any{aud}
	}
	if len(claims) == 0 {
		claims = nil
	}
	return &jwtToken{claims: claims, valid: valid}, nil
}

var (
	authzEnvsOnce sync.Once
	authzEnvs     map[authzMode]*cel.Env
	authzEnvsErr  error
)

// authzEnv returns the CEL environment of a mode: kyverno-authz's base
// environment (CEL extensions and the Kubernetes libraries), the mode's
// response library and jwt.
func authzEnv(mode authzMode) (*cel.Env, error) {
	authzEnvsOnce.Do(func() {
		base, err := cel.NewEnv(
			cel.HomogeneousAggregateLiterals(),
			cel.EagerlyValidateDeclarations(true),
			cel.DefaultUTCTimeZone(true),
			cel.CrossTypeNumericComparisons(true),
			cel.OptionalTypes(),
			ext.Bindings(),
			ext.Encoders(),
			ext.Lists(),
			ext.Math(),
			ext.Protos(),
			ext.Sets(),
			ext.Strings(),
			library.CIDR(),
			library.Format(),
			library.IP(),
			library.Lists(),
			library.Regex(),
			library.URLs(),
			library.Quantity(),
			library.SemverLib(),
			cel.Variable("object", cel.DynType),
			cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)),
		)
		if err != nil {
			authzEnvsErr = err
			return
		}
		base, err = base.Extend(append(jwtFunctions(), cel.CustomTypeProvider(tokenProvider{base.CELTypeProvider()}))...)
		if err != nil {
			authzEnvsErr = err
			return
		}
		authzEnvs = map[authzMode]*cel.Env{}
		for mode, fns := range map[authzMode][]cel.EnvOption{authzEnvoy: envoyFunctions(), authzHTTP: httpFunctions()} {
			env, err := base.Extend(fns...)
			if err != nil {
				authzEnvsErr = err
				return
			}
			authzEnvs[mode] = env
		}
	})
	return authzEnvs[mode], authzEnvsErr
}

// authzPolicy is a compiled Envoy or HTTP authorization policy.
type authzPolicy struct {
	kind, name      string
	mode            authzMode
	failurePolicy   admissionregistrationv1.FailurePolicyType
	matchConditions []cel.Program
	variables       []authzVariable
	rules           []cel.Program
}

type authzVariable struct {
	name string
	prg  cel.Program
}

// parseAuthzPolicy compiles a ValidatingPolicy of mode Envoy or HTTP; ok is
// false for other policies.
func parseAuthzPolicy(o *manifest.Object) (*authzPolicy, bool, error) {
	if o.Kind != kyvernoapi.KindValidatingPolicy {
		return nil, false, nil
	}
	spec, _ := o.Content["spec"].(map[string]any)
	ev, _ := spec["evaluation"].(map[string]any)
	var mode authzMode
	switch ev["mode"] {
	case "Envoy":
		mode = authzEnvoy
	case "HTTP":
		mode = authzHTTP
	default:
		return nil, false, nil
	}
	fail := func(field, format string, args ...any) error {
		return &LoadError{File: o.Source, Test: o.Ref(), Field: field, Err: fmt.Errorf(format, args...)}
	}
	data, err := json.Marshal(o.Content)
	if err != nil {
		return nil, true, fail("", "%v", err)
	}
	var vp vpol.ValidatingPolicy
	strict, err := sigsjson.UnmarshalStrict(data, &vp)
	if err != nil {
		return nil, true, fail("", "%v", err)
	}
	if len(strict) > 0 {
		return nil, true, fail(decodeField(strict[0]), "%s", decodeDetail(strict[0]))
	}
	env, err := authzEnv(mode)
	if err != nil {
		return nil, true, fail("spec", "%v", err)
	}
	p := &authzPolicy{kind: o.Kind, name: vp.Name, mode: mode, failurePolicy: vp.Spec.GetFailurePolicy()}
	compile := func(field, expr string) (*cel.Ast, cel.Program, error) {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return nil, nil, fail(field, "%v", iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			return nil, nil, fail(field, "%v", err)
		}
		return ast, prg, nil
	}
	for i, mc := range vp.Spec.MatchConditions {
		field := fmt.Sprintf("spec.matchConditions[%d].expression", i)
		ast, prg, err := compile(field, mc.Expression)
		if err != nil {
			return nil, true, err
		}
		if !ast.OutputType().IsExactType(types.BoolType) {
			return nil, true, fail(field, "matchCondition output is expected to be of type bool")
		}
		p.matchConditions = append(p.matchConditions, prg)
	}
	for i, v := range vp.Spec.Variables {
		_, prg, err := compile(fmt.Sprintf("spec.variables[%d].expression", i), v.Expression)
		if err != nil {
			return nil, true, err
		}
		p.variables = append(p.variables, authzVariable{name: v.Name, prg: prg})
	}
	want := envoyResponseType
	if mode == authzHTTP {
		want = httpResponseType
	}
	for i, v := range vp.Spec.Validations {
		field := fmt.Sprintf("spec.validations[%d].expression", i)
		ast, prg, err := compile(field, v.Expression)
		if err != nil {
			return nil, true, err
		}
		out := ast.OutputType()
		if !out.IsExactType(want) && !out.IsExactType(types.NullType) && !out.IsExactType(types.DynType) {
			return nil, true, fail(field, "rule response output is expected to be of type %s", want.TypeName())
		}
		p.rules = append(p.rules, prg)
	}
	return p, true, nil
}

// lazyVars is the `variables` map of an authorization policy: a variable
// is evaluated on first use.
type lazyVars struct {
	p      *authzPolicy
	act    map[string]any
	values map[string]ref.Val
}

func (l *lazyVars) get(name string) (ref.Val, bool) {
	if v, ok := l.values[name]; ok {
		return v, true
	}
	for _, v := range l.p.variables {
		if v.name != name {
			continue
		}
		out, _, err := v.prg.Eval(l.act)
		if err != nil {
			out = types.WrapErr(err)
		}
		l.values[name] = out
		return out, true
	}
	return nil, false
}

func (l *lazyVars) ConvertToNative(t reflect.Type) (any, error) {
	return nil, errors.New("variables cannot be converted")
}
func (l *lazyVars) ConvertToType(t ref.Type) ref.Val {
	if t == types.TypeType {
		return types.MapType
	}
	return types.NewErr("variables cannot be converted to %s", t.TypeName())
}
func (l *lazyVars) Equal(o ref.Val) ref.Val { return types.Bool(l == o) }
func (l *lazyVars) Type() ref.Type          { return types.MapType }
func (l *lazyVars) Value() any              { return l }
func (l *lazyVars) Contains(key ref.Val) ref.Val {
	_, ok := l.Find(key)
	return types.Bool(ok)
}
func (l *lazyVars) Get(key ref.Val) ref.Val {
	if v, ok := l.Find(key); ok {
		return v
	}
	return types.NewErr("no such key: %v", key)
}
func (l *lazyVars) Find(key ref.Val) (ref.Val, bool) {
	s, ok := key.(types.String)
	if !ok {
		return nil, false
	}
	return l.get(string(s))
}
func (l *lazyVars) Size() ref.Val { return types.Int(len(l.p.variables)) }
func (l *lazyVars) Iterator() traits.Iterator {
	names := make([]string, len(l.p.variables))
	for i, v := range l.p.variables {
		names[i] = v.name
	}
	return types.NewStringList(types.DefaultTypeAdapter, names).(traits.Lister).Iterator()
}
func (l *lazyVars) IsSet(key ref.Val) ref.Val { return l.Contains(key) }

var _ traits.Mapper = (*lazyVars)(nil)

// evaluate runs a policy on a payload as kyverno-authz does: matchConditions
// (a false one: no opinion), then the validations in order until one
// returns a response. An error is the result under failurePolicy Fail, and
// no opinion under Ignore.
func (p *authzPolicy) evaluate(object map[string]any) (any, error) {
	act := map[string]any{"object": object}
	var errs []string
	for _, mc := range p.matchConditions {
		out, _, err := mc.Eval(act)
		if err == nil {
			if b, ok := out.(types.Bool); ok {
				if !b {
					return nil, nil
				}
				continue
			}
			err = fmt.Errorf("matchCondition output is not a bool: %s", out.Type().TypeName())
		}
		errs = append(errs, err.Error())
	}
	result, err := func() (any, error) {
		if len(errs) > 0 {
			return nil, errors.New(strings.Join(errs, "; "))
		}
		vars := &lazyVars{p: p, act: act, values: map[string]ref.Val{}}
		act["variables"] = vars
		for _, rule := range p.rules {
			out, _, err := rule.Eval(act)
			if err != nil {
				return nil, err
			}
			if out == nil || out == types.NullValue {
				continue
			}
			a, ok := out.(authzVal)
			if !ok || (a.t != envoyResponseType && a.t != httpResponseType) {
				return nil, fmt.Errorf("rule result is expected to be a %s response, got %s", p.mode, out.Type().TypeName())
			}
			return a.v, nil
		}
		return nil, nil
	}()
	if err != nil && p.failurePolicy == admissionregistrationv1.Ignore {
		return nil, nil
	}
	return result, err
}

// evalAuthz evaluates the authorization policies of a mode on a payload,
// as `kyverno test` reports them: pass "request allowed", fail "request
// denied …", skip "request does not match" (no response), error.
func (s *Suite) evalAuthz(_ context.Context, p *Payload, mode authzMode) []response {
	obj := defaultAuthzPayload(p.Object, mode)
	var out []response
	for _, ap := range s.authz {
		if ap.mode != mode {
			continue
		}
		result, message := outcome.Skip, "request does not match"
		res, err := ap.evaluate(obj)
		switch r := res.(type) {
		case *envoyResponse:
			switch {
			case r.ok != nil:
				result, message = outcome.Pass, "request allowed"
			case r.denied != nil:
				result, message = outcome.Fail, fmt.Sprintf("request denied with status code %d", r.denied.status)
			}
		case *httpResponse:
			switch {
			case r.ok:
				result, message = outcome.Pass, "request allowed"
			case r.denied != nil:
				result, message = outcome.Fail, fmt.Sprintf("request denied, reason: %s", *r.denied)
			}
		}
		if err != nil {
			result, message = outcome.Error, err.Error()
		}
		out = append(out, response{
			policyKind: ap.kind,
			policyName: ap.name,
			resource:   map[string]any{},
			results: []outcome.Result{{
				Policy: ap.name, PolicyName: ap.name, PolicyKind: ap.kind,
				Rule: ap.name, Result: result, Message: message,
				Source: outcome.SourceValidatingPolicy, Scored: true,
			}},
		})
	}
	return out
}

// defaultAuthzPayload fills the fields of the request message a policy
// commonly reads and the payload may leave out (protobuf and Go structs
// have zero values where JSON has nothing).
func defaultAuthzPayload(obj map[string]any, mode authzMode) map[string]any {
	out := deepCopy(obj).(map[string]any)
	child := func(m map[string]any, key string) map[string]any {
		c, ok := m[key].(map[string]any)
		if !ok {
			c = map[string]any{}
			m[key] = c
		}
		return c
	}
	setDefault := func(m map[string]any, key string, v any) {
		if _, ok := m[key]; !ok {
			m[key] = v
		}
	}
	attrs := child(out, "attributes")
	switch mode {
	case authzEnvoy:
		req := child(attrs, "request")
		httpReq := child(req, "http")
		for _, k := range []string{"id", "method", "path", "host", "scheme", "query", "fragment", "protocol", "body"} {
			setDefault(httpReq, k, "")
		}
		setDefault(httpReq, "headers", map[string]any{})
		setDefault(httpReq, "size", int64(0))
		child(attrs, "source")
		child(attrs, "destination")
		setDefault(attrs, "contextExtensions", map[string]any{})
	case authzHTTP:
		for _, k := range []string{"method", "host", "protocol", "scheme", "path", "fragment"} {
			setDefault(attrs, k, "")
		}
		setDefault(attrs, "header", map[string]any{})
		setDefault(attrs, "query", map[string]any{})
		setDefault(attrs, "contentLength", int64(0))
		if b, ok := attrs["body"].(string); ok {
			if raw, err := base64.StdEncoding.DecodeString(b); err == nil {
				attrs["body"] = raw
			}
		} else {
			attrs["body"] = []byte{}
		}
	}
	return out
}

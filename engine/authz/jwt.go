package authz

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
	jwxjwt "github.com/lestrrat-go/jwx/v3/jwt"
)

// jwtTokenType is jwt.Token: Claims (a map) and Valid (a bool).
var jwtTokenType = types.NewObjectType("jwt.Token")

// Token is a decoded JWT: its claims, as the protobuf Struct kyverno-authz
// builds them (numbers are doubles, numeric dates whole seconds, "aud" a
// list), and whether exp, nbf and iat hold now.
type Token struct {
	Claims map[string]any
	Valid  bool
}

// Decode verifies a compact JWS with key and returns its claims, as
// kyverno-authz's jwt.Decode does (github.com/lestrrat-go/jwx/v3: the
// algorithm is inferred from the key, "none" is never accepted). key is
// a shared secret (HS256, HS384, HS512) — what kyverno-authz's
// jwt.Decode(string, string) takes — or, for asymmetric algorithms (RS*,
// PS*, ES*, EdDSA), a PEM public key or certificate, a JWK or a JWK set.
// A token that does not verify is an error; one that verifies but is
// expired or not yet valid has Valid false.
func Decode(token, key string, now time.Time) (*Token, error) {
	set, err := keySet(key)
	if err != nil {
		return nil, err
	}
	tok, err := jwxjwt.Parse([]byte(token),
		jwxjwt.WithValidate(false),
		jwxjwt.WithKeySet(set, jws.WithUseDefault(true), jws.WithInferAlgorithmFromKey(true)),
	)
	if err != nil {
		return nil, err
	}
	out := &Token{Valid: jwxjwt.Validate(tok, jwxjwt.WithClock(jwxjwt.ClockFunc(func() time.Time { return now }))) == nil}
	keys := tok.Keys()
	if len(keys) == 0 {
		return out, nil
	}
	claims := make(map[string]any, len(keys))
	for _, k := range keys {
		var v any
		if err := tok.Get(k, &v); err != nil {
			return nil, err
		}
		if t, ok := v.(time.Time); ok {
			v = t.Unix()
		}
		claims[k] = v
	}
	// Struct values: numbers are doubles, lists []any.
	raw, err := json.Marshal(claims)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &out.Claims); err != nil {
		return nil, err
	}
	return out, nil
}

// keySet turns the key argument of jwt.Decode into a key set: a PEM public
// key (or certificate), a JWK or JWK set (JSON), else a shared secret.
func keySet(key string) (jwk.Set, error) {
	b := []byte(key)
	switch trimmed := bytes.TrimSpace(b); {
	case bytes.HasPrefix(trimmed, []byte("-----BEGIN ")):
		if block, _ := pem.Decode(trimmed); block != nil {
			return jwk.Parse(trimmed, jwk.WithPEM(true))
		}
	case bytes.HasPrefix(trimmed, []byte("{")) && json.Valid(trimmed):
		if set, err := jwk.Parse(trimmed); err == nil {
			return set, nil
		}
	}
	k, err := jwk.Import(b)
	if err != nil {
		return nil, err
	}
	set := jwk.NewSet()
	if err := set.AddKey(k); err != nil {
		return nil, err
	}
	return set, nil
}

// jwtLibrary is jwt.Decode(token, key) of kyverno-authz (the JWK set
// overload, fed by jwks.Fetch, is not available: it fetches from the
// network).
func jwtLibrary() []cel.EnvOption {
	return []cel.EnvOption{
		cel.Function("jwt.Decode",
			cel.Overload("jwt_decode_string_string", []*cel.Type{cel.StringType, cel.StringType}, jwtTokenType,
				cel.BinaryBinding(func(tok, key ref.Val) ref.Val {
					t, err := str(tok)
					if err != nil {
						return types.WrapErr(err)
					}
					k, err := str(key)
					if err != nil {
						return types.WrapErr(err)
					}
					token, err := Decode(t, k, time.Now())
					if err != nil {
						// jwx's words, as kyverno-authz returns them
						return types.WrapErr(err)
					}
					return tokenVal{token}
				}))),
	}
}

// field returns a field of the token (Claims is null when the token has
// none, as an unset Struct is).
func (t *Token) field(name string) (ref.Val, bool) {
	switch name {
	case "Claims":
		if t.Claims == nil {
			return types.NullValue, true
		}
		return types.DefaultTypeAdapter.NativeToValue(t.Claims), true
	case "Valid":
		return types.Bool(t.Valid), true
	}
	return nil, false
}

// tokenVal is the CEL value of a jwt.Token.
type tokenVal struct{ t *Token }

var _ traits.FieldTester = tokenVal{}

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

// tokenProvider makes jwt.Token's fields known to the type checker.
type tokenProvider struct{ types.Provider }

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
	if structType != jwtTokenType.TypeName() {
		return p.Provider.FindStructFieldType(structType, fieldName)
	}
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
		Type:  t,
		IsSet: func(any) bool { return true },
		GetFrom: func(target any) (any, error) {
			tok, ok := target.(*Token)
			if !ok {
				return nil, errors.New("not a jwt.Token")
			}
			v, _ := tok.field(fieldName)
			return v, nil
		},
	}, true
}

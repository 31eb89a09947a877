package authz

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// CEL types of the Envoy library (kyverno-authz's, after the protobuf
// messages they stand for).
var (
	envoyOkType       = types.NewObjectType("envoy.service.auth.v3.OkHttpResponse")
	envoyDeniedType   = types.NewObjectType("envoy.service.auth.v3.DeniedHttpResponse")
	envoyResponseType = types.NewObjectType("envoy.service.auth.v3.CheckResponse")
	envoyHeaderType   = types.NewObjectType("envoy.config.core.v3.HeaderValueOption")
	envoyQueryType    = types.NewObjectType("envoy.config.core.v3.QueryParameter")
)

// header is a HeaderValueOption (or a QueryParameter: key and value).
type header struct {
	key, value string
	keepEmpty  bool
}

// envoyOk is an OkHttpResponse.
type envoyOk struct {
	headers, responseHeaders []header
	removeHeaders            []string
	queryParams              []header
	removeQueryParams        []string
}

func (o *envoyOk) clone() *envoyOk {
	return &envoyOk{
		headers:           slices.Clone(o.headers),
		responseHeaders:   slices.Clone(o.responseHeaders),
		removeHeaders:     slices.Clone(o.removeHeaders),
		queryParams:       slices.Clone(o.queryParams),
		removeQueryParams: slices.Clone(o.removeQueryParams),
	}
}

// envoyDenied is a DeniedHttpResponse.
type envoyDenied struct {
	status  int64
	body    string
	headers []header
}

// envoyResponse is a CheckResponse: OK with an OkHttpResponse, or
// PERMISSION_DENIED with a DeniedHttpResponse; message is status.message,
// metadata the dynamic metadata (JSON-shaped).
type envoyResponse struct {
	ok       *envoyOk
	denied   *envoyDenied
	message  string
	metadata map[string]any
}

// envoyLibrary is the envoy.* library of kyverno-authz: the response
// builders of a policy in Envoy mode.
func envoyLibrary() []cel.EnvOption {
	okVal := func(o *envoyOk) ref.Val { return value{envoyOkType, o} }
	deniedVal := func(d *envoyDenied) ref.Val { return value{envoyDeniedType, d} }
	keyValue := func(t *types.Type) func(k, v ref.Val) ref.Val {
		return func(k, v ref.Val) ref.Val {
			ks, err := str(k)
			if err != nil {
				return types.WrapErr(err)
			}
			vs, err := str(v)
			if err != nil {
				return types.WrapErr(err)
			}
			return value{t, header{key: ks, value: vs}}
		}
	}
	// okWith returns a binding that adds a key/value (or an option) to a
	// copy of an OkHttpResponse.
	okWith := func(add func(o *envoyOk, h header)) func(args ...ref.Val) ref.Val {
		return func(args ...ref.Val) ref.Val {
			o, ok := valueOf[*envoyOk](args[0], envoyOkType)
			if !ok {
				return noOverload()
			}
			var h header
			switch len(args) {
			case 2:
				a, isA := args[1].(value)
				if !isA {
					return noOverload()
				}
				if h, ok = a.v.(header); !ok {
					return noOverload()
				}
			case 3:
				k, err := str(args[1])
				if err != nil {
					return types.WrapErr(err)
				}
				v, err := str(args[2])
				if err != nil {
					return types.WrapErr(err)
				}
				h = header{key: k, value: v}
			default:
				return noOverload()
			}
			c := o.clone()
			add(c, h)
			return okVal(c)
		}
	}
	okWithout := func(add func(o *envoyOk, key string)) func(o, k ref.Val) ref.Val {
		return func(ov, k ref.Val) ref.Val {
			o, ok := valueOf[*envoyOk](ov, envoyOkType)
			key, err := str(k)
			if !ok || err != nil {
				return noOverload()
			}
			c := o.clone()
			add(c, key)
			return okVal(c)
		}
	}
	deniedWithHeader := func(args ...ref.Val) ref.Val {
		d, ok := valueOf[*envoyDenied](args[0], envoyDeniedType)
		if !ok {
			return noOverload()
		}
		var h header
		if len(args) == 2 {
			if h, ok = valueOf[header](args[1], envoyHeaderType); !ok {
				return noOverload()
			}
		} else {
			k, err := str(args[1])
			if err != nil {
				return types.WrapErr(err)
			}
			v, err := str(args[2])
			if err != nil {
				return types.WrapErr(err)
			}
			h = header{key: k, value: v}
		}
		c := *d
		c.headers = append(slices.Clone(d.headers), h)
		return deniedVal(&c)
	}
	keepEmpty := func(h ref.Val, keep bool) ref.Val {
		hv, ok := valueOf[header](h, envoyHeaderType)
		if !ok {
			return noOverload()
		}
		hv.keepEmpty = keep
		return value{envoyHeaderType, hv}
	}
	withResponse := func(r ref.Val, set func(c *envoyResponse) error) ref.Val {
		rv, ok := valueOf[*envoyResponse](r, envoyResponseType)
		if !ok {
			return noOverload()
		}
		c := *rv
		if err := set(&c); err != nil {
			return types.WrapErr(err)
		}
		return value{envoyResponseType, &c}
	}
	return []cel.EnvOption{
		cel.Function("envoy.Allowed",
			cel.Overload("envoy_allowed", nil, envoyOkType,
				cel.FunctionBinding(func(...ref.Val) ref.Val { return okVal(&envoyOk{}) }))),
		cel.Function("envoy.Denied",
			cel.Overload("envoy_denied", []*cel.Type{cel.IntType}, envoyDeniedType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					code, ok := v.(types.Int)
					if !ok {
						return noOverload()
					}
					return deniedVal(&envoyDenied{status: int64(code)})
				}))),
		cel.Function("envoy.Header",
			cel.Overload("envoy_header_key_value", []*cel.Type{cel.StringType, cel.StringType}, envoyHeaderType,
				cel.BinaryBinding(keyValue(envoyHeaderType)))),
		cel.Function("envoy.QueryParam",
			cel.Overload("envoy_queryparam_key_value", []*cel.Type{cel.StringType, cel.StringType}, envoyQueryType,
				cel.BinaryBinding(keyValue(envoyQueryType)))),
		cel.Function("WithBody",
			cel.MemberOverload("envoy_denied_with_body", []*cel.Type{envoyDeniedType, cel.StringType}, envoyDeniedType,
				cel.BinaryBinding(func(d, b ref.Val) ref.Val {
					dv, ok := valueOf[*envoyDenied](d, envoyDeniedType)
					body, err := str(b)
					if !ok || err != nil {
						return noOverload()
					}
					c := *dv
					c.body = body
					return deniedVal(&c)
				}))),
		cel.Function("WithHeader",
			cel.MemberOverload("envoy_ok_with_header_header", []*cel.Type{envoyOkType, envoyHeaderType}, envoyOkType,
				cel.FunctionBinding(okWith(func(o *envoyOk, h header) { o.headers = append(o.headers, h) }))),
			cel.MemberOverload("envoy_ok_with_header_string_string", []*cel.Type{envoyOkType, cel.StringType, cel.StringType}, envoyOkType,
				cel.FunctionBinding(okWith(func(o *envoyOk, h header) { o.headers = append(o.headers, h) }))),
			cel.MemberOverload("envoy_denied_with_header_header", []*cel.Type{envoyDeniedType, envoyHeaderType}, envoyDeniedType,
				cel.FunctionBinding(deniedWithHeader)),
			cel.MemberOverload("envoy_denied_with_header_string_string", []*cel.Type{envoyDeniedType, cel.StringType, cel.StringType}, envoyDeniedType,
				cel.FunctionBinding(deniedWithHeader))),
		cel.Function("WithoutHeader",
			cel.MemberOverload("envoy_ok_without_header", []*cel.Type{envoyOkType, cel.StringType}, envoyOkType,
				cel.BinaryBinding(okWithout(func(o *envoyOk, k string) { o.removeHeaders = append(o.removeHeaders, k) })))),
		cel.Function("WithResponseHeader",
			cel.MemberOverload("envoy_ok_with_response_header_header", []*cel.Type{envoyOkType, envoyHeaderType}, envoyOkType,
				cel.FunctionBinding(okWith(func(o *envoyOk, h header) { o.responseHeaders = append(o.responseHeaders, h) }))),
			cel.MemberOverload("envoy_ok_with_response_header_string_string", []*cel.Type{envoyOkType, cel.StringType, cel.StringType}, envoyOkType,
				cel.FunctionBinding(okWith(func(o *envoyOk, h header) { o.responseHeaders = append(o.responseHeaders, h) })))),
		cel.Function("WithQueryParam",
			cel.MemberOverload("envoy_ok_with_queryparam_param", []*cel.Type{envoyOkType, envoyQueryType}, envoyOkType,
				cel.FunctionBinding(okWith(func(o *envoyOk, q header) { o.queryParams = append(o.queryParams, q) }))),
			cel.MemberOverload("envoy_ok_with_queryparam_string_string", []*cel.Type{envoyOkType, cel.StringType, cel.StringType}, envoyOkType,
				cel.FunctionBinding(okWith(func(o *envoyOk, q header) { o.queryParams = append(o.queryParams, q) })))),
		cel.Function("WithoutQueryParam",
			cel.MemberOverload("envoy_ok_without_queryparam_string", []*cel.Type{envoyOkType, cel.StringType}, envoyOkType,
				cel.BinaryBinding(okWithout(func(o *envoyOk, k string) { o.removeQueryParams = append(o.removeQueryParams, k) })))),
		cel.Function("KeepEmptyValue",
			cel.MemberOverload("envoy_header_keep_empty_value", []*cel.Type{envoyHeaderType}, envoyHeaderType,
				cel.UnaryBinding(func(h ref.Val) ref.Val { return keepEmpty(h, true) })),
			cel.MemberOverload("envoy_header_keep_empty_value_bool", []*cel.Type{envoyHeaderType, cel.BoolType}, envoyHeaderType,
				cel.BinaryBinding(func(h, b ref.Val) ref.Val {
					keep, ok := b.(types.Bool)
					if !ok {
						return noOverload()
					}
					return keepEmpty(h, bool(keep))
				}))),
		cel.Function("Response",
			cel.MemberOverload("envoy_ok_response", []*cel.Type{envoyOkType}, envoyResponseType,
				cel.UnaryBinding(func(o ref.Val) ref.Val {
					ov, ok := valueOf[*envoyOk](o, envoyOkType)
					if !ok {
						return noOverload()
					}
					return value{envoyResponseType, &envoyResponse{ok: ov}}
				})),
			cel.MemberOverload("envoy_denied_response", []*cel.Type{envoyDeniedType}, envoyResponseType,
				cel.UnaryBinding(func(d ref.Val) ref.Val {
					dv, ok := valueOf[*envoyDenied](d, envoyDeniedType)
					if !ok {
						return noOverload()
					}
					return value{envoyResponseType, &envoyResponse{denied: dv}}
				}))),
		cel.Function("WithMessage",
			cel.MemberOverload("envoy_response_ok_with_message", []*cel.Type{envoyResponseType, cel.StringType}, envoyResponseType,
				cel.BinaryBinding(func(r, m ref.Val) ref.Val {
					msg, err := str(m)
					if err != nil {
						return noOverload()
					}
					return withResponse(r, func(c *envoyResponse) error { c.message = msg; return nil })
				}))),
		cel.Function("WithMetadata",
			cel.MemberOverload("envoy_response_ok_with_metadata", []*cel.Type{envoyResponseType, cel.MapType(cel.StringType, cel.DynType)}, envoyResponseType,
				cel.BinaryBinding(func(r, m ref.Val) ref.Val {
					return withResponse(r, func(c *envoyResponse) error {
						meta, err := jsonOf(m)
						if err != nil {
							return err
						}
						c.metadata, _ = meta.(map[string]any)
						return nil
					})
				}))),
	}
}

// gRPC status codes of a CheckResponse.
const (
	grpcOK               = 0
	grpcUnknown          = 2
	grpcPermissionDenied = 7
)

// The CheckResponse in protobuf's JSON mapping (field names in lowerCamelCase;
// enum values as numbers, which protobuf's JSON parsers accept).
type (
	jsonCheckResponse struct {
		Status          *jsonStatus    `json:"status,omitempty"`
		DeniedResponse  *jsonDenied    `json:"deniedResponse,omitempty"`
		OkResponse      *jsonOk        `json:"okResponse,omitempty"`
		DynamicMetadata map[string]any `json:"dynamicMetadata,omitempty"`
	}
	jsonStatus struct {
		Code    int32  `json:"code"`
		Message string `json:"message,omitempty"`
	}
	jsonHTTPStatus struct {
		Code int64 `json:"code"`
	}
	jsonDenied struct {
		Status  *jsonHTTPStatus   `json:"status,omitempty"`
		Headers []jsonHeaderValue `json:"headers,omitempty"`
		Body    string            `json:"body,omitempty"`
	}
	jsonOk struct {
		Headers                 []jsonHeaderValue `json:"headers,omitempty"`
		HeadersToRemove         []string          `json:"headersToRemove,omitempty"`
		ResponseHeadersToAdd    []jsonHeaderValue `json:"responseHeadersToAdd,omitempty"`
		QueryParametersToSet    []jsonKeyValue    `json:"queryParametersToSet,omitempty"`
		QueryParametersToRemove []string          `json:"queryParametersToRemove,omitempty"`
	}
	jsonHeaderValue struct {
		Header         jsonKeyValue `json:"header"`
		KeepEmptyValue bool         `json:"keepEmptyValue,omitempty"`
	}
	jsonKeyValue struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
)

func headersJSON(hs []header) []jsonHeaderValue {
	out := make([]jsonHeaderValue, len(hs))
	for i, h := range hs {
		out[i] = jsonHeaderValue{Header: jsonKeyValue{Key: h.key, Value: h.value}, KeepEmptyValue: h.keepEmpty}
	}
	return out
}

// envoyDeniedCode is the HTTP status Envoy answers a denied request
// with: the denied response's, else 403 (Envoy's default).
func envoyDeniedCode(d *envoyDenied) int32 {
	if d.status < 100 || d.status > 599 {
		return 403
	}
	return int32(d.status)
}

// json renders the CheckResponse as kyverno-authz returns it: status OK
// with the ok response, or PERMISSION_DENIED with the denied one.
func (r *envoyResponse) json() []byte {
	out := jsonCheckResponse{DynamicMetadata: r.metadata}
	switch {
	case r.ok != nil:
		out.Status = &jsonStatus{Code: grpcOK, Message: r.message}
		out.OkResponse = &jsonOk{
			Headers:                 headersJSON(r.ok.headers),
			HeadersToRemove:         r.ok.removeHeaders,
			ResponseHeadersToAdd:    headersJSON(r.ok.responseHeaders),
			QueryParametersToRemove: r.ok.removeQueryParams,
		}
		for _, q := range r.ok.queryParams {
			out.OkResponse.QueryParametersToSet = append(out.OkResponse.QueryParametersToSet, jsonKeyValue{Key: q.key, Value: q.value})
		}
	case r.denied != nil:
		out.Status = &jsonStatus{Code: grpcPermissionDenied, Message: r.message}
		out.DeniedResponse = &jsonDenied{
			Status:  &jsonHTTPStatus{Code: r.denied.status},
			Headers: headersJSON(r.denied.headers),
			Body:    r.denied.body,
		}
	}
	return mustJSON(out)
}

// envoyErrorJSON is the answer to a request whose policy failed: kyverno-authz
// returns the error from Check, which gRPC sends as status UNKNOWN with the
// error's text; Envoy denies the request (403, unless its filter is set to
// fail open).
func envoyErrorJSON(err error) []byte {
	return mustJSON(jsonCheckResponse{Status: &jsonStatus{Code: grpcUnknown, Message: err.Error()}})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("authz: encoding a response: %v", err))
	}
	return b
}

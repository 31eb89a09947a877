package authz

import (
	"net/textproto"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// CEL types of the HTTP library (kyverno-authz's).
var (
	httpOkType       = types.NewObjectType("http.CheckResponseOk")
	httpDeniedType   = types.NewObjectType("http.CheckResponseDenied")
	httpResponseType = types.NewObjectType("http.CheckResponse")
)

// httpResponse is an HTTP CheckResponse: ok, or denied with a reason.
type httpResponse struct {
	denied bool
	reason string
}

// httpLibrary is the http.* library of kyverno-authz for policies in HTTP
// mode: the response builders, and Header/QueryParam on the request's
// attributes (header names are matched canonically, as net/http does).
func httpLibrary() []cel.EnvOption {
	attribute := func(field string, canonical bool) func(ref.Val, ref.Val) ref.Val {
		return func(attrs, key ref.Val) ref.Val {
			k, err := str(key)
			if err != nil {
				return types.WrapErr(err)
			}
			m, err := attrs.ConvertToNative(reflect.TypeFor[map[string]any]())
			if err != nil {
				return types.WrapErr(err)
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
						if s, ok := e.(string); ok {
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
				cel.FunctionBinding(func(...ref.Val) ref.Val { return value{httpOkType, true} }))),
		cel.Function("http.Denied",
			cel.Overload("http_denied_string", []*cel.Type{cel.StringType}, httpDeniedType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					reason, err := str(v)
					if err != nil {
						return types.WrapErr(err)
					}
					return value{httpDeniedType, reason}
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
					if _, ok := valueOf[bool](v, httpOkType); !ok {
						return noOverload()
					}
					return value{httpResponseType, &httpResponse{}}
				})),
			cel.MemberOverload("http_response_denied", []*cel.Type{httpDeniedType}, httpResponseType,
				cel.UnaryBinding(func(v ref.Val) ref.Val {
					reason, ok := valueOf[string](v, httpDeniedType)
					if !ok {
						return noOverload()
					}
					return value{httpResponseType, &httpResponse{denied: true, reason: reason}}
				}))),
	}
}

// jsonHTTPResponse is the response the Authz Server writes, with its
// default output expression: 200 for an ok (or no) response, 403 with the
// reason as body for a denied one, 500 with the error as body.
type jsonHTTPResponse struct {
	Status int32               `json:"status"`
	Header map[string][]string `json:"header,omitempty"`
	Body   string              `json:"body,omitempty"`
}

// code is the HTTP status of the response.
func (r *httpResponse) code() int32 {
	if r.denied {
		return 403
	}
	return 200
}

func (r *httpResponse) json() []byte {
	out := jsonHTTPResponse{Status: r.code()}
	if r.denied {
		out.Body = r.reason
	}
	return mustJSON(out)
}

func httpErrorJSON(err error) []byte {
	return mustJSON(jsonHTTPResponse{Status: 500, Body: err.Error()})
}

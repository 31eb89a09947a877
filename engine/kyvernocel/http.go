package kyvernocel

import (
	"crypto/x509"
	"errors"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/types/known/structpb"
)

// http library (sdk extensions/cel/libs/http): member functions of the "http"
// variable.
//
//	http.Get(url) / http.Get(url, headers)             → dyn (declared google.protobuf.Any, as Kyverno)
//	http.Post(url, body) / http.Post(url, body, headers)
//	http.Client(caBundle)                               → http.Context
//
// and the camelCase spellings get, post, client.

func httpFunctions() []cel.EnvOption {
	headersType := types.NewMapType(types.StringType, types.StringType)
	get := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("http_get_string_"+suffix,
				[]*cel.Type{HTTPContextType, types.StringType}, types.AnyType,
				cel.BinaryBinding(httpGet)),
			cel.MemberOverload("http_get_string_headers_"+suffix,
				[]*cel.Type{HTTPContextType, types.StringType, headersType}, types.AnyType,
				cel.FunctionBinding(httpGetWithHeaders)),
		}
	}
	post := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("http_post_string_any_"+suffix,
				[]*cel.Type{HTTPContextType, types.StringType, types.AnyType}, types.AnyType,
				cel.FunctionBinding(httpPost)),
			cel.MemberOverload("http_post_string_any_headers_"+suffix,
				[]*cel.Type{HTTPContextType, types.StringType, types.AnyType, headersType}, types.AnyType,
				cel.FunctionBinding(httpPostWithHeaders)),
		}
	}
	client := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("http_client_string_"+suffix,
				[]*cel.Type{HTTPContextType, types.StringType}, HTTPContextType,
				cel.BinaryBinding(httpClient)),
		}
	}
	return []cel.EnvOption{
		cel.Function("Get", get("pascal")...),
		cel.Function("Post", post("pascal")...),
		cel.Function("Client", client("pascal")...),
		cel.Function("get", get("camel")...),
		cel.Function("post", post("camel")...),
		cel.Function("client", client("camel")...),
	}
}

func httpArg(args []ref.Val) (*httpValue, ref.Val) {
	if h, ok := args[0].(*httpValue); ok && h.c != nil {
		return h, nil
	}
	return nil, types.NewErr("invalid arg 0: unsupported native conversion from %s to 'http.Context'", args[0].Type().TypeName())
}

func httpGet(request, url ref.Val) ref.Val {
	return httpGetWithHeaders(request, url, emptyStringMapCEL)
}

func httpGetWithHeaders(args ...ref.Val) ref.Val {
	if len(args) != 3 {
		return argCountErr(3, len(args))
	}
	h, errVal := httpArg(args)
	if errVal != nil {
		return errVal
	}
	url, errVal := getArgString(args, 1)
	if errVal != nil {
		return errVal
	}
	headers, errVal := getArgStringMap(args, 2)
	if errVal != nil {
		return errVal
	}
	data, err := h.c.Get(h.ctx, url, headers)
	if err != nil {
		return types.NewErr("request failed: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(data)
}

func httpPost(args ...ref.Val) ref.Val {
	if len(args) != 3 {
		return argCountErr(3, len(args))
	}
	return httpPostWithHeaders(args[0], args[1], args[2], emptyStringMapCEL)
}

var structpbValueType = reflect.TypeFor[*structpb.Value]()

func httpPostWithHeaders(args ...ref.Val) ref.Val {
	if len(args) != 4 {
		return argCountErr(4, len(args))
	}
	h, errVal := httpArg(args)
	if errVal != nil {
		return errVal
	}
	url, errVal := getArgString(args, 1)
	if errVal != nil {
		return errVal
	}
	// Kyverno converts the body to a protobuf JSON value (so CEL ints
	// become JSON numbers, bytes base64 strings...) and JSON-encodes it.
	body, err := args[2].ConvertToNative(structpbValueType)
	if err != nil {
		return types.NewErr("invalid arg %d: %v", 2, err)
	}
	headers, errVal := getArgStringMap(args, 3)
	if errVal != nil {
		return errVal
	}
	data, err := h.c.Post(h.ctx, url, body.(*structpb.Value).AsInterface(), headers)
	if err != nil {
		return types.NewErr("request failed: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(data)
}

func httpClient(request, caBundle ref.Val) ref.Val {
	h, ok := request.(*httpValue)
	if !ok || h.c == nil {
		return types.NewErr("invalid arg %d: unsupported native conversion from %s to 'http.Context'", 0, request.Type().TypeName())
	}
	ca, ok := caBundle.(types.String)
	if !ok {
		v, err := caBundle.ConvertToNative(stringType)
		if err != nil {
			return types.NewErr("invalid arg %d: %v", 1, err)
		}
		ca = types.String(v.(string))
	}
	c, err := h.c.Client(h.ctx, string(ca))
	if err != nil {
		return types.NewErr("request failed: %v", err)
	}
	return &httpValue{ctx: h.ctx, c: c}
}

// CheckCABundle validates a CA bundle as Kyverno's http.Client does: an
// empty bundle is fine (the default trust store), anything else must hold at
// least one PEM certificate.
func CheckCABundle(caBundle string) error {
	if caBundle == "" {
		return nil
	}
	if !x509.NewCertPool().AppendCertsFromPEM([]byte(caBundle)) {
		return errors.New("failed to parse PEM CA bundle for APICall")
	}
	return nil
}

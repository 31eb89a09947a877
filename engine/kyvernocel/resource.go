package kyvernocel

import (
	"fmt"
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"google.golang.org/protobuf/types/known/structpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/jsonval"
)

// resource library (sdk extensions/cel/libs/resource): member functions of
// the "resource" variable.
//
// Cluster policies:
//
//	resource.List(apiVersion, resource, namespace[, labels])   → map(string, dyn)
//	resource.List(gvr, namespace[, labels])
//	resource.Get(apiVersion, resource, namespace, name)         → map(string, dyn), null if not found
//	resource.Get(gvr, namespace, name)
//	resource.Post(apiVersion, resource, namespace, object)      → map(string, dyn)
//	resource.Post(apiVersion, resource, object)
//	resource.ToGVR(apiVersion, kind)                            → schema.GroupVersionResource
//
// Namespaced policies: the same without the namespace argument, confined to
// the policy's namespace. camelCase spellings list, get, post, toGVR.

var (
	labelsType    = types.NewMapType(types.StringType, types.StringType)
	objectMapType = types.NewMapType(types.StringType, types.AnyType)
	resultMapType = types.NewMapType(types.StringType, types.AnyType)
)

func clusterResourceFunctions() []cel.EnvOption {
	list := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("resource_list_string_string_string_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType, types.StringType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceList(args, 4, false, false) })),
			cel.MemberOverload("resource_list_string_string_string_map_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType, types.StringType, labelsType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceList(args, 5, false, false) })),
			cel.MemberOverload("list_resources_gvr_string_"+suffix,
				[]*cel.Type{ResourceContextType, GVRType, types.StringType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceList(args, 3, true, false) })),
			cel.MemberOverload("list_resources_gvr_string_map_"+suffix,
				[]*cel.Type{ResourceContextType, GVRType, types.StringType, labelsType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceList(args, 4, true, false) })),
		}
	}
	get := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("resource_get_string_string_string_string_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType, types.StringType, types.StringType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceGet(args, 5, false, false) })),
			cel.MemberOverload("resource_get_gvr_string_string_"+suffix,
				[]*cel.Type{ResourceContextType, GVRType, types.StringType, types.StringType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceGet(args, 4, true, false) })),
		}
	}
	post := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("resource_post_string_string_string_map_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType, types.StringType, objectMapType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourcePost(args, 5, false) })),
			cel.MemberOverload("resource_post_string_string_map_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType, objectMapType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					if len(args) != 4 {
						return argCountErr(4, len(args))
					}
					return resourcePost([]ref.Val{args[0], args[1], args[2], types.String(""), args[3]}, 5, false)
				})),
		}
	}
	return resourceDecls(list, get, post)
}

func namespacedResourceFunctions() []cel.EnvOption {
	list := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("resource_list_string_string_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceList(args, 3, false, true) })),
			cel.MemberOverload("resource_list_string_string_map_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType, labelsType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceList(args, 4, false, true) })),
			cel.MemberOverload("list_resources_gvr_"+suffix,
				[]*cel.Type{ResourceContextType, GVRType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceList(args, 2, true, true) })),
			cel.MemberOverload("list_resources_gvr_map_"+suffix,
				[]*cel.Type{ResourceContextType, GVRType, labelsType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceList(args, 3, true, true) })),
		}
	}
	get := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("resource_get_string_string_string_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType, types.StringType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceGet(args, 4, false, true) })),
			cel.MemberOverload("resource_get_gvr_string_"+suffix,
				[]*cel.Type{ResourceContextType, GVRType, types.StringType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourceGet(args, 3, true, true) })),
		}
	}
	post := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("resource_post_string_string_map_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType, objectMapType}, resultMapType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val { return resourcePost(args, 4, true) })),
		}
	}
	return resourceDecls(list, get, post)
}

func resourceDecls(list, get, post func(string) []cel.FunctionOpt) []cel.EnvOption {
	toGVR := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("convert_to_gvr_string_string_"+suffix,
				[]*cel.Type{ResourceContextType, types.StringType, types.StringType}, GVRType,
				cel.FunctionBinding(resourceToGVR)),
		}
	}
	return []cel.EnvOption{
		cel.Function("List", list("pascal")...),
		cel.Function("Get", get("pascal")...),
		cel.Function("Post", post("pascal")...),
		cel.Function("ToGVR", toGVR("pascal")...),
		cel.Function("list", list("camel")...),
		cel.Function("get", get("camel")...),
		cel.Function("post", post("camel")...),
		cel.Function("toGVR", toGVR("camel")...),
	}
}

// expandGVR rewrites a gvr overload's arguments into those of the matching
// (apiVersion, resource) overload, as Kyverno's implementation does, so that
// argument indexes in errors are the same.
func expandGVR(args []ref.Val) ([]ref.Val, ref.Val) {
	g, ok := args[1].(*gvrValue)
	if !ok {
		return nil, types.NewErr("invalid arg 1: unsupported native conversion from %s to '*schema.GroupVersionResource'", args[1].Type().TypeName())
	}
	out := make([]ref.Val, 0, len(args)+1)
	out = append(out, args[0], types.String(g.gvr.GroupVersion().String()), types.String(g.gvr.Resource))
	return append(out, args[2:]...), nil
}

// resourceArgs decodes the receiver, apiVersion, resource and, for cluster
// functions, the namespace. It returns the index of the next argument.
func resourceArgs(args []ref.Val, namespaced bool) (v *resourceValue, apiVersion, resource, ns string, next int, errVal ref.Val) {
	v, ok := args[0].(*resourceValue)
	if !ok || v.c == nil {
		return nil, "", "", "", 0, types.NewErr("invalid arg 0: unsupported native conversion from %s to 'resource.Context'", args[0].Type().TypeName())
	}
	if apiVersion, errVal = getArgString(args, 1); errVal != nil {
		return
	}
	if resource, errVal = getArgString(args, 2); errVal != nil {
		return
	}
	if namespaced {
		if v.ns == "" {
			return nil, "", "", "", 0, types.NewErr("resource library of a namespaced policy evaluated without the policy namespace")
		}
		return v, apiVersion, resource, v.ns, 3, nil
	}
	if ns, errVal = getArgString(args, 3); errVal != nil {
		return
	}
	return v, apiVersion, resource, ns, 4, nil
}

func resourceList(args []ref.Val, want int, gvr, namespaced bool) ref.Val {
	if len(args) != want {
		return argCountErr(want, len(args))
	}
	if gvr {
		args, errVal := expandGVR(args)
		if errVal != nil {
			return errVal
		}
		return resourceList(args, want+1, false, namespaced)
	}
	v, apiVersion, resource, ns, next, errVal := resourceArgs(args, namespaced)
	if errVal != nil {
		return errVal
	}
	var labels map[string]string
	if next < len(args) {
		if labels, errVal = getArgStringMap(args, next); errVal != nil {
			return errVal
		}
	}
	list, err := v.c.ListResources(v.ctx, apiVersion, resource, ns, labels)
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return types.NewErr("failed to list resource: permission denied: %v", err)
		}
		return types.NewErr("failed to list resource: %v", err)
	}
	// jsonval converts fields as they are read, once, and iterates maps in
	// key order (a list of a hundred objects is not converted up front).
	return jsonval.Of(list.UnstructuredContent())
}

func resourceGet(args []ref.Val, want int, gvr, namespaced bool) ref.Val {
	if len(args) != want {
		return argCountErr(want, len(args))
	}
	if gvr {
		args, errVal := expandGVR(args)
		if errVal != nil {
			return errVal
		}
		return resourceGet(args, want+1, false, namespaced)
	}
	v, apiVersion, resource, ns, next, errVal := resourceArgs(args, namespaced)
	if errVal != nil {
		return errVal
	}
	name, errVal := getArgString(args, next)
	if errVal != nil {
		return errVal
	}
	if vc, ok := v.c.(ResourceValueContext); ok {
		val, err := vc.GetResourceValue(v.ctx, apiVersion, resource, ns, name)
		if err != nil {
			return getErr(err)
		}
		if val == nil {
			return types.NullValue
		}
		return val
	}
	res, err := v.c.GetResource(v.ctx, apiVersion, resource, ns, name)
	if err != nil {
		return getErr(err)
	}
	if res == nil {
		return types.NullValue
	}
	return jsonval.Of(res.UnstructuredContent())
}

// getErr is resource.Get's value for the error of a read.
func getErr(err error) ref.Val {
	if apierrors.IsNotFound(err) {
		return types.NullValue
	}
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return types.NewErr("failed to get resource: permission denied: %v", err)
	}
	return types.NewErr("failed to get resource: %v", err)
}

var structpbStructType = reflect.TypeFor[*structpb.Struct]()

func resourcePost(args []ref.Val, want int, namespaced bool) ref.Val {
	if len(args) != want {
		return argCountErr(want, len(args))
	}
	v, apiVersion, resource, ns, next, errVal := resourceArgs(args, namespaced)
	if errVal != nil {
		return errVal
	}
	data, err := args[next].ConvertToNative(structpbStructType)
	if err != nil {
		return types.NewErr("invalid arg %d: %v", next, err)
	}
	res, err := v.c.PostResource(v.ctx, apiVersion, resource, ns, data.(*structpb.Struct).AsMap())
	if err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return types.NewErr("failed to create resource: permission denied: %v", err)
		}
		return types.NewErr("failed to create resource: %v", err)
	}
	if res == nil {
		return types.NullValue
	}
	return types.DefaultTypeAdapter.NativeToValue(res.UnstructuredContent())
}

func resourceToGVR(args ...ref.Val) ref.Val {
	if len(args) != 3 {
		// sic: Kyverno's message says 2 (the receiver is not counted).
		return types.NewErr("expected 2 arguments, got %d", len(args))
	}
	v, ok := args[0].(*resourceValue)
	if !ok || v.c == nil {
		return types.NewErr("invalid arg 0: unsupported native conversion from %s to 'resource.Context'", args[0].Type().TypeName())
	}
	apiVersion, errVal := getArgString(args, 1)
	if errVal != nil {
		return errVal
	}
	kind, errVal := getArgString(args, 2)
	if errVal != nil {
		return errVal
	}
	gvr, err := v.c.ToGVR(v.ctx, apiVersion, kind)
	if err != nil {
		return types.NewErr("failed to map kind to resource: %v", err)
	}
	if gvr == nil {
		return types.NewErr("failed to map kind to resource: no mapping for %s %s", apiVersion, kind)
	}
	return &gvrValue{gvr: *gvr}
}

// gvrValue is the CEL value of a schema.GroupVersionResource.
type gvrValue struct {
	gvr schema.GroupVersionResource
}

var (
	gvrGoType    = reflect.TypeFor[schema.GroupVersionResource]()
	gvrPtrGoType = reflect.TypeFor[*schema.GroupVersionResource]()
)

func (v *gvrValue) ConvertToNative(t reflect.Type) (any, error) {
	switch t {
	case gvrGoType:
		return v.gvr, nil
	case gvrPtrGoType:
		g := v.gvr
		return &g, nil
	case stringType:
		return v.gvr.String(), nil
	}
	return nil, fmt.Errorf("type conversion error from '%s' to '%v'", GVRType, t)
}
func (v *gvrValue) ConvertToType(t ref.Type) ref.Val { return convertOpaque(v, GVRType, t) }
func (v *gvrValue) Equal(o ref.Val) ref.Val {
	g, ok := o.(*gvrValue)
	if !ok {
		return types.MaybeNoSuchOverloadErr(o)
	}
	return types.Bool(v.gvr == g.gvr)
}
func (v *gvrValue) Type() ref.Type { return GVRType }
func (v *gvrValue) Value() any     { return v.gvr }

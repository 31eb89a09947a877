package kyvernocel

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// globalContext library (sdk extensions/cel/libs/globalcontext):
//
//	globalContext.Get(entryName)              → dyn
//	globalContext.Get(entryName, projection)  → dyn
//
// and globalContext.get. A missing entry is null.
func globalContextFunctions() []cel.EnvOption {
	get := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("globalcontext_get_string_"+suffix,
				[]*cel.Type{GlobalContextType, types.StringType}, types.DynType,
				cel.BinaryBinding(func(c, name ref.Val) ref.Val { return globalContextGet(c, name, types.String("")) })),
			cel.MemberOverload("globalcontext_get_string_string_"+suffix,
				[]*cel.Type{GlobalContextType, types.StringType, types.StringType}, types.DynType,
				cel.FunctionBinding(func(args ...ref.Val) ref.Val {
					if len(args) != 3 {
						return argCountErr(3, len(args))
					}
					return globalContextGet(args[0], args[1], args[2])
				})),
		}
	}
	return []cel.EnvOption{
		cel.Function("Get", get("pascal")...),
		cel.Function("get", get("camel")...),
	}
}

func globalContextGet(c, name, projection ref.Val) ref.Val {
	v, ok := c.(*globalContextValue)
	if !ok || v.c == nil {
		return types.NewErr("unsupported native conversion from %s to 'globalcontext.Context'", c.Type().TypeName())
	}
	n, errVal := toString(name)
	if errVal != nil {
		return errVal
	}
	p, errVal := toString(projection)
	if errVal != nil {
		return errVal
	}
	data, err := v.c.GetGlobalReference(v.ctx, n, p)
	if err != nil {
		return types.NewErr("failed to get global reference: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(data)
}

// image data library (sdk extensions/cel/libs/imagedata):
//
//	image.GetMetadata(imageRef) → dyn
//
// and image.getMetadata.
func imageDataFunctions() []cel.EnvOption {
	get := func(suffix string) []cel.FunctionOpt {
		return []cel.FunctionOpt{
			cel.MemberOverload("imagedata_get_string_"+suffix,
				[]*cel.Type{ImageDataContextType, types.StringType}, types.DynType,
				cel.FunctionBinding(imageDataGet)),
		}
	}
	return []cel.EnvOption{
		cel.Function("GetMetadata", get("pascal")...),
		cel.Function("getMetadata", get("camel")...),
	}
}

func imageDataGet(args ...ref.Val) ref.Val {
	if len(args) != 2 {
		return argCountErr(2, len(args))
	}
	v, ok := args[0].(*imageDataValue)
	if !ok || v.c == nil {
		return types.NewErr("unsupported native conversion from %s to 'imagedata.Context'", args[0].Type().TypeName())
	}
	image, errVal := toString(args[1])
	if errVal != nil {
		return errVal
	}
	data, err := v.c.GetImageData(v.ctx, image)
	if err != nil {
		return types.NewErr("failed to get image data: %v", err)
	}
	return types.DefaultTypeAdapter.NativeToValue(data)
}

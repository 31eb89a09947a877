// Package kyvernocel re-implements Kyverno's CEL function libraries (the
// github.com/kyverno/sdk extensions/cel/libs packages, as Kyverno 1.19 wires
// them for ValidatingPolicy) on cel-go, without importing Kyverno.
//
// Every function keeps Kyverno's name, overloads (overload ids included),
// argument and result types, PascalCase and camelCase spellings (the "latest"
// library version, 1.19) and error texts, so that Kyverno policies compile and
// behave the same.
//
// The one design difference from Kyverno: Kyverno binds the context of the
// libraries that reach out of the process (cluster, HTTP, global context,
// registries) into each policy's environment with cel.Globals. Arbiter builds
// its environment once, so those variables — "resource", "http",
// "globalContext" and "image" — take their values from the activation of each
// evaluation instead: see Bind. The stateless "json" and "yaml" objects are
// declared as constants and need no binding.
//
// Contexts: Offline (every call fails, naming what is unavailable), and any
// implementation of Context: a server with cluster access implements it
// itself; the fixtures of `kyverno test` (context files, clusterResources,
// apiCallResponses, globalContextEntries) are served by
// kyvernotest/fixtures.Static, which is test-runner loading, not evaluation.
//
// Verified against Kyverno's own library code (testdata/differential, ~490
// expressions, error texts included); kyvernotest/fixtures runs Kyverno's CLI
// suites and end-to-end cases that use the libraries. Deliberate differences
// from Kyverno 1.19.1:
//
//   - http.Client(ca).Get/Post work; in Kyverno the value http.Client returns
//     is refused by its own overloads at run time ("no such overload").
//   - resource.ToGVR returns an opaque value of its own; Kyverno relies on
//     cel-go 0.30 wrapping arbitrary Go structs, which cel-go 0.31 no longer
//     does.
//   - listObjToMap with elements that are not maps, and random() with a
//     pattern matching nothing, return errors where Kyverno panics (which
//     cel-go reports as "internal error: ...").
package kyvernocel

import (
	"reflect"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel/internal/user"
)

// Names of the variables the libraries declare. The first four are bound per
// evaluation (Bind); json and yaml are constants.
const (
	ResourceVar      = "resource"
	HTTPVar          = "http"
	GlobalContextVar = "globalContext"
	ImageDataVar     = "image"
	JSONVar          = "json"
	YAMLVar          = "yaml"
)

// CEL types of the library objects, named as in Kyverno.
var (
	// ResourceContextType is the type of the "resource" variable.
	ResourceContextType = types.NewOpaqueType("resource.Context")
	// GVRType is the type resource.ToGVR returns.
	GVRType = types.NewOpaqueType("schema.GroupVersionResource")
	// HTTPContextType is the type of the "http" variable and of http.Client(...).
	HTTPContextType = types.NewOpaqueType("http.Context")
	// GlobalContextType is the type of the "globalContext" variable.
	GlobalContextType = types.NewOpaqueType("globalcontext.Context")
	// ImageDataContextType is the type of the "image" variable.
	ImageDataContextType = types.NewOpaqueType("imagedata.Context")
	// ImageType is the type parseImageReference returns.
	ImageType = types.NewOpaqueType("kyverno.image")
	// JSONType is the type of the "json" constant.
	JSONType = types.NewOpaqueType("json.Json")
	// YAMLType is the type of the "yaml" constant.
	YAMLType = types.NewOpaqueType("yaml.Yaml")
	// ServiceAccountType is the type parseServiceAccount returns: an object
	// with the fields Name and Namespace (capitalised, as in Kyverno).
	ServiceAccountType = types.NewObjectType("user.ServiceAccount")
)

// ServiceAccount is the Go value behind ServiceAccountType.
type ServiceAccount = user.ServiceAccount

// Options selects the library variant.
type Options struct {
	// Namespaced selects the NamespacedValidatingPolicy variant of the
	// resource library: List/Get/Post without a namespace argument, confined
	// to the namespace given to Bind. Whether http.* may be used by a
	// namespaced policy is decided by the caller (see ExpressionsUseHTTP,
	// HTTPNamespacer and NamespacedHTTPNotAllowed).
	Namespaced bool
	// NoX509 leaves the x509 library out (Kyverno's ImageValidatingPolicy
	// environment does not have it).
	NoX509 bool
}

// Libraries returns the env options that declare and implement every Kyverno
// library a ValidatingPolicy can use: http, resource, globalContext, image
// data, image references, user, hash, math, json, yaml, random, x509, time,
// transform and gzip. They declare variables, constants, functions and the
// native type user.ServiceAccount; they set no cel.Globals. Values for the
// context-bound variables come from Bind.
//
// The options expect the Kubernetes base environment (or at least a cel-go
// environment with the standard library); math.round coexists with
// ext.Math's math.* functions. Append them after the environment's own type
// registrations, as Kyverno does.
func Libraries(o Options) []cel.EnvOption {
	opts := []cel.EnvOption{
		// the Go type of parseServiceAccount's result (Kyverno's image
		// library does not register kyverno.image as a type name: neither
		// does this one)
		ext.NativeTypes(reflect.TypeFor[ServiceAccount]()),
		// variables bound per evaluation
		cel.Variable(GlobalContextVar, GlobalContextType),
		cel.Variable(ResourceVar, ResourceContextType),
		cel.Variable(ImageDataVar, ImageDataContextType),
		cel.Variable(HTTPVar, HTTPContextType),
		// stateless objects
		cel.Constant(JSONVar, JSONType, jsonObject{}),
		cel.Constant(YAMLVar, YAMLType, yamlObject{}),
		// hash declares this constant too (an artefact of Kyverno's library).
		cel.Constant("mylib_version", types.StringType, types.String("")),
	}
	opts = append(opts, globalContextFunctions()...)
	if o.Namespaced {
		opts = append(opts, namespacedResourceFunctions()...)
	} else {
		opts = append(opts, clusterResourceFunctions()...)
	}
	opts = append(opts, imageRefFunctions()...)
	opts = append(opts, imageDataFunctions()...)
	opts = append(opts, userFunctions()...)
	opts = append(opts, hashFunctions()...)
	opts = append(opts, mathFunctions()...)
	opts = append(opts, jsonFunctions()...)
	opts = append(opts, yamlFunctions()...)
	opts = append(opts, randomFunctions()...)
	if !o.NoX509 {
		opts = append(opts, x509Functions()...)
	}
	opts = append(opts, timeFunctions()...)
	opts = append(opts, transformFunctions()...)
	opts = append(opts, gzipFunctions()...)
	opts = append(opts, httpFunctions()...)
	return opts
}

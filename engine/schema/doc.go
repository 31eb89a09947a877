// Package schema gives the structured-merge-diff type converters that
// mutations need (managedfields.TypeConverter), and ApplyConfiguration, the
// server-side-apply merge of kube-apiserver's MutatingAdmissionPolicy and
// Kyverno's MutatingPolicy, without client-go.
//
//   - Builtin: the built-in Kubernetes kinds, from the structured-merge-diff
//     schema client-go's applyconfigurations embed (copied, with the table of
//     client-go's scheme kinds, into zz_generated_builtin.go by
//     internal/gen/cmd/schemagen: `go generate ./engine/schema` or `make
//     generate`). It converts exactly as
//     applyconfigurations.NewTypeConverter(kubernetes/scheme.Scheme) does.
//   - NewCRDConverter: custom resources, from CustomResourceDefinition objects,
//     with the schema kube-apiserver publishes for them in its OpenAPI v3
//     document (metadata is ObjectMeta, embedded resources get apiVersion, kind
//     and metadata).
//   - Schemas: the built-ins and a set of CRDs; For(gvk) picks the converter.
//     Deduced is the schema-less converter, for callers that ask for it.
//   - ApplyConfiguration: a port of k8s.io/apiserver's
//     ApplyStructuredMergeDiff (mutating/patch/smd.go), with the same errors,
//     made deterministic where upstream's follow Go's map order. With this
//     package's converters a fast path (fast.go) merges a Pod in a tenth of
//     structured-merge-diff's time; it answers only when the result is the
//     same, and the tests compare the two on every differential case and on
//     random apply configurations.
//
// Nothing here links k8s.io/client-go (the tests check it with go list).
package schema

package kyvernoapi

import "github.com/arbiter-pdp/arbiter/engine/manifest"

// servedFromV1beta1 are the kinds Kyverno 1.19's CRDs serve in v1beta1
// and v1 only (their cluster-wide flavours are in v1alpha1 too).
var servedFromV1beta1 = map[string]bool{
	KindNamespacedDeletingPolicy:        true,
	"NamespacedGeneratingPolicy":        true,
	KindNamespacedImageValidatingPolicy: true,
}

// CheckVersion returns the error for a policies.kyverno.io object in a
// version Kyverno 1.19 does not serve for its kind, naming the versions it
// does; nil when the version is served.
func CheckVersion(o *manifest.Object) *manifest.LoadError {
	version := o.VersionOnly()
	supported := VersionsText
	if servedFromV1beta1[o.Kind] {
		supported = "v1beta1, v1"
	}
	if Versions[version] && (version != "v1alpha1" || !servedFromV1beta1[o.Kind]) {
		return nil
	}
	return manifest.Errorf(o, "apiVersion", "unsupported version %q of %s (supported: %s)", o.APIVersion, o.Kind, supported)
}

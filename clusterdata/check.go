package clusterdata

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// IsSecret says whether o is a v1 Secret: context objects that are stored
// only when storing them is explicitly enabled.
func IsSecret(o *manifest.Object) bool {
	return o.Kind == "Secret" && o.APIVersion == "v1"
}

// SecretRefused is the error of a Secret written where Secrets are not
// stored.
func SecretRefused(o *manifest.Object, how string) *manifest.LoadError {
	return manifest.Errorf(o, "kind", "Secrets are not stored as context objects unless enabled (%s): a policy that reads Secrets sees their data, and so do backups and followers", how)
}

// CheckScope checks an object against the scope of its kind in the view's
// mapping: an object of a namespaced kind needs a namespace (policies list
// and get it there), an object of a cluster-scoped kind has none. Kinds
// the mapping only guesses are not checked.
func CheckScope(v *View, o *manifest.Object) *manifest.LoadError {
	mp, ok := v.Mapper().KindFor(schema.GroupKind{Group: o.Group(), Kind: o.Kind})
	if !ok || mp.Source == "guessed" {
		return nil
	}
	switch {
	case mp.Namespaced && o.Namespace == "":
		return manifest.Errorf(o, "metadata.namespace", "required: %s is namespaced, and policies read it in its namespace (resource.Get, resource.List)", o.Kind)
	case !mp.Namespaced && o.Namespace != "":
		return manifest.Errorf(o, "metadata.namespace", "must be empty: %s is cluster-scoped", o.Kind)
	}
	return nil
}

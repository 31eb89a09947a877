package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// KeyOf returns the store key of an object.
func KeyOf(o *manifest.Object) store.Key {
	return store.Key{Group: o.Group(), Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
}

// storable checks that an object may be stored on its own: a policy, an
// exception, a ValidatingAdmissionPolicy or binding, a Namespace, or an
// object that may be a param of a ValidatingAdmissionPolicy. Whether such
// an object is a param depends on the content it ends up in: build checks
// it (notParams).
func storable(o *manifest.Object) error {
	if o.Name == "" {
		return &manifest.LoadError{Source: o.Source, Object: o.Ref(), Field: "metadata.name", Detail: "required"}
	}
	if engine.Classify(o) == engine.ClassUnsupported {
		return &manifest.LoadError{Source: o.Source, Object: o.Ref(), Field: "kind",
			Detail: fmt.Sprintf("unsupported kind %s (apiVersion %s)", o.Kind, o.APIVersion)}
	}
	return nil
}

// notParams returns an error for every object of content that is a
// resource rather than a policy object: not a param of a
// ValidatingAdmissionPolicy of set. Resources to evaluate are not stored.
func notParams(objs []*manifest.Object, set *engine.PolicySet) error {
	var errs manifest.LoadErrors
	for _, o := range objs {
		if engine.Classify(o) == engine.ClassResource && !set.IsParam(o) {
			errs = append(errs, notPolicyObject(o))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

func notPolicyObject(o *manifest.Object) *manifest.LoadError {
	return &manifest.LoadError{Source: o.Source, Object: o.Ref(), Field: "kind",
		Detail: fmt.Sprintf("%s is not a policy object: the store holds ValidatingPolicy, NamespacedValidatingPolicy, PolicyException, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding and Namespace objects, a PodSecurityConfiguration, and params of a ValidatingAdmissionPolicy (objects of its paramKind); evaluate resources with Decide, arbiter decide or arbiter apply", o.Kind)}
}

// encodeObject renders an object as the canonical JSON the store keeps.
func encodeObject(o *manifest.Object) ([]byte, error) {
	return json.Marshal(o.Content)
}

// decodeObject turns a stored object back into an engine object. Its
// Version is the hash of the stored bytes, so the compiler reuses what it
// compiled for unchanged objects.
func decodeObject(key store.Key, value []byte) (*manifest.Object, error) {
	content, err := manifest.DecodeJSON(value)
	if err != nil {
		return nil, fmt.Errorf("stored object %s: %w", key, err)
	}
	o := manifest.NewObject("store:"+key.String(), content)
	sum := sha256.Sum256(value)
	o.Version = hex.EncodeToString(sum[:])
	return o, nil
}

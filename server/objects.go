package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	"github.com/arbiter-pdp/arbiter/store"
)

// KeyOf returns the store key of an object.
func KeyOf(o *manifest.Object) store.Key {
	return store.Key{Group: o.Group(), Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
}

// storable checks that an object may be stored: it has a name and is not
// of a kind Arbiter refuses (kyverno.io policies, policy kinds it does not
// evaluate). Objects of no policy class are context objects: what
// resource.Get and resource.List read (see build).
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

// writable checks what a write to the primary may store beyond storable:
// Secrets only when the server stores them (Config.StoreSecrets).
// Followers apply what their primary committed without this check.
func (s *Server) writable(o *manifest.Object) error {
	if err := storable(o); err != nil {
		return err
	}
	if !s.cfg.StoreSecrets && clusterdata.IsSecret(o) {
		return clusterdata.SecretRefused(o, "arbiter serve --store-secrets")
	}
	return nil
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

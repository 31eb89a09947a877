package server

import (
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/imagedata"
)

// PullSecretsKeychain returns the registry credentials of the image pull
// secrets names (an ImageValidatingPolicy's credentials.secrets), read
// from the v1 Secrets of the revision served when the keychain is first
// used: those written with StoreSecrets, or by the Kubernetes source. A
// name is "namespace/name", or a Secret of namespace (the policy's; for a
// cluster-wide policy, the namespace the caller gives, as Kyverno looks
// in its own namespace). kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg Secrets count, with the kubelet's matching
// rules (imagedata.PullSecretsKeychain); a Secret that is not stored, of
// another type, or whose data does not parse is skipped, logged at debug
// level: the registry is then reached with the other credentials.
//
// It is the imageverify.Options.SecretKeychain of the server's verifier.
func (s *Server) PullSecretsKeychain(namespace string, names []string) authn.Keychain {
	return &lazyKeychain{build: func() authn.Keychain {
		view := s.snap.Load().view
		var secrets []corev1.Secret
		for _, n := range names {
			ns, name := namespace, n
			if i := strings.IndexByte(n, '/'); i >= 0 {
				ns, name = n[:i], n[i+1:]
			}
			obj, ok := view.Get(clusterdata.Key{Kind: "Secret", Namespace: ns, Name: name})
			if !ok {
				s.log.Debug("image pull secret not stored", "secret", ns+"/"+name)
				continue
			}
			var sec corev1.Secret
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Content, &sec); err != nil {
				s.log.Debug("image pull secret unreadable", "secret", ns+"/"+name, "err", err)
				continue
			}
			if _, err := imagedata.NewPullSecretsKeychain(sec); err != nil {
				s.log.Debug("image pull secret unreadable", "secret", ns+"/"+name, "err", err)
				continue
			}
			secrets = append(secrets, sec)
		}
		kc, err := imagedata.NewPullSecretsKeychain(secrets...)
		if err != nil { // (each one parsed alone)
			return authn.NewMultiKeychain()
		}
		return kc
	}}
}

// lazyKeychain builds its keychain when first asked for credentials (a
// verification served from the verifier's cache never reads the secrets).
type lazyKeychain struct {
	once  sync.Once
	build func() authn.Keychain
	kc    authn.Keychain
}

func (k *lazyKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	k.once.Do(func() { k.kc = k.build() })
	return k.kc.Resolve(target)
}

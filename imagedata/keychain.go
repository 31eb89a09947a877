package imagedata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	dockerconfig "github.com/docker/cli/cli/config"
	dockertypes "github.com/docker/cli/cli/config/types"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
)

// PullSecretsKeychain is an authn.Keychain of image pull secrets
// (kubernetes.io/dockerconfigjson and kubernetes.io/dockercfg Secrets), with
// the matching rules of go-containerregistry's pkg/authn/kubernetes
// (NewFromPullSecrets, the keychain Kyverno builds from --imagePullSecrets),
// which are the kubelet's: a key is a registry host (globs allowed per
// label: *.example.com), an optional port that must be equal, and an optional
// path that must be a prefix of the repository; longer keys are tried first
// and the first secret that names a key wins.
//
// The secrets can be replaced at any time (Update): the server keeps the
// keychain of a Fetcher current as the stored secrets change.
type PullSecretsKeychain struct {
	ring atomic.Pointer[keyring]
}

// NewPullSecretsKeychain returns the keychain of secrets. Secrets of other
// types, or without the type's data key, are ignored; a secret whose data
// does not parse is an error naming it.
func NewPullSecretsKeychain(secrets ...corev1.Secret) (*PullSecretsKeychain, error) {
	var k PullSecretsKeychain
	if err := k.Update(secrets...); err != nil {
		return nil, err
	}
	return &k, nil
}

// Update replaces the secrets of k. On error k is unchanged.
func (k *PullSecretsKeychain) Update(secrets ...corev1.Secret) error {
	ring, err := newKeyring(secrets)
	if err != nil {
		return err
	}
	k.ring.Store(ring)
	return nil
}

// Resolve implements authn.Keychain.
func (k *PullSecretsKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	ring := k.ring.Load()
	if ring == nil {
		return authn.Anonymous, nil
	}
	return ring.resolve(target), nil
}

// keyring is the credentials of a set of pull secrets by normalised key.
type keyring struct {
	index []string // keys, longest (reverse-sorted) first
	creds map[string]authn.AuthConfig
}

func newKeyring(secrets []corev1.Secret) (*keyring, error) {
	r := &keyring{creds: map[string]authn.AuthConfig{}}
	for _, s := range secrets {
		auths, err := secretAuths(&s)
		if err != nil {
			return nil, fmt.Errorf("image pull secret %s: %w", secretName(&s), err)
		}
		// Sorted, so that the first of two entries of one secret that
		// normalise to the same key is chosen the same way every time.
		regs := make([]string, 0, len(auths))
		for reg := range auths {
			regs = append(regs, reg)
		}
		sort.Strings(regs)
		for _, reg := range regs {
			key, err := credentialKey(reg)
			if err != nil {
				return nil, fmt.Errorf("image pull secret %s: %w", secretName(&s), err)
			}
			if _, ok := r.creds[key]; ok {
				continue // the first secret naming a key wins
			}
			r.index = append(r.index, key)
			r.creds[key] = auths[reg]
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(r.index)))
	return r, nil
}

func secretName(s *corev1.Secret) string {
	if s.Namespace != "" {
		return s.Namespace + "/" + s.Name
	}
	return s.Name
}

// secretAuths returns the registry credentials of a pull secret, nil for a
// secret of another type.
func secretAuths(s *corev1.Secret) (map[string]authn.AuthConfig, error) {
	switch s.Type {
	case corev1.SecretTypeDockerConfigJson:
		b := s.Data[corev1.DockerConfigJsonKey]
		if len(b) == 0 {
			return nil, nil
		}
		var cfg struct {
			Auths map[string]authn.AuthConfig `json:"auths"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", corev1.DockerConfigJsonKey, err)
		}
		return cfg.Auths, nil
	case corev1.SecretTypeDockercfg:
		b := s.Data[corev1.DockerConfigKey]
		if len(b) == 0 {
			return nil, nil
		}
		var auths map[string]authn.AuthConfig
		if err := json.Unmarshal(b, &auths); err != nil {
			return nil, fmt.Errorf("%s: %w", corev1.DockerConfigKey, err)
		}
		return auths, nil
	}
	return nil, nil
}

// credentialKey normalises a key of a docker config's auths as the kubelet
// does: the scheme is dropped, and a /v1/ or /v2/ path (docker's
// "https://index.docker.io/v1/") counts as the host alone.
func credentialKey(reg string) (string, error) {
	value := reg
	if !strings.HasPrefix(value, "https://") && !strings.HasPrefix(value, "http://") {
		value = "https://" + value
	}
	parsed, err := url.Parse(value)
	if err != nil {
		return "", fmt.Errorf("entry %q: %w", reg, err)
	}
	path := parsed.Path
	if strings.HasPrefix(path, "/v2/") || strings.HasPrefix(path, "/v1/") {
		path = path[3:]
	}
	if path != "" && path != "/" {
		return parsed.Host + path, nil
	}
	return parsed.Host, nil
}

func (r *keyring) resolve(target authn.Resource) authn.Authenticator {
	image := target.String()
	for _, k := range r.index {
		if urlsMatch(k, image) {
			cfg := r.creds[k]
			cfg.Auth = "" // decoded into Username and Password already
			return authn.FromConfig(cfg)
		}
	}
	return authn.Anonymous
}

// urlsMatch says whether the schemeless URL target (registry/repository)
// matches glob, a key: the same number of host labels each matching its
// glob (path.Match), the same port, and the key's path a prefix of the
// target's.
func urlsMatch(glob, target string) bool {
	g, err := url.Parse("https://" + glob)
	if err != nil {
		return false
	}
	t, err := url.Parse("https://" + target)
	if err != nil {
		return false
	}
	gParts, gPort := splitHost(g.Host)
	tParts, tPort := splitHost(t.Host)
	if gPort != tPort || len(gParts) != len(tParts) || !strings.HasPrefix(t.Path, g.Path) {
		return false
	}
	for i, p := range gParts {
		if ok, err := filepath.Match(p, tParts[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func splitHost(hostport string) (labels []string, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return strings.Split(host, "."), port
}

// dockerConfigKeychain reads the credentials of a docker config file as
// authn.DefaultKeychain reads $HOME/.docker/config.json: the repository's
// key, then the registry's (Docker Hub's key being
// "https://index.docker.io/v1/"), through docker's credential stores
// (auths, credHelpers, credsStore). The file is read at each lookup.
type dockerConfigKeychain struct {
	path string
	mu   sync.Mutex // docker's credential helpers are not safe for concurrent use
}

func (k *dockerConfigKeychain) Resolve(target authn.Resource) (authn.Authenticator, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	data, err := os.ReadFile(k.path)
	if err != nil {
		return nil, fmt.Errorf("dockerConfig: %w", err)
	}
	cf, err := dockerconfig.LoadFromReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("dockerConfig %s: %w", k.path, err)
	}
	var empty dockertypes.AuthConfig
	for _, key := range []string{target.String(), target.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		cfg, err := cf.GetAuthConfig(key)
		if err != nil {
			return nil, fmt.Errorf("dockerConfig %s: %w", k.path, err)
		}
		cfg.ServerAddress = "" // set by GetAuthConfig; not a credential
		if cfg != empty {
			return authn.FromConfig(authn.AuthConfig{
				Username:      cfg.Username,
				Password:      cfg.Password,
				Auth:          cfg.Auth,
				IdentityToken: cfg.IdentityToken,
				RegistryToken: cfg.RegistryToken,
			}), nil
		}
	}
	return authn.Anonymous, nil
}

// DockerConfigKeychain returns a keychain of the credentials of a docker
// config file (config.json), read at each lookup as the Fetcher reads
// Config.DockerConfig.
func DockerConfigKeychain(path string) authn.Keychain { return &dockerConfigKeychain{path: path} }

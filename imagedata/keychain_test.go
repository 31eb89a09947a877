package imagedata

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dockerConfigJSON is a docker config with these auths (key → user:pass).
func dockerConfigJSON(auths map[string]string) []byte {
	m := map[string]any{}
	for k, up := range auths {
		user, pass, _ := strings.Cut(up, ":")
		m[k] = map[string]string{"auth": basicAuth(user, pass)}
	}
	b, _ := json.Marshal(map[string]any{"auths": m})
	return b
}

func pullSecret(name string, auths map[string]string) corev1.Secret {
	return corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON(auths)},
	}
}

// user is the username a keychain resolves for image, "" for anonymous.
func user(t *testing.T, kc authn.Keychain, image string) string {
	t.Helper()
	ref, err := name.ParseReference(image)
	if err != nil {
		t.Fatal(err)
	}
	a, err := kc.Resolve(ref.Context())
	if err != nil {
		t.Fatal(err)
	}
	if a == authn.Anonymous {
		return ""
	}
	cfg, err := a.Authorization()
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Username
}

// TestPullSecretsKeychain: the matching rules of go-containerregistry's
// pkg/authn/kubernetes (the kubelet's).
func TestPullSecretsKeychain(t *testing.T) {
	tests := []struct {
		name    string
		secrets []corev1.Secret
		image   string
		want    string // username, "" for anonymous
	}{
		{name: "host", secrets: []corev1.Secret{pullSecret("a", map[string]string{"reg.example.com": "u:p"})},
			image: "reg.example.com/team/app:v1", want: "u"},
		{name: "another host", secrets: []corev1.Secret{pullSecret("a", map[string]string{"reg.example.com": "u:p"})},
			image: "other.example.com/app:v1"},
		{name: "scheme and /v1/ path ignored", secrets: []corev1.Secret{pullSecret("a", map[string]string{"https://reg.example.com/v1/": "u:p"})},
			image: "reg.example.com/app", want: "u"},
		{name: "Docker Hub's key", secrets: []corev1.Secret{pullSecret("a", map[string]string{"https://index.docker.io/v1/": "hub:p"})},
			image: "nginx", want: "hub"},
		{name: "docker.io is not index.docker.io", secrets: []corev1.Secret{pullSecret("a", map[string]string{"docker.io": "hub:p"})},
			image: "nginx"},
		{name: "port must match", secrets: []corev1.Secret{pullSecret("a", map[string]string{"reg.example.com:5000": "u:p"})},
			image: "reg.example.com/app"},
		{name: "port", secrets: []corev1.Secret{pullSecret("a", map[string]string{"reg.example.com:5000": "u:p"})},
			image: "reg.example.com:5000/app", want: "u"},
		{name: "glob label", secrets: []corev1.Secret{pullSecret("a", map[string]string{"*.example.com": "u:p"})},
			image: "reg.example.com/app", want: "u"},
		{name: "a glob matches one label", secrets: []corev1.Secret{pullSecret("a", map[string]string{"*.com": "u:p"})},
			image: "reg.example.com/app"},
		{name: "path prefix", secrets: []corev1.Secret{pullSecret("a", map[string]string{"reg.example.com/team": "u:p"})},
			image: "reg.example.com/team/app", want: "u"},
		{name: "path not a prefix", secrets: []corev1.Secret{pullSecret("a", map[string]string{"reg.example.com/team": "u:p"})},
			image: "reg.example.com/other/app"},
		{name: "longer key first", secrets: []corev1.Secret{pullSecret("a", map[string]string{
			"reg.example.com": "host:p", "reg.example.com/team": "team:p"})},
			image: "reg.example.com/team/app", want: "team"},
		{name: "first secret wins", secrets: []corev1.Secret{
			pullSecret("a", map[string]string{"reg.example.com": "first:p"}),
			pullSecret("b", map[string]string{"reg.example.com": "second:p"})},
			image: "reg.example.com/app", want: "first"},
		{name: "kubernetes.io/dockercfg", secrets: []corev1.Secret{{
			ObjectMeta: metav1.ObjectMeta{Name: "old"}, Type: corev1.SecretTypeDockercfg,
			Data: map[string][]byte{corev1.DockerConfigKey: []byte(`{"reg.example.com":{"username":"old","password":"p"}}`)}}},
			image: "reg.example.com/app", want: "old"},
		{name: "another type ignored", secrets: []corev1.Secret{{
			ObjectMeta: metav1.ObjectMeta{Name: "opaque"}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: dockerConfigJSON(map[string]string{"reg.example.com": "u:p"})}}},
			image: "reg.example.com/app"},
		{name: "no secrets", image: "reg.example.com/app"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kc, err := NewPullSecretsKeychain(tc.secrets...)
			if err != nil {
				t.Fatal(err)
			}
			if got := user(t, kc, tc.image); got != tc.want {
				t.Fatalf("user %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPullSecretsKeychainErrors(t *testing.T) {
	bad := func(data string) corev1.Secret {
		return corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "ns"}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(data)}}
	}
	tests := []struct{ name, data, want string }{
		{"not JSON", `{`, "image pull secret ns/bad: .dockerconfigjson: unexpected end of JSON input"},
		{"auth not base64", `{"auths":{"r.io":{"auth":"%%%"}}}`, "image pull secret ns/bad: .dockerconfigjson: unable to decode auth field"},
		{"bad key", `{"auths":{"r.io/%zz":{"username":"u","password":"p"}}}`, `image pull secret ns/bad: entry "r.io/%zz"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPullSecretsKeychain(bad(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}

	// Update replaces the secrets, and leaves them on error.
	kc, err := NewPullSecretsKeychain(pullSecret("a", map[string]string{"r.io": "one:p"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.Update(bad(`{`)); err == nil {
		t.Fatal("Update of a bad secret: no error")
	}
	if got := user(t, kc, "r.io/app"); got != "one" {
		t.Fatalf("after a failed Update: %q", got)
	}
	if err := kc.Update(pullSecret("a", map[string]string{"r.io": "two:p"})); err != nil {
		t.Fatal(err)
	}
	if got := user(t, kc, "r.io/app"); got != "two" {
		t.Fatalf("after Update: %q", got)
	}
	var zero PullSecretsKeychain
	if got := user(t, &zero, "r.io/app"); got != "" {
		t.Fatalf("zero keychain: %q", got)
	}
}

// TestDockerConfigKeychain: authn.DefaultKeychain's lookup in a given file.
func TestDockerConfigKeychain(t *testing.T) {
	dir := t.TempDir()
	write := func(data []byte) string {
		p := filepath.Join(dir, fmt.Sprintf("config-%d.json", len(data)))
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("DOCKER_AUTH_CONFIG", "")
	path := write(dockerConfigJSON(map[string]string{
		"https://index.docker.io/v1/": "hub:p",
		"reg.example.com":             "host:p",
		"reg.example.com/team/app":    "repo:p",
		"https://other.example.com":   "other:p",
	}))
	tests := []struct{ image, want string }{
		{"nginx", "hub"},
		{"reg.example.com/xy", "host"},
		{"reg.example.com/team/app:v1", "repo"},
		{"other.example.com/xy", "other"},
		{"nowhere.example.com/xy", ""},
	}
	kc := &dockerConfigKeychain{path: path}
	for _, tc := range tests {
		if got := user(t, kc, tc.image); got != tc.want {
			t.Errorf("%s: user %q, want %q", tc.image, got, tc.want)
		}
	}

	ref, _ := name.ParseReference("reg.example.com/xy")
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.json"), "dockerConfig: open "},
		{write([]byte("{")), "dockerConfig " + dir},
	} {
		if _, err := (&dockerConfigKeychain{path: tc.path}).Resolve(ref.Context()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.path, err, tc.want)
		}
	}
}

// TestAuth: a registry behind basic auth, reached with the credentials of a
// docker config file or of an image pull secret.
func TestAuth(t *testing.T) {
	fx := newFixture(t, "alice", "s3cret")
	h := fx.reg.host
	dir := t.TempDir()
	t.Setenv("DOCKER_AUTH_CONFIG", "")
	dockerConfig := func(up string) string {
		p := filepath.Join(dir, up+".json")
		if err := os.WriteFile(p, dockerConfigJSON(map[string]string{h: up}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secrets := func(key, up string) authn.Keychain {
		kc, err := NewPullSecretsKeychain(pullSecret("pull", map[string]string{key: up}))
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	tests := []struct {
		name         string
		dockerConfig string
		keychain     authn.Keychain
		wantErr      string
	}{
		{name: "anonymous", wantErr: "UNAUTHORIZED"},
		{name: "docker config", dockerConfig: dockerConfig("alice:s3cret")},
		{name: "docker config, wrong password", dockerConfig: dockerConfig("alice:nope"), wantErr: "UNAUTHORIZED"},
		{name: "pull secret", keychain: secrets(h, "alice:s3cret")},
		{name: "pull secret with a path", keychain: secrets(h+"/multi", "alice:s3cret")},
		{name: "pull secret of another registry", keychain: secrets("127.0.0.2:1", "alice:s3cret"), wantErr: "UNAUTHORIZED"},
		{name: "pull secret before docker config", keychain: secrets(h, "alice:s3cret"), dockerConfig: dockerConfig("alice:nope")},
		{name: "docker config when no secret matches", keychain: secrets("127.0.0.2:1", "x:y"), dockerConfig: dockerConfig("alice:s3cret")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := insecureConfig(fx.reg)
			cfg.DockerConfig = tc.dockerConfig
			f := newTestFetcher(t, cfg, Options{Keychain: tc.keychain})
			m, err := f.GetImageData(t.Context(), h+"/multi:v1")
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if m["digest"] != fx.multi {
					t.Fatalf("digest %v", m["digest"])
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzPullSecrets: any secret data either is refused with an error or gives
// a keychain that resolves any repository without panicking.
func FuzzPullSecrets(f *testing.F) {
	f.Add([]byte(`{"auths":{"reg.example.com":{"auth":"dTpw"}}}`), "reg.example.com/app")
	f.Add([]byte(`{"auths":{"*.example.com:5000/team":{"username":"u","password":"p"}}}`), "a.example.com:5000/team/app")
	f.Add([]byte(`{"auths":{"https://index.docker.io/v1/":{"auth":"aHViOnA="}}}`), "index.docker.io/library/nginx")
	f.Add([]byte(`{"auths":{"[::1]:5000":{"auth":"dTpw"}}}`), "[::1]:5000/xy")
	f.Add([]byte(`{"auths":{"[":{"auth":"dTpw"}}}`), "r/xy")
	f.Fuzz(func(t *testing.T, data []byte, repo string) {
		for _, typ := range []corev1.SecretType{corev1.SecretTypeDockerConfigJson, corev1.SecretTypeDockercfg} {
			key := corev1.DockerConfigJsonKey
			if typ == corev1.SecretTypeDockercfg {
				key = corev1.DockerConfigKey
			}
			kc, err := NewPullSecretsKeychain(corev1.Secret{Type: typ, Data: map[string][]byte{key: data}})
			if err != nil {
				continue
			}
			r, err := name.NewRepository(repo)
			if err != nil {
				r2, err2 := name.NewRepository("r.io/xy")
				if err2 != nil {
					t.Fatal(err2)
				}
				r = r2
			}
			a, err := kc.Resolve(r)
			if err != nil || a == nil {
				t.Fatalf("Resolve(%s): %v %v", r, a, err)
			}
			if _, err := a.Authorization(); err != nil {
				t.Fatalf("Authorization: %v", err)
			}
		}
	})
}

package imagedata

import (
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// testRegistry is go-containerregistry's in-process registry on a loopback
// httptest server, counting the requests it serves, optionally behind
// basic auth and with a hook run before each manifest request.
type testRegistry struct {
	srv  *httptest.Server
	host string // 127.0.0.1:PORT

	user, pass string // basic auth when user != ""

	mu       sync.Mutex
	requests []string // "METHOD /v2/..." of manifest and blob requests
	// beforeManifest, when set, runs before a manifest request is served.
	beforeManifest func(r *http.Request)
}

func newTestRegistry(t *testing.T, user, pass string) *testRegistry {
	t.Helper()
	tr := &testRegistry{user: user, pass: pass}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	tr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tr.user != "" {
			u, p, ok := r.BasicAuth()
			if !ok || u != tr.user || p != tr.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		if strings.Contains(r.URL.Path, "/manifests/") || strings.Contains(r.URL.Path, "/blobs/") {
			tr.mu.Lock()
			tr.requests = append(tr.requests, r.Method+" "+r.URL.Path)
			hook := tr.beforeManifest
			tr.mu.Unlock()
			if hook != nil && strings.Contains(r.URL.Path, "/manifests/") {
				hook(r)
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(tr.srv.Close)
	tr.host = strings.TrimPrefix(tr.srv.URL, "http://")
	return tr
}

// reset forgets the requests counted so far.
func (tr *testRegistry) reset() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.requests = nil
}

// count is the number of counted requests whose "METHOD path" contains all
// of parts.
func (tr *testRegistry) count(parts ...string) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
next:
	for _, r := range tr.requests {
		for _, p := range parts {
			if !strings.Contains(r, p) {
				continue next
			}
		}
		n++
	}
	return n
}

func (tr *testRegistry) setBeforeManifest(f func(*http.Request)) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.beforeManifest = f
}

func (tr *testRegistry) pushOptions() []remote.Option {
	if tr.user == "" {
		return nil
	}
	return []remote.Option{remote.WithAuth(&authn.Basic{Username: tr.user, Password: tr.pass})}
}

// ref is host/repo plus suffix (":tag" or "@sha256:…").
func (tr *testRegistry) ref(repo, suffix string) string {
	return tr.host + "/" + repo + suffix
}

// pushImage pushes img as repo:tag and returns its digest.
func (tr *testRegistry) pushImage(t *testing.T, repo, tag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(tr.ref(repo, ":"+tag))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, tr.pushOptions()...); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	tr.reset()
	return d.String()
}

// pushIndex pushes idx as repo:tag and returns its digest.
func (tr *testRegistry) pushIndex(t *testing.T, repo, tag string, idx v1.ImageIndex) string {
	t.Helper()
	ref, err := name.ParseReference(tr.ref(repo, ":"+tag))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, tr.pushOptions()...); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	tr.reset()
	return d.String()
}

// labelledImage is a random one-layer image for platform os/arch with the
// given config labels.
func labelledImage(t *testing.T, os, arch string, labels map[string]string) v1.Image {
	t.Helper()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = os, arch
	cf.Config.Labels = labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// platformImage is an image of an index and its platform.
type platformImage struct {
	platform v1.Platform
	img      v1.Image
}

// platformIndex is an OCI index of the images, in order, each with its
// platform.
func platformIndex(imgs ...platformImage) v1.ImageIndex {
	var idx v1.ImageIndex = empty.Index
	for _, pi := range imgs {
		p := pi.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        pi.img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
	}
	return idx
}

// insecureConfig is a Config for tr (plain HTTP allowed to it).
func insecureConfig(tr *testRegistry) Config {
	return Config{InsecureRegistries: []string{tr.host}}
}

func newTestFetcher(t *testing.T, cfg Config, opts Options) *Fetcher {
	t.Helper()
	if opts.Logger == nil {
		// Debug, so the logging runs; discarded, since a shared fetch may
		// log after its test ended.
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	f, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// clock is a settable time source for the cache TTLs.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func basicAuth(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%s:%s", user, pass)))
}

package imagedata

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
	s390x = v1.Platform{OS: "linux", Architecture: "s390x"}
)

// fixture is a registry with a single-platform image (app:v1), a
// two-platform index (multi:v1) and an index without linux/amd64
// (noamd:v1).
type fixture struct {
	reg                  *testRegistry
	app, multi, noamd    string // digests
	appImg               v1.Image
	multiAmd, multiArm   v1.Image
	multiIdx             v1.ImageIndex
	multiAmdD, multiArmD string
}

func newFixture(t *testing.T, user, pass string) *fixture {
	t.Helper()
	fx := &fixture{reg: newTestRegistry(t, user, pass)}
	fx.appImg = labelledImage(t, "linux", "amd64", map[string]string{"approved": "true", "team": "a"})
	fx.app = fx.reg.pushImage(t, "app", "v1", fx.appImg)
	fx.multiAmd = labelledImage(t, "linux", "amd64", map[string]string{"arch": "amd64"})
	fx.multiArm = labelledImage(t, "linux", "arm64", map[string]string{"arch": "arm64"})
	fx.multiIdx = platformIndex(platformImage{arm64, fx.multiArm}, platformImage{amd64, fx.multiAmd})
	fx.multi = fx.reg.pushIndex(t, "multi", "v1", fx.multiIdx)
	fx.multiAmdD = digestOf(t, fx.multiAmd)
	fx.multiArmD = digestOf(t, fx.multiArm)
	other := labelledImage(t, "linux", "s390x", nil)
	fx.noamd = fx.reg.pushIndex(t, "noamd", "v1", platformIndex(platformImage{arm64, fx.multiArm}, platformImage{s390x, other}))
	return fx
}

func digestOf(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// kyvernoShape is what Kyverno's GetImageData returns for img reached as
// described: its ImageDescriptor marshalled to JSON and decoded
// (utils.GetValue), built here from the pushed objects.
func kyvernoShape(t *testing.T, ref map[string]string, img v1.Image, idx v1.ImageIndex) map[string]any {
	t.Helper()
	type descriptor struct {
		Image         string         `json:"image,omitempty"`
		ResolvedImage string         `json:"resolvedImage,omitempty"`
		Registry      string         `json:"registry,omitempty"`
		Repository    string         `json:"repository,omitempty"`
		Identifier    string         `json:"identifier,omitempty"`
		Tag           string         `json:"tag,omitempty"`
		Digest        string         `json:"digest,omitempty"`
		ImageIndex    any            `json:"imageIndex,omitempty"`
		Manifest      *v1.Manifest   `json:"manifest,omitempty"`
		ConfigData    *v1.ConfigFile `json:"config,omitempty"`
	}
	d := descriptor{
		Image: ref["image"], ResolvedImage: ref["resolvedImage"], Registry: ref["registry"],
		Repository: ref["repository"], Identifier: ref["identifier"], Tag: ref["tag"], Digest: ref["digest"],
	}
	var err error
	if d.Manifest, err = img.Manifest(); err != nil {
		t.Fatal(err)
	}
	if d.ConfigData, err = img.ConfigFile(); err != nil {
		t.Fatal(err)
	}
	if idx != nil {
		raw, err := idx.RawManifest()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &d.ImageIndex); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGetImageData(t *testing.T) {
	fx := newFixture(t, "", "")
	h := fx.reg.host
	tests := []struct {
		name     string
		platform string
		image    string
		ref      map[string]string // the reference fields
		img      func() v1.Image
		idx      func() v1.ImageIndex
	}{{
		name:  "tag of an image",
		image: h + "/app:v1",
		ref: map[string]string{"registry": h, "repository": "app", "identifier": "v1", "tag": "v1",
			"digest": fx.app, "resolvedImage": h + "/app:v1@" + fx.app},
		img: func() v1.Image { return fx.appImg },
	}, {
		name:  "digest of an image",
		image: h + "/app@" + fx.app,
		ref: map[string]string{"registry": h, "repository": "app", "identifier": fx.app,
			"digest": fx.app, "resolvedImage": h + "/app@" + fx.app},
		img: func() v1.Image { return fx.appImg },
	}, {
		// Kyverno 1.19's ParseImageReference: a digest reference has no
		// tag, even when the image names one.
		name:  "tag and digest",
		image: h + "/app:v1@" + fx.app,
		ref: map[string]string{"registry": h, "repository": "app", "identifier": fx.app,
			"digest": fx.app, "resolvedImage": h + "/app@" + fx.app},
		img: func() v1.Image { return fx.appImg },
	}, {
		name:  "tag of an index: the linux/amd64 image, the index's digest",
		image: h + "/multi:v1",
		ref: map[string]string{"registry": h, "repository": "multi", "identifier": "v1", "tag": "v1",
			"digest": fx.multi, "resolvedImage": h + "/multi:v1@" + fx.multi},
		img: func() v1.Image { return fx.multiAmd },
		idx: func() v1.ImageIndex { return fx.multiIdx },
	}, {
		name:  "digest of an index",
		image: h + "/multi@" + fx.multi,
		ref: map[string]string{"registry": h, "repository": "multi", "identifier": fx.multi,
			"digest": fx.multi, "resolvedImage": h + "/multi@" + fx.multi},
		img: func() v1.Image { return fx.multiAmd },
		idx: func() v1.ImageIndex { return fx.multiIdx },
	}, {
		name:     "another platform of an index",
		platform: "linux/arm64",
		image:    h + "/multi:v1",
		ref: map[string]string{"registry": h, "repository": "multi", "identifier": "v1", "tag": "v1",
			"digest": fx.multi, "resolvedImage": h + "/multi:v1@" + fx.multi},
		img: func() v1.Image { return fx.multiArm },
		idx: func() v1.ImageIndex { return fx.multiIdx },
	}, {
		name:  "digest of an index's child: an image",
		image: h + "/multi@" + fx.multiArmD,
		ref: map[string]string{"registry": h, "repository": "multi", "identifier": fx.multiArmD,
			"digest": fx.multiArmD, "resolvedImage": h + "/multi@" + fx.multiArmD},
		img: func() v1.Image { return fx.multiArm },
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := insecureConfig(fx.reg)
			cfg.Platform = tc.platform
			f := newTestFetcher(t, cfg, Options{})
			got, err := f.GetImageData(t.Context(), tc.image)
			if err != nil {
				t.Fatal(err)
			}
			ref := map[string]string{"image": tc.image}
			for k, v := range tc.ref {
				ref[k] = v
			}
			var idx v1.ImageIndex
			if tc.idx != nil {
				idx = tc.idx()
			}
			want := kyvernoShape(t, ref, tc.img(), idx)
			if !reflect.DeepEqual(got, want) {
				gj, _ := json.MarshalIndent(got, "", " ")
				wj, _ := json.MarshalIndent(want, "", " ")
				t.Fatalf("got\n%s\nwant\n%s", gj, wj)
			}
		})
	}

	// A few paths policies read, spelled out.
	f := newTestFetcher(t, insecureConfig(fx.reg), Options{})
	got, err := f.GetImageData(t.Context(), h+"/multi:v1")
	if err != nil {
		t.Fatal(err)
	}
	if l := got["config"].(map[string]any)["config"].(map[string]any)["Labels"].(map[string]any)["arch"]; l != "amd64" {
		t.Errorf("config.config.Labels.arch = %v", l)
	}
	if v := got["manifest"].(map[string]any)["schemaVersion"]; v != float64(2) {
		t.Errorf("manifest.schemaVersion = %v (%T)", v, v)
	}
	ms := got["imageIndex"].(map[string]any)["manifests"].([]any)
	if len(ms) != 2 || ms[1].(map[string]any)["platform"].(map[string]any)["architecture"] != "amd64" {
		t.Errorf("imageIndex.manifests = %v", ms)
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := "config digest identifier image imageIndex manifest registry repository resolvedImage tag"; strings.Join(keys, " ") != want {
		t.Errorf("keys %v, want %s", keys, want)
	}
}

// TestGetImageDataErrors: the errors are go-containerregistry's, as Kyverno
// returns them.
func TestGetImageDataErrors(t *testing.T) {
	fx := newFixture(t, "", "")
	h := fx.reg.host
	tests := []struct {
		name, image string
		cfg         func(*Config)
		want        []string
	}{
		{name: "missing tag", image: h + "/app:nope",
			want: []string{"GET http://" + h + "/v2/app/manifests/nope", "MANIFEST_UNKNOWN"}},
		{name: "missing repository", image: h + "/nothing:v1", want: []string{"/v2/nothing/manifests/v1", "NAME_UNKNOWN"}},
		{name: "missing digest", image: h + "/app@sha256:" + strings.Repeat("0", 64), want: []string{"MANIFEST_UNKNOWN"}},
		{name: "no linux/amd64 in the index", image: h + "/noamd:v1",
			want: []string{"no child with platform", "amd64", "in index " + h + "/noamd:v1"}},
		{name: "not a reference", image: "Not An Image", want: []string{"could not parse reference: Not An Image"}},
		{name: "plain HTTP not allowed", image: h + "/app:v1", cfg: func(c *Config) { c.InsecureRegistries = nil },
			want: []string{"plain HTTP to " + h + " refused", "insecureRegistries"}},
		{name: "response too large", image: h + "/app:v1", cfg: func(c *Config) { c.MaxResponseBytes = 64 },
			want: []string{"exceeds maxResponseBytes (64)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := insecureConfig(fx.reg)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			f := newTestFetcher(t, cfg, Options{})
			got, err := f.GetImageData(t.Context(), tc.image)
			if err == nil {
				t.Fatalf("no error: %v", got)
			}
			t.Logf("error: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if s := f.Stats(); s.Failures != 1 || s.Images != 0 {
				t.Errorf("stats %+v: want one failure and nothing cached", s)
			}
		})
	}
}

// TestCache: content is cached by repository@digest and tags by name for
// TagTTL; an expired tag is revalidated with one HEAD request, and fetched
// again only when it moved.
func TestCache(t *testing.T) {
	fx := newFixture(t, "", "")
	h := fx.reg.host
	clk := &clock{now: time.Unix(1_000_000, 0)}
	cfg := insecureConfig(fx.reg)
	cfg.TagTTL = Duration(time.Minute)
	cfg.CacheTTL = Duration(time.Hour)
	f := newTestFetcher(t, cfg, Options{})
	f.now = clk.Now
	get := func(image string) map[string]any {
		t.Helper()
		m, err := f.GetImageData(t.Context(), image)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	requests := func(want int, what string) {
		t.Helper()
		if got := fx.reg.count(); got != want {
			t.Fatalf("%s: %d registry requests %v, want %d", what, got, fx.reg.requests, want)
		}
		fx.reg.reset()
	}

	get(h + "/multi:v1")
	// GET of the index, of the amd64 manifest, of its config blob.
	requests(3, "first fetch")
	if s := f.Stats(); s.Misses != 1 || s.Fetches != 1 || s.Images != 1 || s.Tags != 1 {
		t.Fatalf("stats %+v", s)
	}

	get(h + "/multi:v1")
	get(h + "/multi@" + fx.multi) // the digest the tag resolved to
	requests(0, "cached tag and digest")
	if s := f.Stats(); s.Hits != 2 {
		t.Fatalf("stats %+v, want 2 hits", s)
	}

	clk.advance(2 * time.Minute) // the tag expires, the content does not
	m := get(h + "/multi:v1")
	if fx.reg.count("HEAD", "/manifests/v1") != 1 {
		t.Fatalf("expired tag: requests %v, want one HEAD", fx.reg.requests)
	}
	requests(1, "expired tag, same digest")
	if m["digest"] != fx.multi {
		t.Fatalf("digest %v", m["digest"])
	}

	// The tag moves: the HEAD sees another digest, which is fetched.
	fx.reg.pushImage(t, "multi", "v1", fx.appImg)
	get(h + "/multi:v1")
	requests(0, "moved tag within its TTL")
	clk.advance(2 * time.Minute)
	m = get(h + "/multi:v1")
	if m["digest"] != fx.app || m["imageIndex"] != nil {
		t.Fatalf("moved tag: digest %v, imageIndex %v", m["digest"], m["imageIndex"] != nil)
	}
	// HEAD, then GET of the manifest and of the config blob.
	requests(3, "expired tag, moved")

	// Content expires after CacheTTL.
	clk.advance(2 * time.Hour)
	get(h + "/multi@" + fx.multi)
	requests(3, "expired content")
}

// TestCacheSize: the cache holds at most CacheSize images, least recently
// used out first.
func TestCacheSize(t *testing.T) {
	fx := newFixture(t, "", "")
	h := fx.reg.host
	cfg := insecureConfig(fx.reg)
	cfg.CacheSize = 2
	f := newTestFetcher(t, cfg, Options{})
	for _, img := range []string{"/app@" + fx.app, "/multi@" + fx.multi, "/app@" + fx.app, "/multi@" + fx.multiArmD} {
		if _, err := f.GetImageData(t.Context(), h+img); err != nil {
			t.Fatal(err)
		}
	}
	// app was used again before multiArm came in: multi went out.
	fx.reg.reset()
	if _, err := f.GetImageData(t.Context(), h+"/app@"+fx.app); err != nil {
		t.Fatal(err)
	}
	if n := fx.reg.count(); n != 0 {
		t.Fatalf("app: %d requests, want 0 (cached)", n)
	}
	if _, err := f.GetImageData(t.Context(), h+"/multi@"+fx.multi); err != nil {
		t.Fatal(err)
	}
	if n := fx.reg.count("GET", "/manifests/"+fx.multi); n != 1 {
		t.Fatalf("multi: requests %v, want its index fetched again", fx.reg.requests)
	}
	if s := f.Stats(); s.Images != 2 {
		t.Fatalf("%d images cached, want 2", s.Images)
	}
}

// TestSharedFetch: concurrent calls for one image make one fetch.
func TestSharedFetch(t *testing.T) {
	fx := newFixture(t, "", "")
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fx.reg.setBeforeManifest(func(r *http.Request) {
		once.Do(func() {
			close(entered)
			<-release
		})
	})
	f := newTestFetcher(t, insecureConfig(fx.reg), Options{})
	const n = 8
	var wg sync.WaitGroup
	digests := make([]any, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			m, err := f.GetImageData(context.Background(), fx.reg.host+"/multi:v1")
			errs[i] = err
			if err == nil {
				digests[i] = m["digest"]
			}
		})
	}
	<-entered
	time.Sleep(100 * time.Millisecond) // the other callers join the fetch
	close(release)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || digests[i] != fx.multi {
			t.Fatalf("caller %d: %v %v", i, digests[i], errs[i])
		}
	}
	if got := fx.reg.count("GET", "/manifests/v1"); got != 1 {
		t.Fatalf("%d GETs of the tag, want 1", got)
	}
	if s := f.Stats(); s.Fetches != 1 {
		t.Fatalf("stats %+v, want one fetch", s)
	}
}

// TestTimeout: Config.Timeout bounds a fetch; a caller's own deadline bounds
// its wait.
func TestTimeout(t *testing.T) {
	fx := newFixture(t, "", "")
	fx.reg.setBeforeManifest(func(r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	tests := []struct {
		name     string
		timeout  time.Duration
		deadline time.Duration // of the caller's context, 0 for none
		max      time.Duration
	}{
		{name: "fetcher timeout", timeout: 200 * time.Millisecond, max: 2 * time.Second},
		{name: "caller deadline", timeout: time.Second, deadline: 100 * time.Millisecond, max: 900 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := insecureConfig(fx.reg)
			cfg.Timeout = Duration(tc.timeout)
			f := newTestFetcher(t, cfg, Options{})
			ctx := t.Context()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			start := time.Now()
			_, err := f.GetImageData(ctx, fx.reg.host+"/app:v1")
			t.Logf("error: %v", err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want a deadline exceeded", err)
			}
			if el := time.Since(start); el > tc.max {
				t.Fatalf("returned after %s, want at most %s", el, tc.max)
			}
		})
	}
}

func TestWithFetcher(t *testing.T) {
	fx := newFixture(t, "", "")
	f := newTestFetcher(t, insecureConfig(fx.reg), Options{})
	c := WithFetcher(nil, f)
	if m, err := c.GetImageData(t.Context(), fx.reg.host+"/app:v1"); err != nil || m["digest"] != fx.app {
		t.Fatalf("GetImageData: %v %v", m, err)
	}
	if _, err := c.GetResource(t.Context(), "v1", "configmaps", "ns", "x"); err == nil || !strings.Contains(err.Error(), "no cluster access") {
		t.Fatalf("GetResource: %v, want the offline context's error", err)
	}
}

package image_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/arbiter-pdp/arbiter/internal/image"
)

var created = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

var platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

// binaries builds the arbiter binary twice (two links of the same build)
// once per test binary.
var binaries = sync.OnceValues(func() ([2]string, error) {
	dir, err := os.MkdirTemp("", "arbiter-image-test")
	if err != nil {
		return [2]string{}, err
	}
	var out [2]string
	for i := range out {
		out[i] = filepath.Join(dir, "arbiter"+string(rune('a'+i)))
		if err := image.BuildBinary(out[i], "github.com/arbiter-pdp/arbiter/cmd/arbiter", platform); err != nil {
			return out, err
		}
	}
	return out, nil
})

func buildLayout(t *testing.T, bin string) (string, v1.Hash) {
	t.Helper()
	b, err := image.Build(image.Options{Binary: bin, Platform: *platform, Created: created, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	h, err := image.WriteLayout(dir, "test", []*image.Built{b})
	if err != nil {
		t.Fatal(err)
	}
	return dir, h
}

func sha(t *testing.T, file string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestReproducible: two links of the binary are the same bytes, and two
// builds of the image from them the same digests, layout file for file.
func TestReproducible(t *testing.T) {
	bins, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	if sha(t, bins[0]) != sha(t, bins[1]) {
		t.Fatal("two builds of the binary differ")
	}
	a, ha := buildLayout(t, bins[0])
	b, hb := buildLayout(t, bins[1])
	if ha != hb {
		t.Fatalf("index digests %s and %s", ha, hb)
	}
	err = filepath.Walk(a, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		if sha(t, p) != sha(t, filepath.Join(b, rel)) {
			t.Errorf("%s differs between two builds", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Another creation time is another image.
	bb, err := image.Build(image.Options{Binary: bins[0], Platform: *platform, Created: created.Add(time.Second), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := image.WriteLayout(filepath.Join(t.TempDir(), "c"), "test", []*image.Built{bb})
	if err != nil || hc == ha {
		t.Errorf("a later SOURCE_DATE_EPOCH gives %s (%v), the same digest", hc, err)
	}
}

// TestImageInRegistry loads the OCI layout into an in-process registry
// (with the referrers API), pulls it back and inspects it: non-root user,
// entrypoint, the platform, no shell nor anything else that runs but the
// static binary, the nonroot user in /etc/passwd, and the SPDX SBOM
// attached as a referrer that lists the binary's modules.
func TestImageInRegistry(t *testing.T) {
	bins, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	dir, indexDigest := buildLayout(t, bins[0])

	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	repo, err := name.NewRepository(u.Host + "/arbiter")
	if err != nil {
		t.Fatal(err)
	}

	// Push what the layout holds: the image index (tagged with its ref
	// name) and the SBOM artifacts.
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var pushedIndex, artifacts int
	for _, d := range im.Manifests {
		switch {
		case d.MediaType == types.OCIImageIndex:
			if d.Annotations["org.opencontainers.image.ref.name"] != "test" || d.Digest != indexDigest {
				t.Errorf("index descriptor %+v", d)
			}
			idx, err := top.ImageIndex(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.WriteIndex(repo.Tag("test"), idx); err != nil {
				t.Fatal(err)
			}
			pushedIndex++
		case d.ArtifactType == image.SBOMMediaType:
			img, err := top.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(repo.Digest(d.Digest.String()), img); err != nil {
				t.Fatal(err)
			}
			artifacts++
		default:
			t.Errorf("unexpected descriptor in the layout: %+v", d)
		}
	}
	if pushedIndex != 1 || artifacts != 1 {
		t.Fatalf("%d indexes, %d SBOMs in the layout", pushedIndex, artifacts)
	}

	// Pull the tag and pick the platform's image, as a node would.
	img, err := remote.Image(repo.Tag("test"), remote.WithPlatform(*platform))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != image.Entrypoint || len(c.Cmd) != 0 ||
		cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Equal(created) {
		t.Errorf("config: user %q, entrypoint %v, cmd %v, %s/%s, created %v", c.User, c.Entrypoint, c.Cmd, cf.OS, cf.Architecture, cf.Created)
	}
	for _, port := range []string{"50051/tcp", "8443/tcp", "9090/tcp"} {
		if _, ok := c.ExposedPorts[port]; !ok {
			t.Errorf("port %s not exposed", port)
		}
	}
	mt, _ := img.MediaType()
	if mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}

	// The filesystem: nothing executable but the binary, which is static.
	files := map[string]*tar.Header{}
	var binary []byte
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.TrimPrefix(path.Clean(h.Name), "/")
		files[name] = h
		if h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
			t.Errorf("%s: a link", name)
		}
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 && name != image.Entrypoint {
			t.Errorf("%s: executable", name)
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: mtime %v", name, h.ModTime)
		}
		switch name {
		case image.Entrypoint:
			if binary, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		case "/etc/passwd":
			b, _ := io.ReadAll(tr)
			if !bytes.Contains(b, []byte("\nnonroot:x:65532:65532:")) {
				t.Errorf("/etc/passwd has no nonroot user:\n%s", b)
			}
		}
	}
	for _, sh := range []string{"/bin/sh", "/bin/bash", "/bin/ash", "/bin/busybox", "/usr/bin/sh", "/bin", "/sbin", "/usr/bin"} {
		if files[sh] != nil {
			t.Errorf("%s in the image", sh)
		}
	}
	for _, want := range []string{image.Entrypoint, "/etc/passwd", "/etc/group", "/tmp", "/home/nonroot"} {
		if files[want] == nil {
			t.Errorf("%s missing", want)
		}
	}
	if h := files["/home/nonroot"]; h != nil && h.Uid != 65532 {
		t.Errorf("/home/nonroot owned by %d", h.Uid)
	}
	if h := files["/tmp"]; h != nil && h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp mode %o", h.Mode)
	}
	if !bytes.Equal(binary, mustRead(t, bins[0])) {
		t.Fatal("the image's binary is not the one built")
	}
	extracted := filepath.Join(t.TempDir(), "arbiter")
	if err := os.WriteFile(extracted, binary, 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(extracted)
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%v)", prog.Type)
		}
	}
	ef.Close()
	// It runs (on a host of the same platform).
	if out, err := exec.Command(extracted, "--help").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("serve")) {
		t.Errorf("arbiter --help from the image: %v\n%s", err, out)
	}

	// The SBOM, found through the referrers API from the image's digest.
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := remote.Referrers(repo.Digest(d.String()))
	if err != nil {
		t.Fatal(err)
	}
	rm, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	// (go-containerregistry's registry reports the config's media type as
	// the referrer's artifactType; the manifest carries the real one.)
	if len(rm.Manifests) != 1 {
		t.Fatalf("referrers of the image: %+v", rm.Manifests)
	}
	art, err := remote.Image(repo.Digest(rm.Manifests[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	am, err := art.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if am.ArtifactType != image.SBOMMediaType || am.Subject == nil || am.Subject.Digest != d {
		t.Fatalf("SBOM manifest: artifactType %q, subject %+v", am.ArtifactType, am.Subject)
	}
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("SBOM artifact: %d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	sbom, _ := io.ReadAll(rc)
	rc.Close()
	checkSBOM(t, sbom, bins[0])
}

func mustRead(t *testing.T, f string) []byte {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkSBOM: an SPDX 2.3 document describing the main module, with the
// Go version and every module `go version -m` lists, at its version.
func checkSBOM(t *testing.T, sbom []byte, bin string) {
	t.Helper()
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		SPDXID      string `json:"SPDXID"`
		Packages    []struct {
			Name    string `json:"name"`
			SPDXID  string `json:"SPDXID"`
			Version string `json:"versionInfo"`
		} `json:"packages"`
		Relationships []struct {
			Element string `json:"spdxElementId"`
			Type    string `json:"relationshipType"`
			Related string `json:"relatedSpdxElement"`
		} `json:"relationships"`
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || doc.SPDXID != "SPDXRef-DOCUMENT" {
		t.Errorf("SBOM: %s %s", doc.SPDXVersion, doc.SPDXID)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	ids := map[string]bool{}
	for _, p := range doc.Packages {
		got[p.Name] = p.Version
		if ids[p.SPDXID] {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
	}
	if got["stdlib"] != info.GoVersion || got[info.Main.Path] != info.Main.Version {
		t.Errorf("SBOM: stdlib %q, main %q", got["stdlib"], got[info.Main.Path])
	}
	if len(info.Deps) < 20 {
		t.Fatalf("%d modules in the binary", len(info.Deps))
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		if got[d.Path] != d.Version {
			t.Errorf("SBOM: %s at %q, the binary has %s", d.Path, got[d.Path], d.Version)
		}
	}
	var describes int
	for _, r := range doc.Relationships {
		if !ids[r.Related] || r.Element != "SPDXRef-DOCUMENT" && !ids[r.Element] {
			t.Errorf("relationship %+v names no package", r)
		}
		if r.Type == "DESCRIBES" {
			describes++
		}
	}
	if describes != 1 || len(doc.Relationships) != len(doc.Packages) {
		t.Errorf("%d relationships (%d DESCRIBES) for %d packages", len(doc.Relationships), describes, len(doc.Packages))
	}
}

// TestRefusesDynamicBinary: a cgo binary (it needs a libc the image does
// not have) is refused.
func TestRefusesDynamicBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	cgo := false
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" && s.Value == "1" {
			cgo = true
		}
	}
	if !cgo {
		t.Skip("the test binary is not a cgo build")
	}
	_, err = image.Build(image.Options{Binary: self, Platform: *platform, Created: created})
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=1") {
		t.Errorf("Build of a cgo binary: %v", err)
	}
}

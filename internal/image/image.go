// Package image builds Arbiter's container image without a Docker daemon
// or a registry: a distroless-style base made here from nothing (an
// /etc/passwd and /etc/group with root and nonroot, /etc/nsswitch.conf,
// /tmp and /home/nonroot; no shell, no package manager, no CA bundle —
// the binary carries Go's fallback roots) and the static arbiter binary,
// running as nonroot (65532). Every byte is a function of the binary and
// the creation time (SOURCE_DATE_EPOCH): tar headers carry fixed owners
// and that time, layers are gzip-compressed without names or times, so a
// rebuild of the same commit gives the same digests. An SPDX SBOM made
// from the binary's build information (`go version -m`) is attached as an
// OCI 1.1 referrer (its manifest's subject is the image). WriteLayout
// writes all of it as an OCI image layout (make image).
package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// Entrypoint is where the binary is, and the image's entrypoint.
	Entrypoint = "/usr/local/bin/arbiter"
	// User is the image's user: distroless's nonroot.
	User = "65532:65532"
	// SBOMMediaType is the SBOM artifact's artifactType and layer type.
	SBOMMediaType = "application/spdx+json"
	// emptyConfigMediaType is OCI 1.1's empty config of artifacts.
	emptyConfigMediaType = "application/vnd.oci.empty.v1+json"
	// Source is the repository, in the image's labels and the SBOM.
	Source = "https://github.com/arbiter-pdp/arbiter"
)

// Options say what to build.
type Options struct {
	// Binary is a static arbiter binary for Platform.
	Binary   string
	Platform v1.Platform
	// Created is the time in every tar header, the config and the SBOM
	// (SOURCE_DATE_EPOCH).
	Created time.Time
	// Version labels the image (org.opencontainers.image.version).
	Version string
}

// Built is one platform's image and its SBOM.
type Built struct {
	Image v1.Image
	SBOM  []byte
}

type file struct {
	name string
	mode int64
	uid  int
	body []byte // nil for a directory
}

// baseFiles is the distroless-style base: what a static Go binary running
// as nonroot needs, and nothing that runs.
var baseFiles = []file{
	{name: "etc/", mode: 0o755},
	{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
	{name: "etc/group", mode: 0o644, body: []byte("root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n")},
	// Go's resolver reads it: files before DNS, as glibc does.
	{name: "etc/nsswitch.conf", mode: 0o644, body: []byte("hosts: files dns\n")},
	{name: "home/", mode: 0o755},
	{name: "home/nonroot/", mode: 0o700, uid: 65532},
	{name: "root/", mode: 0o700},
	{name: "tmp/", mode: 0o1777},
	{name: "usr/", mode: 0o755},
	{name: "usr/local/", mode: 0o755},
	{name: "usr/local/bin/", mode: 0o755},
}

// tarLayer is a deterministic layer of files.
func tarLayer(files []file, created time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: created, Format: tar.FormatPAX}
		if f.body == nil {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Build makes one platform's image and SBOM.
func Build(o Options) (*Built, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	if err := checkStatic(o.Binary); err != nil {
		return nil, err
	}
	created := o.Created.UTC()
	base, err := tarLayer(baseFiles, created)
	if err != nil {
		return nil, err
	}
	app, err := tarLayer([]file{{name: strings.TrimPrefix(Entrypoint, "/"), mode: 0o755, body: bin}}, created)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.source":  Source,
		"org.opencontainers.image.title":   "arbiter",
		"org.opencontainers.image.version": o.Version,
		"org.opencontainers.image.created": created.Format(time.RFC3339),
	}
	cfg := &v1.ConfigFile{
		Architecture: o.Platform.Architecture,
		OS:           o.Platform.OS,
		Variant:      o.Platform.Variant,
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			User:         User,
			Entrypoint:   []string{Entrypoint},
			WorkingDir:   "/home/nonroot",
			Env:          []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/nonroot"},
			ExposedPorts: map[string]struct{}{"50051/tcp": {}, "8443/tcp": {}, "9090/tcp": {}},
			Labels:       labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "internal/image: distroless-style base (passwd, group, nsswitch.conf, /tmp, /home/nonroot)", Comment: "no shell"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "internal/image: " + Entrypoint}},
	)
	if err != nil {
		return nil, err
	}
	img = mutate.Annotations(img, labels).(v1.Image)
	sbom, err := SBOM(o.Binary, bin, created)
	if err != nil {
		return nil, err
	}
	return &Built{Image: img, SBOM: sbom}, nil
}

// spdxID makes an SPDX identifier ([A-Za-z0-9.-]+) of a module path.
var spdxUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]`)

// SBOM is an SPDX 2.3 document of the binary: the main module, the Go
// standard library and every module compiled in, with their versions
// and checksums, as `go version -m` reads them.
func SBOM(path string, bin []byte, created time.Time) ([]byte, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(bin)
	type checksum struct {
		Algorithm string `json:"algorithm"`
		Value     string `json:"checksumValue"`
	}
	type ref struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type pkg struct {
		Name             string     `json:"name"`
		SPDXID           string     `json:"SPDXID"`
		Version          string     `json:"versionInfo,omitempty"`
		DownloadLocation string     `json:"downloadLocation"`
		FilesAnalyzed    bool       `json:"filesAnalyzed"`
		Checksums        []checksum `json:"checksums,omitempty"`
		ExternalRefs     []ref      `json:"externalRefs,omitempty"`
		Comment          string     `json:"comment,omitempty"`
	}
	type rel struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
	mainVersion := info.Main.Version
	mainID := "SPDXRef-Package-" + spdxUnsafe.ReplaceAllString(info.Main.Path, "-")
	pkgs := []pkg{{
		Name: info.Main.Path, SPDXID: mainID, Version: mainVersion, DownloadLocation: Source, FilesAnalyzed: false,
		Checksums:    []checksum{{"SHA256", hex.EncodeToString(sum[:])}},
		ExternalRefs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + info.Main.Path + "@" + mainVersion}},
		Comment:      "the arbiter binary (" + Entrypoint + "); " + buildSettings(info),
	}, {
		Name: "stdlib", SPDXID: "SPDXRef-Package-stdlib", Version: info.GoVersion, DownloadLocation: "https://go.dev/dl/", FilesAnalyzed: false,
		ExternalRefs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + info.GoVersion}},
	}}
	rels := []rel{
		{"SPDXRef-DOCUMENT", "DESCRIBES", mainID},
		{mainID, "DEPENDS_ON", "SPDXRef-Package-stdlib"},
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		id := "SPDXRef-Package-" + spdxUnsafe.ReplaceAllString(d.Path+"-"+d.Version, "-")
		p := pkg{
			Name: d.Path, SPDXID: id, Version: d.Version, DownloadLocation: "https://proxy.golang.org/" + strings.ToLower(d.Path) + "/@v/" + d.Version + ".zip",
			ExternalRefs: []ref{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + d.Path + "@" + d.Version}},
		}
		if d.Sum != "" {
			p.Comment = "go.sum " + d.Sum
		}
		pkgs = append(pkgs, p)
		rels = append(rels, rel{mainID, "DEPENDS_ON", id})
	}
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              "arbiter " + mainVersion,
		"documentNamespace": Source + "/spdx/" + hex.EncodeToString(sum[:]),
		"creationInfo": map[string]any{
			"created":  created.UTC().Format(time.RFC3339),
			"creators": []string{"Tool: github.com/arbiter-pdp/arbiter/internal/image"},
		},
		"packages":      pkgs,
		"relationships": rels,
	}
	return json.MarshalIndent(doc, "", "  ")
}

func buildSettings(info *buildinfo.BuildInfo) string {
	var s []string
	for _, b := range info.Settings {
		s = append(s, b.Key+"="+b.Value)
	}
	return "build settings: " + strings.Join(s, " ")
}

// checkStatic refuses a binary that needs a dynamic loader or cgo: the
// base has no libc.
func checkStatic(path string) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, s := range info.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			return fmt.Errorf("%s: built with CGO_ENABLED=%s: the image has no libc, build with CGO_ENABLED=0", path, s.Value)
		}
	}
	return nil
}

// sbomArtifact writes the SBOM of img into the layout as an OCI 1.1
// artifact whose subject is img, and returns its descriptor.
func sbomArtifact(p layout.Path, img v1.Image, sbom []byte) (v1.Descriptor, error) {
	subject, err := descriptorOf(img)
	if err != nil {
		return v1.Descriptor{}, err
	}
	emptyConfig := static.NewLayer([]byte("{}"), emptyConfigMediaType)
	layer := static.NewLayer(sbom, SBOMMediaType)
	var descs []v1.Descriptor
	for _, l := range []v1.Layer{emptyConfig, layer} {
		d, err := l.Digest()
		if err != nil {
			return v1.Descriptor{}, err
		}
		size, _ := l.Size()
		mt, _ := l.MediaType()
		rc, _ := l.Compressed()
		if err := p.WriteBlob(d, rc); err != nil {
			return v1.Descriptor{}, err
		}
		descs = append(descs, v1.Descriptor{MediaType: mt, Size: size, Digest: d})
	}
	descs[1].Annotations = map[string]string{"org.opencontainers.image.title": "arbiter.spdx.json"}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  SBOMMediaType,
		Config:        v1.Descriptor{MediaType: emptyConfigMediaType, Size: 2, Digest: descs[0].Digest, Data: []byte("{}")},
		Layers:        descs[1:],
		Subject:       &subject,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return v1.Descriptor{}, err
	}
	h, size, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return v1.Descriptor{}, err
	}
	if err := p.WriteBlob(h, io.NopCloser(bytes.NewReader(raw))); err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: types.OCIManifestSchema1, Size: size, Digest: h, ArtifactType: SBOMMediaType}, nil
}

func descriptorOf(img v1.Image) (v1.Descriptor, error) {
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Size: size, Digest: d}, nil
}

// WriteLayout writes an OCI image layout at dir (replacing it): an image
// index of the platforms' images, named ref (org.opencontainers.image.ref.name),
// and each image's SBOM artifact. It returns the index's digest.
func WriteLayout(dir, ref string, built []*Built) (v1.Hash, error) {
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	var adds []mutate.IndexAddendum
	for _, b := range built {
		cf, err := b.Image.ConfigFile()
		if err != nil {
			return v1.Hash{}, err
		}
		pl := cf.Platform()
		adds = append(adds, mutate.IndexAddendum{Add: b.Image, Descriptor: v1.Descriptor{Platform: pl}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return v1.Hash{}, err
	}
	for _, b := range built {
		d, err := sbomArtifact(p, b.Image, b.SBOM)
		if err != nil {
			return v1.Hash{}, err
		}
		if err := p.AppendDescriptor(d); err != nil {
			return v1.Hash{}, err
		}
	}
	return idx.Digest()
}

// BuildBinary builds pkg for pl as a static, reproducible binary:
// CGO_ENABLED=0, -trimpath, no VCS stamp, no build id, stripped.
func BuildBinary(out, pkg string, pl *v1.Platform) error {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+pl.OS, "GOARCH="+pl.Architecture)
	if pl.Variant != "" && pl.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(pl.Variant, "v"))
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", pkg, pl, err, stderr.Bytes())
	}
	return nil
}

// Command mkimage builds Arbiter's image as an OCI image layout (make
// image): for each platform it builds the static binary (CGO_ENABLED=0,
// -trimpath, no build id) and packs it with internal/image; no Docker
// daemon, no registry, no network beyond the Go module proxy.
//
//	go run ./internal/image/mkimage -o bin/image [-platform linux/amd64,linux/arm64] [-tag dev]
//
// The creation time is $SOURCE_DATE_EPOCH (the Makefile passes the last
// commit's time), so the same commit gives the same digests. Push the
// layout with any OCI tool, e.g. `crane push bin/image REGISTRY/arbiter:TAG`
// (go-containerregistry) or `skopeo copy oci:bin/image docker://...`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/arbiter-pdp/arbiter/internal/image"
)

func main() {
	out := flag.String("o", "bin/image", "directory of the OCI image layout (replaced)")
	platforms := flag.String("platform", "linux/amd64", "comma-separated OS/ARCH[/VARIANT] to build")
	tag := flag.String("tag", "dev", "the layout's ref name and the image's version label")
	pkg := flag.String("pkg", "./cmd/arbiter", "the package to build")
	flag.Parse()
	if err := run(*out, *platforms, *tag, *pkg); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(out, platforms, tag, pkg string) error {
	created := time.Unix(0, 0).UTC()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		created = time.Unix(sec, 0).UTC()
	}
	tmp, err := os.MkdirTemp("", "mkimage")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	var built []*image.Built
	for _, p := range strings.Split(platforms, ",") {
		pl, err := v1.ParsePlatform(p)
		if err != nil {
			return err
		}
		bin := filepath.Join(tmp, strings.ReplaceAll(p, "/", "-"), "arbiter")
		if err := image.BuildBinary(bin, pkg, pl); err != nil {
			return err
		}
		b, err := image.Build(image.Options{Binary: bin, Platform: *pl, Created: created, Version: tag})
		if err != nil {
			return err
		}
		built = append(built, b)
	}
	d, err := image.WriteLayout(out, tag, built)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s (%s)\n", out, d, platforms)
	return nil
}

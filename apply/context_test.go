package apply

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-pdp/arbiter/clusterdata"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const gceDoc = `apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {name: cms}
spec:
  kubernetesResource: {version: v1, resource: configmaps}
  projections: [{name: count, jmesPath: "length(@)"}]
`

func TestLoadContext(t *testing.T) {
	dir := t.TempDir()
	plain := writeFile(t, dir, "plain.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: x}
---
`+gceDoc)
	kyverno := writeFile(t, dir, "kyverno.yaml", `apiVersion: cli.kyverno.io/v1alpha1
kind: Context
metadata: {name: c}
spec:
  resources:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: x}}
  images:
  - {image: nginx, resolvedImage: "nginx@sha256:abc", registry: index.docker.io, repository: library/nginx, tag: latest}
`)
	ctx := context.Background()
	c, err := LoadContext(ctx, ContextOptions{Files: []string{plain, kyverno}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListResources(ctx, "v1", "configmaps", "x", nil)
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}
	if v, err := c.GetGlobalReference(ctx, "cms", "count"); err != nil || v != 2.0 {
		t.Fatalf("global: %v %v", v, err)
	}
	if d, err := c.GetImageData(ctx, "nginx"); err != nil || d["resolvedImage"] != "nginx@sha256:abc" {
		t.Fatalf("image: %v %v", d, err)
	}
	if _, err := c.GetImageData(ctx, "busybox"); err == nil || !strings.Contains(err.Error(), "not in the --context files") {
		t.Fatalf("missing image: %v", err)
	}

	// A GlobalContextEntry among the policies' objects, without --context:
	// the entry cannot be computed, and says why.
	gce := manifest.NewObject("p.yaml", mustDecode(t, gceDoc))
	c, err = LoadContext(ctx, ContextOptions{}, []*manifest.Object{gce})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetGlobalReference(ctx, "cms", ""); !errors.Is(err, clusterdata.ErrNoObjects) {
		t.Fatalf("entry without objects: %v", err)
	}
	if _, err := c.ListResources(ctx, "v1", "configmaps", "", nil); !errors.Is(err, clusterdata.ErrNoObjects) {
		t.Fatalf("list without objects: %v", err)
	}

	for _, tc := range []struct {
		name string
		opts ContextOptions
		objs []*manifest.Object
		want string
	}{
		{"policy object", ContextOptions{Files: []string{writeFile(t, dir, "policy.yaml", `apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: p}
spec: {}`)}}, nil, "--context takes context objects"},
		{"duplicate", ContextOptions{Files: []string{plain, writeFile(t, dir, "dup.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n")}}, nil, "defined twice"},
		{"scope", ContextOptions{Files: []string{writeFile(t, dir, "nons.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")}}, nil, "metadata.namespace: required"},
		{"bad context file", ContextOptions{Files: []string{writeFile(t, dir, "badctx.yaml", "apiVersion: cli.kyverno.io/v1alpha1\nkind: Context\nspec: {nope: 1}\n")}}, nil, "Kyverno CLI context file"},
		{"bad entry", ContextOptions{}, []*manifest.Object{manifest.NewObject("p.yaml", mustDecode(t, "apiVersion: kyverno.io/v2\nkind: GlobalContextEntry\nmetadata: {name: e}\nspec: {}\n"))}, "needs kubernetesResource or apiCall"},
		{"cluster and objects", ContextOptions{Files: []string{plain}, Cluster: true}, nil, "--cluster reads the objects from the cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := LoadContext(ctx, tc.opts, tc.objs); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func mustDecode(t *testing.T, doc string) map[string]any {
	t.Helper()
	m, err := manifest.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

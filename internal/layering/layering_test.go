// Package layering checks the package boundaries of DESIGN.md with the go
// command: what Arbiter's own packages import.
package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/arbiter-pdp/arbiter"

// list runs `go list` with a template over patterns, from the module root.
func list(t *testing.T, template string, patterns ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	cmd := exec.Command(gobin, append([]string{"list", "-f", template}, patterns...)...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", patterns, err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestEngineIsPure: no engine package imports gRPC, bbolt or net/http, and
// nothing the engine links reaches gRPC, bbolt or the server, store and
// client packages, or the imagedata, imageverify and callout packages that
// make the calls out of the context libraries and the image verification. (The Kubernetes libraries the engine is built on —
// k8s.io/apimachinery's meta/v1 and k8s.io/apiserver's CEL library — link
// net/http themselves; Arbiter's engine code does not use it.)
func TestEngineIsPure(t *testing.T) {
	banned := []string{"net/http", "google.golang.org/grpc", "go.etcd.io/bbolt"}
	for _, line := range list(t, `{{.ImportPath}} {{join .Imports " "}}`, "./engine/...") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			for _, b := range banned {
				if imp == b || strings.HasPrefix(imp, b+"/") {
					t.Errorf("%s imports %s", f[0], imp)
				}
			}
		}
	}
	deps := list(t, `{{join .Deps "\n"}}`, "./engine/...")
	var ours []string
	for _, dep := range deps {
		for _, b := range []string{"google.golang.org/grpc", "go.etcd.io/bbolt", module + "/server", module + "/store", module + "/client", module + "/imagedata", module + "/imageverify", module + "/callout"} {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("the engine links %s", dep)
			}
		}
		if strings.HasPrefix(dep, module+"/") {
			ours = append(ours, dep)
		}
	}
	// Nor does any Arbiter package the engine links (internal helpers):
	// net/http reaches the engine only through the Kubernetes libraries.
	for _, line := range list(t, `{{.ImportPath}} {{join .Imports " "}}`, ours...) {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if imp == "net/http" || strings.HasPrefix(imp, "net/http/") {
				t.Errorf("%s, which the engine links, imports %s", f[0], imp)
			}
		}
	}
}

// TestCalloutLinksOnlyTheEngine: callout implements the engine's context
// interfaces for the server; it links none of the server, store or client
// packages (the server embeds it, not the other way round).
func TestCalloutLinksOnlyTheEngine(t *testing.T) {
	for _, dep := range list(t, `{{join .Deps "\n"}}`, "./callout") {
		for _, b := range []string{module + "/server", module + "/store", module + "/client", module + "/cmd", "google.golang.org/grpc", "go.etcd.io/bbolt"} {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("callout links %s", dep)
			}
		}
	}
}

// TestStoreDoesNotLinkEngine: the store holds objects, not decisions.
func TestStoreDoesNotLinkEngine(t *testing.T) {
	for _, dep := range list(t, `{{join .Deps "\n"}}`, "./store/...") {
		if strings.HasPrefix(dep, module+"/engine") {
			t.Errorf("the store links %s", dep)
		}
	}
}

// TestClientDependsOnTheAPI: of Arbiter's packages the client links only
// the generated API (and internal/certs, which uses the standard library
// alone to load and reload certificate files).
func TestClientDependsOnTheAPI(t *testing.T) {
	allowed := map[string]bool{module + "/proto/arbiter/v1": true, module + "/internal/certs": true}
	for _, dep := range list(t, `{{join .Deps "\n"}}`, "./client") {
		if strings.HasPrefix(dep, module+"/") && !allowed[dep] {
			t.Errorf("the client links %s", dep)
		}
	}
	for _, dep := range list(t, `{{if not .Standard}}{{.ImportPath}}{{end}}`, "-deps", "./internal/certs") {
		if dep != "" && dep != module+"/internal/certs" {
			t.Errorf("internal/certs links %s, not only the standard library", dep)
		}
	}
}

// TestOnlyTheStoreImportsBbolt: bbolt is the store's implementation; the
// other packages (and their tests) use the store's API and its error values
// (store.ErrLocked, store.ErrCorrupt, ...), which wrap bbolt's.
func TestOnlyTheStoreImportsBbolt(t *testing.T) {
	const bbolt = "go.etcd.io/bbolt"
	for _, line := range list(t, `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, "./...") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == module+"/store" {
			continue
		}
		for _, imp := range f[1:] {
			if imp == bbolt || strings.HasPrefix(imp, bbolt+"/") {
				t.Errorf("%s imports %s: only the store may", f[0], imp)
			}
		}
	}
}

// TestKubesourceDependsOnAnInterface: the Kubernetes source writes through
// the interfaces it declares (kubesource.Primary, kubesource.Replica), which
// *server.Server satisfies; it does not link the server (its tests may, to
// run a real one).
func TestKubesourceDependsOnAnInterface(t *testing.T) {
	for _, dep := range list(t, `{{join .Deps "\n"}}`, "./kubesource") {
		if dep == module+"/server" || strings.HasPrefix(dep, module+"/server/") {
			t.Errorf("kubesource links %s", dep)
		}
	}
}

// TestSharedPackagesStaySmall: what both the server and the CLI use links
// no more than it needs — whatif only the generated API, internal/parallel
// only the standard library and x/sync (the engine uses it), and apply
// (the CLI's pipeline, which may embed the engine) never the server.
func TestSharedPackagesStaySmall(t *testing.T) {
	for _, dep := range list(t, `{{join .Deps "\n"}}`, "./whatif") {
		if strings.HasPrefix(dep, module+"/") && dep != module+"/proto/arbiter/v1" {
			t.Errorf("whatif links %s", dep)
		}
	}
	for _, dep := range list(t, `{{if not .Standard}}{{.ImportPath}}{{end}}`, "-deps", "./internal/parallel") {
		if dep != "" && dep != module+"/internal/parallel" && !strings.HasPrefix(dep, "golang.org/x/sync/") {
			t.Errorf("internal/parallel links %s", dep)
		}
	}
	for _, dep := range list(t, `{{join .Deps "\n"}}`, "./apply", "./convert") {
		if dep == module+"/server" || strings.HasPrefix(dep, module+"/server/") || dep == module+"/store" {
			t.Errorf("apply or convert links %s", dep)
		}
	}
}

// TestClusterdataIsData: the view of context objects links neither the
// server, the store nor the client, nor gRPC or bbolt (the server and the
// CLI both build it).
func TestClusterdataIsData(t *testing.T) {
	for _, dep := range list(t, `{{join .Deps "\n"}}`, "./clusterdata") {
		for _, b := range []string{"google.golang.org/grpc", "go.etcd.io/bbolt", module + "/server", module + "/store", module + "/client"} {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("clusterdata links %s", dep)
			}
		}
	}
	for _, line := range list(t, `{{.ImportPath}} {{join .Imports " "}}`, "./clusterdata") {
		for _, imp := range strings.Fields(line)[1:] {
			if imp == "net/http" || strings.HasPrefix(imp, "net/http/") {
				t.Errorf("clusterdata imports %s", imp)
			}
		}
	}
}

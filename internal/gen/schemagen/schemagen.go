// Package schemagen generates engine/schema's built-in schemas: the
// structured-merge-diff schema of the built-in Kubernetes types, copied from
// k8s.io/client-go/applyconfigurations/internal (the unexported schemaYAML of
// internal.go), and the table GroupVersionKind → schema type name of every kind
// of client-go's scheme (k8s.io/client-go/kubernetes/scheme), named as
// runtime.Scheme.ToOpenAPIDefinitionName names them — the two halves of
// applyconfigurations.NewTypeConverter(scheme.Scheme).
//
// The generator links client-go; engine/schema, which holds its output, does
// not. Both halves come from the client-go version of go.mod: the YAML is read
// from the module's source (located with `go list`), the table from the scheme
// linked into the generator, and Generate fails when the two versions differ.
package schemagen

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// ClientGoModule is the module the schema is copied from.
const ClientGoModule = "k8s.io/client-go"

// internalPackage holds internal.go, whose schemaYAML is the schema.
const internalPackage = ClientGoModule + "/applyconfigurations/internal"

// Source is where the generator found the schema.
type Source struct {
	// Dir is the directory of k8s.io/client-go/applyconfigurations/internal.
	Dir string
	// Version is the version of k8s.io/client-go in go.mod.
	Version string
}

// Locate finds client-go's applyconfigurations/internal package with `go
// list`, run in dir (any directory of the module; "" for the current one).
func Locate(dir string) (Source, error) {
	gobin, err := goCommand()
	if err != nil {
		return Source{}, err
	}
	cmd := exec.Command(gobin, "list", "-f", "{{.Dir}}\t{{.Module.Version}}", internalPackage)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Source{}, fmt.Errorf("go list %s: %v: %s", internalPackage, err, strings.TrimSpace(stderr.String()))
	}
	d, v, ok := strings.Cut(strings.TrimSpace(string(out)), "\t")
	if !ok || d == "" || v == "" {
		return Source{}, fmt.Errorf("go list %s: unexpected output %q", internalPackage, out)
	}
	return Source{Dir: d, Version: v}, nil
}

// goCommand finds the go command on PATH or else in $GOROOT/bin (go
// generate sets GOROOT; go test puts $GOROOT/bin first on PATH).
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if root := os.Getenv("GOROOT"); root != "" {
		p := filepath.Join(root, "bin", "go")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("the go command was not found")
}

// LinkedVersion is the version of k8s.io/client-go linked into the running
// binary ("" when the binary carries no module information).
func LinkedVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, m := range bi.Deps {
		if m.Path == ClientGoModule {
			if m.Replace != nil {
				return m.Replace.Version
			}
			return m.Version
		}
	}
	return ""
}

// SchemaYAML reads the schemaYAML variable of internal.go in dir.
func SchemaYAML(dir string) (string, error) {
	file := filepath.Join(dir, "internal.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if name.Name != "schemaYAML" || i >= len(vs.Values) {
					continue
				}
				// var schemaYAML = typed.YAMLObject(`...`)
				call, ok := vs.Values[i].(*ast.CallExpr)
				if !ok || len(call.Args) != 1 {
					return "", fmt.Errorf("%s: schemaYAML is not a conversion of a string literal", file)
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return "", fmt.Errorf("%s: schemaYAML is not a conversion of a string literal", file)
				}
				return strconv.Unquote(lit.Value)
			}
		}
	}
	return "", fmt.Errorf("%s: no schemaYAML variable", file)
}

// Kind is one kind of client-go's scheme.
type Kind struct {
	Group, Version, Kind string
	// TypeName is the schema type name (Scheme.ToOpenAPIDefinitionName).
	TypeName string
	// InSchema says whether the schema has a type of that name.
	InSchema bool
}

// Kinds lists every kind of client-go's scheme, sorted by group, version and
// kind, and the unversioned kinds (runtime.Scheme.New finds those in any group
// version) with their type names.
func Kinds(p *typed.Parser) (kinds []Kind, unversioned map[string]string, err error) {
	s := clientgoscheme.Scheme
	unversioned = map[string]string{}
	for gvk := range s.AllKnownTypes() {
		name, err := s.ToOpenAPIDefinitionName(gvk)
		if err != nil {
			return nil, nil, fmt.Errorf("%v: %w", gvk, err)
		}
		_, in := p.Schema.FindNamedType(name)
		kinds = append(kinds, Kind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, TypeName: name, InSchema: in})
		obj, err := s.New(gvk)
		if err != nil {
			return nil, nil, fmt.Errorf("%v: %w", gvk, err)
		}
		if unv, ok := s.IsUnversioned(obj); ok && unv {
			if prev, dup := unversioned[gvk.Kind]; dup && prev != name {
				return nil, nil, fmt.Errorf("unversioned kind %s has two types: %s, %s", gvk.Kind, prev, name)
			}
			unversioned[gvk.Kind] = name
		}
	}
	sort.Slice(kinds, func(i, j int) bool {
		a, b := kinds[i], kinds[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Kind < b.Kind
	})
	return kinds, unversioned, nil
}

// Generate produces the Go source of engine/schema's generated file, for the
// module that contains dir ("" for the current directory).
func Generate(dir string) ([]byte, error) {
	src, err := Locate(dir)
	if err != nil {
		return nil, err
	}
	if linked := LinkedVersion(); linked != "" && linked != src.Version {
		return nil, fmt.Errorf("go.mod has %s %s but the generator was built with %s: run it from the module with go run",
			ClientGoModule, src.Version, linked)
	}
	yaml, err := SchemaYAML(src.Dir)
	if err != nil {
		return nil, err
	}
	p, err := typed.NewParser(typed.YAMLObject(yaml))
	if err != nil {
		return nil, fmt.Errorf("client-go's schema does not parse: %w", err)
	}
	kinds, unversioned, err := Kinds(p)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by internal/gen/cmd/schemagen from %s %s. DO NOT EDIT.\n\n", ClientGoModule, src.Version)
	b.WriteString("package schema\n\n")
	fmt.Fprintf(&b, "// clientGoVersion is the version of %s the built-in schemas come from.\n", ClientGoModule)
	fmt.Fprintf(&b, "const clientGoVersion = %q\n\n", src.Version)
	b.WriteString("// clientGoSchemeName is the name of client-go's scheme (kubernetes/scheme.Scheme.Name()),\n")
	b.WriteString("// which its errors for unregistered kinds carry.\n")
	fmt.Fprintf(&b, "const clientGoSchemeName = %q\n\n", clientgoscheme.Scheme.Name())
	b.WriteString("// builtinKinds is every kind of client-go's scheme (kubernetes/scheme.Scheme.AllKnownTypes()),\n")
	b.WriteString("// sorted by group, version and kind, with its schema type name\n")
	b.WriteString("// (Scheme.ToOpenAPIDefinitionName) and whether builtinSchemaYAML has that type.\n")
	b.WriteString("var builtinKinds = [...]builtinKind{\n")
	for _, k := range kinds {
		fmt.Fprintf(&b, "\t{%q, %q, %q, %q, %v},\n", k.Group, k.Version, k.Kind, k.TypeName, k.InSchema)
	}
	b.WriteString("}\n\n")
	b.WriteString("// builtinUnversionedKinds are the kinds client-go's scheme knows in every group version\n")
	b.WriteString("// (runtime.Scheme.New falls back to them), with their schema type names.\n")
	b.WriteString("var builtinUnversionedKinds = map[string]string{\n")
	names := make([]string, 0, len(unversioned))
	for k := range unversioned {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, "\t%q: %q,\n", k, unversioned[k])
	}
	b.WriteString("}\n\n")
	meta, err := TypesYAML(yaml, p, ObjectMetaType)
	if err != nil {
		return nil, err
	}
	b.WriteString("// objectMetaSchemaYAML is the part of builtinSchemaYAML that describes ObjectMeta: its\n")
	b.WriteString("// type and every type it refers to, copied verbatim in the same order. Custom resources\n")
	b.WriteString("// use it without parsing the whole built-in schema.\n")
	b.WriteString("const objectMetaSchemaYAML = `" + meta + "`\n\n")
	fmt.Fprintf(&b, "// builtinSchemaYAML is the structured-merge-diff schema of the built-in types:\n")
	fmt.Fprintf(&b, "// schemaYAML of %s/applyconfigurations/internal/internal.go, %s.\n", ClientGoModule, src.Version)
	b.WriteString("const builtinSchemaYAML = ")
	if canRawQuote(yaml) {
		b.WriteString("`" + yaml + "`")
	} else {
		b.WriteString(strconv.Quote(yaml))
	}
	b.WriteString("\n")
	out, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting the generated source: %w", err)
	}
	return out, nil
}

// canRawQuote says whether s can be written unchanged as a raw string
// literal: no backquote, no carriage return (gofmt would drop it), and no
// control character other than tab and newline.
func canRawQuote(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r == '`', r == '\r', r == '\uFEFF':
			return false
		case r < ' ' && r != '\t' && r != '\n':
			return false
		}
	}
	return true
}

// ObjectMetaType is the schema type name of ObjectMeta.
const ObjectMetaType = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

// TypesYAML copies, from a schema YAML document whose types are the list
// items at column 0 ("- name: …"), the types reachable from root, in their
// order, as a schema YAML document of its own.
func TypesYAML(yaml string, p *typed.Parser, root string) (string, error) {
	reach := map[string]bool{}
	var visit func(name string) error
	var visitRef func(tr smdschema.TypeRef) error
	visitAtom := func(a smdschema.Atom) error {
		if m := a.Map; m != nil {
			for _, f := range m.Fields {
				if err := visitRef(f.Type); err != nil {
					return err
				}
			}
			if err := visitRef(m.ElementType); err != nil {
				return err
			}
		}
		if a.List != nil {
			if err := visitRef(a.List.ElementType); err != nil {
				return err
			}
		}
		return nil
	}
	visitRef = func(tr smdschema.TypeRef) error {
		if tr.NamedType != nil {
			return visit(*tr.NamedType)
		}
		return visitAtom(tr.Inlined)
	}
	visit = func(name string) error {
		if reach[name] {
			return nil
		}
		td, ok := p.Schema.FindNamedType(name)
		if !ok {
			return fmt.Errorf("the schema has no type %s", name)
		}
		reach[name] = true
		return visitAtom(td.Atom)
	}
	if err := visit(root); err != nil {
		return "", err
	}
	const head = "types:\n"
	if !strings.HasPrefix(yaml, head) {
		return "", fmt.Errorf("the schema does not start with %q", head)
	}
	var b strings.Builder
	b.WriteString(head)
	found := 0
	for _, block := range strings.SplitAfter(yaml[len(head):], "\n- name: ") {
		// Every block but the first starts after "- name: "; put it back.
		text := block
		if !strings.HasPrefix(text, "- name: ") {
			text = "- name: " + text
		}
		text = strings.TrimSuffix(text, "- name: ")
		line, _, _ := strings.Cut(strings.TrimPrefix(text, "- name: "), "\n")
		if reach[line] {
			b.WriteString(text)
			found++
		}
	}
	if found != len(reach) {
		return "", fmt.Errorf("found %d of the %d types reachable from %s in the schema text", found, len(reach), root)
	}
	return b.String(), nil
}

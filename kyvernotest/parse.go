package kyvernotest

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// LoadError is a test suite that cannot be loaded. It names the file, the
// test (the object) and the field.
type LoadError struct {
	// File is the file the problem is in (the test file, or an input it names).
	File string
	// Test names the object: the test (`Test name`, `Test #2` for an unnamed
	// document) or, in an input file, the object (`Kind namespace/name`).
	Test string
	// Field is the field path in the test, e.g. `policies[0]` or
	// `results[3].operation`, or in the input file.
	Field string
	Err   error
}

func (e *LoadError) Error() string {
	var b strings.Builder
	for _, s := range []string{e.File, e.Test, e.Field} {
		if s != "" {
			b.WriteString(s)
			b.WriteString(": ")
		}
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *LoadError) Unwrap() error { return e.Err }

// TestDocument is one Test of a test file.
type TestDocument struct {
	// Path is the test file.
	Path string
	// Index is the 1-based position of the document in the file.
	Index int
	Test  *Test
}

// Ref names the test for messages: "Test name" or "Test #2".
func (d *TestDocument) Ref() string {
	if d.Test != nil && d.Test.ObjectMeta.Name != "" {
		return "Test " + d.Test.ObjectMeta.Name
	}
	if d.Test != nil && d.Test.Name != "" {
		return "Test " + d.Test.Name
	}
	return fmt.Sprintf("Test #%d", d.Index)
}

// ParseTestFile decodes every Test of a test file. Decoding is strict: an
// unknown or duplicate field is an error; so is the deprecated schema (no
// apiVersion or kind, or the top-level `name`), which Kyverno refuses too.
// Results must name a policy and use a PolicyReport result word; an
// operation must be CREATE, UPDATE or DELETE.
func ParseTestFile(file string, data []byte) ([]*TestDocument, error) {
	raw, err := manifest.SplitNonEmptyDocuments(data)
	if err != nil {
		return nil, &LoadError{File: file, Err: err}
	}
	var out []*TestDocument
	for i, doc := range raw {
		d := &TestDocument{Path: file, Index: i + 1}
		var t Test
		if err := yaml.UnmarshalStrict(doc, &t); err != nil {
			// name the test and the field path as well as the lenient
			// decoding allows
			var named struct {
				Name     string `json:"name"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			_ = yaml.Unmarshal(doc, &named)
			d.Test = &Test{Name: named.Name}
			d.Test.ObjectMeta.Name = named.Metadata.Name
			return nil, &LoadError{File: file, Test: d.Ref(), Field: strictFieldPath(doc, &t, err), Err: decodeDetail(err)}
		}
		d.Test = &t
		if err := validateTest(d); err != nil {
			return nil, err
		}
		cleanTest(&t)
		out = append(out, d)
	}
	return out, nil
}

// resultWords are the PolicyReport result words an expectation may use.
var resultWords = map[string]bool{"pass": true, "fail": true, "warn": true, "error": true, "skip": true}

func validateTest(d *TestDocument) error {
	t := d.Test
	fail := func(field, format string, args ...any) error {
		return &LoadError{File: d.Path, Test: d.Ref(), Field: field, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case t.APIVersion == "":
		return fail("apiVersion", "required: the test uses the deprecated schema (set apiVersion: cli.kyverno.io/v1alpha1)")
	case t.Kind == "":
		return fail("kind", "required: the test uses the deprecated schema (set kind: Test)")
	case t.Name != "":
		return fail("name", "deprecated field: use metadata.name")
	}
	for i, r := range t.Results {
		field := fmt.Sprintf("results[%d]", i)
		if r.Policy == "" {
			return fail(field+".policy", "required")
		}
		if !resultWords[r.Result] {
			if r.Result == "" {
				return fail(field+".result", "required (pass, fail, warn, error or skip)")
			}
			return fail(field+".result", "unsupported value %q: supported values: \"pass\", \"fail\", \"warn\", \"error\", \"skip\"", r.Result)
		}
		switch r.Operation {
		case "", "CREATE", "UPDATE", "DELETE":
		default:
			return fail(field+".operation", "invalid operation %q, must be one of CREATE, UPDATE, DELETE", r.Operation)
		}
		if r.Operation != "" && r.IsDeletingPolicy {
			return fail(field+".operation", "operation is not supported for deleting policies")
		}
	}
	return nil
}

// cleanTest removes duplicate paths and folds the deprecated jsonPayload
// into jsonPayloads, with cleaned names (so "./a.json" is named "a.json").
func cleanTest(t *Test) {
	t.Policies = dedup(t.Policies)
	t.Resources = dedup(t.Resources)
	if t.JSONPayload != "" {
		if len(t.JSONPayloads) == 0 {
			t.JSONPayloads = append(t.JSONPayloads, t.JSONPayload)
		}
		t.JSONPayload = ""
	}
	var cleaned []string
	for _, p := range t.JSONPayloads {
		if strings.TrimSpace(p) != "" {
			cleaned = append(cleaned, path.Clean(p))
		}
	}
	t.JSONPayloads = dedup(cleaned)
}

func dedup(in []string) []string {
	seen := make(map[string]bool, len(in))
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// decodeField extracts the field of a strict-decoding error
// (`json: unknown field "foo"`, `key "foo" already set in map`).
func decodeField(err error) string {
	msg := err.Error()
	for _, marker := range []string{`unknown field "`, `duplicate field "`, `key "`} {
		if i := strings.Index(msg, marker); i >= 0 {
			rest := msg[i+len(marker):]
			if j := strings.IndexByte(rest, '"'); j >= 0 {
				return rest[:j]
			}
		}
	}
	if i := strings.Index(msg, "Go struct field "); i >= 0 {
		rest := msg[i+len("Go struct field "):]
		if j := strings.IndexByte(rest, ' '); j >= 0 {
			rest = rest[:j]
		}
		if k := strings.IndexByte(rest, '.'); k >= 0 {
			return rest[k+1:]
		}
		return rest
	}
	return ""
}

func decodeDetail(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "unknown field"):
		return errors.New("unknown field")
	case strings.Contains(msg, "duplicate field"), strings.Contains(msg, "already set in map"):
		return errors.New("duplicate field")
	}
	msg = strings.TrimPrefix(msg, "error unmarshaling JSON: ")
	msg = strings.TrimPrefix(msg, "while decoding JSON: ")
	return errors.New(msg)
}

// strictFieldPath names the field of a strict-decoding error with its path
// (`results[0].resource`), by walking the document along the Go type.
func strictFieldPath(doc []byte, target any, err error) string {
	field := decodeField(err)
	var generic any
	if yaml.Unmarshal(doc, &generic) != nil {
		return field
	}
	if p := unknownField(generic, reflect.TypeOf(target), ""); p != "" {
		return p
	}
	return field
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// unknownField returns the path of the first field of v (in document order
// of a depth-first walk) that the type t does not have.
func unknownField(v any, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		if t.Implements(unmarshalerType) {
			return ""
		}
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return ""
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		fields := map[string]reflect.Type{}
		collectFields(t, fields)
		for _, k := range sortedKeys(m) {
			ft, ok := fields[k]
			p := k
			if path != "" {
				p = path + "." + k
			}
			if !ok {
				return p
			}
			if r := unknownField(m[k], ft, p); r != "" {
				return r
			}
		}
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok || t.Elem().Kind() == reflect.Uint8 {
			return ""
		}
		for i, e := range l {
			if r := unknownField(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); r != "" {
				return r
			}
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		for _, k := range sortedKeys(m) {
			if r := unknownField(m[k], t.Elem(), path+"."+k); r != "" {
				return r
			}
		}
	}
	return ""
}

// collectFields maps the JSON names of a struct's fields (inline embedded
// structs included) to their types.
func collectFields(t reflect.Type, out map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}

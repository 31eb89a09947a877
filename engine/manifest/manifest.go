// Package manifest reads Kubernetes-style manifests: files and folders of
// multi-document YAML or JSON, `v1 List` objects, and stdin. It produces
// JSON-shaped documents (map[string]any with int64/float64 numbers, as
// unstructured Kubernetes objects) and errors that name the file and the
// document.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/arbiter-pdp/arbiter/internal/jsonenc"
	"github.com/arbiter-pdp/arbiter/internal/parallel"
)

// Document is one object read from a manifest.
type Document struct {
	// File is the path the document was read from ("-" for stdin).
	File string
	// Index is the 1-based position of the document in its file (items of a
	// List count as separate documents and share their list's index).
	Index int
	// Object is the document as JSON-shaped data.
	Object map[string]any
}

// Source names the document for messages: "file.yaml" or "file.yaml#3".
func (d *Document) Source() string {
	if d.Index <= 1 {
		return d.File
	}
	return fmt.Sprintf("%s#%d", d.File, d.Index)
}

// APIVersion returns the document's apiVersion.
func (d *Document) APIVersion() string { return str(d.Object, "apiVersion") }

// Kind returns the document's kind.
func (d *Document) Kind() string { return str(d.Object, "kind") }

// Name returns metadata.name.
func (d *Document) Name() string { return meta(d.Object, "name") }

// Namespace returns metadata.namespace.
func (d *Document) Namespace() string { return meta(d.Object, "namespace") }

func str(m map[string]any, k string) string {
	s, _ := m[k].(string)
	return s
}

func meta(m map[string]any, k string) string {
	md, _ := m["metadata"].(map[string]any)
	return str(md, k)
}

// Error is a manifest that could not be read.
type Error struct {
	File  string
	Index int
	Err   error
}

func (e *Error) Error() string {
	if e.Index > 0 {
		return fmt.Sprintf("%s (document %d): %v", e.File, e.Index, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// IsManifestFile says whether a file name is read when walking a folder.
func IsManifestFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Files expands paths into the manifest files they denote: a file is taken
// as is (whatever its extension), a folder is walked recursively in lexical
// order for *.yaml, *.yml and *.json, skipping hidden folders below it. "-"
// stands for stdin.
func Files(paths ...string) ([]string, error) {
	var out []string
	for _, p := range paths {
		if p == "-" {
			out = append(out, p)
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		var files []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != p && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				return nil
			}
			if IsManifestFile(d.Name()) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		out = append(out, files...)
	}
	return out, nil
}

// ReadPaths reads every document under paths (see Files). stdin is read
// from the given reader.
func ReadPaths(stdin io.Reader, paths ...string) ([]*Document, error) {
	files, err := Files(paths...)
	if err != nil {
		return nil, err
	}
	var docs []*Document
	for _, f := range files {
		data, err := readFile(stdin, f)
		if err != nil {
			return nil, err
		}
		d, err := Parse(f, data)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

func readFile(stdin io.Reader, f string) ([]byte, error) {
	var data []byte
	var err error
	if f == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(f)
	}
	if err != nil {
		return nil, &Error{File: f, Err: err}
	}
	return data, nil
}

// Parse splits data (YAML, multi-document YAML, or JSON) into documents.
// Empty documents are skipped; `kind: List` (and `*List`) objects are
// expanded into their items. A document that is not an object is an error.
func Parse(file string, data []byte) ([]*Document, error) {
	// Split first (cheap), then decode the documents in parallel: YAML
	// decoding dominates the cost of large inputs (helm template output).
	raws, index, err := SplitDocuments(data)
	if err != nil {
		return nil, &Error{File: file, Index: index, Err: err}
	}
	objs := make([]map[string]any, len(raws))
	errs := make([]error, len(raws))
	parallel.ForGrain(len(raws), 16, func(i int) { objs[i], errs[i] = Decode(raws[i]) })
	var docs []*Document
	for i, obj := range objs {
		index := i + 1
		if errs[i] != nil {
			return nil, &Error{File: file, Index: index, Err: errs[i]}
		}
		held, err := objectsOf(obj)
		if err != nil {
			return nil, &Error{File: file, Index: index, Err: err}
		}
		for _, o := range held {
			docs = append(docs, &Document{File: file, Index: index, Object: o})
		}
	}
	return docs, nil
}

// objectsOf returns the objects a decoded document holds: none for an
// empty one, the items of a List, or the document itself.
func objectsOf(obj map[string]any) ([]map[string]any, error) {
	if obj == nil {
		return nil, nil
	}
	items, ok := listItems(obj)
	if !ok {
		return []map[string]any{obj}, nil
	}
	out := make([]map[string]any, len(items))
	for j, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("items[%d]: not an object", j)
		}
		out[j] = m
	}
	return out, nil
}

// RawDocument is a document with its head, kept as JSON when it is plain
// YAML (transcoded without building its data: compact, for callers that
// pass documents on or decode them one at a time), as data otherwise.
// Exactly one of JSON and Object is set.
type RawDocument struct {
	File   string
	Index  int
	Head   Head
	JSON   []byte
	Object map[string]any
}

// Content returns the document as data: Object, or JSON decoded (the data
// Parse gives).
func (d *RawDocument) Content() (map[string]any, error) {
	if d.Object != nil {
		return d.Object, nil
	}
	return DecodeJSON(d.JSON)
}

// Encoded returns the document as JSON: JSON, or Object encoded.
func (d *RawDocument) Encoded() ([]byte, error) {
	if d.JSON != nil {
		return d.JSON, nil
	}
	return jsonenc.AppendValue(nil, d.Object)
}

// Source names the document for messages, as Document.Source does.
func (d *RawDocument) Source() string {
	return (&Document{File: d.File, Index: d.Index}).Source()
}

// ReadPathsJSON reads every document under paths as ReadPaths does, plain
// YAML manifests as JSON, transcoded without building their data (see
// transcodeYAMLFast), the rest as data.
func ReadPathsJSON(stdin io.Reader, paths ...string) ([]*RawDocument, error) {
	files, err := Files(paths...)
	if err != nil {
		return nil, err
	}
	var docs []*RawDocument
	for _, f := range files {
		data, err := readFile(stdin, f)
		if err != nil {
			return nil, err
		}
		d, err := ParseJSON(f, data)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

// ParseJSON is Parse giving plain YAML documents as JSON (see
// ReadPathsJSON).
func ParseJSON(file string, data []byte) ([]*RawDocument, error) {
	raws, index, err := SplitDocuments(data)
	if err != nil {
		return nil, &Error{File: file, Index: index, Err: err}
	}
	out := make([][]*RawDocument, len(raws))
	errs := make([]error, len(raws))
	parallel.ForGrain(len(raws), 16, func(i int) { out[i], errs[i] = parseJSONDocument(file, i+1, raws[i]) })
	var docs []*RawDocument
	for i, d := range out {
		if errs[i] != nil {
			return nil, errs[i]
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

func parseJSONDocument(file string, index int, raw []byte) ([]*RawDocument, error) {
	if js, head, ok := transcodeYAMLFast(make([]byte, 0, len(raw)), raw); ok && !strings.HasSuffix(head.Kind, "List") {
		return []*RawDocument{{File: file, Index: index, Head: head, JSON: js}}, nil
	}
	obj, err := Decode(raw)
	var objs []map[string]any
	if err == nil {
		objs, err = objectsOf(obj)
	}
	if err != nil {
		return nil, &Error{File: file, Index: index, Err: err}
	}
	docs := make([]*RawDocument, len(objs))
	for j, o := range objs {
		docs[j] = &RawDocument{File: file, Index: index, Head: headOf(o), Object: o}
	}
	return docs, nil
}

// SplitDocuments splits a YAML stream at its "---" lines as Kubernetes'
// YAMLReader does (FuzzSplitDocuments compares them), empty documents
// included; on an error (a separator followed by anything but a comment),
// index is the number of the document it is in. It is Arbiter's one YAML
// document splitter: Parse, ParseJSON, the `arbiter test` loaders and the
// tests use it (SplitNonEmptyDocuments drops the empty documents).
func SplitDocuments(data []byte) (docs [][]byte, index int, err error) {
	if bytes.IndexByte(data, '\r') >= 0 {
		// YAMLReader drops the \r of \r\n line ends: let it.
		return splitDocumentsReader(data)
	}
	docStart, pos := 0, 0
	for pos < len(data) {
		line, next := data[pos:], len(data)
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line, next = line[:i], pos+i+1
		}
		if bytes.HasPrefix(line, []byte("---")) {
			if trimmed := bytes.TrimSpace(line[3:]); len(trimmed) > 0 && trimmed[0] != '#' {
				return nil, len(docs) + 1, fmt.Errorf("invalid Yaml document separator: %s", trimmed)
			}
			// A separator ends a non-empty document; at the start of one,
			// YAMLReader keeps it as the document's first line.
			if pos > docStart {
				docs = append(docs, data[docStart:pos])
				docStart = next
			}
		}
		pos = next
	}
	if len(data) > docStart {
		docs = append(docs, data[docStart:])
	}
	return docs, 0, nil
}

// SplitNonEmptyDocuments is SplitDocuments without the documents that hold
// only blank lines, comments and separators (IsEmptyDocument), as Kyverno's
// CLI reads a multi-document file. An error names the document it is in.
// (Kyverno's own splitter stops silently at an invalid separator, dropping
// what follows; this one says so.)
func SplitNonEmptyDocuments(data []byte) ([][]byte, error) {
	docs, index, err := SplitDocuments(data)
	if err != nil {
		return nil, fmt.Errorf("document %d: %w", index, err)
	}
	out := docs[:0]
	for _, d := range docs {
		if !IsEmptyDocument(d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// IsEmptyDocument reports whether doc holds nothing but blank lines,
// comments and document separators ("---", optionally followed by a
// comment), which a YAML document may begin with.
func IsEmptyDocument(doc []byte) bool {
	for len(doc) > 0 {
		line := doc
		if i := bytes.IndexByte(doc, '\n'); i >= 0 {
			line, doc = doc[:i], doc[i+1:]
		} else {
			doc = nil
		}
		line = bytes.TrimSpace(line)
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok {
			line = bytes.TrimSpace(rest)
		}
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

// splitDocumentsReader is SplitDocuments by Kubernetes' YAMLReader.
func splitDocumentsReader(data []byte) (docs [][]byte, index int, err error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for index := 1; ; index++ {
		raw, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, 0, nil
		}
		if err != nil {
			return nil, index, err
		}
		docs = append(docs, raw)
	}
}

// Decode converts one YAML or JSON document to JSON-shaped data. It returns
// nil for an empty document.
func Decode(raw []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if obj, ok := decodeYAMLFast(raw); ok {
		return obj, nil
	}
	return decodeYAMLFull(raw)
}

// decodeYAMLFull is Decode by sigs.k8s.io/yaml: YAML to JSON, then JSON to
// data.
func decodeYAMLFull(raw []byte) (map[string]any, error) {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	js = bytes.TrimSpace(js)
	if bytes.Equal(js, []byte("null")) {
		return nil, nil
	}
	if len(js) == 0 || js[0] != '{' {
		return nil, fmt.Errorf("document is not an object")
	}
	// YAMLToJSON's output is valid JSON: the lean decoder (checked
	// against Kubernetes' by FuzzDecodeJSON) turns it into the same data.
	return DecodeJSON(js)
}

// DecodeJSON decodes one JSON object with Kubernetes number handling
// (integers as int64, other numbers as float64).
func DecodeJSON(js []byte) (map[string]any, error) {
	v, err := decodeJSONValue(js)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("document is not an object")
	}
	return obj, nil
}

func listItems(obj map[string]any) ([]any, bool) {
	kind := str(obj, "kind")
	if !strings.HasSuffix(kind, "List") {
		return nil, false
	}
	if items, ok := obj["items"].([]any); ok {
		return items, true
	}
	if kind == "List" && obj["items"] == nil {
		return nil, true
	}
	return nil, false
}

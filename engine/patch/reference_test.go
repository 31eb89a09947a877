package patch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// referenceResult is what kube-apiserver's JSONPatch mutation makes of a
// patch: evanphx's Patch.Apply on the object's JSON, with the operations
// built as k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch
// builds them (op, path and from through strconv.Quote, from only when not
// empty, value only when set, written as JSON).
type referenceResult struct {
	out      []byte // the patched document, when err and panicked are nil
	err      error
	panicked any
}

// buildReference builds evanphx operations as json_patch.go does, or
// reports that a value has no JSON.
func buildReference(ops []Op) (jsonpatch.Patch, bool) {
	raw := func(s string) *json.RawMessage {
		m := json.RawMessage(s)
		return &m
	}
	p := make(jsonpatch.Patch, 0, len(ops))
	for _, op := range ops {
		o := jsonpatch.Operation{}
		o["op"] = raw(strconv.Quote(op.Op))
		o["path"] = raw(strconv.Quote(op.Path))
		if len(op.From) > 0 {
			o["from"] = raw(strconv.Quote(op.From))
		}
		if _, absent := op.Value.(NoValue); !absent {
			b, err := json.Marshal(op.Value)
			if err != nil {
				return nil, false
			}
			o["value"] = raw(string(b))
		}
		p = append(p, o)
	}
	return p, true
}

// reference applies ops to obj with evanphx, with AccumulatedCopySizeLimit
// set to limit for the call.
func reference(obj map[string]any, ops []Op, limit int64) (referenceResult, bool) {
	doc, err := json.Marshal(obj)
	if err != nil {
		return referenceResult{}, false
	}
	return referenceDoc(doc, ops, limit)
}

// referenceDoc applies ops to a JSON document with evanphx.
func referenceDoc(doc []byte, ops []Op, limit int64) (referenceResult, bool) {
	p, ok := buildReference(ops)
	if !ok {
		return referenceResult{}, false
	}
	saved := jsonpatch.AccumulatedCopySizeLimit
	jsonpatch.AccumulatedCopySizeLimit = limit
	defer func() { jsonpatch.AccumulatedCopySizeLimit = saved }()
	var r referenceResult
	func() {
		defer func() { r.panicked = recover() }()
		r.out, r.err = p.Apply(doc)
	}()
	return r, true
}

// checkAgainstReference applies ops to obj with ApplyJSONPatch and with
// evanphx and fails t unless they agree: the same document, the same error
// text (prefixed "JSON Patch: "), a no-op for a failed test, ErrPanic where
// evanphx panics, ErrNotObject where its result is no object. It also fails
// t when ApplyJSONPatch modified obj or the operations' values. It reports
// what the reference did, for the callers' statistics.
func checkAgainstReference(t testing.TB, obj map[string]any, ops []Op, limit int64) string {
	t.Helper()
	ref, ok := reference(obj, ops, limit)
	if !ok {
		return "skipped"
	}
	objBefore := deepCopy(obj)
	opsBefore := deepCopyOps(ops)
	got, err := Options{MaxCopyBytes: limit}.ApplyJSONPatch(obj, ops)
	if !reflect.DeepEqual(obj, objBefore) {
		t.Fatalf("ApplyJSONPatch modified its input\nops: %s\nbefore: %s\nafter:  %s", showOps(ops), show(objBefore), show(obj))
	}
	if !reflect.DeepEqual(deepCopyOps(ops), opsBefore) {
		t.Fatalf("ApplyJSONPatch modified the operations' values\nops: %s", showOps(ops))
	}
	ctx := func() string { return fmt.Sprintf("\nobject: %s\nops: %s", show(obj), showOps(ops)) }
	switch {
	case ref.panicked != nil:
		if errors.Is(err, ErrPanic) {
			return "panic"
		}
		// evanphx's random map order may find a differing member first.
		if err == nil && sameMapIdentity(got, obj) && hasTest(ops) {
			return "panic"
		}
		t.Fatalf("evanphx panics (%v); ApplyJSONPatch = %s, %v%s", ref.panicked, show(got), err, ctx())
	case errors.Is(ref.err, jsonpatch.ErrTestFailed):
		if err != nil || !sameMapIdentity(got, obj) {
			t.Fatalf("evanphx: %v (a no-op); ApplyJSONPatch = %s, %v%s", ref.err, show(got), err, ctx())
		}
		return "test failed"
	case ref.err != nil:
		if err == nil || err.Error() != "JSON Patch: "+ref.err.Error() {
			t.Fatalf("evanphx error:\n  JSON Patch: %v\nApplyJSONPatch = %s, error:\n  %v%s", ref.err, show(got), err, ctx())
		}
		return "error"
	}
	if b := bytes.TrimSpace(ref.out); len(b) == 0 || b[0] != '{' {
		if !errors.Is(err, ErrNotObject) {
			t.Fatalf("evanphx result %s is no object; ApplyJSONPatch = %s, %v%s", ref.out, show(got), err, ctx())
		}
		return "not an object"
	}
	if err != nil {
		t.Fatalf("evanphx result %s; ApplyJSONPatch error %v%s", ref.out, err, ctx())
	}
	if leak := findRawNull(got); leak != "" {
		t.Fatalf("result holds an internal null at %s%s", leak, ctx())
	}
	gotJSON, jerr := json.Marshal(got)
	if jerr != nil {
		t.Fatalf("result does not marshal: %v%s", jerr, ctx())
	}
	if !sameJSON(gotJSON, ref.out) {
		t.Fatalf("results differ\nevanphx:        %s\nApplyJSONPatch: %s%s", ref.out, gotJSON, ctx())
	}
	return "applied"
}

// sameJSON reports whether two JSON texts are the same, or decode to Equal
// values (a key or string with invalid UTF-8 is written "\ufffd" by
// encoding/json, as U+FFFD itself once it went through a decoder).
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	x, err1 := decodeValue(a)
	y, err2 := decodeValue(b)
	return err1 == nil && err2 == nil && Equal(x, y)
}

func hasTest(ops []Op) bool {
	for _, op := range ops {
		if op.Op == "test" {
			return true
		}
	}
	return false
}

func sameMapIdentity(a, b map[string]any) bool {
	return a != nil && b != nil && reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func findRawNull(v any) string {
	switch t := v.(type) {
	case rawNull:
		return "(here)"
	case map[string]any:
		for k, e := range t {
			if p := findRawNull(e); p != "" {
				return "/" + EscapeToken(k) + p
			}
		}
	case []any:
		for i, e := range t {
			if p := findRawNull(e); p != "" {
				return "/" + strconv.Itoa(i) + p
			}
		}
	}
	return ""
}

func deepCopy[T any](v T) T {
	return any(deepCopyAny(v)).(T)
}

func deepCopyAny(v any) any {
	switch t := v.(type) {
	case map[string]any:
		if t == nil {
			return t
		}
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopyAny(e)
		}
		return m
	case []any:
		if t == nil {
			return t
		}
		s := make([]any, len(t))
		for i, e := range t {
			s[i] = deepCopyAny(e)
		}
		return s
	}
	return v
}

func deepCopyOps(ops []Op) []Op {
	c := make([]Op, len(ops))
	for i, op := range ops {
		c[i] = op
		c[i].Value = deepCopyAny(op.Value)
	}
	return c
}

func show(v any) string {
	if m, ok := v.(map[string]any); ok && m == nil {
		return "<nil>"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

func showOps(ops []Op) string {
	b, err := Marshal(ops)
	if err != nil {
		return fmt.Sprintf("%#v", ops)
	}
	return string(b)
}

// decodeObject decodes JSON as the engine does (manifest.DecodeJSON: int64
// for integers, float64 otherwise).
func decodeObject(t testing.TB, js string) map[string]any {
	t.Helper()
	obj, err := manifest.DecodeJSON([]byte(js))
	if err != nil {
		t.Fatalf("decode %s: %v", js, err)
	}
	return obj
}

// decodeValue decodes one JSON value as the engine does.
func decodeValue(js []byte) (any, error) {
	obj, err := manifest.DecodeJSON(append(append([]byte(`{"v":`), js...), '}'))
	if err != nil {
		return nil, err
	}
	return obj["v"], nil
}

// decodeOps reads a JSON Patch document into operations: a missing value is
// NoValue; op, path and from must be strings when present.
func decodeOps(js []byte) ([]Op, error) {
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, err
	}
	ops := make([]Op, 0, len(raw))
	for _, r := range raw {
		var op Op
		for _, f := range []struct {
			name string
			dst  *string
		}{{"op", &op.Op}, {"path", &op.Path}, {"from", &op.From}} {
			if m, ok := r[f.name]; ok {
				if err := json.Unmarshal(m, f.dst); err != nil {
					return nil, err
				}
			}
		}
		op.Value = NoValue{}
		if m, ok := r["value"]; ok {
			v, err := decodeValue(m)
			if err != nil {
				return nil, err
			}
			op.Value = v
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// corpus reads the realistic objects of testdata.
func corpus(t testing.TB) map[string]string {
	t.Helper()
	files, err := filepath.Glob("testdata/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata: %v", err)
	}
	c := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c[filepath.Base(f)] = string(b)
	}
	return c
}

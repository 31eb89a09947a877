package kyvernocel

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	gojmespath "github.com/kyverno/go-jmespath"
	"sigs.k8s.io/yaml"
)

// TestJMESPathDifferential compares the hand-written evaluator (jpSearch)
// with github.com/kyverno/go-jmespath, the library Kyverno's CLI evaluates
// globalContextEntries fieldPath and projections with, on every
// expression/data pair of this package's tests and testdata, the library's
// own compliance suite and a generated corpus. Where they differ, the library
// is the reference. Every difference found is classified below
// (jpKnownDifference); an unclassified one fails the test.
func TestJMESPathDifferential(t *testing.T) {
	type pair struct {
		source string
		expr   string
		data   any
	}
	var pairs []pair
	add := func(source, expr string, data any) {
		pairs = append(pairs, pair{source, expr, jpNormalize(t, data)})
	}

	// 1. testdata/jmespath/cases.yaml: every expression against the data of
	// its own group, and against every other group's data.
	raw, err := os.ReadFile("testdata/jmespath/cases.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var groups []struct {
		Data  any `json:"data"`
		Cases []struct {
			Expr string `json:"expr"`
		} `json:"cases"`
	}
	if err := yaml.Unmarshal(raw, &groups); err != nil {
		t.Fatal(err)
	}
	for i, g := range groups {
		for _, c := range g.Cases {
			for j, h := range groups {
				src := "cases.yaml"
				if i != j {
					src = "cases.yaml (cross)"
				}
				add(src, c.Expr, h.Data)
			}
		}
	}

	// 2. globalContextEntries of the test inputs under testdata, and the
	// expressions of load_test.go and the chainsaw GlobalContextEntries.
	files, _ := filepath.Glob("testdata/*/kyverno-test.yaml")
	more, _ := filepath.Glob("testdata/suites/*/kyverno-test.yaml")
	files = append(files, more...)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tc TestContext
		if err := yaml.Unmarshal(raw, &tc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, e := range tc.GlobalContextEntries {
			bare := e
			bare.FieldPath, bare.Projections = "", nil
			root, err := ResolveGlobalContextEntry(filepath.Dir(f), bare)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if e.FieldPath != "" {
				add(f, e.FieldPath, root)
				if root, err = jpSearch(e.FieldPath, root); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			}
			for _, p := range e.Projections {
				add(f, p.Path, root)
			}
		}
	}
	for _, e := range []string{"x[", "to_upper(x)", "x", "items | length(@)"} {
		add("load_test.go", e, map[string]any{"x": 1.0, "items": []any{"a", "b"}})
	}

	// 3. The library's compliance suite (the JMESPath specification's).
	if dir := jpModuleDir(t); dir != "" {
		suites, _ := filepath.Glob(filepath.Join(dir, "compliance", "*.json"))
		for _, f := range suites {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var groups []struct {
				Given any `json:"given"`
				Cases []struct {
					Expression string `json:"expression"`
				} `json:"cases"`
			}
			if err := json.Unmarshal(raw, &groups); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, g := range groups {
				for _, c := range g.Cases {
					add("compliance/"+filepath.Base(f), c.Expression, g.Given)
				}
			}
		}
	}

	// 4. A generated corpus over a few documents.
	docs := jpGenDocs()
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 30000; i++ {
		add("generated", jpGenExpr(r, 0), docs[i%len(docs)])
	}

	type diff struct {
		pair
		old, lib string
	}
	var (
		same, errBoth  int
		known          = map[string][]diff{}
		unknown        []diff
		msgDiffs       = map[string]int{}
		exampleMsgDiff = map[string]string{}
	)
	for _, p := range pairs {
		oldV, oldErr := jpSafe(func() (any, error) { return jpSearch(p.expr, p.data) })
		libV, libErr := jpSafe(func() (any, error) { return gojmespath.Search(p.expr, p.data) })
		switch {
		case oldErr != nil && libErr != nil:
			errBoth++
			if oldErr.Error() != libErr.Error() {
				k := jpErrClass(libErr)
				msgDiffs[k]++
				if _, ok := exampleMsgDiff[k]; !ok {
					exampleMsgDiff[k] = fmt.Sprintf("%q: old %q, library %q", p.expr, oldErr, libErr)
				}
			}
			continue
		case oldErr == nil && libErr == nil && reflect.DeepEqual(jpNormalize(t, oldV), jpNormalize(t, libV)):
			same++
			continue
		}
		d := diff{pair: p, old: jpShow(oldV, oldErr), lib: jpShow(libV, libErr)}
		if os.Getenv("JP_DIFF_ALL") != "" && !strings.HasPrefix(p.source, "generated") {
			t.Logf("difference: %s", jpShowDiff(p.source, p.expr, p.data, jpShow(oldV, oldErr), jpShow(libV, libErr)))
		}
		if class := jpKnownDifference(p.expr, jpNormalize(t, oldV), oldErr, jpNormalize(t, libV), libErr); class != "" {
			known[class] = append(known[class], d)
		} else {
			unknown = append(unknown, d)
		}
	}
	t.Logf("%d pairs: %d same result, %d errors in both, %d known differences, %d unclassified", len(pairs), same, errBoth, len(pairs)-same-errBoth-len(unknown), len(unknown))
	classes := make([]string, 0, len(known))
	for c := range known {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	for _, c := range classes {
		t.Logf("known difference %q: %d pairs, e.g. %s", c, len(known[c]), jpShowDiff(known[c][0].source, known[c][0].expr, known[c][0].data, known[c][0].old, known[c][0].lib))
	}
	msgClasses := make([]string, 0, len(msgDiffs))
	for c := range msgDiffs {
		msgClasses = append(msgClasses, c)
	}
	sort.Strings(msgClasses)
	for _, c := range msgClasses {
		t.Logf("error text differs (%s): %d pairs, e.g. %s", c, msgDiffs[c], exampleMsgDiff[c])
	}
	seen := map[string]bool{}
	for _, d := range unknown {
		key := d.expr + "\x00" + d.old + "\x00" + d.lib
		if seen[key] {
			continue
		}
		seen[key] = true
		t.Errorf("unclassified difference: %s", jpShowDiff(d.source, d.expr, d.data, d.old, d.lib))
	}
}

// jpKnownDifference names the class of a difference between the old
// evaluator and the library, or "" when it is not a known one. The classes:
//
//   - missing key: the library (Kyverno's fork) fails with NotFoundError
//     ("Unknown key \"k\" in path") when a field is missing from an object
//     at the top of an expression (outside a projection, pipe, function
//     argument, ||, &&, !, comparison or multiselect, which turn it into
//     null); the specification says null. Kyverno's CLI passes the error on.
//   - error swallowed: the library's flatten ([]), filter ([?...]) and
//     object-value (.*) projections turn any error of their left side (an
//     unknown function, a type error) into null; the old evaluator and the
//     specification pass it on.
//   - zero-argument not_null()/merge(): an arity error in the library, as
//     the specification requires; the old evaluator returned null and {}.
//   - expression reference argument: type(&x) and to_number(&x) fail with
//     "unknown type" in the library; the old evaluator said "expref" / null.
//   - non-JSON literal: the library rejects a `...` literal that is not JSON
//     (empty, or the legacy unquoted-string form); the old evaluator took
//     the text as a string.
//   - library panic: contains() and comparisons of values Go cannot compare
//     (objects, arrays) panic in the library.
//   - avg of an empty array: NaN in the library; the specification and the
//     old evaluator say null.
//   - object member order: keys(), values() and .* follow Go's map order in
//     the library (the specification leaves it unspecified); the old
//     evaluator sorted by key.
//   - sort of an empty array: [] in the library (correct); the old evaluator
//     returned null.
//   - unknown function found when called: the old evaluator refused an
//     unknown function when compiling; the library only when it calls it,
//     so `a || nope(@)` is a when a is truthy.
//   - invalid syntax accepted: the library's parser takes expressions the
//     grammar forbids (`@@`, `(@)(@)`, two adjacent literals, `[3[:]`...),
//     which the old evaluator refused.
func jpKnownDifference(expr string, oldV any, oldErr error, libV any, libErr error) string {
	var nf gojmespath.NotFoundError
	switch {
	case oldErr == nil && errors.As(libErr, &nf):
		return "missing key"
	case oldErr == nil && libErr != nil && strings.HasPrefix(libErr.Error(), "panic: "):
		return "library panic"
	case oldErr == nil && libErr != nil && libErr.Error() == "Invalid arity." && (strings.Contains(expr, "not_null()") || strings.Contains(expr, "merge()")):
		return "zero-argument not_null()/merge()"
	case oldErr == nil && libErr != nil && libErr.Error() == "unknown type" && strings.Contains(expr, "&"):
		return "expression reference argument"
	case oldErr == nil && libErr != nil && strings.Contains(expr, "`") && jpIsJSONError(libErr):
		return "non-JSON literal"
	case oldErr != nil && libErr == nil && strings.Contains(oldErr.Error(), "unknown function"):
		return "unknown function found when called"
	case oldErr != nil && libErr == nil && (strings.Contains(oldErr.Error(), "unexpected token") || strings.Contains(oldErr.Error(), "invalid function call")):
		return "invalid syntax accepted"
	case oldErr != nil && libErr == nil && jpHasProjection(expr):
		return "error swallowed"
	case oldErr == nil && libErr == nil:
		if f, ok := libV.(float64); ok && math.IsNaN(f) && strings.Contains(expr, "avg(") {
			return "avg of an empty array"
		}
		if (strings.Contains(expr, ".*") || strings.Contains(expr, "keys(") || strings.Contains(expr, "values(")) && jpSameMultiset(oldV, libV) {
			return "object member order"
		}
		if oldV == nil && reflect.DeepEqual(libV, []any{}) && strings.Contains(expr, "sort(") {
			return "sort of an empty array"
		}
		if jpHasProjection(expr) && (oldV == nil) != (libV == nil) {
			// an error swallowed inside (null), or a null the old one
			// produced by an error it swallowed the same way
			return "error swallowed"
		}
		if strings.Contains(expr, ".*") || strings.Contains(expr, "keys(") || strings.Contains(expr, "values(") {
			// order changes what a later slice or index picks
			return "object member order"
		}
	}
	return ""
}

func jpHasProjection(expr string) bool {
	return strings.Contains(expr, "[]") || strings.Contains(expr, "[?") || strings.Contains(expr, ".*") || strings.Contains(expr, "*")
}

func jpIsJSONError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "JSON input") || strings.HasPrefix(s, "invalid character")
}

// jpSameMultiset reports whether a and b are equal once every array in
// them is sorted (by its JSON text).
func jpSameMultiset(a, b any) bool {
	return reflect.DeepEqual(jpSortedDeep(a), jpSortedDeep(b))
}

func jpSortedDeep(v any) any {
	switch v := v.(type) {
	case []any:
		out := make([]any, len(v))
		keys := make([]string, len(v))
		for i, e := range v {
			out[i] = jpSortedDeep(e)
		}
		idx := make([]int, len(v))
		for i := range idx {
			idx[i] = i
			b, _ := json.Marshal(out[i])
			keys[i] = string(b)
		}
		sort.SliceStable(idx, func(i, j int) bool { return keys[idx[i]] < keys[idx[j]] })
		sorted := make([]any, len(v))
		for i, j := range idx {
			sorted[i] = out[j]
		}
		return sorted
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = jpSortedDeep(e)
		}
		return out
	}
	return v
}

func jpErrClass(err error) string {
	s := err.Error()
	if i := strings.IndexAny(s, ":0123456789"); i > 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// jpSafe calls f, turning a panic into an error.
func jpSafe(f func() (any, error)) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

func jpShow(v any, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	b, jerr := json.Marshal(v)
	if jerr != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

func jpShowDiff(source, expr string, data any, old, lib string) string {
	d, _ := json.Marshal(data)
	ds := string(d)
	if len(ds) > 200 {
		ds = ds[:200] + "..."
	}
	return fmt.Sprintf("[%s] %q on %s: old %s, library %s", source, expr, ds, old, lib)
}

// jpNormalize gives v the shape encoding/json decodes to.
func jpNormalize(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// jpModuleDir is the library's module directory, or "" (logged) when the
// go command cannot say.
func jpModuleDir(t *testing.T) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kyverno/go-jmespath").Output()
	if err != nil {
		t.Logf("no compliance suite: go list: %v", err)
		return ""
	}
	return strings.TrimSpace(string(out))
}

func jpGenDocs() []any {
	var docs []any
	for _, s := range []string{
		`{"a": {"b": {"c": [1, 2, {"d": "x"}]}, "e": null}, "f": [true, false, null], "g": "str", "h": 3.5}`,
		`{"people": [{"name": "a", "age": 30, "tags": ["x", "y"]}, {"name": "b", "age": 20, "tags": []}, {"name": "c", "age": null}, {"other": 1}], "foo": {"bar": "baz", "n": -2}}`,
		`[[1, 2, [3, [4]]], [], "s", {"a": 1}, 0, -1.5, null, true]`,
		`{"items": [{"metadata": {"name": "d1", "labels": {"app": "web"}}, "spec": {"replicas": 2}}, {"metadata": {"name": "d2", "labels": {}}, "spec": {"replicas": 0}}], "kind": "List"}`,
		`"a string"`,
		`[3, 1, 2, 2.5, -7, 0]`,
		`["b", "a", "c", ""]`,
		`{"a": "1", "b": "x", "c": [], "d": {}, "e": 0, "f": false, "g": ""}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			panic(err)
		}
		docs = append(docs, v)
	}
	return docs
}

var (
	jpGenFields = []string{"a", "b", "c", "d", "e", "f", "g", "h", "people", "name", "age", "tags", "foo", "bar", "n", "items", "metadata", "labels", "app", "spec", "replicas", "kind", "other", `"a"`, `"with space"`, `"\u0061"`}
	jpGenLits   = []string{"`1`", "`0`", "`-1`", "`2.5`", "`\"x\"`", "`\"\"`", "`null`", "`true`", "`false`", "`[]`", "`{}`", "`[1, \"a\"]`", "`{\"a\": 1}`", "'x'", "''", "'a'", "`\"1\"`", "`\"b\"`", "`[3, 1, 2]`", "`[\"b\", \"a\"]`"}
	jpGenFuncs  = map[string]int{"abs": 1, "avg": 1, "contains": 2, "ceil": 1, "ends_with": 2, "floor": 1, "join": 2, "keys": 1, "length": 1, "map": 2, "max": 1, "max_by": 2, "merge": 2, "min": 1, "min_by": 2, "not_null": 2, "reverse": 1, "sort": 1, "sort_by": 2, "starts_with": 2, "sum": 1, "to_array": 1, "to_string": 1, "to_number": 1, "type": 1, "values": 1, "nope": 1}
	jpGenFnames = func() []string {
		var s []string
		for k := range jpGenFuncs {
			s = append(s, k)
		}
		sort.Strings(s)
		return s
	}()
	jpGenCmps = []string{"==", "!=", "<", "<=", ">", ">="}
)

// jpGenExpr generates a random, mostly well-formed JMESPath expression.
func jpGenExpr(r *rand.Rand, depth int) string {
	if depth > 3 {
		switch r.Intn(3) {
		case 0:
			return jpGenFields[r.Intn(len(jpGenFields))]
		case 1:
			return jpGenLits[r.Intn(len(jpGenLits))]
		default:
			return "@"
		}
	}
	sub := func() string { return jpGenExpr(r, depth+1) }
	field := func() string { return jpGenFields[r.Intn(len(jpGenFields))] }
	num := func() string { return fmt.Sprint(r.Intn(7) - 3) }
	maybe := func(s string) string {
		if r.Intn(2) == 0 {
			return ""
		}
		return s
	}
	switch r.Intn(24) {
	case 0, 1, 2:
		return field()
	case 3:
		return sub() + "." + field()
	case 4:
		return sub() + "[" + num() + "]"
	case 5:
		return sub() + "[" + maybe(num()) + ":" + maybe(num()) + maybe(":"+maybe(num())) + "]"
	case 6:
		return sub() + "[*]" + maybe("."+field())
	case 7:
		return sub() + ".*" + maybe("."+field())
	case 8:
		return sub() + "[]" + maybe("."+field())
	case 9:
		return sub() + "[?" + sub() + " " + jpGenCmps[r.Intn(len(jpGenCmps))] + " " + sub() + "]" + maybe("."+field())
	case 10:
		return sub() + "[?" + sub() + "]"
	case 11:
		return sub() + ".[" + sub() + ", " + sub() + "]"
	case 12:
		return "{" + field() + ": " + sub() + ", x: " + sub() + "}"
	case 13:
		return sub() + " | " + sub()
	case 14:
		return sub() + " || " + sub()
	case 15:
		return sub() + " && " + sub()
	case 16:
		return "!" + sub()
	case 17:
		return "(" + sub() + ")"
	case 18:
		return jpGenLits[r.Intn(len(jpGenLits))]
	case 19:
		return sub() + " " + jpGenCmps[r.Intn(len(jpGenCmps))] + " " + sub()
	case 20, 21:
		name := jpGenFnames[r.Intn(len(jpGenFnames))]
		n := jpGenFuncs[name]
		if r.Intn(10) == 0 {
			n = r.Intn(3)
		}
		args := make([]string, n)
		for i := range args {
			if r.Intn(4) == 0 {
				args[i] = "&" + sub()
			} else {
				args[i] = sub()
			}
		}
		return name + "(" + strings.Join(args, ", ") + ")"
	case 22:
		return "[" + sub() + ", " + sub() + "]"
	default:
		// a mangled expression: cut or doubled
		s := sub()
		if len(s) > 1 && r.Intn(2) == 0 {
			return s[:r.Intn(len(s))]
		}
		return s + s
	}
}

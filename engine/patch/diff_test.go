package patch

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

func TestDiff(t *testing.T) {
	cases := []struct {
		name, from, to, want string
	}{
		{"equal", `{"a":{"b":[1,{"c":null}]}}`, `{"a":{"b":[1,{"c":null}]}}`, `[]`},
		{"numbers equal as JSON", `{"a":1,"b":[2.0]}`, `{"a":1.0,"b":[2]}`, `[]`},
		{"a changed scalar", `{"a":{"b":1,"c":2}}`, `{"a":{"b":1,"c":3}}`, `[{"op":"replace","path":"/a/c","value":3}]`},
		{"keys added and removed in order", `{"m":{"b":1,"d":2,"x":0}}`, `{"m":{"a":0,"c":3,"x":0,"z":{"k":"v"}}}`,
			`[{"op":"add","path":"/m/a","value":0},{"op":"remove","path":"/m/b"},{"op":"add","path":"/m/c","value":3},{"op":"remove","path":"/m/d"},{"op":"add","path":"/m/z","value":{"k":"v"}}]`},
		{"escaped keys", `{"metadata":{"annotations":{}}}`, `{"metadata":{"annotations":{"a.io/x~y":"1"}}}`,
			`[{"op":"add","path":"/metadata/annotations/a.io~1x~0y","value":"1"}]`},
		{"a type change", `{"a":{"b":1}}`, `{"a":[1]}`, `[{"op":"replace","path":"/a","value":[1]}]`},
		{"null to a value and back", `{"a":null,"b":1}`, `{"a":1,"b":null}`,
			`[{"op":"replace","path":"/a","value":1},{"op":"replace","path":"/b","value":null}]`},
		{"a new null member", `{}`, `{"a":null}`, `[{"op":"add","path":"/a","value":null}]`},
		{"an element inserted first", `{"l":["a","b","c"]}`, `{"l":["x","a","b","c"]}`, `[{"op":"add","path":"/l/0","value":"x"}]`},
		{"an element inserted inside", `{"l":["a","b","c"]}`, `{"l":["a","b","x","c"]}`, `[{"op":"add","path":"/l/2","value":"x"}]`},
		{"elements appended", `{"l":["a"]}`, `{"l":["a","b","c"]}`,
			`[{"op":"add","path":"/l/1","value":"b"},{"op":"add","path":"/l/2","value":"c"}]`},
		{"elements removed from the last", `{"l":["a","b","c","d"]}`, `{"l":["a","d"]}`,
			`[{"op":"remove","path":"/l/2"},{"op":"remove","path":"/l/1"}]`},
		{"an element changed inside", `{"l":[{"name":"a","image":"x:1"},{"name":"b","image":"y:1"}]}`, `{"l":[{"name":"a","image":"x:2"},{"name":"b","image":"y:1"}]}`,
			`[{"op":"replace","path":"/l/0/image","value":"x:2"}]`},
		{"changed and added elements", `{"l":[1,2,9]}`, `{"l":[1,3,4,9]}`,
			`[{"op":"replace","path":"/l/1","value":3},{"op":"add","path":"/l/2","value":4}]`},
		{"empty to full", `{}`, `{"a":{"b":[]}}`, `[{"op":"add","path":"/a","value":{"b":[]}}]`},
		{"strings with HTML", `{"a":"x"}`, `{"a":"<&>"}`, `[{"op":"replace","path":"/a","value":"\u003c\u0026\u003e"}]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			from, to := decodeObject(t, c.from), decodeObject(t, c.to)
			ops := Diff(from, to)
			got, err := Marshal(ops)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			checkDiff(t, from, to)
		})
	}
}

// TestDiffOfAppliedPatch diffs a Pod and ApplyJSONPatch's result, which
// shares every untouched subtree with it: the patch names the three changes.
func TestDiffOfAppliedPatch(t *testing.T) {
	pod := decodeObject(t, corpus(t)["pod.json"])
	after, err := ApplyJSONPatch(pod, benchOps())
	if err != nil {
		t.Fatal(err)
	}
	got, err := Marshal(Diff(pod, after))
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"op":"add","path":"/metadata/annotations/policies.example.com~1mutated-by","value":"add-defaults"},` +
		`{"op":"add","path":"/metadata/labels/team","value":"payments"},` +
		`{"op":"replace","path":"/spec/containers/0/image","value":"registry.example.com/shop/web:1.8.4"}]`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	checkDiff(t, pod, after)
}

func TestMarshal(t *testing.T) {
	ops := []Op{
		{Op: "add", Path: "/a", Value: map[string]any{"b": []any{int64(1), 2.5, nil, "<"}}},
		{Op: "remove", Path: "/b"},
		{Op: "remove", Path: "/c", Value: NoValue{}},
		{Op: "test", Path: "/d", Value: nil},
		{Op: "test", Path: "/e", Value: NoValue{}},
		{Op: "move", From: "/x~1y", Path: "/z"},
		{Op: "copy", From: "/z", Path: "/w", Value: int64(3)},
	}
	got, err := Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	const want = `[{"op":"add","path":"/a","value":{"b":[1,2.5,null,"\u003c"]}},{"op":"remove","path":"/b"},{"op":"remove","path":"/c"},` +
		`{"op":"test","path":"/d","value":null},{"op":"test","path":"/e"},{"op":"move","path":"/z","from":"/x~1y"},{"op":"copy","path":"/w","from":"/z","value":3}]`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, err := Marshal(nil); err != nil || string(got) != "[]" {
		t.Errorf("Marshal(nil) = %s, %v; want []", got, err)
	}
	if _, err := Marshal([]Op{{Op: "add", Path: "/a", Value: math.NaN()}}); err == nil {
		t.Error("Marshal of NaN: no error")
	}
	if _, err := jsonpatch.DecodePatch(got); err != nil {
		t.Errorf("evanphx cannot decode %s: %v", got, err)
	}
}

// checkDiff checks the properties of Diff(from, to): from and to unchanged;
// only add, remove and replace; ApplyJSONPatch(from, patch) equals to (when
// its paths reach evanphx, see quoteError); evanphx applying the marshalled
// patch to from's JSON gives to's JSON, as the API server applies a
// webhook's patch; no patch between equal objects; the same patch whether or
// not from and to share subtrees.
func checkDiff(t testing.TB, from, to map[string]any) {
	t.Helper()
	fromBefore, toBefore := deepCopy(from), deepCopy(to)
	ops := Diff(from, to)
	if !reflect.DeepEqual(from, fromBefore) || !reflect.DeepEqual(to, toBefore) {
		t.Fatalf("Diff modified its input")
	}
	patchJSON, err := Marshal(ops)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	ctx := func() string {
		return "\nfrom:  " + show(from) + "\nto:    " + show(to) + "\npatch: " + string(patchJSON)
	}
	decodable := true
	for _, op := range ops {
		switch op.Op {
		case "add", "remove", "replace":
		default:
			t.Fatalf("Diff emitted %q%s", op.Op, ctx())
		}
		if !strings.HasPrefix(op.Path, "/") {
			t.Fatalf("Diff emitted the path %q%s", op.Path, ctx())
		}
		if quoteError(op.Path) != "" {
			decodable = false
		}
	}
	got, err := ApplyJSONPatch(from, ops)
	switch {
	case !decodable:
		if err == nil || !strings.Contains(err.Error(), "failed to decode path") {
			t.Fatalf("a path kube-apiserver cannot decode: ApplyJSONPatch = %v, want its error%s", err, ctx())
		}
	case err != nil:
		t.Fatalf("ApplyJSONPatch(from, Diff(from, to)): %v%s", err, ctx())
	case !Equal(got, to):
		t.Fatalf("ApplyJSONPatch(from, Diff(from, to)) = %s, want to%s", show(got), ctx())
	}
	if !reflect.DeepEqual(from, fromBefore) {
		t.Fatalf("ApplyJSONPatch modified from")
	}
	fromJSON, err1 := json.Marshal(from)
	toJSON, err2 := json.Marshal(to)
	if err1 != nil || err2 != nil {
		t.Fatalf("marshal: %v, %v", err1, err2)
	}
	if decodable {
		if gotJSON, _ := json.Marshal(got); !sameJSON(gotJSON, toJSON) {
			t.Fatalf("ApplyJSONPatch(from, Diff(from, to)) = %s, want %s%s", gotJSON, toJSON, ctx())
		}
	}
	p, err := jsonpatch.DecodePatch(patchJSON)
	if err != nil {
		t.Fatalf("evanphx cannot decode the patch: %v%s", err, ctx())
	}
	out, err := p.Apply(fromJSON)
	if err != nil {
		t.Fatalf("evanphx cannot apply the patch: %v%s", err, ctx())
	}
	if !sameJSON(out, toJSON) {
		t.Fatalf("evanphx applying the patch gives\n  %s\nwant\n  %s%s", out, toJSON, ctx())
	}
	if n := len(Diff(to, to)); n != 0 {
		t.Fatalf("Diff(to, to) has %d operations", n)
	}
	if n := len(Diff(from, fromBefore)); n != 0 {
		t.Fatalf("Diff(from, a copy of from) has %d operations", n)
	}
	unshared, _ := Marshal(Diff(fromBefore, toBefore))
	if !bytes.Equal(unshared, patchJSON) {
		t.Fatalf("Diff of copies differs:\n  %s\nshared:\n  %s", unshared, patchJSON)
	}
}

// FuzzDiff checks Diff's properties on corpus objects and changed versions
// of them: changed by ApplyJSONPatch (sharing subtrees with the original),
// or changed in place in a deep copy (sharing nothing).
func FuzzDiff(f *testing.F) {
	objects := corpusObjects(f)
	for i := range 64 {
		f.Add([]byte{byte(i), byte(i * 3), byte(i * 11), byte(i * 17), byte(i * 29), 2, 7, 1, 8, 2, 8, 1, 8})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{b: data}
		from := objects[g.intn(len(objects))]
		var to map[string]any
		if g.intn(2) == 0 {
			if r, err := ApplyJSONPatch(from, g.ops(from)); err == nil {
				to = r
			}
		}
		if to == nil {
			m, ok := g.mutate(deepCopy(from), 0).(map[string]any)
			if !ok {
				return
			}
			to = m
		}
		checkDiff(t, from, to)
	})
}

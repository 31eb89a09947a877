package patch

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

const base = `{"a":{"b":1,"c":[1,2,3]},"s":"x","n":null,"arr":[{"k":"v"},null],"e":{},"ea":[],"sl/ash":1,"ti~lde":2}`

// TestApplyJSONPatch is the table of operations and errors. Every case is
// also checked against evanphx (checkAgainstReference).
func TestApplyJSONPatch(t *testing.T) {
	const noop = "no-op"
	cases := []struct {
		name  string
		doc   string // base when empty
		patch string
		limit int64
		want  string // the result's JSON, noop, or the start of the error (an error wrapping ErrPanic or ErrNotObject when it names them)
	}{
		// add
		{name: "add a key", patch: `[{"op":"add","path":"/a/d","value":4}]`,
			want: `{"a":{"b":1,"c":[1,2,3],"d":4},"arr":[{"k":"v"},null],"e":{},"ea":[],"n":null,"s":"x","sl/ash":1,"ti~lde":2}`},
		{name: "add replaces an existing key", patch: `[{"op":"add","path":"/a/b","value":{"x":[true]}}]`,
			want: `{"a":{"b":{"x":[true]},"c":[1,2,3]},"arr":[{"k":"v"},null],"e":{},"ea":[],"n":null,"s":"x","sl/ash":1,"ti~lde":2}`},
		{name: "add under a missing parent", patch: `[{"op":"add","path":"/x/y","value":1}]`,
			want: `JSON Patch: add operation does not apply: doc is missing path: "/x/y": missing value`},
		{name: "add under null", patch: `[{"op":"add","path":"/n/x","value":1}]`,
			want: `JSON Patch: add operation does not apply: doc is missing path: "/n/x": missing value`},
		{name: "add under a string", patch: `[{"op":"add","path":"/s/x","value":1}]`,
			want: `JSON Patch: add operation does not apply: doc is missing path: "/s/x": missing value`},
		{name: "add appends with -", patch: `[{"op":"add","path":"/a/c/-","value":4}]`,
			want: `{"a":{"b":1,"c":[1,2,3,4]},"arr":[{"k":"v"},null],"e":{},"ea":[],"n":null,"s":"x","sl/ash":1,"ti~lde":2}`},
		{name: "add inserts at 0", doc: `{"c":[1,2,3]}`, patch: `[{"op":"add","path":"/c/0","value":0}]`, want: `{"c":[0,1,2,3]}`},
		{name: "add at the length appends", doc: `{"c":[1,2,3]}`, patch: `[{"op":"add","path":"/c/3","value":4}]`, want: `{"c":[1,2,3,4]}`},
		{name: "add past the length", doc: `{"c":[1,2,3]}`, patch: `[{"op":"add","path":"/c/4","value":4}]`,
			want: `JSON Patch: error in add for path: '/c/4': Unable to access invalid index: 4: invalid index referenced`},
		{name: "add at -1 appends", doc: `{"c":[1,2,3]}`, patch: `[{"op":"add","path":"/c/-1","value":9}]`, want: `{"c":[1,2,3,9]}`},
		{name: "add at -4 inserts first", doc: `{"c":[1,2,3]}`, patch: `[{"op":"add","path":"/c/-4","value":9}]`, want: `{"c":[9,1,2,3]}`},
		{name: "add at -5", doc: `{"c":[1,2,3]}`, patch: `[{"op":"add","path":"/c/-5","value":9}]`,
			want: `JSON Patch: error in add for path: '/c/-5': Unable to access invalid index: -5: invalid index referenced`},
		{name: "add at +1 and 01", doc: `{"c":[1,2,3]}`, patch: `[{"op":"add","path":"/c/+1","value":"p"},{"op":"add","path":"/c/01","value":"z"}]`,
			want: `{"c":[1,"z","p",2,3]}`},
		{name: "add at a word in an array", doc: `{"c":[1]}`, patch: `[{"op":"add","path":"/c/x","value":1}]`,
			want: `JSON Patch: error in add for path: '/c/x': value was not a proper array index: 'x': strconv.Atoi: parsing "x": invalid syntax`},
		{name: "add through an array index", doc: `{"c":[{"a":1},{"a":2}]}`, patch: `[{"op":"add","path":"/c/-1/b","value":3},{"op":"add","path":"/c/0/b","value":0}]`,
			want: `{"c":[{"a":1,"b":0},{"a":2,"b":3}]}`},
		{name: "add through - fails", doc: `{"c":[{"a":1}]}`, patch: `[{"op":"add","path":"/c/-/b","value":3}]`,
			want: `JSON Patch: add operation does not apply: doc is missing path: "/c/-/b": missing value`},
		{name: "add escaped keys", patch: `[{"op":"add","path":"/sl~1ash","value":"S"},{"op":"add","path":"/ti~0lde","value":"T"},{"op":"add","path":"/a/~01~10~2","value":0}]`,
			want: `{"a":{"b":1,"c":[1,2,3],"~1/0~2":0},"arr":[{"k":"v"},null],"e":{},"ea":[],"n":null,"s":"x","sl/ash":"S","ti~lde":"T"}`},
		{name: "add ignores what precedes the first slash", doc: `{"a":{}}`, patch: `[{"op":"add","path":"a/b","value":1}]`, want: `{"a":{},"b":1}`},
		{name: "add to a path without a slash", doc: `{}`, patch: `[{"op":"add","path":"abc","value":1}]`,
			want: `JSON Patch: add operation does not apply: doc is missing path: "abc": missing value`},
		{name: "add to the whole document", doc: `{}`, patch: `[{"op":"add","path":"","value":{}}]`,
			want: `JSON Patch: add operation does not apply: doc is missing path: "": missing value`},
		{name: "add the empty key", doc: `{}`, patch: `[{"op":"add","path":"/","value":1},{"op":"add","path":"//x","value":2}]`,
			want: `JSON Patch: add operation does not apply: doc is missing path: "//x": missing value`},
		{name: "add without a value adds null", doc: `{}`, patch: `[{"op":"add","path":"/x"}]`, want: `{"x":null}`},

		// remove
		{name: "remove a key", doc: `{"a":{"b":1,"c":2}}`, patch: `[{"op":"remove","path":"/a/b"}]`, want: `{"a":{"c":2}}`},
		{name: "remove a null member", doc: `{"a":null,"b":1}`, patch: `[{"op":"remove","path":"/a"}]`, want: `{"b":1}`},
		{name: "remove a missing key", doc: `{"a":{}}`, patch: `[{"op":"remove","path":"/a/zz"}]`,
			want: `JSON Patch: error in remove for path: '/a/zz': Unable to remove nonexistent key: zz: missing value`},
		{name: "remove an escaped missing key", doc: `{"a":{}}`, patch: `[{"op":"remove","path":"/a/z~1z"}]`,
			want: `JSON Patch: error in remove for path: '/a/z~1z': Unable to remove nonexistent key: z/z: missing value`},
		{name: "remove array elements", doc: `{"c":[1,2,3,4]}`, patch: `[{"op":"remove","path":"/c/1"},{"op":"remove","path":"/c/-1"}]`, want: `{"c":[1,3]}`},
		{name: "remove past the end", doc: `{"c":[1]}`, patch: `[{"op":"remove","path":"/c/1"}]`,
			want: `JSON Patch: error in remove for path: '/c/1': Unable to access invalid index: 1: invalid index referenced`},
		{name: "remove -2 of one", doc: `{"c":[1]}`, patch: `[{"op":"remove","path":"/c/-2"}]`,
			want: `JSON Patch: error in remove for path: '/c/-2': Unable to access invalid index: -2: invalid index referenced`},
		{name: "remove -", doc: `{"c":[1]}`, patch: `[{"op":"remove","path":"/c/-"}]`,
			want: `JSON Patch: error in remove for path: '/c/-': strconv.Atoi: parsing "-": invalid syntax`},
		{name: "remove under a missing parent", doc: `{}`, patch: `[{"op":"remove","path":"/a/b"}]`,
			want: `JSON Patch: remove operation does not apply: doc is missing path: "/a/b": missing value`},

		// replace
		{name: "replace a key", doc: `{"a":{"b":1}}`, patch: `[{"op":"replace","path":"/a/b","value":[2]}]`, want: `{"a":{"b":[2]}}`},
		{name: "replace a missing key adds it", doc: `{"a":{}}`, patch: `[{"op":"replace","path":"/a/b","value":2}]`, want: `{"a":{"b":2}}`},
		{name: "replace array elements", doc: `{"c":[1,2,3]}`, patch: `[{"op":"replace","path":"/c/0","value":"x"},{"op":"replace","path":"/c/-1","value":"z"}]`,
			want: `{"c":["x",2,"z"]}`},
		{name: "replace past the end", doc: `{"c":[1,2,3]}`, patch: `[{"op":"replace","path":"/c/3","value":4}]`,
			want: `JSON Patch: replace operation does not apply: doc is missing key: /c/3: missing value`},
		{name: "replace under a missing parent", doc: `{}`, patch: `[{"op":"replace","path":"/a/b","value":4}]`,
			want: `JSON Patch: replace operation does not apply: doc is missing path: /a/b: missing value`},
		{name: "replace the document", doc: `{"a":1}`, patch: `[{"op":"replace","path":"","value":{"b":2}},{"op":"add","path":"/c","value":3}]`,
			want: `{"b":2,"c":3}`},
		{name: "replace the document by a scalar", doc: `{"a":1}`, patch: `[{"op":"replace","path":"","value":1}]`,
			want: `JSON Patch: replace operation value must be object or array: %!w(<nil>)`},
		{name: "replace the document by an array", doc: `{"a":1}`, patch: `[{"op":"replace","path":"","value":[1]},{"op":"add","path":"/0","value":0}]`,
			want: "ErrNotObject"},
		{name: "replace the document by an array and back", doc: `{"a":1}`, patch: `[{"op":"replace","path":"","value":[1]},{"op":"replace","path":"","value":{"z":0}}]`,
			want: `{"z":0}`},
		{name: "replace the document by null", doc: `{"a":1}`, patch: `[{"op":"replace","path":"","value":null}]`, want: "ErrNotObject"},
		{name: "replace the document without a value", doc: `{"a":1}`, patch: `[{"op":"replace","path":""}]`, want: "ErrPanic"},

		// move
		{name: "move a key", doc: `{"a":{"b":1},"c":{}}`, patch: `[{"op":"move","from":"/a/b","path":"/c/d"}]`, want: `{"a":{},"c":{"d":1}}`},
		{name: "move an array element", doc: `{"c":[1,2,3]}`, patch: `[{"op":"move","from":"/c/0","path":"/c/-"}]`, want: `{"c":[2,3,1]}`},
		{name: "move within an array", doc: `{"c":[1,2,3]}`, patch: `[{"op":"move","from":"/c/0","path":"/c/2"}]`, want: `{"c":[2,3,1]}`},
		{name: "move a missing key", doc: `{"a":{}}`, patch: `[{"op":"move","from":"/a/b","path":"/c"}]`,
			want: `JSON Patch: error in move for path: 'b': Unable to remove nonexistent key: b: missing value`},
		{name: "move a bad index", doc: `{"a":[]}`, patch: `[{"op":"move","from":"/a/0","path":"/c"}]`,
			want: `JSON Patch: error in move for path: '0': Unable to access invalid index: 0: invalid index referenced`},
		{name: "move into itself", doc: `{"a":{"b":1}}`, patch: `[{"op":"move","from":"/a","path":"/a/b"}]`,
			want: `JSON Patch: move operation does not apply: doc is missing destination path: /a/b: missing value`},
		{name: "move without from", doc: `{"a":1}`, patch: `[{"op":"move","path":"/b"}]`,
			want: `JSON Patch: move operation failed to decode from: operation, missing from field: missing value`},
		{name: "move from a missing parent", doc: `{"a":1}`, patch: `[{"op":"move","from":"/x/y","path":"/b"}]`,
			want: `JSON Patch: move operation does not apply: doc is missing from path: /x/y: missing value`},
		{name: "move to a bad index", doc: `{"a":1,"c":[]}`, patch: `[{"op":"move","from":"/a","path":"/c/1"}]`,
			want: `JSON Patch: error in move for path: '/c/1': Unable to access invalid index: 1: invalid index referenced`},

		// copy
		{name: "copy then change the copy", doc: `{"a":{"b":1}}`, patch: `[{"op":"copy","from":"/a","path":"/c"},{"op":"add","path":"/c/x","value":2}]`,
			want: `{"a":{"b":1},"c":{"b":1,"x":2}}`},
		{name: "copy a changed object then change both", doc: `{"a":{"b":{"z":1}}}`,
			patch: `[{"op":"add","path":"/a/b/y","value":2},{"op":"copy","from":"/a","path":"/c"},{"op":"add","path":"/c/b/x","value":3},{"op":"remove","path":"/a/b/z"}]`,
			want:  `{"a":{"b":{"y":2}},"c":{"b":{"x":3,"y":2,"z":1}}}`},
		{name: "copy a missing key copies null", doc: `{"a":{}}`, patch: `[{"op":"copy","from":"/a/zz","path":"/c"}]`, want: `{"a":{},"c":null}`},
		{name: "copy a bad index", doc: `{"a":[]}`, patch: `[{"op":"copy","from":"/a/0","path":"/c"}]`,
			want: `JSON Patch: error in copy for from: '/a/0': Unable to access invalid index: 0: invalid index referenced`},
		{name: "copy without from", doc: `{"a":1}`, patch: `[{"op":"copy","path":"/b"}]`,
			want: `JSON Patch: copy operation failed to decode from: operation, missing from field: missing value`},
		{name: "copy to a missing parent", doc: `{"a":1}`, patch: `[{"op":"copy","from":"/a","path":"/x/y"}]`,
			want: `JSON Patch: copy operation does not apply: doc is missing destination path: /x/y: missing value`},
		{name: "copy to a bad index", doc: `{"a":1,"c":[]}`, patch: `[{"op":"copy","from":"/a","path":"/c/2"}]`,
			want: `JSON Patch: error while adding value during copy: Unable to access invalid index: 2: invalid index referenced`},
		{name: "copy within the limit", limit: 14, doc: `{"a":{"b":[1,2]}}`, patch: `[{"op":"copy","from":"/a","path":"/c"}]`, want: `{"a":{"b":[1,2]},"c":{"b":[1,2]}}`},
		{name: "copy over the limit", limit: 20, doc: `{"a":{"b":[1,2]}}`, patch: `[{"op":"copy","from":"/a","path":"/c"},{"op":"copy","from":"/a","path":"/d"}]`,
			want: `JSON Patch: Unable to complete the copy, the accumulated size increase of copy is 22, exceeding the limit 20`},
		{name: "copy of null counts nothing, of an added null four bytes", limit: 4, doc: `{"n":null}`,
			patch: `[{"op":"copy","from":"/n","path":"/m"},{"op":"add","path":"/x","value":null},{"op":"copy","from":"/x","path":"/y"},{"op":"copy","from":"/x","path":"/z"}]`,
			want:  `JSON Patch: Unable to complete the copy, the accumulated size increase of copy is 8, exceeding the limit 4`},

		// test
		{name: "test passes", doc: `{"a":{"b":[1,{"c":"d"}]}}`, patch: `[{"op":"test","path":"/a","value":{"b":[1,{"c":"d"}]}},{"op":"add","path":"/x","value":1}]`,
			want: `{"a":{"b":[1,{"c":"d"}]},"x":1}`},
		{name: "a failed test is a no-op", doc: `{"a":1}`, patch: `[{"op":"add","path":"/x","value":1},{"op":"test","path":"/a","value":2},{"op":"add","path":"/y","value":1}]`,
			want: noop},
		{name: "test 1 equals 1.0", doc: `{"a":1}`, patch: `[{"op":"test","path":"/a","value":1.0},{"op":"add","path":"/x","value":1}]`, want: `{"a":1,"x":1}`},
		{name: "test 1 is not \"1\"", doc: `{"a":1}`, patch: `[{"op":"test","path":"/a","value":"1"}]`, want: noop},
		{name: "test with no value on a missing key", doc: `{"a":{}}`, patch: `[{"op":"test","path":"/a/b"},{"op":"add","path":"/x","value":1}]`,
			want: `{"a":{},"x":1}`},
		{name: "test with no value on a value", doc: `{"a":1}`, patch: `[{"op":"test","path":"/a"}]`, want: noop},
		{name: "test null on null fails", doc: `{"a":null}`, patch: `[{"op":"test","path":"/a","value":null}]`, want: noop},
		{name: "test null on a missing key fails", doc: `{}`, patch: `[{"op":"test","path":"/a","value":null}]`, want: noop},
		{name: "test with no value on null", doc: `{"a":null}`, patch: `[{"op":"test","path":"/a"},{"op":"add","path":"/x","value":1}]`,
			want: `{"a":null,"x":1}`},
		{name: "test null on {} and []", doc: `{"a":{},"b":[]}`, patch: `[{"op":"test","path":"/a","value":null},{"op":"test","path":"/b","value":null},{"op":"add","path":"/x","value":1}]`,
			want: `{"a":{},"b":[],"x":1}`},
		{name: "test null on an object", doc: `{"a":{"k":1}}`, patch: `[{"op":"test","path":"/a","value":null}]`, want: noop},
		{name: "test an object against an array", doc: `{"a":{}}`, patch: `[{"op":"test","path":"/a","value":[]}]`, want: noop},
		{name: "test null members", doc: `{"a":{"k":null}}`, patch: `[{"op":"test","path":"/a","value":{"k":null}},{"op":"add","path":"/x","value":1}]`,
			want: `{"a":{"k":null},"x":1}`},
		{name: "test arrays with null", doc: `{"a":[1,null]}`, patch: `[{"op":"test","path":"/a","value":[1,null]}]`, want: "ErrPanic"},
		{name: "test arrays differing before a null", doc: `{"a":[1,null]}`, patch: `[{"op":"test","path":"/a","value":[2,null]}]`, want: noop},
		{name: "test a missing parent", doc: `{}`, patch: `[{"op":"test","path":"/a/b","value":1}]`,
			want: `JSON Patch: test operation does not apply: is missing path: /a/b: missing value`},
		{name: "test a bad index", doc: `{"a":[]}`, patch: `[{"op":"test","path":"/a/0","value":1}]`,
			want: `JSON Patch: error in test for path: '/a/0': Unable to access invalid index: 0: invalid index referenced`},
		{name: "test the document", doc: `{"a":1}`, patch: `[{"op":"test","path":"","value":{"a":1.0}},{"op":"add","path":"/x","value":1}]`,
			want: `{"a":1,"x":1}`},
		{name: "test the document fails", doc: `{"a":1}`, patch: `[{"op":"test","path":"","value":{"a":2}}]`, want: noop},
		{name: "test the document without a value", doc: `{"a":1}`, patch: `[{"op":"test","path":""}]`, want: "ErrPanic"},
		{name: "test strings with HTML characters", doc: `{"a":"<b & c>"}`, patch: `[{"op":"test","path":"/a","value":"<b & c>"},{"op":"add","path":"/x","value":1}]`,
			want: `{"a":"\u003cb \u0026 c\u003e","x":1}`},

		// nulls set by an operation
		{name: "add under an added null", doc: `{}`, patch: `[{"op":"add","path":"/x","value":null},{"op":"add","path":"/x/y","value":1}]`, want: "ErrPanic"},
		{name: "replace under an added null", doc: `{}`, patch: `[{"op":"replace","path":"/x","value":null},{"op":"replace","path":"/x/y","value":1}]`, want: "ErrPanic"},
		{name: "remove under an added null", doc: `{}`, patch: `[{"op":"add","path":"/x","value":null},{"op":"remove","path":"/x/y"}]`,
			want: `JSON Patch: error in remove for path: '/x/y': Unable to remove nonexistent key: y: missing value`},
		{name: "test under an added null", doc: `{}`, patch: `[{"op":"add","path":"/x","value":null},{"op":"test","path":"/x/y"},{"op":"test","path":"/x","value":{}}]`,
			want: `{"x":null}`},
		{name: "copy from under an added null", doc: `{}`, patch: `[{"op":"add","path":"/x","value":null},{"op":"copy","from":"/x/y","path":"/z"}]`,
			want: `{"x":null,"z":null}`},
		{name: "an added null in an array", doc: `{"c":[1]}`, patch: `[{"op":"add","path":"/c/-","value":null},{"op":"test","path":"/c","value":[1,null]}]`,
			want: "ErrPanic"},
		{name: "an added null is not a null member", doc: `{"a":{}}`, patch: `[{"op":"add","path":"/a/k","value":null},{"op":"test","path":"/a","value":{"k":null}}]`,
			want: noop},
		{name: "a copied added null", doc: `{"a":{}}`, patch: `[{"op":"add","path":"/a/k","value":null},{"op":"copy","from":"/a","path":"/b"},{"op":"test","path":"/b","value":{"k":null}},{"op":"copy","from":"/a/k","path":"/c"},{"op":"test","path":"/c","value":{}}]`,
			want: `{"a":{"k":null},"b":{"k":null},"c":null}`},
		{name: "a moved added null", doc: `{"a":{}}`, patch: `[{"op":"add","path":"/a/k","value":null},{"op":"move","from":"/a/k","path":"/m"},{"op":"add","path":"/m/x","value":1}]`,
			want: "ErrPanic"},

		// op, path and from strings
		{name: "an unknown op", doc: `{}`, patch: `[{"op":"ADD","path":"/a","value":1}]`, want: `JSON Patch: Unexpected kind: ADD`},
		{name: "an empty op", doc: `{}`, patch: `[{"path":"/a","value":1}]`, want: `JSON Patch: Unexpected kind: `},
		{name: "an op that does not decode", doc: `{}`, patch: `[{"op":"add\u0001","path":"/a","value":1}]`, want: `JSON Patch: Unexpected kind: unknown`},
		{name: "a path that does not decode in add", doc: `{}`, patch: `[{"op":"add","path":"/a\u0007","value":1}]`,
			want: `JSON Patch: add operation failed to decode path: missing value`},
		{name: "a path that does not decode in replace", doc: `{}`, patch: `[{"op":"replace","path":"/a\u0007","value":1}]`,
			want: `JSON Patch: replace operation failed to decode path: invalid character 'a' in string escape code`},
		{name: "a from that does not decode", doc: `{"a":1}`, patch: `[{"op":"copy","from":"/a\u007f","path":"/b"}]`,
			want: `JSON Patch: copy operation failed to decode from: invalid character 'x' in string escape code`},
		{name: "a move path that does not decode", doc: `{"a":1}`, patch: `[{"op":"move","from":"/a","path":"/b\u0007"}]`,
			want: `JSON Patch: move operation failed to decode path: invalid character 'a' in string escape code`},
		{name: "a move from a missing key before its path", doc: `{"a":1}`, patch: `[{"op":"move","from":"/x","path":"/b\u0007"}]`,
			want: `JSON Patch: error in move for path: 'x': Unable to remove nonexistent key: x: missing value`},
		{name: "a copy path that does not decode", doc: `{"a":1}`, patch: `[{"op":"copy","from":"/a","path":"/b\u000b"}]`,
			want: `JSON Patch: copy operation failed to decode path: missing value`},
		{name: "a test path that does not decode", doc: `{"a":1}`, patch: `[{"op":"test","path":"/\ud83d\ude00\udb40\udc01","value":1}]`,
			want: `JSON Patch: test operation failed to decode path: invalid character 'U' in string escape code`},
		{name: "a remove path that does not decode", doc: `{"a":1}`, patch: `[{"op":"remove","path":"/a\u0000"}]`,
			want: `JSON Patch: remove operation failed to decode path: missing value`},
		{name: "paths with tabs, newlines and unicode decode", doc: `{}`, patch: `[{"op":"add","path":"/a\tb\n","value":1},{"op":"add","path":"/é\u00ad","value":2}]`,
			want: "{\"a\\tb\\n\":1,\"é\u00ad\":2}"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := c.doc
			if doc == "" {
				doc = base
			}
			obj := decodeObject(t, doc)
			ops, err := decodeOps([]byte(c.patch))
			if err != nil {
				t.Fatalf("patch: %v", err)
			}
			before := deepCopy(obj)
			got, err := Options{MaxCopyBytes: c.limit}.ApplyJSONPatch(obj, ops)
			switch {
			case c.want == noop:
				if err != nil || !sameMapIdentity(got, obj) {
					t.Errorf("got %s, %v; want the object itself", show(got), err)
				}
			case c.want == "ErrPanic" || c.want == "ErrNotObject":
				target := map[string]error{"ErrPanic": ErrPanic, "ErrNotObject": ErrNotObject}[c.want]
				if !errors.Is(err, target) || got != nil {
					t.Errorf("got %s, %v; want an error wrapping %v", show(got), err, target)
				}
			case strings.HasPrefix(c.want, "JSON Patch: "):
				if err == nil || err.Error() != c.want || got != nil {
					t.Errorf("got %s, error:\n  %v\nwant error:\n  %s", show(got), err, c.want)
				}
			default:
				if err != nil {
					t.Fatalf("error %v; want %s", err, c.want)
				}
				if b, _ := json.Marshal(got); string(b) != c.want {
					t.Errorf("got  %s\nwant %s", b, c.want)
				}
			}
			if show(obj) != show(before) {
				t.Errorf("the input changed: %s", show(obj))
			}
			checkAgainstReference(t, obj, ops, c.limit)
		})
	}
}

// TestApplyJSONPatchGoValues checks objects and values built in Go rather
// than decoded (nil maps and slices, other number types, invalid UTF-8,
// negative zero) against evanphx applied to their JSON encoding.
func TestApplyJSONPatchGoValues(t *testing.T) {
	obj := map[string]any{
		"nilMap":   map[string]any(nil),
		"nilSlice": []any(nil),
		"int":      int64(7),
		"float":    0.1,
		"negZero":  math.Copysign(0, -1),
		"zero":     0.0,
		"bad":      "a\xffb",
		"fffd":     "a\ufffdb",
		"big":      int64(123456789012345680),
		"list":     []any{int64(1), "x"},
		"sub":      map[string]any{"k": "v"},
	}
	values := []any{
		nil, NoValue{}, map[string]any(nil), []any(nil), int(7), int32(7), float32(0.1), json.Number("7"), json.Number("7.0"),
		0.1, float64(7), int64(0), math.Copysign(0, -1), "a\xfeb", "a\ufffdb", "a\xffb", 1.2345678901234568e+17,
		[]any{int(1), "x"}, map[string]any{"k": "v"}, map[string]any{"k": nil},
	}
	paths := []string{"/nilMap", "/nilMap/x", "/nilSlice", "/nilSlice/0", "/int", "/float", "/negZero", "/zero", "/bad", "/fffd", "/big", "/list", "/list/0", "/sub", "/missing", ""}
	outcomes := map[string]int{}
	for _, p := range paths {
		for _, v := range values {
			for _, kind := range []string{"test", "add", "replace"} {
				ops := []Op{{Op: kind, Path: p, Value: v}}
				outcomes[kind+" "+checkAgainstReference(t, obj, ops, 0)]++
			}
		}
		for _, from := range paths {
			for _, kind := range []string{"copy", "move"} {
				checkAgainstReference(t, obj, []Op{{Op: kind, From: from, Path: p}}, 0)
				checkAgainstReference(t, obj, []Op{{Op: kind, From: from, Path: p}}, 6)
			}
		}
		checkAgainstReference(t, obj, []Op{{Op: "remove", Path: p}}, 0)
	}
	if outcomes["test applied"] == 0 || outcomes["test test failed"] == 0 {
		t.Errorf("outcomes: %v", outcomes)
	}
	t.Logf("outcomes: %v", outcomes)
}

func TestApplyJSONPatchNilObject(t *testing.T) {
	got, err := ApplyJSONPatch(nil, nil)
	if got != nil || err != nil {
		t.Errorf("no operations on nil: %v, %v", got, err)
	}
	if _, err := ApplyJSONPatch(nil, []Op{{Op: "add", Path: "/a", Value: int64(1)}}); !errors.Is(err, ErrPanic) {
		t.Errorf("add to a nil object: %v; want ErrPanic (evanphx assigns to a nil map)", err)
	}
	got, err = ApplyJSONPatch(nil, []Op{{Op: "replace", Path: "", Value: map[string]any{"a": int64(1)}}})
	if err != nil || show(got) != `{"a":1}` {
		t.Errorf("replace of a nil object: %s, %v", show(got), err)
	}
}

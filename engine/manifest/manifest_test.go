package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    []string // kind/name of each document
		wantErr string
	}{
		{name: "single", in: "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n", want: []string{"Pod/a"}},
		{name: "multi with empty documents", in: "---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n---\n# comment only\n---\nkind: Pod\nmetadata: {name: b}\n", want: []string{"Pod/a", "Pod/b"}},
		{name: "json", in: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`, want: []string{"ConfigMap/c"}},
		{name: "list", in: "apiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  metadata: {name: a}\n- kind: Service\n  metadata: {name: s}\n", want: []string{"Pod/a", "Service/s"}},
		{name: "typed list", in: "apiVersion: v1\nkind: PodList\nitems:\n- kind: Pod\n  metadata: {name: a}\n", want: []string{"Pod/a"}},
		{name: "empty list", in: "apiVersion: v1\nkind: List\n", want: nil},
		{name: "not an object", in: "- a\n- b\n", wantErr: "document is not an object"},
		{name: "scalar", in: "hello\n", wantErr: "document is not an object"},
		{name: "bad yaml", in: "a: [\n", wantErr: "f.yaml (document 1)"},
		{name: "second document bad", in: "kind: Pod\n---\na: b: c\n", wantErr: "f.yaml (document 2)"},
		{name: "list item not an object", in: "kind: List\nitems: [1]\n", wantErr: "items[0]: not an object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			docs, err := Parse("f.yaml", []byte(c.in))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, c.wantErr)
				}
				var me *Error
				if !errors.As(err, &me) || me.File != "f.yaml" {
					t.Fatalf("err %v does not name the file", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range docs {
				got = append(got, d.Kind()+"/"+d.Name())
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestNumbers(t *testing.T) {
	docs, err := Parse("f.yaml", []byte("kind: X\nspec: {replicas: 3, ratio: 0.5, big: 9007199254740993}\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec := docs[0].Object["spec"].(map[string]any)
	if _, ok := spec["replicas"].(int64); !ok {
		t.Errorf("replicas is %T, want int64", spec["replicas"])
	}
	if _, ok := spec["ratio"].(float64); !ok {
		t.Errorf("ratio is %T, want float64", spec["ratio"])
	}
	if spec["big"] != int64(9007199254740993) {
		t.Errorf("big = %v, want exact int64", spec["big"])
	}
}

func TestFoldedStringsKeepSpaces(t *testing.T) {
	// Kyverno reports folded messages verbatim, trailing spaces included.
	in := "kind: X\nmessage: >-\n  a \n  b\n"
	docs, err := Parse("f.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := docs[0].Object["message"]; got != "a  b" {
		t.Fatalf("message = %q, want %q", got, "a  b")
	}
}

func TestFilesWalk(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, s string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yaml", "kind: B\n")
	write("a.json", `{"kind":"A"}`)
	write("sub/c.yml", "kind: C\n")
	write(".hidden/d.yaml", "kind: D\n")
	write("notes.txt", "kind: E\n")
	docs, err := ReadPaths(nil, dir)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, d := range docs {
		kinds = append(kinds, d.Kind())
	}
	if got := strings.Join(kinds, ""); got != "ABC" {
		t.Fatalf("kinds = %s, want ABC (lexical order, hidden folders and other files skipped)", got)
	}
	// A file named explicitly is read whatever its extension.
	docs, err = ReadPaths(nil, filepath.Join(dir, "notes.txt"))
	if err != nil || len(docs) != 1 || docs[0].Kind() != "E" {
		t.Fatalf("explicit file: %v %v", docs, err)
	}
	// stdin
	docs, err = ReadPaths(strings.NewReader("kind: S\n---\nkind: T\n"), "-")
	if err != nil || len(docs) != 2 {
		t.Fatalf("stdin: %v %v", docs, err)
	}
	if _, err := ReadPaths(nil, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing path: no error")
	}
}

// FuzzParse feeds arbitrary bytes to the manifest loader: it must never
// panic, and every document it returns must be an object.
func FuzzParse(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"))
	f.Add([]byte("---\n---\nkind: List\nitems: [{kind: A}]\n"))
	f.Add([]byte(`{"a": [1, 2.5, "x", null, {"b": true}]}`))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("kind: X\nm: >-\n  a\n  b\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, d := range docs {
			if d.Object == nil {
				t.Fatalf("nil object from %q", data)
			}
		}
	})
}

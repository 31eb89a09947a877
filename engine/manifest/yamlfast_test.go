package manifest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// checkFastSameAsReference fails when the fast path accepts a document
// and decodes it differently from the full path (or the full path rejects
// it).
func checkFastSameAsReference(t *testing.T, data []byte) bool {
	t.Helper()
	got, ok := decodeYAMLFast(data)
	checkTranscodeSameAsFast(t, data, got, ok)
	if !ok {
		return false
	}
	want, err := decodeYAMLFull(data)
	if err != nil {
		t.Fatalf("%q: fast path accepted what sigs.k8s.io/yaml rejects: %v", data, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n fast %#v\n full %#v", data, got, want)
	}
	return true
}

// checkTranscodeSameAsFast fails when transcodeYAMLFast accepts a
// different set of documents than decodeYAMLFast decodes to objects, or
// its JSON decodes to other data, or its head differs.
func checkTranscodeSameAsFast(t *testing.T, data []byte, fast map[string]any, fastOK bool) {
	t.Helper()
	prefix := []byte("prefix")
	js, head, ok := transcodeYAMLFast(prefix, data)
	if ok != (fastOK && fast != nil) {
		t.Fatalf("%q: transcoder ok %v, fast path ok %v (%#v)", data, ok, fastOK, fast)
	}
	if !ok {
		return
	}
	if !bytes.HasPrefix(js, prefix) {
		t.Fatalf("%q: the transcoder did not append to dst: %q", data, js)
	}
	got, err := DecodeJSON(js[len(prefix):])
	if err != nil {
		t.Fatalf("%q: transcoded to invalid JSON %q: %v", data, js, err)
	}
	if !reflect.DeepEqual(got, fast) {
		t.Fatalf("%q:\n transcoded %s\n fast %#v", data, js, fast)
	}
	if want := headOf(fast); head != want {
		t.Fatalf("%q: head %+v, want %+v", data, head, want)
	}
}

var yamlSeeds = []string{
	"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  labels:\n    app.kubernetes.io/name: web # c\nspec:\n  containers:\n  - name: c\n    image: nginx:1.27\n    args: [\"--a\", '-b', c, 3]\n    ports:\n      - containerPort: 8080\n        protocol: TCP\n  volumes: []\n  x: {}\n",
	"a: yes\nb: No\nc: ~\nd: null\ne:\nf: 0\ng: -12\nh: 007\ni: 1.5\nj: 1e3\nk: 0x1F\nl: 2001-12-14\nm: 12:30\nn: .inf\no: 100m\np: 128Mi\nq: '1'\nr: \"a\\\"b\\n\"\ns: 'it''s'\n",
	"- a\n- b\n",
	"a:\n  - - x\n",
	"a: b\n  c\n",
	"a: |\n  x\n",
	"a: &x 1\nb: *x\n",
	"a: 1\na: 2\n",
	"1: a\n",
	"true: a\n",
	"\"quoted key\": v\n'k2': [a,b]\n",
	"a:\n-\n- b\n-   c: d\n    e: f\n",
	"a: b # c: d\nx: 'y' # z\n",
	"a: [1, 2,]\n",
	"a: [x: y]\n",
	"a:b\n",
	"key: value with: colon\n",
	"key: -\n",
	"key: - x\n",
	"a:\n  b: 1\n c: 2\n",
	"  a: 1\nb: 2\n",
	"a: \"unterminated\n",
	"a: 9223372036854775807\nb: 999999999999999999\nc: -999999999999999999\n",
	"a: +1\nb: -0\nc: 0b101\nd: 1_000\ne: .5\nf: -.inf\ng: .\nh: -x\n",
	"a: '#not a comment'\nb: x#y\nc: \"x # y\" # z\n",
	"? a\n: b\n",
	"a: !!str 1\n",
	"a:\n  # comment\n  b: 1\n\n  c: 2\n",
	"a: b\n---\nc: d\n",
	"a: {b: c}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \"n<1>\"\n  namespace: 3\ndata:\n  k1: a\n  k2: b\n  k3: c\n  k4: d\n  k5: e\n  k6: f\n  k7: g\n  k8: h\n  k9: i\n  k10: j\n  k11: k\n  k12: l\n  k13: m\n  k14: n\n  k15: o\n  k16: p\n  k17: q\n  k18: r\n  k1: dup\n",
	"kind: [a]\napiVersion: 7\nspec:\n  metadata:\n    name: not-the-head\nmetadata: {}\n",
	"metadata:\n- name: x\n",
}

func FuzzDecodeYAMLFast(f *testing.F) {
	for _, s := range yamlSeeds {
		f.Add([]byte(s))
	}
	for _, name := range []string{"compliant-pod.yaml", "violating-pod.yaml", "violating-deployment.yaml", "exempt-violating-pod.yaml"} {
		if data, err := os.ReadFile(filepath.Join("../testdata/pss", name)); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFastSameAsReference(t, data) })
}

// TestDecodeYAMLFastOnRealManifests runs every YAML document of the
// repository's examples and test data (and the Kyverno conformance suites
// when ../shared is beside the checkout) through both paths: where the
// fast path accepts a document, the data must be the full path's. The
// test Pods and Deployment (plain manifests) must take it.
func TestDecodeYAMLFastOnRealManifests(t *testing.T) {
	var files []string
	for _, root := range []string{"../../deploy", "../../engine/testdata", "../../docs", "../../../shared/bench/workload", "../../../shared/conformance"} {
		// What cannot be read (a root that is absent) is skipped.
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var docs, fast int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			docs++
			if checkFastSameAsReference(t, doc) {
				fast++
			}
		}
	}
	t.Logf("%d files, %d documents, %d decoded by the fast path", len(files), docs, fast)
	for _, f := range []string{"../../engine/testdata/pss/compliant-pod.yaml", "../../engine/testdata/pss/violating-pod.yaml", "../../engine/testdata/pss/violating-deployment.yaml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := decodeYAMLFast(data); !ok {
			t.Errorf("%s: the fast path declined it", f)
		}
	}
}

// TestPlainText compares plainText with the byte-by-byte rule on every
// byte value at every position of a word, and on random text.
func TestPlainText(t *testing.T) {
	naive := func(data []byte) bool {
		for _, c := range data {
			if c >= 0x80 || c < 0x20 && c != '\n' || c == 0x7f {
				return false
			}
		}
		return true
	}
	base := []byte("apiVersion: v1\nkind: Pod\n  name: x\n")
	for c := range 256 {
		for pos := range len(base) {
			data := bytes.Clone(base)
			data[pos] = byte(c)
			for _, d := range [][]byte{data, data[1:], data[:pos+1]} {
				if got, want := plainText(string(d)), naive(d); got != want {
					t.Fatalf("%q: plainText %v, want %v", d, got, want)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		d := make([]byte, rng.IntN(40))
		for i := range d {
			d[i] = byte(0x09 + rng.IntN(0x78))
		}
		if got, want := plainText(string(d)), naive(d); got != want {
			t.Fatalf("%q: plainText %v, want %v", d, got, want)
		}
	}
}

// TestParseJSONSameAsParse checks ParseJSON gives Parse's documents, as
// JSON, for transcoded, decoded, List and JSON documents.
func TestParseJSONSameAsParse(t *testing.T) {
	inputs := []string{
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  namespace: ns\n---\n# empty\n---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n- kind: Secret\n  metadata:\n    name: c\n",
		`{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"}, "spec": {"replicas": 2.5}}`,
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: &n e\n  labels: {a: b}\n",
		"apiVersion: v1\nkind: PodList\nitems: []\n",
	}
	for _, in := range inputs {
		want, err := Parse("f.yaml", []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseJSON("f.yaml", []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d documents, Parse %d", in, len(got), len(want))
		}
		for i := range got {
			if (got[i].JSON == nil) == (got[i].Object == nil) {
				t.Fatalf("%q #%d: JSON %q and Object %v: want exactly one", in, i, got[i].JSON, got[i].Object)
			}
			obj, err := got[i].Content()
			if err != nil {
				t.Fatalf("%q #%d: %v", in, i, err)
			}
			if !reflect.DeepEqual(obj, want[i].Object) || got[i].Source() != want[i].Source() || got[i].Head != headOf(want[i].Object) {
				t.Errorf("%q #%d: got %s %s %+v, want %#v %s", in, i, got[i].JSON, got[i].Source(), got[i].Head, want[i].Object, want[i].Source())
			}
			js, err := got[i].Encoded()
			if err != nil {
				t.Fatal(err)
			}
			if back, err := DecodeJSON(js); err != nil || back["kind"] != want[i].Object["kind"] {
				t.Errorf("%q #%d: encoded %s: %v", in, i, js, err)
			}
		}
	}
	for _, bad := range []string{"a: 1\n---\n- x\n", "a: [\n"} {
		_, want := Parse("f.yaml", []byte(bad))
		_, got := ParseJSON("f.yaml", []byte(bad))
		if want == nil || got == nil || got.Error() != want.Error() {
			t.Errorf("%q: error %v, Parse %v", bad, got, want)
		}
	}
}

func BenchmarkDecodeYAML(b *testing.B) {
	data, err := os.ReadFile("../../engine/testdata/pss/compliant-pod.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeYAMLFast(data); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("transcode", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 4096)
		for b.Loop() {
			if _, _, ok := transcodeYAMLFast(buf, data); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("sigs.k8s.io/yaml", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeYAMLFull(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzSplitDocuments compares SplitDocuments with Kubernetes' YAMLReader:
// the same documents (the reader ends the last line with a newline) and
// the same errors.
func FuzzSplitDocuments(f *testing.F) {
	for _, s := range []string{"a: 1\n---\nb: 2\n", "---\n---\n\n---\na", "--- # c\nx\n---x\n", "a\r\nb\r\n---\r\nc", "\n\n---\n", "---  \t\n--- #\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if dropsLastLine(data) {
			// YAMLReader loses a last line without a newline whose length
			// is a multiple of its 4,096-byte buffer (bufio's ReadLine
			// gives its end as io.EOF with no bytes, and YAMLReader drops
			// the line read with io.EOF); SplitDocuments keeps it
			// (TestSplitDocumentsKeepsLongLastLine).
			return
		}
		got, gi, gerr := SplitDocuments(data)
		want, wi, werr := splitDocumentsReader(data)
		if (gerr == nil) != (werr == nil) || gerr != nil && (gerr.Error() != werr.Error() || gi != wi) {
			t.Fatalf("%q: error %v at %d, YAMLReader %v at %d", data, gerr, gi, werr, wi)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d documents, YAMLReader %d", data, len(got), len(want))
		}
		for i := range got {
			g := got[i]
			if i == len(got)-1 && !bytes.HasSuffix(g, []byte("\n")) {
				g = append(g[:len(g):len(g)], '\n')
			}
			if !bytes.Equal(g, want[i]) {
				t.Fatalf("%q: document %d %q, YAMLReader %q", data, i, got[i], want[i])
			}
		}
	})
}

// dropsLastLine says whether YAMLReader would lose data's last line.
func dropsLastLine(data []byte) bool {
	if len(data) == 0 || data[len(data)-1] == '\n' || bytes.IndexByte(data, '\r') >= 0 {
		return false
	}
	last := len(data) - bytes.LastIndexByte(data, '\n') - 1
	return last >= 4096 && last%4096 == 0
}

func TestSplitDocumentsKeepsLongLastLine(t *testing.T) {
	data := []byte("a: 1\n---\nb: " + strings.Repeat("x", 4096-3))
	if !dropsLastLine(data) {
		t.Fatal("the case is not the one YAMLReader drops")
	}
	docs, _, err := SplitDocuments(data)
	if err != nil || len(docs) != 2 || !bytes.HasPrefix(docs[1], []byte("b: xxx")) {
		t.Fatalf("got %d documents, %v", len(docs), err)
	}
	if want, _, _ := splitDocumentsReader(data); len(want) != 1 {
		t.Fatalf("YAMLReader gave %d documents: it no longer drops the line, drop dropsLastLine", len(want))
	}
}

// SplitNonEmptyDocuments drops what Kyverno's CLI drops (blank and comment
// lines), and separator lines too (a document YAMLReader starts with "---"
// when separators follow one another), and names the document of an error.
func TestSplitNonEmptyDocuments(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: "a: 1\n", want: []string{"a: 1\n"}},
		{in: "---\na: 1\n---\n\n# only a comment\n---\n---\nb: 2", want: []string{"---\na: 1\n", "---\nb: 2"}},
		{in: "a: 1\n---\n---\n", want: []string{"a: 1\n"}},
		{in: "--- # c\n---\n  \n", want: nil},
		{in: "a\r\n---\r\n# x\r\n---\r\nb\r\n", want: []string{"a\n", "b\n"}},
		{in: "a: 1\n---\nb: 2\n---x\nc: 3\n", err: "document 2: invalid Yaml document separator: x"},
	} {
		got, err := SplitNonEmptyDocuments([]byte(tc.in))
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		var gs []string
		for _, d := range got {
			gs = append(gs, string(d))
		}
		if !reflect.DeepEqual(gs, tc.want) {
			t.Errorf("%q: %q, want %q", tc.in, gs, tc.want)
		}
	}
}

func TestIsEmptyDocument(t *testing.T) {
	for in, want := range map[string]bool{
		"":                      true,
		"\n  \n":                true,
		"# a\n  # b\n":          true,
		"---\n":                 true,
		"--- # c\n# d":          true,
		"---\na: 1\n":           false,
		"a: 1":                  false,
		"  x\n":                 false,
		"# a\n---\n- 1\n":       false,
		"--- |\n  text\n":       false,
		"key: |\n  ---\n":       false,
		"\t# tab comment\n\t\n": true,
	} {
		if got := IsEmptyDocument([]byte(in)); got != want {
			t.Errorf("IsEmptyDocument(%q) = %v, want %v", in, got, want)
		}
	}
}

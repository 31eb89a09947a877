package manifest

import (
	"bytes"
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
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return nil
		})
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
	b.Run("sigs.k8s.io/yaml", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeYAMLFull(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzSplitDocuments compares splitDocuments with Kubernetes' YAMLReader:
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
			// the line read with io.EOF); splitDocuments keeps it
			// (TestSplitDocumentsKeepsLongLastLine).
			return
		}
		got, gi, gerr := splitDocuments(data)
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
	docs, _, err := splitDocuments(data)
	if err != nil || len(docs) != 2 || !bytes.HasPrefix(docs[1], []byte("b: xxx")) {
		t.Fatalf("got %d documents, %v", len(docs), err)
	}
	if want, _, _ := splitDocumentsReader(data); len(want) != 1 {
		t.Fatalf("YAMLReader gave %d documents: it no longer drops the line, drop dropsLastLine", len(want))
	}
}

package apply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine/report"
)

// TestJSONArrayWriterMatchesEncoder checks that reports encoded one by one
// and put out of order (as apply's workers do) are written as exactly the
// bytes of one json.Encoder over the whole slice (the format scripts
// parse), for 0, 1 and many reports, with characters the encoder would
// escape as HTML.
func TestJSONArrayWriterMatchesEncoder(t *testing.T) {
	for _, n := range []int{0, 1, 2, 57} {
		reports := make([]report.Report, n)
		for i := range reports {
			results := []report.Result{
				{Policy: "p<1>", Result: "fail", Message: fmt.Sprintf("a & b > c \"%d\"\n\tline", i)},
				{Policy: "p2", Result: "pass", Message: "ok", Properties: map[string]string{"process": "background scan"}},
			}
			reports[i] = report.New("v1", "Pod", "ns", fmt.Sprintf("pod-%d", i), true, results[:i%3%2+1])
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(reports); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		a := newJSONArrayWriter(&got)
		// Out of order: pairs swapped, the last first.
		order := make([]int, 0, n)
		if n > 0 {
			order = append(order, n-1)
		}
		for i := 0; i+1 < n-1; i += 2 {
			order = append(order, i+1, i)
		}
		if n%2 == 0 && n > 1 {
			order = append(order, n-2)
		}
		for _, i := range order {
			a.put(i, reports[i].AppendJSON(a.buffer(), "  "))
		}
		if len(order) != n {
			t.Fatalf("test bug: order %v", order)
		}
		if err := a.close(); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%d reports: got\n%s\nwant\n%s", n, got.String(), want.String())
		}
	}
}

// TestJSONArrayWriterConcurrent puts reports from several goroutines at
// once, recycling buffers as apply's workers do: the output must be the
// reports in order, each intact (run with -race).
func TestJSONArrayWriterConcurrent(t *testing.T) {
	const n, workers = 2000, 4
	var want bytes.Buffer
	want.WriteString("[")
	encode := func(i int, b []byte) []byte {
		b = append(b, fmt.Sprintf("{\n    \"i\": %d,\n    \"pad\": %q\n  }", i, strings.Repeat("x", i%300))...)
		return b
	}
	for i := range n {
		if i > 0 {
			want.WriteString(",")
		}
		want.WriteString("\n  ")
		want.Write(encode(i, nil))
	}
	want.WriteString("\n]\n")
	var got bytes.Buffer
	a := newJSONArrayWriter(&got)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				a.put(i, encode(i, a.buffer()))
			}
		})
	}
	wg.Wait()
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Fatalf("output differs (%d bytes, want %d)", got.Len(), want.Len())
	}
}

// TestAppendElement: the server's JSON goes into the -o json array as it
// is when its lines carry the element prefix (json_prefix), re-indented
// when they do not (a server that predates json_prefix), the same bytes
// either way.
func TestAppendElement(t *testing.T) {
	want := "{\n    \"a\": [\n      1\n    ],\n    \"b\": {}\n  }"
	for _, c := range []struct{ name, in, want string }{
		{"prefixed by the server", want, want},
		{"not prefixed", "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}", want},
		{"one line", "{}", "{}"},
		{"a string with an escaped line break", "{\n  \"a\": \"x\\ny\"\n}", "{\n    \"a\": \"x\\ny\"\n  }"},
	} {
		if got := string(appendElement([]byte("["), []byte(c.in))); got != "["+c.want {
			t.Errorf("%s: got\n%s\nwant\n[%s", c.name, got, c.want)
		}
	}
}

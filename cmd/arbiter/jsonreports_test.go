package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine/report"
)

// TestWriteJSONArrayMatchesEncoder checks that reports encoded one by one
// (as apply's workers do) and joined by writeJSONArray are exactly the bytes
// of one json.Encoder over the whole slice (the format scripts parse), for
// 0, 1 and many reports, with characters the encoder would escape as HTML.
func TestWriteJSONArrayMatchesEncoder(t *testing.T) {
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
		in := reports
		if in == nil {
			in = []report.Report{}
		}
		if err := enc.Encode(in); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		encoded := make([][]byte, len(reports))
		for i := range reports {
			encoded[i] = reports[i].AppendJSON(nil, "  ")
		}
		if err := writeJSONArray(&got, encoded); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%d reports: got\n%s\nwant\n%s", n, got.String(), want.String())
		}
	}
}

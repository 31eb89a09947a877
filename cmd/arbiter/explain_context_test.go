package main

import (
	"bytes"
	"strings"
	"testing"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// explain's table ends with the context the decision read.
func TestWriteExplainContextReads(t *testing.T) {
	var b bytes.Buffer
	err := writeExplain(&b, &arbiterv1.ExplainResponse{
		Decision: &arbiterv1.DecideResponse{Allowed: true, Revision: 7, Digest: "sha256:x"},
		ContextReads: []*arbiterv1.ContextRead{
			{Op: "get", ApiVersion: "v1", Resource: "configmaps", Namespace: "kube-system", Name: "limits"},
			{Op: "list", ApiVersion: "v1", Resource: "configmaps", Namespace: "apps", Selector: "team=a", Count: 3},
			{Op: "globalContext", Name: "deployments", Projection: "count", Count: 1},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `
context read at revision 7
  get v1 configmaps kube-system/limits: not found
  list v1 configmaps apps labels team=a: 3 objects
  globalContext deployments count
`
	if !strings.HasSuffix(b.String(), want) {
		t.Fatalf("got\n%s", b.String())
	}
}

package mpol

import (
	"testing"

	"github.com/arbiter-pdp/arbiter/engine/patch"
)

func TestTouchesIdentity(t *testing.T) {
	for _, tc := range []struct {
		ops  []patch.Op
		want bool
	}{
		{[]patch.Op{{Op: "add", Path: "/metadata/labels/a"}}, false},
		{[]patch.Op{{Op: "add", Path: "/spec/containers/0/image"}}, false},
		{[]patch.Op{{Op: "replace", Path: "/metadata/namespaceSelector"}}, false},
		{[]patch.Op{{Op: "test", Path: "/metadata/name"}}, false},
		{[]patch.Op{{Op: "copy", From: "/metadata/name", Path: "/metadata/labels/n"}}, false},
		{[]patch.Op{{Op: "replace", Path: "/metadata/name"}}, true},
		{[]patch.Op{{Op: "remove", Path: "/metadata/namespace"}}, true},
		{[]patch.Op{{Op: "add", Path: "/metadata/uid"}}, true},
		{[]patch.Op{{Op: "add", Path: "/metadata/name/x"}}, true},
		{[]patch.Op{{Op: "replace", Path: "/metadata"}}, true},
		{[]patch.Op{{Op: "remove", Path: "/kind"}}, true},
		{[]patch.Op{{Op: "add", Path: "/apiVersion"}}, true},
		{[]patch.Op{{Op: "replace", Path: ""}}, true},
		{[]patch.Op{{Op: "add", Path: "metadata/name"}}, true},
		{[]patch.Op{{Op: "add", Path: "/metadata/n~0ame"}}, true},
		{[]patch.Op{{Op: "add", Path: "/k~1ind"}}, true},
		{[]patch.Op{{Op: "move", From: "/metadata/name", Path: "/metadata/labels/n"}}, true},
		{[]patch.Op{{Op: "add", Path: "/spec/a"}, {Op: "add", Path: "/metadata/namespace"}}, true},
	} {
		if got := touchesIdentity(tc.ops); got != tc.want {
			t.Errorf("touchesIdentity(%+v) = %v, want %v", tc.ops, got, tc.want)
		}
	}
}

package convert

import (
	"errors"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine/admission"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
)

// TestRequestRoundTrip: a request sent with RequestToProto is read back by
// RequestFromProto as it was built.
func TestRequestRoundTrip(t *testing.T) {
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "web", "namespace": "team-a"},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}}}
	for _, op := range []string{admission.OpCreate, admission.OpUpdate, admission.OpDelete, admission.OpConnect} {
		for _, mode := range []admission.Mode{admission.ModeAdmission, admission.ModeBackground} {
			req := &admission.Request{Operation: op, Mode: mode, UserInfo: admission.UserInfo{Username: "alice", Groups: []string{"dev"}}, DryRun: true}
			if op != admission.OpDelete {
				req.Object = pod
			}
			if op == admission.OpUpdate || op == admission.OpDelete {
				req.OldObject = pod
			}
			req.Fill()
			pr, err := RequestToProto(req)
			if err != nil {
				t.Fatal(err)
			}
			back, _, err := RequestFromProto(pr)
			if err != nil {
				t.Fatalf("%s %v: %v", op, mode, err)
			}
			if back.Operation != op || back.Mode != mode || back.Kind != req.Kind || back.Resource != req.Resource ||
				back.Name != "web" || back.Namespace != "team-a" || !back.DryRun || back.UserInfo.Username != "alice" ||
				(back.Object == nil) != (req.Object == nil) || (back.OldObject == nil) != (req.OldObject == nil) {
				t.Errorf("%s %v: read back as %+v", op, mode, back)
			}
		}
	}
}

func TestRequestFromProtoFieldErrors(t *testing.T) {
	pr := RequestToProtoJSON(&admission.Request{Operation: admission.OpCreate}, nil, nil)
	_, _, err := RequestFromProto(pr)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "object" {
		t.Fatalf("a CREATE without an object: %v", err)
	}
}

func TestNamespaceRoundTrip(t *testing.T) {
	ns := manifest.NewObject("ns.yaml", map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": "team-a", "labels": map[string]any{"env": "prod"}, "generation": int64(3)}})
	st, err := NamespaceToProto(ns)
	if err != nil {
		t.Fatal(err)
	}
	req := &admission.Request{Operation: admission.OpCreate, Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "team-a"}}}
	req.Fill()
	pr, err := RequestToProto(req)
	if err != nil {
		t.Fatal(err)
	}
	pr.NamespaceObject = st
	back, _, err := RequestFromProto(pr)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := back.NamespaceObject["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	if labels["env"] != "prod" || meta["generation"] != int64(3) {
		t.Fatalf("namespace read back as %v", back.NamespaceObject)
	}
}

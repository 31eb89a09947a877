package convert

import (
	"errors"
	"testing"

	"github.com/arbiter-pdp/arbiter/engine"
)

// TestRequestRoundTrip: a request sent with RequestToProto is read back by
// RequestFromProto as it was built.
func TestRequestRoundTrip(t *testing.T) {
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "web", "namespace": "team-a"},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "nginx"}}}}
	for _, op := range []string{engine.OpCreate, engine.OpUpdate, engine.OpDelete, engine.OpConnect} {
		for _, mode := range []engine.Mode{engine.ModeAdmission, engine.ModeBackground} {
			req := &engine.Request{Operation: op, Mode: mode, UserInfo: engine.UserInfo{Username: "alice", Groups: []string{"dev"}}, DryRun: true}
			if op != engine.OpDelete {
				req.Object = pod
			}
			if op == engine.OpUpdate || op == engine.OpDelete {
				req.OldObject = pod
			}
			req.Fill()
			pr, err := RequestToProto(req)
			if err != nil {
				t.Fatal(err)
			}
			back, err := RequestFromProto(pr)
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
	pr := RequestToProtoJSON(&engine.Request{Operation: engine.OpCreate}, nil, nil)
	_, err := RequestFromProto(pr)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "object" {
		t.Fatalf("a CREATE without an object: %v", err)
	}
}

package server_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/store"
)

func nsObject(name string, labels map[string]any) *manifest.Object {
	return manifest.NewObject("test:"+name, map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "labels": labels},
	})
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Roles switch at run time: a follower that leads starts a term at its
// floor revision, the old primary follows it and converges even though it
// was ahead, and revisions never go down on either.
func TestRoleSwitch(t *testing.T) {
	ctx := context.Background()
	a := startServer(t, server.Config{})
	b := startServer(t, server.Config{Follow: a.addr, ReplicaID: "b"})
	for i := range 3 {
		if _, err := a.WriteObjects(ctx, []*manifest.Object{nsObject(fmt.Sprintf("ns-%d", i), nil)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "b to catch up", func() bool { return b.Current().Revision == 3 })

	// b stops following; a writes once more (b never sees it): a is ahead.
	b.Standby()
	if b.IsPrimary() || b.Serving() {
		t.Fatal("a standby is not primary and not serving")
	}
	if _, err := b.WriteObjects(ctx, []*manifest.Object{nsObject("x", nil)}, nil); !errors.As(err, new(*server.NotPrimaryError)) {
		t.Fatalf("write to a standby: %v", err)
	}
	if _, err := a.WriteObjects(ctx, []*manifest.Object{nsObject("only-on-a", nil)}, nil); err != nil {
		t.Fatal(err)
	}

	// b leads at term floor 1<<32+1; a follows b.
	floor := uint64(1)<<32 + 1
	c, err := b.Lead(ctx, floor)
	if err != nil {
		t.Fatal(err)
	}
	if c.Revision != floor || len(c.Changes) != 0 || !b.IsPrimary() || !b.Serving() {
		t.Fatalf("lead: commit %+v primary %v serving %v", c, b.IsPrimary(), b.Serving())
	}
	a.Follow(b.addr)
	if a.IsPrimary() || a.PrimaryAddress() != b.addr {
		t.Fatalf("a: primary %v following %q", a.IsPrimary(), a.PrimaryAddress())
	}
	_, err = a.WriteObjects(ctx, []*manifest.Object{nsObject("y", nil)}, nil)
	var np *server.NotPrimaryError
	if !errors.As(err, &np) || np.Primary != b.addr {
		t.Fatalf("write to the old primary: %v", err)
	}
	c2, err := b.WriteObjects(ctx, []*manifest.Object{nsObject("ns-9", map[string]any{"t": "2"})}, nil)
	if err != nil || c2.Revision != floor+1 {
		t.Fatalf("first write of the term: %+v %v", c2, err)
	}
	waitFor(t, "a to converge on b", func() bool {
		return a.Current().Revision == c2.Revision && a.Current().Digest == c2.Digest && a.Serving()
	})
	if _, ok := a.Current().Object(store.Key{Kind: "Namespace", Name: "only-on-a"}); ok {
		t.Fatal("a kept an object the new primary never had")
	}
	st, err := a.c.Status(ctx)
	if err != nil || st.GetRole() != arbiterv1.Role_ROLE_FOLLOWER || st.GetPrimary() != b.addr {
		t.Fatalf("a status: %v %v", st, err)
	}
	// Writes over gRPC to the follower name the primary.
	_, err = a.c.Write(ctx, &arbiterv1.WriteBatch{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("gRPC write to a follower: %v", err)
	}

	// Leading again without a higher floor continues the revisions.
	if c3, err := b.Lead(ctx, 5); err != nil || !c3.Unchanged || c3.Revision != c2.Revision {
		t.Fatalf("lead while primary: %+v %v", c3, err)
	}
}

package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/engine/manifest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
)

// testServer is a real server on a loopback port with a bbolt file in a
// temporary directory.
type testServer struct {
	*server.Server
	addr string
	dir  string
	c    *client.Client
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startServer starts a server without fsync (tests); startSyncedServer with it.
func startServer(t testing.TB, cfg server.Config) *testServer {
	cfg.NoSync = true
	return startSyncedServer(t, cfg)
}

func startSyncedServer(t testing.TB, cfg server.Config) *testServer {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	c, err := client.Dial(context.Background(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: srv, addr: lis.Addr().String(), dir: cfg.DataDir, c: c}
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ts
}

func readObjects(t testing.TB, paths ...string) []*manifest.Object {
	t.Helper()
	docs, err := manifest.ReadPaths(nil, paths...)
	if err != nil {
		t.Fatal(err)
	}
	return manifest.FromDocuments(docs)
}

func objectJSON(t testing.TB, path string) []byte {
	t.Helper()
	objs := readObjects(t, path)
	if len(objs) != 1 {
		t.Fatalf("%s: %d objects", path, len(objs))
	}
	b, err := json.Marshal(objs[0].Content)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const (
	pssDir       = "../deploy/examples/pod-security"
	violatingPod = "../engine/testdata/pss/violating-pod.yaml"
	compliantPod = "../engine/testdata/pss/compliant-pod.yaml"
	exemptPod    = "../engine/testdata/pss/exempt-violating-pod.yaml"
)

func TestDecideOverGRPC(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	commit, err := ts.LoadObjects(ctx, readObjects(t, pssDir))
	if err != nil {
		t.Fatal(err)
	}
	if commit.Revision != 1 {
		t.Fatalf("revision %d, want 1", commit.Revision)
	}
	resp, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: objectJSON(t, violatingPod)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllowed() || len(resp.GetResults()) != 16 {
		t.Fatalf("violating pod: allowed=%v results=%d", resp.GetAllowed(), len(resp.GetResults()))
	}
	if resp.GetRevision() != 1 || resp.GetDigest() != commit.Digest || resp.GetDecisionId() == "" {
		t.Fatalf("revision %d digest %q id %q, want 1 %q and an id", resp.GetRevision(), resp.GetDigest(), resp.GetDecisionId(), commit.Digest)
	}
	if !strings.HasPrefix(resp.GetStatus().GetMessage(), "Policy disallow-capabilities failed: ") {
		t.Fatalf("status message %q", resp.GetStatus().GetMessage())
	}
	fails := 0
	for _, r := range resp.GetResults() {
		if r.GetResult() == "fail" {
			fails++
		}
	}
	if fails != 12 {
		t.Fatalf("%d fails, want 12", fails)
	}
	resp, err = ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: objectJSON(t, compliantPod)})
	if err != nil || !resp.GetAllowed() {
		t.Fatalf("compliant pod: %v %v", resp, err)
	}
	// The Struct form gives the same decision as the JSON bytes form.
	var m map[string]any
	_ = json.Unmarshal(objectJSON(t, violatingPod), &m)
	st, err := structpbFrom(m)
	if err != nil {
		t.Fatal(err)
	}
	resp2, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{Object: st})
	if err != nil || resp2.GetAllowed() || len(resp2.GetResults()) != 16 {
		t.Fatalf("struct form: %v %v", resp2, err)
	}
	ok, err := ts.c.Serving(ctx)
	if err != nil || !ok {
		t.Fatalf("health: %v %v", ok, err)
	}
}

func TestDecideBadRequest(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	cases := []struct {
		name  string
		req   *arbiterv1.DecideRequest
		field string
	}{
		{"no object", &arbiterv1.DecideRequest{}, "object"},
		{"bad json", &arbiterv1.DecideRequest{ObjectJson: []byte("{nope")}, "object_json"},
		{"no kind", &arbiterv1.DecideRequest{ObjectJson: []byte(`{"metadata":{"name":"x"}}`)}, "kind"},
		{"delete without old object", &arbiterv1.DecideRequest{Operation: arbiterv1.Operation_OPERATION_DELETE}, "old_object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ts.c.Decide(ctx, c.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
			}
			if got := fieldViolations(err); len(got) == 0 || got[0] != c.field {
				t.Fatalf("field violations %v, want %s", got, c.field)
			}
		})
	}
}

func fieldViolations(err error) []string {
	st, _ := status.FromError(err)
	var out []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out = append(out, v.GetField())
			}
		}
	}
	return out
}

func TestWriteRefusedWhole(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	before, _ := ts.Store().Revision()
	good := objectJSON(t, exemptPod)
	bad := []byte(`{"apiVersion":"policies.kyverno.io/v1","kind":"ValidatingPolicy","metadata":{"name":"broken"},
		"spec":{"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["pods"]}]},
		"validations":[{"expression":"object.spec.containers.all(c, c.image.startsWith("}]}}`)
	_, err := ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
		{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: good},
		{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: bad},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
	}
	fv := fieldViolations(err)
	if len(fv) != 1 || fv[0] != "ValidatingPolicy broken: spec.validations[0].expression" {
		t.Fatalf("field violations %q", fv)
	}
	after, _ := ts.Store().Revision()
	if after != before {
		t.Fatalf("revision moved from %d to %d", before, after)
	}
	if n := ts.Current().Objects(); n != 16 {
		t.Fatalf("%d objects after a refused write, want 16", n)
	}
	// A context object that does not load (a namespaced kind without a
	// namespace) is refused with the rest of its batch, naming it.
	_, err = ts.c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{
		{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"nowhere"}}`)},
		{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT, ObjectJson: good},
	}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ConfigMap nowhere") {
		t.Fatalf("context object without namespace: %v", err)
	}
	if after, _ := ts.Store().Revision(); after != before {
		t.Fatalf("revision moved from %d to %d", before, after)
	}
}

func TestPushReplacesAndIsIdempotent(t *testing.T) {
	ts := startServer(t, server.Config{})
	ctx := context.Background()
	var all [][]byte
	for _, o := range readObjects(t, pssDir) {
		b, _ := json.Marshal(o.Content)
		all = append(all, b)
	}
	ack, err := ts.c.Push(ctx, all, nil, 0)
	if err != nil || ack.GetRevision() != 1 || ack.GetUpserted() != 16 {
		t.Fatalf("first push: %v %v", ack, err)
	}
	ack, err = ts.c.Push(ctx, all, nil, 0)
	if err != nil || !ack.GetUnchanged() || ack.GetRevision() != 1 {
		t.Fatalf("same push: %v %v", ack, err)
	}
	ack, err = ts.c.Push(ctx, all[:10], nil, 0)
	if err != nil || ack.GetRevision() != 2 || ack.GetDeleted() != 6 {
		t.Fatalf("smaller push: %v %v", ack, err)
	}
	if got := len(ts.Current().Set.Policies()); got != 10 {
		t.Fatalf("%d policies, want 10", got)
	}
	// Optimistic concurrency.
	_, err = ts.c.Push(ctx, all, nil, 1)
	if status.Code(err) != codes.Aborted {
		t.Fatalf("stale expected revision: %v", err)
	}
}

func TestMinRevision(t *testing.T) {
	ts := startServer(t, server.Config{MinRevisionWait: 200 * time.Millisecond})
	ctx := context.Background()
	if _, err := ts.LoadObjects(ctx, readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	pod := objectJSON(t, violatingPod)
	// Not reached: FAILED_PRECONDITION with the current revision in the details.
	start := time.Now()
	_, err := ts.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: pod, MinRevision: 2})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("code %v, want FailedPrecondition", status.Code(err))
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Fatalf("returned after %v without waiting", waited)
	}
	st, _ := status.FromError(err)
	var info *arbiterv1.RevisionInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*arbiterv1.RevisionInfo); ok {
			info = ri
		}
	}
	if info == nil || info.GetRevision() != 1 {
		t.Fatalf("details %v, want RevisionInfo{revision: 1}", st.Details())
	}
	// Reached while waiting: the exception committed meanwhile applies.
	go func() {
		time.Sleep(50 * time.Millisecond)
		if _, err := ts.LoadObjects(ctx, readObjects(t, exemptPod)); err != nil {
			t.Error(err)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := ts.c.Decide(cctx, &arbiterv1.DecideRequest{ObjectJson: pod, MinRevision: 2})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRevision() != 2 {
		t.Fatalf("revision %d, want 2", resp.GetRevision())
	}
	skips := 0
	for _, r := range resp.GetResults() {
		if r.GetRule() == "exception" && r.GetResult() == "skip" {
			skips++
		}
	}
	if skips != 1 {
		t.Fatalf("%d exception skips, want 1", skips)
	}
}

func TestRestartKeepsRevisionAndContent(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	ts := startServer(t, server.Config{DataDir: dir})
	commit, err := ts.LoadObjects(ctx, readObjects(t, pssDir, exemptPod))
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ts.Shutdown(sctx)
	cancel()
	ts2 := startServer(t, server.Config{DataDir: dir})
	cur := ts2.Current()
	if cur.Revision != commit.Revision || cur.Digest != commit.Digest || len(cur.Set.Exceptions()) != 1 || len(cur.Set.Policies()) != 16 {
		t.Fatalf("after restart: rev %d digest %s, %d policies %d exceptions; want %d %s 16 1",
			cur.Revision, cur.Digest, len(cur.Set.Policies()), len(cur.Set.Exceptions()), commit.Revision, commit.Digest)
	}
	if _, err := os.Stat(filepath.Join(dir, "arbiter.db")); err != nil {
		t.Fatal(err)
	}
}

func TestFollowerConvergesAndRefusesWrites(t *testing.T) {
	ctx := context.Background()
	primary := startServer(t, server.Config{})
	if _, err := primary.LoadObjects(ctx, readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	follower := startServer(t, server.Config{Follow: primary.addr, ReplicaID: "f1"})
	waitRevision(t, follower, 1)
	// A change on the primary reaches the follower; min_revision on the
	// follower sees it.
	commit, err := primary.LoadObjects(ctx, readObjects(t, exemptPod))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := follower.c.Decide(cctx, &arbiterv1.DecideRequest{ObjectJson: objectJSON(t, violatingPod), MinRevision: commit.Revision})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetRevision() != commit.Revision || resp.GetDigest() != commit.Digest {
		t.Fatalf("follower decided at %d %s, want %d %s", resp.GetRevision(), resp.GetDigest(), commit.Revision, commit.Digest)
	}
	// Writes to a follower are refused, naming the primary.
	_, err = follower.c.Push(ctx, nil, nil, 0)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), primary.addr) {
		t.Fatalf("write to follower: %v", err)
	}
	ok, err := follower.c.Serving(ctx)
	if err != nil || !ok {
		t.Fatalf("follower health: %v %v", ok, err)
	}
	// The primary knows the follower's acked revision.
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := primary.c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.GetFollowers()) == 1 && st.GetFollowers()[0].GetAckedRevision() == commit.Revision && st.GetFollowers()[0].GetReplicaId() == "f1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("primary status followers: %v", st.GetFollowers())
		}
		time.Sleep(20 * time.Millisecond)
	}
	fst, err := follower.c.Status(ctx)
	if err != nil || fst.GetRole() != arbiterv1.Role_ROLE_FOLLOWER || fst.GetPrimary() != primary.addr {
		t.Fatalf("follower status: %v %v", fst, err)
	}
}

func waitRevision(t testing.TB, ts *testServer, rev uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ts.WaitRevision(ctx, rev); err != nil {
		t.Fatalf("replica did not reach revision %d: %v", rev, err)
	}
}

func structpbFrom(m map[string]any) (*structpb.Struct, error) { return structpb.NewStruct(m) }

// A follower is NOT_SERVING until it has synced with its primary.
func TestFollowerNotServingUntilSynced(t *testing.T) {
	ctx := context.Background()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	primaryAddr := lis.Addr().String()
	lis.Close()
	f := startServer(t, server.Config{Follow: primaryAddr, ReplicaID: "early"})
	time.Sleep(300 * time.Millisecond)
	if ok, _ := f.c.Serving(ctx); ok {
		t.Fatal("a follower that never reached its primary is SERVING")
	}
	st, err := f.c.Status(ctx)
	if err != nil || st.GetServing() || len(st.GetWarnings()) == 0 {
		t.Fatalf("status before sync: %v %v", st, err)
	}
	// Decisions still answer, at the follower's (empty) revision, unless a
	// min_revision is asked for.
	if _, err := f.c.Decide(ctx, &arbiterv1.DecideRequest{ObjectJson: objectJSON(t, violatingPod), MinRevision: 1}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("min_revision on an unsynced follower: %v", err)
	}
	// Now the primary comes up on that address.
	srv, err := server.New(ctx, server.Config{DataDir: t.TempDir(), Logger: quietLogger(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.LoadObjects(ctx, readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	lis, err = net.Listen("tcp", primaryAddr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", primaryAddr, err)
	}
	go srv.Serve(lis)
	defer srv.Shutdown(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok, _ := f.c.Serving(ctx); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("follower never became SERVING")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rev := f.Current().Revision; rev != 1 {
		t.Fatalf("follower at %d, want 1", rev)
	}
}

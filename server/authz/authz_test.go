package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func withCert(ctx context.Context, c *x509.Certificate) context.Context {
	st := tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}, VerifiedChains: [][]*x509.Certificate{{c}}}
	return peer.NewContext(ctx, &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
}

func TestIdentitiesAndRules(t *testing.T) {
	u, _ := url.Parse("spiffe://cluster.local/ns/ci/sa/pusher")
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "pusher"}, URIs: []*url.URL{u}, DNSNames: []string{"pusher.ci.svc"}}
	a, err := New(Config{Rules: []Rule{
		{Identity: "uri:spiffe://cluster.local/ns/ci/*", Roles: []Role{RoleWrite}},
		{Identity: "dns:pusher.ci.svc", Roles: []Role{RoleReplicate}},
		{Identity: "cn:other", Roles: []Role{RoleReplicate}},
	}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Authenticate(withCert(context.Background(), cert))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "uri:spiffe://cluster.local/ns/ci/sa/pusher" {
		t.Fatalf("name %s", c.Name)
	}
	if got := c.Roles(); len(got) != 4 {
		t.Fatalf("roles %v", got)
	}
	// Unverified certificates do not identify.
	st := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	c, _ = a.Authenticate(peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}}))
	if c.Name != Anonymous || len(c.Roles()) != 0 {
		t.Fatalf("unverified: %s %v", c.Name, c.Roles())
	}
}

func TestTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("# comment\nabc,ci,1001,\"a,b\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := tokenCheckInterval
	tokenCheckInterval = 0
	defer func() { tokenCheckInterval = old }()
	a, err := New(Config{TokenFile: path, Rules: []Rule{{Identity: "token:ci", Roles: []Role{RoleWrite}}}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	md := func(v string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", v))
	}
	c, err := a.Authenticate(md("Bearer abc"))
	if err != nil || c.Name != "token:ci" || !c.Has(RoleWrite) {
		t.Fatalf("%v %v", c, err)
	}
	for _, bad := range []string{"Bearer nope", "Basic abc", "Bearer ", "abc"} {
		if _, err := a.Authenticate(md(bad)); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// The file is re-read when it changes.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(path, []byte("xyz,ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(md("Bearer abc")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("old token after rotation: %v", err)
	}
	if c, err := a.Authenticate(md("Bearer xyz")); err != nil || c.Name != "token:ci" {
		t.Fatalf("new token: %v %v", c, err)
	}
	// A malformed file is refused at start.
	if err := os.WriteFile(path, []byte("lonely\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{TokenFile: path}, quiet()); err == nil || !strings.Contains(err.Error(), "TOKEN,NAME") {
		t.Fatalf("malformed file: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{
		{Rules: []Rule{{Identity: "pusher", Roles: []Role{RoleWrite}}}},
		{Rules: []Rule{{Identity: "cn:x", Roles: []Role{"admin"}}}},
		{Rules: []Rule{{Roles: []Role{RoleRead}}}},
		{Anonymous: []Role{"root"}},
	} {
		if _, err := New(c, quiet()); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

func TestMethodRoles(t *testing.T) {
	for m, want := range map[string]Role{
		"/arbiter.v1.DecisionService/Decide":       RoleDecide,
		"/arbiter.v1.DecisionService/DecideStream": RoleDecide,
		"/arbiter.v1.QueryService/Explain":         RoleRead,
		"/arbiter.v1.AdminService/Backup":          RoleReplicate,
	} {
		if req, r := MethodRole(m); req != NeedRole || r != want {
			t.Errorf("%s: %v %v", m, req, r)
		}
	}
	if req, _ := MethodRole("/grpc.health.v1.Health/Watch"); req != Open {
		t.Error("health is not open")
	}
	if req, _ := MethodRole("/some.Other/Method"); req != Deny {
		t.Error("unknown methods are not denied")
	}
	if SyncRole(&arbiterv1.SyncRequest{Kind: &arbiterv1.SyncRequest_Write{Write: &arbiterv1.WriteBatch{}}}) != RoleWrite ||
		SyncRole(&arbiterv1.SyncRequest{Kind: &arbiterv1.SyncRequest_Follow{Follow: &arbiterv1.FollowRequest{}}}) != RoleReplicate {
		t.Error("sync roles")
	}
}

package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/arbiter-pdp/arbiter/client"
	"github.com/arbiter-pdp/arbiter/internal/certs"
	"github.com/arbiter-pdp/arbiter/internal/certs/certstest"
	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
	"github.com/arbiter-pdp/arbiter/server"
	"github.com/arbiter-pdp/arbiter/server/authz"
)

// pki is a CA with a server certificate for 127.0.0.1 and localhost.
type pki struct {
	dir    string
	ca     *certstest.CA
	server *certstest.Leaf
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	dir := t.TempDir()
	ca := certstest.NewCA(t, dir, "arbiter")
	srv := ca.Issue(t, "server", certstest.Spec{CommonName: "arbiter-server", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true, Client: true})
	return &pki{dir: dir, ca: ca, server: srv}
}

func (p *pki) client(t testing.TB, cn string, uris ...string) *certstest.Leaf {
	t.Helper()
	return p.ca.Issue(t, "client-"+cn, certstest.Spec{CommonName: cn, URIs: uris, Client: true})
}

// serverTLS returns the server credentials option, reloading the files
// every interval.
func (p *pki) serverTLS(t testing.TB, auth tls.ClientAuthType, interval time.Duration) (grpc.ServerOption, *certs.Reloader) {
	t.Helper()
	r, err := certs.New(certs.Files{Cert: p.server.CertFile, Key: p.server.KeyFile, CA: p.ca.File}, certs.Options{Interval: interval, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig(auth)
	if err != nil {
		t.Fatal(err)
	}
	return grpc.Creds(credentials.NewTLS(cfg)), r
}

// dialTLS connects with the client certificate leaf (nil: none) and a
// bearer token ("" : none).
func dialTLS(t testing.TB, addr string, p *pki, leaf *certstest.Leaf, token string) *client.Client {
	t.Helper()
	files := client.TLSFiles{CA: p.ca.File}
	if leaf != nil {
		files.Cert, files.Key = leaf.CertFile, leaf.KeyFile
	}
	opts := []client.Option{client.WithTLS(files)}
	if token != "" {
		opts = append(opts, client.WithBearerToken(token))
	}
	c, err := client.Dial(context.Background(), addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// method is one RPC as a caller makes it.
type method struct {
	name string
	role authz.Role // "" : open to everyone
	call func(ctx context.Context, c *client.Client) error
}

func methods() []method {
	pod := podRequest("p", "default", false)
	return []method{
		{"Decide", authz.RoleDecide, func(ctx context.Context, c *client.Client) error {
			_, err := c.Decide(ctx, pod)
			return err
		}},
		{"DecideBatch", authz.RoleDecide, func(ctx context.Context, c *client.Client) error {
			_, err := c.Decision.DecideBatch(ctx, &arbiterv1.DecideBatchRequest{Items: []*arbiterv1.BatchItem{{Request: pod}}})
			return err
		}},
		{"DecideStream", authz.RoleDecide, func(ctx context.Context, c *client.Client) error {
			st, err := c.Decision.DecideStream(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(&arbiterv1.DecideStreamRequest{Item: &arbiterv1.BatchItem{Request: pod}}); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			_ = st.CloseSend()
			_, err = st.Recv()
			return err
		}},
		{"Status", authz.RoleRead, func(ctx context.Context, c *client.Client) error {
			_, err := c.Status(ctx)
			return err
		}},
		{"ListPolicies", authz.RoleRead, func(ctx context.Context, c *client.Client) error {
			_, err := c.Query.ListPolicies(ctx, &arbiterv1.ListPoliciesRequest{})
			return err
		}},
		{"ListExceptions", authz.RoleRead, func(ctx context.Context, c *client.Client) error {
			_, err := c.Query.ListExceptions(ctx, &arbiterv1.ListExceptionsRequest{})
			return err
		}},
		{"Reflection", authz.RoleRead, func(ctx context.Context, c *client.Client) error {
			st, err := reflectionpb.NewServerReflectionClient(c.Conn()).ServerReflectionInfo(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"SyncWrite", authz.RoleWrite, func(ctx context.Context, c *client.Client) error {
			_, err := c.Write(ctx, &arbiterv1.WriteBatch{Changes: []*arbiterv1.Change{{Op: arbiterv1.ChangeOp_CHANGE_OP_UPSERT,
				ObjectJson: []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"authz-test"}}`)}}})
			return err
		}},
		{"SyncFollow", authz.RoleReplicate, func(ctx context.Context, c *client.Client) error {
			st, err := c.Sync.Sync(ctx)
			if err != nil {
				return err
			}
			if err := st.Send(&arbiterv1.SyncRequest{Kind: &arbiterv1.SyncRequest_Follow{Follow: &arbiterv1.FollowRequest{ReplicaId: "authz-test"}}}); err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"Backup", authz.RoleReplicate, func(ctx context.Context, c *client.Client) error {
			_, err := c.Backup(ctx, io.Discard)
			return err
		}},
		{"Health", "", func(ctx context.Context, c *client.Client) error {
			_, err := c.Health.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		}},
	}
}

// TestAuthorizationEachRoleEachMethod calls every method as a caller with
// each single role (client certificate identities), with the default roles
// of an authenticated caller, with a bearer token, and anonymously.
func TestAuthorizationEachRoleEachMethod(t *testing.T) {
	p := newPKI(t)
	tokens := filepath.Join(p.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("# token,name\ns3cret-ci,ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	a, err := authz.New(authz.Config{
		Rules: []authz.Rule{
			{Identity: "cn:decider", Roles: []authz.Role{authz.RoleDecide}},
			{Identity: "cn:reader", Roles: []authz.Role{authz.RoleRead}},
			{Identity: "cn:writer", Roles: []authz.Role{authz.RoleWrite}},
			{Identity: "uri:spiffe://test/ns/arbiter/sa/*", Roles: []authz.Role{authz.RoleReplicate}},
			{Identity: "token:ci", Roles: []authz.Role{authz.RoleWrite, authz.RoleRead}},
		},
		TokenFile: tokens,
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := p.serverTLS(t, tls.VerifyClientCertIfGiven, time.Second)
	ts := startServer(t, server.Config{GRPCOptions: []grpc.ServerOption{creds}, Authz: a, Logger: log})
	if _, err := ts.LoadObjects(context.Background(), readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	callers := []struct {
		name  string
		c     *client.Client
		roles []authz.Role
	}{
		{"cn:decider", dialTLS(t, ts.addr, p, p.client(t, "decider"), ""), []authz.Role{authz.RoleDecide, authz.RoleRead}},
		{"cn:reader", dialTLS(t, ts.addr, p, p.client(t, "reader"), ""), []authz.Role{authz.RoleDecide, authz.RoleRead}},
		{"cn:writer", dialTLS(t, ts.addr, p, p.client(t, "writer"), ""), []authz.Role{authz.RoleDecide, authz.RoleRead, authz.RoleWrite}},
		{"uri:replicator", dialTLS(t, ts.addr, p, p.client(t, "replica-1", "spiffe://test/ns/arbiter/sa/follower"), ""),
			[]authz.Role{authz.RoleDecide, authz.RoleRead, authz.RoleReplicate}},
		{"cn:nobody (default roles)", dialTLS(t, ts.addr, p, p.client(t, "nobody"), ""), []authz.Role{authz.RoleDecide, authz.RoleRead}},
		{"token:ci", dialTLS(t, ts.addr, p, nil, "s3cret-ci"), []authz.Role{authz.RoleDecide, authz.RoleRead, authz.RoleWrite}},
		{"anonymous", dialTLS(t, ts.addr, p, nil, ""), nil},
	}
	// Rules add to the default roles of an authenticated caller (decide,
	// read); the single-role callers above prove each role on its own below.
	for _, cl := range callers {
		for _, m := range methods() {
			t.Run(cl.name+"/"+m.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err := m.call(ctx, cl.c)
				allowed := m.role == ""
				for _, r := range cl.roles {
					allowed = allowed || r == m.role
				}
				if allowed && err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !allowed {
					if status.Code(err) != codes.PermissionDenied {
						t.Fatalf("got %v, want PermissionDenied", err)
					}
					if !strings.Contains(status.Convert(err).Message(), string(m.role)) {
						t.Fatalf("denial does not name the role %q: %v", m.role, err)
					}
				}
			})
		}
	}
	// Each refusal was logged with the identity and the method.
	out := logs.String()
	for _, want := range []string{`"identity":"cn:nobody"`, `"method":"/arbiter.v1.SyncService/Sync"`, `"method":"/arbiter.v1.DecisionService/Decide"`, `"identity":"anonymous"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
}

// TestAuthorizationSingleRoles: with no default roles, each identity has
// exactly the role its rule grants.
func TestAuthorizationSingleRoles(t *testing.T) {
	p := newPKI(t)
	none := []authz.Role{}
	roles := []authz.Role{authz.RoleDecide, authz.RoleRead, authz.RoleWrite, authz.RoleReplicate}
	var rules []authz.Rule
	for _, r := range roles {
		rules = append(rules, authz.Rule{Identity: "cn:" + string(r), Roles: []authz.Role{r}})
	}
	a, err := authz.New(authz.Config{Rules: rules, Authenticated: &none}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := p.serverTLS(t, tls.RequireAndVerifyClientCert, time.Second)
	ts := startServer(t, server.Config{GRPCOptions: []grpc.ServerOption{creds}, Authz: a})
	if _, err := ts.LoadObjects(context.Background(), readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		c := dialTLS(t, ts.addr, p, p.client(t, string(r)), "")
		for _, m := range methods() {
			t.Run(string(r)+"/"+m.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err := m.call(ctx, c)
				if m.role == "" || m.role == r {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
				} else if status.Code(err) != codes.PermissionDenied {
					t.Fatalf("got %v, want PermissionDenied", err)
				}
			})
		}
	}
}

func TestUnknownBearerTokenUnauthenticated(t *testing.T) {
	p := newPKI(t)
	tokens := filepath.Join(p.dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("good,ci\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := authz.New(authz.Config{TokenFile: tokens}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := p.serverTLS(t, tls.VerifyClientCertIfGiven, time.Second)
	ts := startServer(t, server.Config{GRPCOptions: []grpc.ServerOption{creds}, Authz: a})
	ctx := context.Background()
	if _, err := dialTLS(t, ts.addr, p, nil, "bad").Status(ctx); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unknown token: %v, want Unauthenticated", err)
	}
	if _, err := dialTLS(t, ts.addr, p, nil, "good").Status(ctx); err != nil {
		t.Fatalf("known token: %v", err)
	}
}

func TestMutualTLSRequiresClientCertificate(t *testing.T) {
	p := newPKI(t)
	a, err := authz.New(authz.Config{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := p.serverTLS(t, tls.RequireAndVerifyClientCert, time.Second)
	ts := startServer(t, server.Config{GRPCOptions: []grpc.ServerOption{creds}, Authz: a})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := dialTLS(t, ts.addr, p, nil, "").Status(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("no client certificate: %v, want Unavailable (handshake refused)", err)
	}
	// A certificate from another CA is refused too.
	other := certstest.NewCA(t, t.TempDir(), "other")
	leaf := other.Issue(t, "intruder", certstest.Spec{CommonName: "decider", Client: true})
	if _, err := dialTLS(t, ts.addr, p, leaf, "").Status(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("foreign certificate: %v, want Unavailable", err)
	}
	if _, err := dialTLS(t, ts.addr, p, p.client(t, "ok"), "").Status(ctx); err != nil {
		t.Fatal(err)
	}
	// Plaintext is refused.
	plain, err := client.Dial(ctx, ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Status(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext: %v, want Unavailable", err)
	}
}

// peerSerial dials a fresh connection and returns the serial number of the
// certificate the server presented.
func peerSerial(t testing.TB, addr string, p *pki, leaf *certstest.Leaf) (string, error) {
	t.Helper()
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(p.ca.File)
	if err != nil {
		return "", err
	}
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"h2"}}
	if leaf != nil {
		kp, err := tls.LoadX509KeyPair(leaf.CertFile, leaf.KeyFile)
		if err != nil {
			return "", err
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestCertificateRotationUnderLoad rotates the server's certificate and the
// client CA bundle on disk while callers keep deciding: every call
// succeeds, and handshakes after the rotation see the new certificate and
// accept clients of the new CA.
func TestCertificateRotationUnderLoad(t *testing.T) {
	p := newPKI(t)
	a, err := authz.New(authz.Config{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	// The CA file the server trusts for clients is a bundle we rewrite.
	clientCAFile := filepath.Join(p.dir, "client-ca-bundle.pem")
	certstest.WriteBundle(t, clientCAFile, p.ca)
	r, err := certs.New(certs.Files{Cert: p.server.CertFile, Key: p.server.KeyFile, CA: clientCAFile},
		certs.Options{Interval: 50 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.ServerConfig(tls.RequireAndVerifyClientCert)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, server.Config{GRPCOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, Authz: a})
	if _, err := ts.LoadObjects(context.Background(), readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	leaf := p.client(t, "loader")
	before, err := peerSerial(t, ts.addr, p, leaf)
	if err != nil {
		t.Fatal(err)
	}
	if before != p.server.Cert.SerialNumber.String() {
		t.Fatalf("serial %s, want %s", before, p.server.Cert.SerialNumber)
	}
	newCA := certstest.NewCA(t, t.TempDir(), "next")
	newClient := newCA.Issue(t, "next-client", certstest.Spec{CommonName: "next", Client: true})
	if _, err := peerSerial(t, ts.addr, p, newClient); err == nil {
		// The handshake may complete on the client side before the server
		// refuses; a call shows it.
		if _, err := dialTLS(t, ts.addr, p, newClient, "").Status(context.Background()); err == nil {
			t.Fatal("a client of a CA not yet trusted was accepted")
		}
	}

	// Load: callers on their own connections, and callers that reconnect
	// (new handshakes) all through the rotation.
	ctx, cancel := context.WithCancel(context.Background())
	var calls, failures atomic.Int64
	var firstErr atomic.Pointer[string]
	var wg sync.WaitGroup
	fail := func(err error) {
		failures.Add(1)
		s := err.Error()
		firstErr.CompareAndSwap(nil, &s)
	}
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(reconnect bool) {
			defer wg.Done()
			c := dialTLS(t, ts.addr, p, leaf, "")
			for ctx.Err() == nil {
				if reconnect {
					c.Close()
					c = dialTLS(t, ts.addr, p, leaf, "")
				}
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := c.Decide(cctx, podRequest("p", "default", false))
				ccancel()
				if err != nil && ctx.Err() == nil {
					fail(err)
				}
				calls.Add(1)
			}
		}(i%2 == 1)
	}
	time.Sleep(300 * time.Millisecond)
	// Rotate: a new server certificate (same CA), and a bundle trusting
	// both the old and the new client CA.
	next := p.ca.Make(t, certstest.Spec{CommonName: "arbiter-server", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	p.server.Replace(t, next)
	certstest.WriteBundle(t, clientCAFile, p.ca, newCA)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := peerSerial(t, ts.addr, p, leaf)
		if err == nil && got == next.Cert.SerialNumber.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after rotation the server still presents %s (err %v), want %s", got, err, next.Cert.SerialNumber)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A client of the new CA is now accepted.
	if _, err := dialTLS(t, ts.addr, p, newClient, "").Status(context.Background()); err != nil {
		t.Fatalf("client of the new CA after rotation: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	if failures.Load() > 0 {
		t.Fatalf("%d of %d calls failed during rotation; first: %s", failures.Load(), calls.Load(), *firstErr.Load())
	}
	if r.Reloads() == 0 {
		t.Fatal("no reload recorded")
	}
	t.Logf("%d calls through the rotation, none failed; %d reloads", calls.Load(), r.Reloads())
}

// TestFollowerOverMutualTLS: a follower reaches its primary with mutual
// TLS and needs the replicate role.
func TestFollowerOverMutualTLS(t *testing.T) {
	p := newPKI(t)
	a, err := authz.New(authz.Config{Rules: []authz.Rule{{Identity: "uri:spiffe://test/follower", Roles: []authz.Role{authz.RoleReplicate}}}}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := p.serverTLS(t, tls.RequireAndVerifyClientCert, time.Second)
	primary := startServer(t, server.Config{GRPCOptions: []grpc.ServerOption{creds}, Authz: a})
	if _, err := primary.LoadObjects(context.Background(), readObjects(t, pssDir)); err != nil {
		t.Fatal(err)
	}
	follow := func(leaf *certstest.Leaf) *testServer {
		r, err := certs.New(certs.Files{Cert: leaf.CertFile, Key: leaf.KeyFile, CA: p.ca.File}, certs.Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		dial := grpc.WithTransportCredentials(credentials.NewTLS(r.ClientConfig("localhost")))
		return startServer(t, server.Config{Follow: primary.addr, FollowDialOptions: []grpc.DialOption{dial}})
	}
	good := follow(p.client(t, "follower", "spiffe://test/follower"))
	waitRevision(t, good, 1)
	if got, want := good.Current().Digest, primary.Current().Digest; got != want {
		t.Fatalf("follower digest %s, primary %s", got, want)
	}
	// A follower without the replicate role never syncs.
	bad := follow(p.client(t, "stranger"))
	time.Sleep(500 * time.Millisecond)
	if rev := bad.Current().Revision; rev != 0 {
		t.Fatalf("a follower without the replicate role reached revision %d", rev)
	}
	st, err := bad.Status(context.Background(), &arbiterv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if w := fmt.Sprint(st.GetWarnings()); !strings.Contains(w, "PermissionDenied") && !strings.Contains(w, "permission denied") {
		t.Fatalf("follower warnings do not show the refusal: %s", w)
	}
}

// Package authz identifies gRPC callers and decides which methods they may
// call.
//
// A caller is identified by its verified client certificate (common name,
// DNS, URI and e-mail SANs) and/or a bearer token (the "authorization:
// Bearer TOKEN" metadata) found in a token file. Each identity is written
// with a prefix that says where it came from:
//
//	cn:arbiter-webhook                       certificate subject common name
//	dns:webhook.arbiter.svc                  DNS SAN
//	uri:spiffe://cluster.local/ns/x/sa/y     URI SAN (SPIFFE IDs)
//	email:ci@example.com                     e-mail SAN
//	token:ci-pusher                          the name of a bearer token
//
// The configuration maps identities (exact, or a prefix ending in '*') to
// roles. A caller's roles are the union of the roles of every rule one of its
// identities matches, plus Authenticated for any caller with an identity, or
// Anonymous for a caller without one. Roles decide the methods:
//
//	decide     arbiter.v1.DecisionService/*
//	read       arbiter.v1.QueryService/*, server reflection
//	write      SyncService/Sync streams whose messages are writes
//	replicate  SyncService/Sync follow streams; AdminService/Backup
//
// grpc.health.v1.Health is open to every caller (probes). Every other method
// is refused. A refusal is PERMISSION_DENIED, logged with the caller's
// identity and the method; an unknown bearer token is UNAUTHENTICATED.
package authz

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	arbiterv1 "github.com/arbiter-pdp/arbiter/proto/arbiter/v1"
)

// Role is a set of methods a caller may call.
type Role string

// Roles.
const (
	RoleDecide    Role = "decide"
	RoleRead      Role = "read"
	RoleWrite     Role = "write"
	RoleReplicate Role = "replicate"
)

// AllRoles are every role.
var AllRoles = []Role{RoleDecide, RoleRead, RoleWrite, RoleReplicate}

// DefaultAuthenticated are the roles of an authenticated caller that no
// rule names: decisions and reads; never writes or replication.
var DefaultAuthenticated = []Role{RoleDecide, RoleRead}

// Rule grants roles to the callers whose identity matches.
type Rule struct {
	// Identity is an identity ("cn:NAME", "uri:spiffe://...", "token:NAME"),
	// or a prefix of one ending in '*' ("uri:spiffe://cluster.local/ns/ci/*").
	Identity string `json:"identity"`
	Roles    []Role `json:"roles"`
}

// Config is the authorization configuration (the `authorization:` section
// of `arbiter serve --config`).
type Config struct {
	// Rules grant roles to identities.
	Rules []Rule `json:"rules,omitempty"`
	// Authenticated are the roles of every caller with an identity (nil:
	// DefaultAuthenticated; an empty list: none).
	Authenticated *[]Role `json:"authenticated,omitempty"`
	// Anonymous are the roles of callers without an identity (default none).
	Anonymous []Role `json:"anonymous,omitempty"`
	// TokenFile holds bearer tokens, one per line: TOKEN,NAME (the
	// Kubernetes static token file format; further columns are ignored).
	// The caller presenting TOKEN has the identity token:NAME. The file is
	// re-read when it changes.
	TokenFile string `json:"tokenFile,omitempty"`
	// Disabled grants every role to every caller (plaintext loopback
	// development only).
	Disabled bool `json:"-"`
}

// Validate checks the roles and identities of the configuration.
func (c *Config) Validate() error {
	check := func(where string, roles []Role) error {
		for _, r := range roles {
			if !slices.Contains(AllRoles, r) {
				return fmt.Errorf("%s: unknown role %q (decide, read, write, replicate)", where, r)
			}
		}
		return nil
	}
	for i, r := range c.Rules {
		if r.Identity == "" {
			return fmt.Errorf("authorization.rules[%d].identity: required", i)
		}
		if !strings.Contains(r.Identity, ":") && r.Identity != "*" {
			return fmt.Errorf("authorization.rules[%d].identity: %q has no kind prefix (cn:, dns:, uri:, email:, token:)", i, r.Identity)
		}
		if err := check(fmt.Sprintf("authorization.rules[%d].roles", i), r.Roles); err != nil {
			return err
		}
	}
	if c.Authenticated != nil {
		if err := check("authorization.authenticated", *c.Authenticated); err != nil {
			return err
		}
	}
	return check("authorization.anonymous", c.Anonymous)
}

// Caller is an identified caller and its roles.
type Caller struct {
	// Identities are every identity of the caller.
	Identities []string
	// Name is the identity used in logs, the decision log and rate limits:
	// the token's, else the first URI SAN, else the common name, else the
	// first DNS SAN, else "anonymous".
	Name  string
	roles roleSet
}

// Has says whether the caller has the role.
func (c *Caller) Has(r Role) bool { return c != nil && c.roles.has(r) }

// Roles returns the caller's roles.
func (c *Caller) Roles() []Role {
	var out []Role
	for _, r := range AllRoles {
		if c.roles.has(r) {
			out = append(out, r)
		}
	}
	return out
}

type roleSet uint8

func (s roleSet) has(r Role) bool { return s&roleBit(r) != 0 }

func roleBit(r Role) roleSet {
	switch r {
	case RoleDecide:
		return 1
	case RoleRead:
		return 2
	case RoleWrite:
		return 4
	case RoleReplicate:
		return 8
	}
	return 0
}

func setOf(roles []Role) roleSet {
	var s roleSet
	for _, r := range roles {
		s |= roleBit(r)
	}
	return s
}

// Anonymous is the name of a caller without an identity.
const Anonymous = "anonymous"

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller the interceptors identified (nil outside a call).
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}

// CallerName returns the caller's name, or "" outside a call.
func CallerName(ctx context.Context) string {
	if c := CallerFrom(ctx); c != nil {
		return c.Name
	}
	return ""
}

// Authorizer identifies callers and checks their roles.
type Authorizer struct {
	cfg           Config
	log           *slog.Logger
	rules         []compiledRule
	authenticated roleSet
	anonymous     roleSet
	tokens        *tokenFile
	anonCaller    *Caller
}

type compiledRule struct {
	pattern string
	prefix  bool
	roles   roleSet
}

func (r compiledRule) matches(id string) bool {
	if r.prefix {
		return strings.HasPrefix(id, r.pattern)
	}
	return id == r.pattern
}

// New returns an Authorizer for cfg.
func New(cfg Config, log *slog.Logger) (*Authorizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	a := &Authorizer{cfg: cfg, log: log}
	for _, r := range cfg.Rules {
		cr := compiledRule{pattern: r.Identity, roles: setOf(r.Roles)}
		if strings.HasSuffix(r.Identity, "*") {
			cr.pattern, cr.prefix = strings.TrimSuffix(r.Identity, "*"), true
		}
		a.rules = append(a.rules, cr)
	}
	a.authenticated = setOf(DefaultAuthenticated)
	if cfg.Authenticated != nil {
		a.authenticated = setOf(*cfg.Authenticated)
	}
	a.anonymous = setOf(cfg.Anonymous)
	if cfg.Disabled {
		a.authenticated, a.anonymous = setOf(AllRoles), setOf(AllRoles)
	}
	a.anonCaller = &Caller{Name: Anonymous, roles: a.anonymous}
	if cfg.TokenFile != "" {
		tf, err := loadTokenFile(cfg.TokenFile, log)
		if err != nil {
			return nil, err
		}
		a.tokens = tf
	}
	return a, nil
}

// Config returns the configuration.
func (a *Authorizer) Config() Config { return a.cfg }

// Authenticate identifies the caller of ctx (a server call context).
func (a *Authorizer) Authenticate(ctx context.Context) (*Caller, error) {
	var ids []string
	if p, ok := peer.FromContext(ctx); ok && p.AuthInfo != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 && len(ti.State.PeerCertificates) > 0 {
			ids = certIdentities(ti.State.PeerCertificates[0])
		}
	}
	token, err := bearerToken(ctx)
	if err != nil {
		return nil, err
	}
	var tokenID string
	if token != "" && a.tokens == nil && a.cfg.Disabled {
		token = "" // authorization is off: a token changes nothing
	}
	if token != "" {
		if a.tokens == nil {
			return nil, status.Error(codes.Unauthenticated, "bearer tokens are not accepted by this server (no token file configured)")
		}
		name, ok := a.tokens.lookup(token)
		if !ok {
			return nil, status.Error(codes.Unauthenticated, "unknown bearer token")
		}
		tokenID = "token:" + name
		ids = append([]string{tokenID}, ids...)
	}
	if len(ids) == 0 {
		return a.anonCaller, nil
	}
	c := &Caller{Identities: ids, Name: displayName(ids, tokenID), roles: a.authenticated}
	for _, r := range a.rules {
		for _, id := range ids {
			if r.matches(id) {
				c.roles |= r.roles
				break
			}
		}
	}
	return c, nil
}

func displayName(ids []string, tokenID string) string {
	if tokenID != "" {
		return tokenID
	}
	for _, kind := range []string{"uri:", "cn:", "dns:", "email:"} {
		for _, id := range ids {
			if strings.HasPrefix(id, kind) {
				return id
			}
		}
	}
	return ids[0]
}

func certIdentities(c *x509.Certificate) []string {
	var ids []string
	for _, u := range c.URIs {
		ids = append(ids, "uri:"+u.String())
	}
	if c.Subject.CommonName != "" {
		ids = append(ids, "cn:"+c.Subject.CommonName)
	}
	for _, d := range c.DNSNames {
		ids = append(ids, "dns:"+d)
	}
	for _, e := range c.EmailAddresses {
		ids = append(ids, "email:"+e)
	}
	return ids
}

func bearerToken(ctx context.Context) (string, error) {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return "", nil
	}
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", nil
	}
	if len(vals) > 1 {
		return "", status.Error(codes.Unauthenticated, "more than one authorization header")
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return "", status.Error(codes.Unauthenticated, `malformed authorization header: want "Bearer TOKEN"`)
	}
	return strings.TrimSpace(token), nil
}

// Requirement is what a method needs.
type Requirement int

// Requirements.
const (
	// Deny: no role grants the method.
	Deny Requirement = iota
	// Open: every caller may call it (health).
	Open
	// NeedRole: the role returned with it.
	NeedRole
	// PerMessage: decided by each message of the stream (Sync).
	PerMessage
)

// MethodRole says what a method (a full gRPC method name) requires.
func MethodRole(method string) (Requirement, Role) {
	switch {
	case strings.HasPrefix(method, "/grpc.health.v1.Health/"):
		return Open, ""
	case strings.HasPrefix(method, "/arbiter.v1.DecisionService/"):
		return NeedRole, RoleDecide
	case strings.HasPrefix(method, "/arbiter.v1.QueryService/"),
		strings.HasPrefix(method, "/grpc.reflection.v1.ServerReflection/"),
		strings.HasPrefix(method, "/grpc.reflection.v1alpha.ServerReflection/"):
		return NeedRole, RoleRead
	case method == "/arbiter.v1.SyncService/Sync":
		return PerMessage, ""
	case method == "/arbiter.v1.AdminService/Backup":
		return NeedRole, RoleReplicate
	}
	return Deny, ""
}

// SyncRole is the role a Sync message needs: write for a write batch,
// replicate for a follow request or acknowledgement.
func SyncRole(m *arbiterv1.SyncRequest) Role {
	if m.GetWrite() != nil {
		return RoleWrite
	}
	return RoleReplicate
}

// denied logs and returns the PERMISSION_DENIED error of a refusal.
func (a *Authorizer) denied(ctx context.Context, c *Caller, method string, role Role, what string) error {
	roles := make([]string, 0, 4)
	for _, r := range c.Roles() {
		roles = append(roles, string(r))
	}
	a.log.WarnContext(ctx, "permission denied", "identity", c.Name, "identities", c.Identities, "method", method,
		"needs", string(role), "has", roles)
	if role == "" {
		return status.Errorf(codes.PermissionDenied, "permission denied: %s is not open to any caller", method)
	}
	return status.Errorf(codes.PermissionDenied, "permission denied: %s needs role %q for %s%s; it has %v",
		c.Name, role, method, what, roles)
}

// check authenticates the call and checks its method (PerMessage methods
// are checked later, message by message).
func (a *Authorizer) check(ctx context.Context, method string) (context.Context, *Caller, Requirement, error) {
	c, err := a.Authenticate(ctx)
	if err != nil {
		a.log.WarnContext(ctx, "unauthenticated call", "method", method, "err", status.Convert(err).Message())
		return ctx, nil, Deny, err
	}
	ctx = WithCaller(ctx, c)
	req, role := MethodRole(method)
	switch req {
	case Open, PerMessage:
		return ctx, c, req, nil
	case NeedRole:
		if c.Has(role) {
			return ctx, c, req, nil
		}
	}
	return ctx, c, req, a.denied(ctx, c, method, role, "")
}

// UnaryServerInterceptor identifies the caller, puts it in the context and
// refuses methods its roles do not cover.
func (a *Authorizer) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, _, _, err := a.check(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams; on Sync it
// checks every message received (write: write; follow and ack: replicate).
func (a *Authorizer) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, c, req, err := a.check(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		return handler(srv, &stream{ServerStream: ss, ctx: ctx, a: a, c: c, method: info.FullMethod, perMessage: req == PerMessage})
	}
}

type stream struct {
	grpc.ServerStream
	ctx        context.Context
	a          *Authorizer
	c          *Caller
	method     string
	perMessage bool
}

func (s *stream) Context() context.Context { return s.ctx }

func (s *stream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.perMessage {
		return nil
	}
	sr, ok := m.(*arbiterv1.SyncRequest)
	if !ok {
		return s.a.denied(s.ctx, s.c, s.method, "", "")
	}
	role := SyncRole(sr)
	if !s.c.Has(role) {
		what := " (follow)"
		if role == RoleWrite {
			what = " (write)"
		}
		return s.a.denied(s.ctx, s.c, s.method, role, what)
	}
	return nil
}

// tokenFile is a bearer token file, re-read when it changes.
type tokenFile struct {
	path string
	log  *slog.Logger

	mu        sync.Mutex
	lastCheck atomic.Int64
	stamp     fileStamp
	byHash    atomic.Pointer[map[[32]byte]string]
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// tokenCheckInterval is how often the token file is checked for changes.
var tokenCheckInterval = 2 * time.Second

func loadTokenFile(path string, log *slog.Logger) (*tokenFile, error) {
	tf := &tokenFile{path: path, log: log}
	if err := tf.reload(); err != nil {
		return nil, err
	}
	tf.lastCheck.Store(time.Now().UnixNano())
	return tf, nil
}

func (tf *tokenFile) reload() error {
	fi, err := os.Stat(tf.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	st := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if tf.byHash.Load() != nil && st == tf.stamp {
		return nil
	}
	b, err := os.ReadFile(tf.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	m, err := parseTokens(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("token file %s: %w", tf.path, err)
	}
	tf.stamp = st
	tf.byHash.Store(&m)
	return nil
}

func parseTokens(r io.Reader) (map[[32]byte]string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	m := map[[32]byte]string{}
	line := 0
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line++
		if err != nil {
			return nil, err
		}
		if len(rec) < 2 || strings.TrimSpace(rec[0]) == "" || strings.TrimSpace(rec[1]) == "" {
			l, _ := cr.FieldPos(0)
			return nil, fmt.Errorf("line %d: want TOKEN,NAME", l)
		}
		m[sha256.Sum256([]byte(strings.TrimSpace(rec[0])))] = strings.TrimSpace(rec[1])
	}
	return m, nil
}

func (tf *tokenFile) lookup(token string) (string, bool) {
	now := time.Now().UnixNano()
	if now-tf.lastCheck.Load() >= int64(tokenCheckInterval) && tf.mu.TryLock() {
		if err := tf.reload(); err != nil {
			tf.log.Warn("token file unreadable; keeping the loaded tokens", "err", err)
		}
		tf.lastCheck.Store(now)
		tf.mu.Unlock()
	}
	// Hashing first makes the map lookup independent of how much of the
	// token matches a stored one.
	name, ok := (*tf.byHash.Load())[sha256.Sum256([]byte(token))]
	return name, ok
}

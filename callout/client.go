package callout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// Options are what a Client is given besides its Config.
type Options struct {
	// Recorder, when set, is called once for every call, when it ends,
	// with the context of the call (see also Collect). It must be safe
	// for concurrent use and return quickly.
	Recorder func(ctx context.Context, c Call)
	// Logger receives a debug line for every call (default slog.Default()).
	Logger *slog.Logger
	// Kube is the API server resource.Post creates objects in (nil:
	// resource.Post fails with kyvernocel.ErrNoCluster). It is copied; its
	// transport is wrapped with the response size limit and the records.
	// Its credentials are those of the creates (RBAC applies on top of
	// AllowedResources), and its QPS and Burst throttle them (client-go's
	// 5 and 10 when unset).
	Kube *rest.Config
}

// maxCABundles bounds the clients kept for http.Client(caBundle): a policy
// may compute its bundle from the request, so the cache cannot grow with
// what it is sent. The oldest is dropped first.
const maxCABundles = 32

// Client makes the calls out of Kyverno's CEL libraries: http.Get,
// http.Post and http.Client(caBundle) (it implements
// kyvernocel.HTTPContext and kyvernocel.HTTPNamespacer) and resource.Post
// (PostResource). Every call is checked against the allowlists, bounded in
// time and size, and recorded. A Client is safe for concurrent use; the
// values Client and ForNamespace return share its connections, limits and
// records.
type Client struct {
	s *state
	// hc sends the requests: the shared client trusting the system's
	// roots, or one trusting a CA bundle.
	hc *http.Client
	// ca identifies the CA bundle ("" for the system's roots).
	ca string
	// ns is the namespace of the calling policy ("" for a cluster policy).
	ns string
}

// state is what every view of a Client shares.
type state struct {
	rules    *rules
	recorder func(context.Context, Call)
	log      *slog.Logger
	dyn      dynamic.Interface

	mu      sync.Mutex
	byCA    map[string]*http.Client
	caOrder []string
}

var (
	_ kyvernocel.HTTPContext    = (*Client)(nil)
	_ kyvernocel.HTTPNamespacer = (*Client)(nil)
)

// New returns a Client for cfg (validated; unset limits are the defaults).
func New(cfg Config, opts Options) (*Client, error) {
	r, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	s := &state{rules: r, recorder: opts.Recorder, log: opts.Logger, byCA: map[string]*http.Client{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opts.Kube != nil {
		if s.dyn, err = s.dynamicFor(opts.Kube); err != nil {
			return nil, fmt.Errorf("callout: the API server client: %w", err)
		}
	}
	return &Client{s: s, hc: s.newHTTPClient(nil)}, nil
}

// newHTTPClient returns a client with its own transport, trusting roots
// (nil: the system's). The transport's settings are net/http's
// DefaultTransport's, spelled out so that nothing else in the process
// changes them, without a proxy: calls go straight to the hosts the
// allowlist names (HTTP_PROXY and HTTPS_PROXY are not read).
func (s *state) newHTTPClient(roots *x509.CertPool) *http.Client {
	dialer := &net.Dialer{
		Timeout:   min(30*time.Second, s.rules.timeout),
		KeepAlive: 30 * time.Second,
		Control:   s.controlDial,
	}
	t := &http.Transport{
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  1 * time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}
	return &http.Client{Transport: t, CheckRedirect: s.checkRedirect}
}

// controlDial refuses to connect to a blocked address. It runs on the
// address actually dialled, after name resolution: no DNS rebinding window.
func (s *state) controlDial(_, address string, _ syscall.RawConn) error {
	if p, a, blocked := s.rules.blockedBy(address); blocked {
		return fmt.Errorf("%w: %s is in %s", ErrBlockedAddress, a, p)
	}
	return nil
}

// redirectError is the refusal of a redirect.
type redirectError struct {
	location string
	err      error
}

func (e *redirectError) Error() string {
	return fmt.Sprintf("redirect to %q: %v", redact(e.location), e.err)
}

func (e *redirectError) Unwrap() error { return e.err }

// checkRedirect checks every redirect against the allowlist, as Kyverno's
// does, and stops after MaxRedirects.
func (s *state) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= MaxRedirects {
		return ErrTooManyRedirects
	}
	if !s.allowed(req.URL) {
		return &redirectError{location: req.URL.String(), err: ErrURLNotAllowed}
	}
	return nil
}

// allowed reports whether u is under an allowed prefix.
func (s *state) allowed(u *url.URL) bool {
	for _, p := range s.rules.prefixes {
		if p.Match(u) {
			return true
		}
	}
	return false
}

// ForNamespace implements kyvernocel.HTTPNamespacer: the calls of a
// policy of namespace ns are refused unless
// Config.AllowHTTPInNamespacedPolicies, as Kyverno's are, and are recorded
// with the namespace.
func (c *Client) ForNamespace(ns string) kyvernocel.HTTPContext {
	v := *c
	v.ns = ns
	return &v
}

// Get implements kyvernocel.HTTPContext (http.Get).
func (c *Client) Get(ctx context.Context, rawURL string, headers map[string]string) (any, error) {
	return c.do(ctx, "http.Get", http.MethodGet, rawURL, nil, headers)
}

// Post implements kyvernocel.HTTPContext (http.Post): data is sent
// JSON-encoded, byte for byte as Kyverno encodes it (a protobuf
// structpb.Value through encoding/json, with a trailing newline), with no
// Content-Type unless headers set one, as in Kyverno.
func (c *Client) Post(ctx context.Context, rawURL string, data any, headers map[string]string) (any, error) {
	body, err := encodeBody(data)
	if err != nil {
		call := c.newCall("http.Post", http.MethodPost, rawURL)
		call.Err = &Error{Function: "http.Post", Target: quoteURL(rawURL), Err: fmt.Errorf("failed to encode request data: %w", err)}
		c.s.record(ctx, call)
		return nil, call.Err
	}
	return c.do(ctx, "http.Post", http.MethodPost, rawURL, body, headers)
}

// encodeBody encodes data as Kyverno's buildRequestData does: Kyverno
// passes the CEL value as a *structpb.Value to json.Encoder.Encode.
func encodeBody(data any) ([]byte, error) {
	v, err := structpb.NewValue(data)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Client implements kyvernocel.HTTPContext (http.Client(caBundle)): the
// returned context trusts the certificates of caBundle (PEM) and nothing
// else, as Kyverno's; an empty bundle returns c. Clients are kept by the
// bundle's hash (the last 32), so a bundle costs one TLS setup, not one per
// decision.
func (c *Client) Client(_ context.Context, caBundle string) (kyvernocel.HTTPContext, error) {
	if caBundle == "" {
		return c, nil
	}
	sum := sha256.Sum256([]byte(caBundle))
	id := "sha256:" + hex.EncodeToString(sum[:8])
	hc, err := c.s.clientForCA(id, caBundle)
	if err != nil {
		return nil, &Error{Function: "http.Client", Err: err}
	}
	v := *c
	v.hc, v.ca = hc, id
	return &v, nil
}

func (s *state) clientForCA(id, caBundle string) (*http.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hc, ok := s.byCA[id]; ok {
		return hc, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caBundle)) {
		// Kyverno's text (kyvernocel.CheckCABundle)
		return nil, errors.New("failed to parse PEM CA bundle for APICall")
	}
	hc := s.newHTTPClient(pool)
	if len(s.caOrder) >= maxCABundles {
		oldest := s.caOrder[0]
		s.caOrder = s.caOrder[1:]
		s.byCA[oldest].CloseIdleConnections()
		delete(s.byCA, oldest)
	}
	s.byCA[id] = hc
	s.caOrder = append(s.caOrder, id)
	s.log.Debug("callout: new client for a CA bundle", "caBundle", id)
	return hc, nil
}

func (c *Client) newCall(function, method, rawURL string) *Call {
	return &Call{Function: function, Method: method, URL: redact(rawURL), Namespace: c.ns, CABundle: c.ca, Start: time.Now()}
}

// do makes an http.* call: checks, sends, reads at most the size limit and
// decodes the response as Kyverno does.
func (c *Client) do(ctx context.Context, function, method, rawURL string, body []byte, headers map[string]string) (any, error) {
	status, data, err := c.send(ctx, function, method, rawURL, body, func(h http.Header) {
		for k, v := range headers {
			h.Add(k, v)
		}
	})
	if err != nil {
		return nil, err
	}
	return decodeResponse(data, status), nil
}

// send makes a call: checks, sends, and reads at most the size limit of
// the response, whatever its status.
func (c *Client) send(ctx context.Context, function, method, rawURL string, body []byte, setHeaders func(http.Header)) (int, []byte, error) {
	call := c.newCall(function, method, rawURL)
	call.RequestBytes = int64(len(body))
	defer c.s.record(ctx, call)
	fail := func(refused bool, err error) (int, []byte, error) {
		call.Refused = refused
		call.Err = &Error{Function: function, Target: quoteURL(rawURL), Err: err}
		return 0, nil, call.Err
	}
	if c.ns != "" && !c.s.rules.allowNamespaceHTTP {
		return fail(true, ErrNamespacedHTTP)
	}
	cctx, cancel := context.WithTimeoutCause(ctx, c.s.rules.timeout, ErrTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(cctx, method, rawURL, rd)
	if err != nil {
		return fail(false, fmt.Errorf("failed to create request: %w", err))
	}
	// The URL checked is the one the request is sent to.
	if !c.s.allowed(req.URL) {
		if len(c.s.rules.prefixes) == 0 {
			return fail(true, fmt.Errorf("%w: %v", ErrURLNotAllowed, errNoAllowlist))
		}
		return fail(true, ErrURLNotAllowed)
	}
	if setHeaders != nil {
		setHeaders(req.Header)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fail(false, c.transportError(ctx, cctx, err))
	}
	defer func() { _ = resp.Body.Close() }()
	call.Status = resp.StatusCode
	if resp.Request != nil && resp.Request.URL.String() != req.URL.String() {
		call.Location = redact(resp.Request.URL.String())
	}
	limit := c.s.rules.maxResponseBytes
	if resp.ContentLength > limit {
		call.ResponseBytes = 0
		return fail(false, c.tooLarge())
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	call.ResponseBytes = int64(len(data))
	if err != nil {
		return fail(false, fmt.Errorf("reading the response: %w", c.transportError(ctx, cctx, err)))
	}
	if int64(len(data)) > limit {
		return fail(false, c.tooLarge())
	}
	return resp.StatusCode, data, nil
}

func (c *Client) tooLarge() error {
	return fmt.Errorf("%w: more than %d bytes (maxResponseBytes)", ErrResponseTooLarge, c.s.rules.maxResponseBytes)
}

// transportError says why a request failed: the callout timeout, the end
// of the caller's context, a refused redirect, or the transport's error
// (without net/http's "Get \"url\": " prefix: the call is named already).
func (c *Client) transportError(parent, cctx context.Context, err error) error {
	if parent.Err() != nil {
		return fmt.Errorf("the caller's context ended: %w", context.Cause(parent))
	}
	if errors.Is(context.Cause(cctx), ErrTimeout) && cctx.Err() != nil {
		return fmt.Errorf("%w of %s (timeout)", ErrTimeout, c.s.rules.timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err
}

// decodeResponse shapes a response as Kyverno's executeRequest
// (kyverno/sdk extensions/cel/libs/http/http.go): the body decoded as JSON
// (the first JSON value of it; null when it is not JSON), an object with
// "statusCode" added, anything else as {"body": ..., "statusCode": N}.
// Every status is a response, not an error.
func decodeResponse(data []byte, status int) any {
	var body any
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&body); err != nil {
		body = nil
	}
	if m, ok := body.(map[string]any); ok {
		m["statusCode"] = status
		return m
	}
	return map[string]any{"body": body, "statusCode": status}
}

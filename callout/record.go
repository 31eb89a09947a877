package callout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// Call is the record of one call out: what the server sent where, what
// came back, and how long it took. Every call is recorded — refused,
// failed or answered — through Options.Recorder, the Calls of Collect and a
// debug log line. No header and no body is recorded.
type Call struct {
	// Function is the library function: "http.Get", "http.Post" or
	// "resource.Post".
	Function string
	// Method is the HTTP method ("GET", "POST").
	Method string
	// URL is the URL called, without its password. For resource.Post, the
	// API server's URL of the create once it is sent, else
	// "apiVersion resource" of the call.
	URL string
	// Location is where the redirects of the call led ("" when it was not
	// redirected).
	Location string
	// Resource is resource.Post's "resource[.group][/subresource]".
	Resource string
	// Namespace is the namespace of the calling policy ("" for a cluster
	// policy, or when the caller did not say).
	Namespace string
	// CABundle identifies the CA bundle of http.Client(caBundle):
	// "sha256:" and the first 16 hex digits of its hash ("" for the
	// system's roots).
	CABundle string
	// Status is the HTTP status code of the response (0 without one).
	Status int
	// Start is when the call started; Duration how long it took, reading
	// the response included.
	Start    time.Time
	Duration time.Duration
	// RequestBytes is the size of the request body; ResponseBytes what was
	// read of the response's.
	RequestBytes  int64
	ResponseBytes int64
	// Refused says the server's configuration refused the call: nothing
	// was sent.
	Refused bool
	// Err is why the call failed (nil when a response was read).
	Err error
}

// LogValue implements slog.LogValuer.
func (c Call) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs,
		slog.String("function", c.Function),
		slog.String("method", c.Method),
		slog.String("url", c.URL))
	if c.Location != "" {
		attrs = append(attrs, slog.String("location", c.Location))
	}
	if c.Resource != "" {
		attrs = append(attrs, slog.String("resource", c.Resource))
	}
	if c.Namespace != "" {
		attrs = append(attrs, slog.String("namespace", c.Namespace))
	}
	if c.CABundle != "" {
		attrs = append(attrs, slog.String("caBundle", c.CABundle))
	}
	attrs = append(attrs,
		slog.Int("status", c.Status),
		slog.Duration("duration", c.Duration),
		slog.Int64("requestBytes", c.RequestBytes),
		slog.Int64("responseBytes", c.ResponseBytes))
	if c.Refused {
		attrs = append(attrs, slog.Bool("refused", true))
	}
	if c.Err != nil {
		attrs = append(attrs, slog.String("error", c.Err.Error()))
	}
	return slog.GroupValue(attrs...)
}

// Calls collects the calls made under a context returned by Collect (for
// example those of one decision, for its decision log entry). It is safe
// for concurrent use.
type Calls struct {
	mu    sync.Mutex
	calls []Call
}

// List returns the calls collected so far, in the order they ended.
func (c *Calls) List() []Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Call(nil), c.calls...)
}

func (c *Calls) add(call Call) {
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()
}

type callsKey struct{}

// Collect returns a context under which every call a Client makes is also
// added to the returned Calls. Contexts nest: each Calls collects the calls
// made under its own context, and its descendants'.
func Collect(ctx context.Context) (context.Context, *Calls) {
	c := &Calls{}
	return context.WithValue(ctx, callsKey{}, collectors{c, collectorsFrom(ctx)}), c
}

// collectors is a linked list of the Calls of nested Collect contexts.
type collectors struct {
	c      *Calls
	parent *collectors
}

func collectorsFrom(ctx context.Context) *collectors {
	if v, ok := ctx.Value(callsKey{}).(collectors); ok {
		return &v
	}
	return nil
}

// record reports a finished call to the recorder, the collectors of ctx
// and the log.
func (s *state) record(ctx context.Context, c *Call) {
	c.Duration = time.Since(c.Start)
	if s.recorder != nil {
		s.recorder(ctx, *c)
	}
	for l := collectorsFrom(ctx); l != nil; l = l.parent {
		l.c.add(*c)
	}
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.LogAttrs(ctx, slog.LevelDebug, "callout", slog.Any("call", *c))
	}
}

// ---- errors ----

// Error is the error of a failed call: the library function, what it
// called, and why it failed. Its text names the call, so that the result
// of the policy does: "http.Get \"https://...\": ...".
type Error struct {
	// Function is "http.Get", "http.Post", "http.Client" or
	// "resource.Post".
	Function string
	// Target is what was called: the quoted URL, or resource.Post's
	// "apiVersion resource".
	Target string
	Err    error
}

func (e *Error) Error() string {
	if e.Target == "" {
		return e.Function + ": " + e.Err.Error()
	}
	return e.Function + " " + e.Target + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// The causes of failed calls, for errors.Is.
var (
	// ErrURLNotAllowed: the URL, or a redirect's, is not under any of
	// Config.AllowedURLPrefixes.
	ErrURLNotAllowed = errors.New("URL is not allowed by the server's callout allowlist (allowedURLPrefixes)")
	// ErrResourceNotAllowed: resource.Post of a resource Config.AllowedResources
	// does not list.
	ErrResourceNotAllowed = errors.New("resource is not allowed by the server's callout allowlist (allowedResources)")
	// ErrResponseTooLarge: the response body is longer than
	// Config.MaxResponseBytes.
	ErrResponseTooLarge = errors.New("response body too large")
	// ErrTimeout: no complete response within Config.Timeout.
	ErrTimeout = errors.New("no complete response within the callout timeout")
	// ErrBlockedAddress: the host resolved to an address of
	// Config.BlockedCIDRs.
	ErrBlockedAddress = errors.New("address is blocked by the server's callout configuration (blockedCIDRs)")
	// ErrNamespacedHTTP: http.Get or http.Post called by a namespaced
	// policy without Config.AllowHTTPInNamespacedPolicies (Kyverno's text).
	ErrNamespacedHTTP = errors.New(kyvernocel.HTTPNotAllowedMessage)
	// ErrTooManyRedirects: more than MaxRedirects redirects.
	ErrTooManyRedirects = fmt.Errorf("stopped after %d redirects", MaxRedirects)
)

// quoteURL is the Target of an http call: the URL without its password,
// quoted.
func quoteURL(raw string) string {
	return fmt.Sprintf("%q", redact(raw))
}

// redact returns raw without the password of its user information.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); !has {
		return raw
	}
	return u.Redacted()
}

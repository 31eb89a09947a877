package callout

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-pdp/arbiter/engine/kyvernocel"
)

// recorder keeps the calls a Client records.
type recorder struct {
	mu    sync.Mutex
	calls []Call
}

func (r *recorder) record(_ context.Context, c Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) take() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// testServer serves what the tests call; other is a host the allowlist
// does not name (a redirect target).
func testServers(t *testing.T) (srv, other *httptest.Server) {
	t.Helper()
	other = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"secret": "from the other host"}`)
	}))
	t.Cleanup(other.Close)
	mux := http.NewServeMux()
	mux.HandleFunc("/api/json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"allowed": true, "n": 1, "list": [1, "a", null]}`)
	})
	mux.HandleFunc("/api/array", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `[1, 2.5, "x"]`)
	})
	mux.HandleFunc("/api/text", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "plain text, not JSON")
	})
	mux.HandleFunc("/api/trailing", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"a": 1} trailing garbage`)
	})
	mux.HandleFunc("/api/empty", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/api/missing", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error": "no such thing"}`)
	})
	mux.HandleFunc("/api/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, `{}`)
	})
	mux.HandleFunc("/api/slowbody", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"partial": `)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, `1}`)
	})
	mux.HandleFunc("/api/big", func(w http.ResponseWriter, _ *http.Request) {
		// chunked: no Content-Length announces the size
		_, _ = io.WriteString(w, `{"pad": "`)
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, strings.Repeat("x", 1000))
		_, _ = io.WriteString(w, `"}`)
	})
	mux.HandleFunc("/api/bigdeclared", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "5000")
		_, _ = io.WriteString(w, strings.Repeat(" ", 5000))
	})
	mux.HandleFunc("/api/exact", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"pad": "`+strings.Repeat("x", 400-len(`{"pad": ""}`))+`"}`)
	})
	mux.HandleFunc("/api/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		out := map[string]any{
			"method":      r.Method,
			"body":        string(body),
			"contentType": r.Header.Get("Content-Type"),
			"token":       r.Header.Values("X-Token"),
			"auth":        r.Header.Get("Authorization"),
			"length":      r.ContentLength,
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("/api/redirect-here", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/api/json", http.StatusFound)
	})
	mux.HandleFunc("/api/redirect-post", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/api/echo", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/api/redirect-away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/secret", http.StatusFound)
	})
	mux.HandleFunc("/api/redirect-outside", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/private/x", http.StatusFound)
	})
	mux.HandleFunc("/api/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/api/loop", http.StatusFound)
	})
	mux.HandleFunc("/private/x", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"private": true}`)
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, other
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHTTP: http.Get and http.Post against a real server — the shape of
// responses (Kyverno's), the allowlist (of the URL and of every redirect),
// the limits, the body and headers sent — and the record of every call.
func TestHTTP(t *testing.T) {
	srv, other := testServers(t)
	base := Config{
		Timeout:            Duration(300 * time.Millisecond),
		MaxResponseBytes:   400,
		AllowedURLPrefixes: []string{srv.URL + "/api"},
	}
	type tc struct {
		name    string
		cfg     *Config
		ns      string
		method  string
		path    string // appended to srv.URL unless it has a scheme
		body    any
		headers map[string]string
		want    string // JSON of the result
		err     string // the error's start, srv's URL written as SRV
		refused bool
		check   func(t *testing.T, c Call)
	}
	noAllowlist := base
	noAllowlist.AllowedURLPrefixes = nil
	blocked := base
	blocked.BlockedCIDRs = []string{"127.0.0.0/8", "::1"}
	nsAllowed := base
	nsAllowed.AllowHTTPInNamespacedPolicies = true
	for _, c := range []tc{
		{name: "json object", path: "/api/json", want: `{"allowed":true,"list":[1,"a",null],"n":1,"statusCode":200}`,
			check: func(t *testing.T, c Call) {
				if c.Status != 200 || c.ResponseBytes == 0 || c.Err != nil || c.Refused || c.Method != "GET" || c.Function != "http.Get" || c.Duration <= 0 {
					t.Errorf("call: %+v", c)
				}
			}},
		{name: "json array", path: "/api/array", want: `{"body":[1,2.5,"x"],"statusCode":200}`},
		{name: "not json", path: "/api/text", want: `{"body":null,"statusCode":200}`},
		{name: "first JSON value", path: "/api/trailing", want: `{"a":1,"statusCode":200}`},
		{name: "empty body", path: "/api/empty", want: `{"body":null,"statusCode":204}`},
		{name: "404 is a response", path: "/api/missing", want: `{"error":"no such thing","statusCode":404}`},
		{name: "exactly the limit", path: "/api/exact", want: `{"pad":"` + strings.Repeat("x", 389) + `","statusCode":200}`},
		{name: "denied path", path: "/private/x", refused: true,
			err: `http.Get "SRV/private/x": URL is not allowed by the server's callout allowlist (allowedURLPrefixes)`},
		{name: "denied boundary", path: "/apix", refused: true, err: `http.Get "SRV/apix": URL is not allowed`},
		{name: "denied traversal", path: "/api/../private/x", refused: true, err: `http.Get "SRV/api/../private/x": URL is not allowed`},
		{name: "denied host", path: other.URL + "/api/json", refused: true, err: `http.Get "` + other.URL + `/api/json": URL is not allowed`},
		{name: "denied scheme", path: "file:///etc/passwd", refused: true, err: `http.Get "file:///etc/passwd": URL is not allowed`},
		{name: "other path", path: "/relative", refused: true, err: `http.Get "SRV/relative": URL is not allowed`},
		{name: "relative URL", path: "relative:/x", refused: true, err: `http.Get "relative:/x": URL is not allowed`},
		{name: "no allowlist", cfg: &noAllowlist, path: "/api/json", refused: true,
			err: `http.Get "SRV/api/json": URL is not allowed by the server's callout allowlist (allowedURLPrefixes): no allowed URL prefixes are configured`},
		{name: "password redacted", path: strings.Replace(other.URL, "://", "://user:hunter2@", 1) + "/x", refused: true,
			err: `http.Get "http://user:xxxxx@`,
			check: func(t *testing.T, c Call) {
				if strings.Contains(c.URL, "hunter2") || strings.Contains(c.Err.Error(), "hunter2") {
					t.Errorf("password recorded: %+v", c)
				}
			}},
		{name: "bad url", path: "http://a b/", err: `http.Get "http://a b/": failed to create request: parse`},
		{name: "redirect allowed", path: "/api/redirect-here", want: `{"allowed":true,"list":[1,"a",null],"n":1,"statusCode":200}`,
			check: func(t *testing.T, c Call) {
				if c.Location != srv.URL+"/api/json" {
					t.Errorf("location: %+v", c)
				}
			}},
		{name: "redirect to a denied host", path: "/api/redirect-away",
			err: `http.Get "SRV/api/redirect-away": redirect to "` + other.URL + `/secret": URL is not allowed by the server's callout allowlist (allowedURLPrefixes)`},
		{name: "redirect to a denied path", path: "/api/redirect-outside",
			err: `http.Get "SRV/api/redirect-outside": redirect to "SRV/private/x": URL is not allowed`},
		{name: "redirect loop", path: "/api/loop", err: `http.Get "SRV/api/loop": stopped after 10 redirects`},
		{name: "timeout", path: "/api/slow", err: `http.Get "SRV/api/slow": no complete response within the callout timeout of 300ms (timeout)`,
			check: func(t *testing.T, c Call) {
				if c.Duration < 300*time.Millisecond || c.Duration > 3*time.Second || !errors.Is(c.Err, ErrTimeout) {
					t.Errorf("timeout call: %+v", c)
				}
			}},
		{name: "timeout in the body", path: "/api/slowbody", err: `http.Get "SRV/api/slowbody": reading the response: no complete response within the callout timeout of 300ms (timeout)`},
		{name: "oversize chunked", path: "/api/big", err: `http.Get "SRV/api/big": response body too large: more than 400 bytes (maxResponseBytes)`,
			check: func(t *testing.T, c Call) {
				if c.Status != 200 || c.ResponseBytes != 401 || !errors.Is(c.Err, ErrResponseTooLarge) {
					t.Errorf("oversize call: %+v", c)
				}
			}},
		{name: "oversize declared", path: "/api/bigdeclared", err: `http.Get "SRV/api/bigdeclared": response body too large: more than 400 bytes (maxResponseBytes)`},
		{name: "blocked address", cfg: &blocked, path: "/api/json",
			err: `http.Get "SRV/api/json": dial tcp 127.0.0.1:`,
			check: func(t *testing.T, c Call) {
				if !errors.Is(c.Err, ErrBlockedAddress) || !strings.Contains(c.Err.Error(), "is in 127.0.0.0/8") {
					t.Errorf("blocked: %v", c.Err)
				}
			}},
		{name: "headers", path: "/api/echo", headers: map[string]string{"X-Token": "t1", "Authorization": "Bearer abc"},
			want: `{"auth":"Bearer abc","body":"","contentType":"","length":0,"method":"GET","statusCode":200,"token":["t1"]}`},
		{name: "post body", method: "POST", path: "/api/echo",
			body: map[string]any{"b": "<&>", "a": float64(1), "c": []any{true, nil, 2.5}, "d": map[string]any{}},
			want: `{"auth":"","body":"{\"a\":1,\"b\":\"\\u003c\\u0026\\u003e\",\"c\":[true,null,2.5],\"d\":{}}\n","contentType":"","length":60,"method":"POST","statusCode":200,"token":null}`,
			check: func(t *testing.T, c Call) {
				if c.Function != "http.Post" || c.Method != "POST" || c.RequestBytes != 60 {
					t.Errorf("post call: %+v", c)
				}
			}},
		{name: "post string body with content type", method: "POST", path: "/api/echo", body: "text",
			headers: map[string]string{"Content-Type": "application/json"},
			want:    `{"auth":"","body":"\"text\"\n","contentType":"application/json","length":7,"method":"POST","statusCode":200,"token":null}`},
		{name: "post null body", method: "POST", path: "/api/echo", body: nil,
			want: `{"auth":"","body":"null\n","contentType":"","length":5,"method":"POST","statusCode":200,"token":null}`},
		{name: "post redirected with its body (307)", method: "POST", path: "/api/redirect-post", body: map[string]any{"k": "v"},
			want: `{"auth":"","body":"{\"k\":\"v\"}\n","contentType":"","length":10,"method":"POST","statusCode":200,"token":null}`},
		{name: "post unencodable", method: "POST", path: "/api/echo", body: map[string]any{"x": make(chan int)},
			err: `http.Post "SRV/api/echo": failed to encode request data: proto:`},
		{name: "post denied", method: "POST", path: "/private/x", body: "x", refused: true, err: `http.Post "SRV/private/x": URL is not allowed`},
		{name: "namespaced policy", ns: "team", path: "/api/json", refused: true,
			err: `http.Get "SRV/api/json": ` + kyvernocel.HTTPNotAllowedMessage,
			check: func(t *testing.T, c Call) {
				if c.Namespace != "team" || !errors.Is(c.Err, ErrNamespacedHTTP) {
					t.Errorf("namespaced: %+v", c)
				}
			}},
		{name: "namespaced post", ns: "team", method: "POST", path: "/api/echo", body: "x", refused: true,
			err: `http.Post "SRV/api/echo": http calls are not allowed in namespaced policies: set --allowHTTPInNamespacedPolicies to enable`},
		{name: "namespaced policy allowed", cfg: &nsAllowed, ns: "team", path: "/api/json",
			want: `{"allowed":true,"list":[1,"a",null],"n":1,"statusCode":200}`,
			check: func(t *testing.T, c Call) {
				if c.Namespace != "team" {
					t.Errorf("namespace not recorded: %+v", c)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			if c.cfg != nil {
				cfg = *c.cfg
			}
			rec := &recorder{}
			cl, err := New(cfg, Options{Recorder: rec.record})
			if err != nil {
				t.Fatal(err)
			}
			var h kyvernocel.HTTPContext = cl
			if c.ns != "" {
				h = cl.ForNamespace(c.ns)
			}
			u := c.path
			if !strings.Contains(u, ":") {
				u = srv.URL + u
			}
			var got any
			if c.method == "POST" {
				got, err = h.Post(context.Background(), u, c.body, c.headers)
			} else {
				got, err = h.Get(context.Background(), u, c.headers)
			}
			if c.err != "" {
				want := strings.ReplaceAll(c.err, "SRV", srv.URL)
				if err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Fatalf("error %v, want %q", err, want)
				}
				var ce *Error
				if !errors.As(err, &ce) || ce.Function == "" {
					t.Errorf("not a *callout.Error: %T", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if s := jsonOf(t, got); s != c.want {
					t.Errorf("got  %s\nwant %s", s, c.want)
				}
			}
			calls := rec.take()
			if len(calls) != 1 {
				t.Fatalf("%d calls recorded", len(calls))
			}
			call := calls[0]
			if call.Refused != c.refused || (call.Err == nil) != (c.err == "") || call.Start.IsZero() {
				t.Errorf("call: %+v", call)
			}
			if c.refused && (call.Status != 0 || call.ResponseBytes != 0) {
				t.Errorf("a refused call has a response: %+v", call)
			}
			if c.check != nil {
				c.check(t, call)
			}
		})
	}
}

// TestNamespacedClient: http.Client(caBundle) of a namespaced policy keeps
// the rule (and checks its bundle first, as Kyverno's).
func TestNamespacedClient(t *testing.T) {
	cl, err := New(Config{AllowedURLPrefixes: []string{"https://example.com"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := cl.ForNamespace("team")
	if _, err := ns.Client(context.Background(), "not a PEM"); err == nil || err.Error() != "http.Client: failed to parse PEM CA bundle for APICall" {
		t.Errorf("bad bundle: %v", err)
	}
	same, err := ns.Client(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := same.Get(context.Background(), "https://example.com/", nil); !errors.Is(err, ErrNamespacedHTTP) {
		t.Errorf("namespaced Client(\"\").Get: %v", err)
	}
}

// TestCallerContext: a call ends with the caller's context, and says so.
func TestCallerContext(t *testing.T) {
	srv, _ := testServers(t)
	cl, err := New(Config{Timeout: Duration(10 * time.Second), AllowedURLPrefixes: []string{srv.URL}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = cl.Get(ctx, srv.URL+"/api/slow", nil)
	if err == nil || !strings.Contains(err.Error(), `/api/slow": the caller's context ended: context deadline exceeded`) || time.Since(start) > 5*time.Second {
		t.Errorf("%v after %v", err, time.Since(start))
	}
}

// TestRecords: Collect gathers the calls of a context (nested contexts
// each theirs), the recorder sees every call with its context, and the
// debug log has a line per call without headers or bodies.
func TestRecords(t *testing.T) {
	srv, _ := testServers(t)
	var logBuf bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&logBuf, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	type key struct{}
	var seen []any
	var seenMu sync.Mutex
	cl, err := New(Config{AllowedURLPrefixes: []string{srv.URL + "/api/"}}, Options{
		Logger: logger,
		Recorder: func(ctx context.Context, _ Call) {
			seenMu.Lock()
			seen = append(seen, ctx.Value(key{}))
			seenMu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), key{}, "decision-1")
	outer, all := Collect(ctx)
	inner, mine := Collect(outer)
	if _, err := cl.Get(outer, srv.URL+"/api/json", nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = cl.Post(inner, srv.URL+"/api/echo", map[string]any{"secret-body": "s3cr3t"}, map[string]string{"Authorization": "Bearer s3cr3t"})
		}()
	}
	wg.Wait()
	_, _ = cl.Get(inner, srv.URL+"/private/x", nil)
	if n := len(all.List()); n != 6 {
		t.Errorf("outer collected %d calls, want 6", n)
	}
	if n := len(mine.List()); n != 5 {
		t.Errorf("inner collected %d calls, want 5", n)
	}
	if l := mine.List(); !l[4].Refused || l[4].Err == nil {
		t.Errorf("last call: %+v", l[4])
	}
	seenMu.Lock()
	if len(seen) != 6 || seen[0] != "decision-1" || seen[5] != "decision-1" {
		t.Errorf("recorder contexts: %v", seen)
	}
	seenMu.Unlock()
	logMu.Lock()
	logs := logBuf.String()
	logMu.Unlock()
	if strings.Count(logs, `"msg":"callout"`) != 6 || strings.Contains(logs, "s3cr3t") {
		t.Errorf("log:\n%s", logs)
	}
	for _, want := range []string{`"function":"http.Post"`, `"status":200`, `"refused":true`, `"url":"` + srv.URL + `/private/x"`, `"error":"http.Get`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestNoProxy: the transports have no proxy (HTTP_PROXY is not read:
// net/http would not proxy loopback test servers anyway, so the transports
// are inspected), and their TLS floor is 1.2.
func TestNoProxy(t *testing.T) {
	cl, err := New(Config{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := newCA(t)
	withCA, err := cl.Client(context.Background(), ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*Client{cl, withCA.(*Client)} {
		tr := c.hc.Transport.(*http.Transport)
		if tr.Proxy != nil || tr.TLSClientConfig.MinVersion != tls.VersionTLS12 || c.hc.CheckRedirect == nil {
			t.Errorf("transport: proxy %v, TLS %x", tr.Proxy != nil, tr.TLSClientConfig.MinVersion)
		}
	}
}
